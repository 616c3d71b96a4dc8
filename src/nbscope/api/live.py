"""``nbscope import``, and storing the partial run an unfinished live file holds (``nbscope import FILE.jsonl``, an
interrupted audit).

The live-file format is :mod:`nbscope.record.live`'s; this job decides what storing one does to the store and
to the file:

- a run is stored once: its identity is the ``uuid`` of its live header (with its ``started_at``, target and
  kind), so importing one file twice, or two copies of it, stores it once;
- the file is removed once its run is in the store, and only when it is one of that store's own live files
  (:func:`nbscope.record.live.belongs_to`); a file given from anywhere else is the user's, and stays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope import _signals
from nbscope._errors import NbscopeError
from nbscope.record import live as live_format
from nbscope.record.run import RunRecord, loads
from nbscope.schema.codec import decode

if TYPE_CHECKING:
    from nbscope.record.store import Store


def recover_unfinished(path: str | Path) -> RunRecord:
    """The partial run of a live file, refusing a file whose run is still going, and checked as an imported
    record is (its lines may be crafted: one line naming the field)."""
    path = Path(path)
    run = live_format.read_live(path)
    if run.running():
        raise NbscopeError(f"{path} is still being written by process {run.header.pid}; import it once that run ends")
    return loads(live_format.recover(path).to_json(), source=str(path))


def stored_id(record: RunRecord, store: Store) -> int | None:
    """The id of the stored run that is this one (the same live run, by its uuid), if any."""
    if not store.path.exists():
        return None
    run_uuid = record.notebook_run().run_uuid
    for row in store.runs(kind=record.kind, target=record.target):
        if row["started_at"] != record.started_at:
            continue
        stored = store.readable(row["id"])
        if stored is not None and stored.notebook_run().run_uuid == run_uuid:
            return int(row["id"])
    return None


def store_recovered(path: str | Path, record: RunRecord, store: Store) -> ImportedRun:
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
    return ImportedRun(path, record, existing is None, removed)


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """One file ``nbscope import`` read: the run it held and what storing it did."""

    path: Path
    record: RunRecord  # with its id in the store
    added: bool  # False: the store held the run already
    live_file_removed: bool | None  # a live file: removed (one of the store's own) or kept; None: a run record
    note: str | None = None  # what importing it changed (a trial's link to a run this store lacks)


@dataclass(frozen=True, slots=True)
class Imports:
    """What ``nbscope import`` did, file by file (live files first), in the store at ``store_path``."""

    store_path: Path
    runs: tuple[ImportedRun, ...]


def import_runs(
    files: Sequence[Path],
    db: Path | None,
    *,
    on_skip: Callable[[str], None] | None = None,
    on_run: Callable[[ImportedRun, Path], None] | None = None,
) -> Imports:
    """``nbscope import``: run records (``export`` or ``--json`` output) and live files of unfinished runs
    (``.jsonl``) stored, each once; every file is read and validated before anything is written. ``on_run`` gets
    each file's run (and the store's path) as soon as it is stored: a stopped import has said what it stored."""
    from nbscope.api._saving import save_run
    from nbscope.api.runs import load_run, open_store, relink

    recovered = [(path, recover_unfinished(path)) for path in files if path.suffix == ".jsonl"]
    records = [(path, load_run(path)) for path in files if path.suffix != ".jsonl"]
    store = open_store(db, on_skip=on_skip)
    imported = []
    for path, partial in recovered:
        with _signals.one_step():  # a stop signal ends the import after a run's line, never between
            done = store_recovered(path, partial, store)
            if done.added:
                save_run(store, done.record)  # saved: publish then reads its summary, as a profiled run's
            imported.append(done)
            if on_run is not None:
                on_run(imported[-1], Path(store.path))
    for path, record in records:
        dropped = relink(record, store) if store.find(record) is None else None
        with _signals.one_step():
            _, added = store.add(record)
            if added:
                save_run(store, record)
            if live_format.belongs_to(path, store.path):  # a run file kept there when the store refused it: stored now
                path.unlink(missing_ok=True)
            imported.append(ImportedRun(path, record, added, None, dropped))
            if on_run is not None:
                on_run(imported[-1], Path(store.path))
    return Imports(Path(store.path), tuple(imported))


# ---- what runs now: `nbscope runs --live` -------------------------------------------------------------


@dataclass
class RunningKernel:
    """One kernel of a running profile, audit or traced build, and the cell it runs now."""

    kind: str  # profile | trace
    nbscope_pid: int
    kernel_pid: int | None  # None: the nbscope process runs no kernel at this moment (starting one, or between two)
    notebook: str | None  # the source its cells come from; None when no known notebook matches
    cells_done: int
    cell: int | None = None  # the running code cell's index (1-based, as ledgers show it); None between cells
    line: int | None = None  # its line in the notebook's file
    first_line: str | None = None
    elapsed_s: float | None = None  # how long the running cell has run


def running_kernels(now: float | None = None) -> list[RunningKernel]:
    """Every kernel that a ``profile``, ``audit`` or ``trace`` of this user runs now, from the lines its probe
    writes (a ``start`` line without its ``cell`` line is the running cell)."""
    import time

    from nbscope.collect.inject import announced
    from nbscope.collect.kernel_logs import match, read_kernel_log, read_notebooks

    found: list[RunningKernel] = []
    for entry in (decode(Announced, document) for document in announced()):
        logs = []
        for output in map(Path, entry.outputs):
            files = sorted(output.glob("*.jsonl")) if output.is_dir() else [output] if output.is_file() else []
            logs += [read_kernel_log(f) for f in files]
        notebooks = read_notebooks(Path(s) for s in entry.sources)
        before = len(found)
        for log in logs:
            if log.header is None or not _alive(log.header.pid):
                continue  # a kernel that ended: its notebook is done (or another kernel goes on)
            nb = match(log, notebooks) if len(notebooks) != 1 else notebooks[0]
            kernel = RunningKernel(
                kind=str(entry.kind),
                nbscope_pid=entry.pid,
                kernel_pid=log.header.pid,
                notebook=str(nb.path) if nb else None,
                cells_done=len(log.cells),
            )
            running = log.unfinished[-1] if log.unfinished else None
            if running is not None:
                current = time.time() if now is None else now  # read after the log: never before its start line
                kernel.elapsed_s = current - running.unix if running.unix is not None else None
                cell = next((c for c in nb.code_cells if c.source_hash == running.hash), None) if nb else None
                if cell is not None:
                    kernel.cell, kernel.line, kernel.first_line = cell.index + 1, cell.line, cell.first_line
            found.append(kernel)
        if len(found) == before:  # the run goes on, but none of its kernels runs now
            found.append(
                RunningKernel(
                    kind=str(entry.kind),
                    nbscope_pid=entry.pid,
                    kernel_pid=None,
                    notebook=None,
                    cells_done=sum(len(log.cells) for log in logs),
                )
            )
    return found


@dataclass(frozen=True, slots=True)
class Announced:
    """A running nbscope process as it announces itself for ``runs --live`` (:func:`nbscope.collect.inject.announce`):
    its command's kind, its process, where its kernels' probes write and the notebooks they may run."""

    kind: str | None
    pid: int
    outputs: tuple[str, ...]
    sources: tuple[str, ...]


def _alive(pid: int | None) -> bool:
    """A process that runs (a killed kernel its server has not reaped yet is a zombie: it does not)."""
    import psutil

    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
