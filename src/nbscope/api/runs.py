"""The run store as the commands open it, and the run references they take (one grammar everywhere)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope._errors import NbscopeError
from nbscope.record.run import LABEL_ENV, RunRecord, check_label
from nbscope.record.store import RUN_REFERENCE, Store, default_path, resolve_run
from nbscope.schema.codec import decode

if TYPE_CHECKING:
    from nbscope.analyse.trial import TrialResult
    from nbscope.record.live import UnfinishedRun

__all__ = [
    "LABEL_ENV",
    "RUN_REFERENCE",
    "Exported",
    "RunRecord",
    "Store",
    "check_label",
    "db_option",
    "export",
    "open_store",
    "resolve",
    "show",
    "store_then_stop",
]


def open_store(db: Path | None, *, read_only: bool = False, on_skip: Callable[[str], None] | None = None) -> Store:
    """The run store at ``db`` (default: ``$NBSCOPE_DB``, else the project's); ``on_skip`` hears of each row it
    cannot read (left out). A read-only store is never created: reading one that is not there is an error."""
    return Store(db, on_skip=on_skip, read_only=read_only)


def resolve(reference: str, store: Store, *, kinds: Sequence[str] | None = None) -> RunRecord:
    """The run a reference names (see :func:`nbscope.record.store.resolve_run`)."""
    return resolve_run(reference, store, kinds=kinds)


def db_option(store: Store) -> str:
    """`` --db PATH`` for a command a hint prints, when the store is not the one commands find without it."""
    try:
        same = Path(store.path).resolve() == default_path().resolve()
    except OSError:
        same = False
    return "" if same else f" --db {store.path}"


def unfinished(store: Store) -> list[UnfinishedRun]:
    """The live files of this store's runs that ended before they were stored (see :mod:`nbscope.record.live`)."""
    from nbscope.record import live

    return live.unfinished(store.path)


def export_run(record: RunRecord, output: Path, *, portable: bool = False) -> RunRecord:
    """Write a run as a JSON record to ``output``; ``portable`` drops what only this machine knows (paths). The
    run written (its id kept)."""
    from nbscope.record import run as record_module

    if portable:
        from nbscope.record.portable import portable as portable_document

        run_id = record.run_id
        record = record_module.RunRecord.from_dict(portable_document(record.to_dict()), source=f"run {run_id}")
        record.run_id = run_id
    record_module.dump(record, output)
    return record


@dataclass(frozen=True, slots=True)
class Shown:
    """What ``nbscope show`` prints: the run, and the remedies tried on it (``nbscope try``)."""

    record: RunRecord
    trials: list[TrialResult]


def show(reference: str, db: Path | None, *, on_skip: Callable[[str], None] | None = None) -> Shown:
    """``nbscope show``: the run ``reference`` names, read from the store at ``db`` (never created), with its trials."""
    store = open_store(db, read_only=True, on_skip=on_skip)
    record = resolve(reference, store)
    return Shown(record, trials_of(store, record))


@dataclass(frozen=True, slots=True)
class Exported:
    """What ``nbscope export`` wrote: the run (its id kept), named as its confirmation names it, and where."""

    record: RunRecord
    name: str  # ``run 7``; the reference given for a run read from a file
    written_to: str


def export(
    reference: str,
    output: Path,
    db: Path | None,
    *,
    portable: bool = False,
    on_skip: Callable[[str], None] | None = None,
) -> Exported:
    """``nbscope export``: the run ``reference`` names written to ``output`` (see :func:`export_run`)."""
    from nbscope._files import check_target, written_to

    store = open_store(db, read_only=True, on_skip=on_skip)
    check_target(output, option="-o")  # after the store is open: -o naming it is refused before anything is written
    record = export_run(resolve(reference, store), output, portable=portable)
    name = f"run {record.run_id}" if record.run_id is not None else reference
    return Exported(record, name, written_to(output))


def load_run(path: Path) -> RunRecord:
    """A run record from a JSON file (``nbscope export`` or ``--json`` output), validated."""
    from nbscope.record import run as record_module

    return record_module.load(path)


def store_then_stop(record: RunRecord, store: Store | None, interrupted: bool, what: str = "partial run {id}") -> None:
    """Save ``record`` in ``store`` (when given); after an interrupt, note what was saved (``what`` with the
    run's ``{id}``) for the closing message, and re-raise it."""
    from nbscope import _signals

    if store is not None:
        from nbscope.record.live import save_or_keep

        save_or_keep(store, [record])
    if interrupted:
        if record.run_id is not None:
            _signals.note_saved(what.format(id=record.run_id))
        raise KeyboardInterrupt


@dataclass(frozen=True, slots=True)
class TrialLink:
    """What a trial run's ``settings.trial`` says: the run it tests, the cell (1-based), the remedy and its side."""

    of: int | None = None  # None: a trial imported without the run it tests
    cell: int = 0
    remedy: str = ""
    side: str = ""
    through_cell: bool = False  # each run stopped after the cell tried (``try --through-cell``)
    # The run uuids (``measurements.run_uuid``) of the run tested and of the as-is side: the links ``import``
    # remaps, since run ids are one store's own.
    of_uuid: str | None = None
    as_is_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class _Linked:
    trial: TrialLink | None = None


def link_of(record: RunRecord) -> TrialLink | None:
    """The run a trial run tests (None for any other run)."""
    return decode(_Linked, record.settings).trial if record.kind == "trial" else None


def not_a_trial(record: RunRecord) -> RunRecord:
    """``record``, unless it is one side of a trial (``nbscope try``), which is a run of its own for no command
    but ``show`` and ``compare``: a one-line NbscopeError naming the run it tries."""
    link = link_of(record)
    if link is not None:
        of = f"run {link.of}" if link.of is not None else "a run not in this store"
        raise NbscopeError(f"run {record.run_id} is a trial of {of} (`nbscope try`), not a run of its own: give {of}")
    return record


def relink(record: RunRecord, store: Store) -> str | None:
    """A trial run being imported, its links (the run ids of the store it was made in) set to this store's runs
    of the same uuid, or to none where this store lacks the run: what was dropped, for the import's line."""
    link = link_of(record)
    if link is None:
        return None
    found = store.ids_of_uuids([uuid for uuid in (link.of_uuid, link.as_is_uuid) if uuid])
    of, as_is = (found.get(uuid or "") for uuid in (link.of_uuid, link.as_is_uuid))
    trial, measured = record.settings.get("trial"), record.measurements.get("trial")
    if isinstance(trial, dict):
        trial["of"] = of
    if isinstance(measured, dict):
        measured.update(of_run=of, as_is_run=as_is, reference_run=None)
    return None if of is not None else "a trial of a run not in this store: its link is dropped"


def trials_of(store: Store, run: RunRecord) -> list[TrialResult]:
    """The trials stored for ``run``, oldest first (each from its remedy side's run); a trial run's own."""
    from nbscope.analyse.trial import TrialResult

    if run.kind == "trial":
        return (
            [replace(decode(TrialResult, run.measurements["trial"]), remedy_run=run.run_id)]
            if "trial" in run.measurements
            else []
        )
    if run.run_id is None or not store.path.exists():
        return []
    records: list[RunRecord] = store.records(kind="trial")
    linked = [(r, link_of(r)) for r in reversed(records)]
    return [
        trials_of(store, r)[0]
        for r, link in linked
        if link and link.of == run.run_id and "trial" in r.measurements  # one side of a trial carries it
    ]
