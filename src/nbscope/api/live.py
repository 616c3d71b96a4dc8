"""Storing the partial run an unfinished live file holds (``nbscope import FILE.jsonl``, an interrupted audit).

The live-file format is :mod:`nbscope.record.live`'s; this job decides what storing one does to the store and
to the file:

- a run is stored once: its identity is the ``uuid`` of its live header (with its ``started_at``, target and
  kind), so importing one file twice, or two copies of it, stores it once;
- the file is removed once its run is in the store, and only when it is one of that store's own live files
  (:func:`nbscope.record.live.belongs_to`); a file given from anywhere else is the user's, and stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope._errors import NbscopeError
from nbscope.record import live as live_format
from nbscope.record.run import RunRecord

if TYPE_CHECKING:
    from nbscope.record.store import Store


@dataclass
class Imported:
    """What importing a live file did: the run (with its id in the store), whether it was new, whether the
    file was removed."""

    record: RunRecord
    added: bool
    removed: bool


def recover_unfinished(path: str | Path) -> RunRecord:
    """The partial run of a live file, refusing a file whose run is still going."""
    path = Path(path)
    run = live_format.read_live(path)
    if run.running():
        raise NbscopeError(f"{path} is still being written by process {run.header.get('pid')}; import it once that run ends")
    return live_format.recover(path)


def stored_id(record: RunRecord, store: Store) -> int | None:
    """The id of the stored run that is this one (the same live run, by its uuid), if any."""
    if not store.path.exists():
        return None
    run_uuid = record.measurements.get("run_uuid")
    for row in store.list(kind=record.kind, target=record.target):
        if row["started_at"] != record.started_at:
            continue
        try:
            stored = store.get(row["id"])
        except NbscopeError:
            continue
        if stored.measurements.get("run_uuid") == run_uuid:
            return int(row["id"])
    return None


def store_recovered(path: str | Path, record: RunRecord, store: Store) -> Imported:
    """Save a recovered run unless it is stored already, then remove its live file when that file is one
    of ``store``'s own (its content is in the store now)."""
    path = Path(path)
    existing = stored_id(record, store)
    if existing is not None:
        record.run_id = existing
    else:
        record.run_id = store.save(record)
    removed = live_format.belongs_to(path, store.path)
    if removed:
        live_format.remove_live_file(path)
    return Imported(record, existing is None, removed)
