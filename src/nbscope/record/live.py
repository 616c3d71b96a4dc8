"""Live files: a profile's cell records, streamed to disk as each cell finishes, and the partial run they
hold when the process that wrote them died. This module is the one owner of the format.

``nbscope profile`` (and each notebook of ``nbscope audit``) writes ``<store>.d/live/<stamp>-<pid>-<id>.jsonl``
(:func:`live_folder`: each store has its own folder, named for it): one header line (``{"type": "run",
...}``: what ran, where, with which settings, and the run's ``uuid``), then per execution (one per
``--repeat``) an ``{"type": "execution", ...}`` line followed by one line per code cell, as each finishes
(and, before the first, the probe's ``{"type": "kernel", ...}`` line). Once the run is in the store the file
is removed. A file that stays behind belongs to a run that was killed before it could be stored (SIGKILL, a
crash, a full disk): ``nbscope runs --unfinished`` lists it and ``nbscope import FILE`` stores it as a
partial run (see :mod:`nbscope.api.live`).

Who writes what: the header and execution lines are written here (:class:`LiveWriter`); the cell and kernel
lines come from the runner, which measures them, but the collect stage may not import from record (stages
run one way). So the runner is handed a :class:`LiveWriter` as its ``live_sink``: an object with a
``write(line)`` method (``collect._sidefiles.LineSink``); what a line is and where it goes stays decided here.
:func:`fill_measurements` builds a profile record's measurements from executions: the profile itself uses it
and so does :func:`recover`, which is why it lives here and not in the api stage.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from nbscope._errors import NbscopeError
from nbscope._redact import redact
from nbscope.collect._cells import interrupted_described, merge_described
from nbscope.collect.runner import NotebookExecution
from nbscope.record.run import RunRecord
from nbscope.record.store import Store, default_path, files_folder, make_folder, store_subfolder
from nbscope.schema._fields import time as time_of
from nbscope.schema.build import combine_repeats, derive, totals
from nbscope.schema.codec import Encoded, Write, decode
from nbscope.schema.live import LiveHeader, LiveLine
from nbscope.schema.machine import Settings

LIVE_FORMAT = "nbscope-live"
LIVE_VERSION = 1
LIVE_FOLDER = "live"


def live_folder(store_path: str | Path | None) -> Path:
    """Where one store's live files go: ``<store>.d/live`` (``.nbscope/nbscope.db.d/live`` by default)."""
    return files_folder(store_path) / LIVE_FOLDER


def legacy_live_folder(store_path: str | Path | None) -> Path:
    """Where nbscope before 0.x put live files: ``live/`` beside the database, shared by every store there."""
    path = Path(store_path) if store_path is not None else default_path()
    return path.parent / LIVE_FOLDER


def new_live_path(store_path: str | Path | None, label: str = "") -> Path:
    """A fresh live file name in the store's live folder (made, with its ``.gitignore``); unique even for
    several runs of one process in the same second."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    middle = f"-{label}" if label else ""
    folder = store_subfolder(store_path, LIVE_FOLDER)
    return folder / f"{stamp}{middle}-{os.getpid()}-{uuid.uuid4().hex[:6]}.jsonl"


def _process_started(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


# Each live file this process writes: its lines so far, and whether it had to be written again. A notebook may
# remove nbscope's folder as it runs (`!rm -rf .nbscope`, `!git clean -fdx`): the next line finds the file gone
# (or shorter) and writes it again whole, so that what was measured so far is never lost.
_WRITTEN: dict[Path, tuple[list[str], int]] = {}  # its lines, and their size in bytes
_REWRITTEN: set[Path] = set()


def rewritten(path: Path) -> bool:
    """Whether something removed or cut the live file at ``path`` while this process wrote it (it was rewritten)."""
    return Path(path).absolute() in _REWRITTEN


class LiveWriter:
    """Appends the lines of one live file; ``None`` as path writes nothing. The runner gets it as its
    ``live_sink`` and calls :meth:`write` with each cell record (and the probe's kernel line). A file that
    vanished or was cut since its last line is written again whole (its folder made again)."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, line: dict[str, Any]) -> None:
        if self.path is None:
            return
        text = redact(json.dumps(line, default=str)) + "\n"  # no credential of a URL is kept
        key = self.path.absolute()
        lines, size = _WRITTEN.setdefault(key, ([], 0))
        try:
            found = self.path.stat().st_size
        except FileNotFoundError:
            found = -1
        if lines and found != size:
            _REWRITTEN.add(key)
            make_folder(self.path.parent, ignored=self.path.parent.parent)
            with open(self.path, "w", encoding="utf-8") as handle:
                handle.writelines(lines)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)
        lines.append(text)
        _WRITTEN[key] = (lines, size + len(text.encode()))

    def header(
        self,
        record: RunRecord,
        notebook: dict[str, Any],
        code_cells: list[dict[str, Any]],
        store_path: Path | None,
        *,
        run_uuid: str | None = None,
    ) -> str:
        """The first line: enough to rebuild the run record from the cell lines that follow. Returns the run's
        uuid (its identity: a run imported twice, or from two copies of one file, is stored once)."""
        run_uuid = run_uuid or uuid.uuid4().hex
        self.write(
            {
                "type": "run",
                "format": LIVE_FORMAT,
                "version": LIVE_VERSION,
                "uuid": run_uuid,
                "kind": record.kind,
                "target": record.target,
                "started_at": record.started_at,
                "command": record.command,
                "settings": record.settings,
                "fingerprint": record.fingerprint,
                "notebook": notebook,
                "code_cells": code_cells,
                "store": str(Path(store_path).resolve()) if store_path is not None else None,
                "pid": os.getpid(),
                "process_started": _process_started(os.getpid()),
            }
        )
        return run_uuid

    def execution(self, number: int, cache_state: str) -> None:
        """Marks the start of one execution (one per repeat); its cell lines follow."""
        self.write({"type": "execution", "number": number, "cache_state": cache_state, "started_unix": time.time()})


def write_header(
    path: Path, record: RunRecord, notebook: dict[str, Any], code_cells: list[dict[str, Any]], store_path: Path | None
) -> str:
    """:meth:`LiveWriter.header` of the file at ``path``; the run's uuid, also kept in the record."""
    run_uuid = LiveWriter(path).header(record, notebook, code_cells, store_path)
    record.measurements.setdefault("run_uuid", run_uuid)
    return run_uuid


def write_execution(path: Path, number: int, cache_state: str) -> None:
    """:meth:`LiveWriter.execution` of the file at ``path``."""
    LiveWriter(path).execution(number, cache_state)


def _header_of(path: Path) -> LiveHeader | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = json.loads(handle.readline() or "null")
    except (OSError, ValueError, RecursionError):  # not JSON, a number of thousands of digits, nested too deep
        return None
    return decode(LiveHeader, first) if isinstance(first, dict) and _is_header(decode(LiveLine, first)) else None


def _is_header(line: LiveLine) -> bool:
    return line.type == "run" and line.format == LIVE_FORMAT


def remove_live_file(path: Path) -> None:
    """Remove a live file once its run is stored; only a file that starts with nbscope's header, so that
    nothing nbscope did not write is ever deleted."""
    _WRITTEN.pop(Path(path).absolute(), None)  # its lines are in the record now
    if _header_of(Path(path)) is not None and not Path(path).is_symlink():
        Path(path).unlink(missing_ok=True)


# What a store that refuses a write raises: locked past its wait (sqlite3.OperationalError), read-only, full, gone.
STORE_REFUSED = (NbscopeError, sqlite3.Error, OSError)


class NotStored(NbscopeError):
    """Runs measured that the store refused: each kept in a run file, and the command that stores them."""

    def __init__(self, what: str, store_path: Path, files: list[Path], why: str) -> None:
        names = " ".join(str(f) for f in files)
        super().__init__(
            f"{what} could not be stored in {store_path} ({why}); they are kept in files: store them with "
            f"`nbscope import {names} --db {store_path}`"
        )


def save_or_keep(store: Store, records: list[RunRecord], what: str = "the runs") -> list[int]:
    """Store each run in order (their ids); one the store refuses (held past its wait, a read-only or full disk) and
    those after it are kept in run files, which :class:`NotStored` names: every writer keeps what it measured so."""
    ids: list[int] = []
    for number, record in enumerate(records):
        try:
            ids.append(store.save(record))
        except STORE_REFUSED as exc:
            raise keep_unstored(store, records[number:], exc, what) from None
    return ids


def keep_unstored(store: Store, records: list[RunRecord], exc: BaseException, what: str) -> NotStored:
    """:class:`NotStored` for ``records``, each written to a run file in the store's live folder (else TMPDIR)."""
    from nbscope.record.run import dump

    why = str(exc) if isinstance(exc, NbscopeError) else f"{type(exc).__name__}: {exc}"
    files = []
    for record in records:
        record.run_id = None
        name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{record.kind}-{uuid.uuid4().hex[:8]}.json"
        try:
            files.append(dump(record, store_subfolder(store.path, LIVE_FOLDER) / name))
        except (OSError, NbscopeError):  # the store's disk is full or read-only: the temporary folder, then
            files.append(dump(record, Path(tempfile.mkdtemp(prefix="nbscope-unstored-")) / name))
    return NotStored(what, Path(store.path), files, why.removeprefix("--db ").removeprefix(f"{store.path}: "))


def belongs_to(path: str | Path, store_path: str | Path) -> bool:
    """Whether ``path`` is a live file of this store's: in its live folder, or in the folder older nbscope
    versions shared (``live/`` beside the database) with a header naming this store. Only such a file is
    removed once imported; a file given from anywhere else stays."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    folder = path.resolve().parent
    if folder == live_folder(store_path).resolve():
        return True
    if folder == legacy_live_folder(store_path).resolve():
        header = _header_of(path)
        return header is not None and header.store == str(Path(store_path).resolve())
    return False


@dataclass
class LiveExecution:
    """One execution of a live file (one per ``--repeat``): its cache state, its kernel's line (the probe's header,
    None before its kernel answered) and its cell lines so far, with their statuses."""

    cache_state: str
    cells: list[dict[str, Any]] = field(default_factory=list)  # as written: each goes into the run's record
    statuses: list[str | None] = field(default_factory=list)  # each cell line's status (None: none recorded)
    kernel: dict[str, Any] | None = None


@dataclass
class LiveRun:
    """What a live file holds: its header and, per execution, the cells recorded so far."""

    path: Path
    header: LiveHeader
    executions: list[LiveExecution] = field(default_factory=list)

    @property
    def cells_measured(self) -> int:
        last = self.executions[-1].statuses if self.executions else []
        return sum(1 for status in last if status not in ("not-run", None))

    @property
    def code_cells(self) -> int:
        return len(self.header.code_cells)

    @property
    def uuid(self) -> str | None:
        return self.header.uuid

    def running(self) -> bool:
        """Whether the process that writes this file is still alive (then the run is not unfinished)."""
        pid, started = self.header.pid, self.header.process_started
        now_started = _process_started(pid) if pid is not None else None
        return now_started is not None and (started is None or abs(now_started - started) < 1.0)


def read_live(path: str | Path) -> LiveRun:
    """Parse a live file; the last header in it starts the run (a reused path may hold earlier ones)."""
    from nbscope._files import read_bounded

    path = Path(path)
    text = read_bounded(path, what="live file").decode("utf-8", errors="replace")
    run: LiveRun | None = None
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):  # a torn last line (a process killed mid-write), or a crafted one
            continue
        if not isinstance(item, dict):
            continue
        said = decode(LiveLine, item)
        if _is_header(said):
            run = LiveRun(path, decode(LiveHeader, item))
        elif run is None:
            continue
        elif said.type == "execution":
            run.executions.append(LiveExecution(said.cache_state or "off"))
        elif said.type == "kernel" and run.executions:
            run.executions[-1].kernel = item  # the probe's header of that execution's kernel
        elif said.type is None and "source_hash" in item:
            if not run.executions:
                run.executions.append(LiveExecution("off"))
            run.executions[-1].cells.append(item)
            run.executions[-1].statuses.append(said.status)
    if run is None:
        raise NbscopeError(
            f"{path} is not an nbscope live file with a header (an older nbscope wrote it, or another program)"
        )
    version = run.header.version
    if version is None or version > LIVE_VERSION:
        raise NbscopeError(
            f"{path}: live file version {version!r}; this nbscope reads up to {LIVE_VERSION}: upgrade nbscope"
        )
    return run


def fill_measurements(
    record: RunRecord,
    notebook: dict[str, Any],
    code_cells: list[dict[str, Any]],
    executions: list[NotebookExecution],
    cache_state: str,
    live: Path | None,
) -> None:
    """A profile record's measurements from its executions (``notebook`` and ``code_cells`` as described
    by ``Notebook.describe()`` / ``CodeCell.describe()``), and its status."""
    if not executions:
        cells = [merge_described(c, None) for c in code_cells]
        runner: dict[str, Any] = {"pathway": "kernel"}
        status, kernel = "partial", None
    else:
        for execution in executions:
            execution.cells = [derive(c) for c in execution.cells]
        # A repeat counts once it finished: one a signal cut short adds none of its figures to the medians.
        finished = [e for e in executions if not e.interrupted and len(e.cells) == len(code_cells)]
        if len(finished) > 1:
            cells = combine_repeats([e.cells for e in finished])
        else:
            cells = (finished or executions)[-1].cells
        runner = dict(executions[-1].runner)
        status = "ok" if all(e.status == "ok" for e in executions) else "partial"
        kernel = executions[-1].kernel
    run_uuid = record.notebook_run().run_uuid
    record.measurements = {
        "notebook": notebook,
        "runner": runner,
        "kernel": kernel,
        "totals": totals(cells, runner, cache_state),
        "cells": cells,
        "repeats": len(executions),
        "repeat_runners": [e.runner for e in executions] if len(executions) > 1 else None,
        "live_file": str(live) if live is not None else None,
    }
    if run_uuid is not None:
        record.measurements["run_uuid"] = run_uuid  # the run's identity, as its live file's header has it
    if executions and executions[-1].programs is not None:
        record.measurements["programs"] = executions[-1].programs
    record.finish(status)


UNFINISHED_CELL_STATUSES = ("not-run", "interrupted", None)


def complete(run: LiveRun) -> bool:
    """Whether a live file holds every execution its settings asked for (``--repeat``), each with every code
    cell finished: the process died after measuring everything, before storing it (a full disk, a kill)."""
    wanted = decode(Settings, run.header.settings).repeat
    return len(run.executions) >= wanted and all(
        len(entry.cells) == len(run.header.code_cells)
        and all(status not in UNFINISHED_CELL_STATUSES for status in entry.statuses)
        for entry in run.executions
    )


def recover(path: str | Path, stopped: tuple[float, str] | None = None) -> RunRecord:
    """The run a live file holds, as a run record: status ``ok`` when it is complete (:func:`complete`: every
    cell of every repeat measured, so it may become a baseline), else ``partial``, its last execution
    interrupted.

    ``stopped``: (Unix time, signal name) of the stop signal, when the caller knows the writer was running
    until then (an audit's worker, stopped with the audit). The cell after the last finished one was running
    then: it is ``interrupted``, having run from the file's last write (its predecessor's end) to the signal.
    Without it (a run killed outright, imported later) when it died is unknown: that cell is ``not-run``."""
    run = read_live(path)
    header = run.header
    described = [dict(c) for c in header.code_cells]
    finished = complete(run)
    executions = []
    for number, entry in enumerate(run.executions):
        cells = list(entry.cells)
        last = number == len(run.executions) - 1
        started = entry.kernel is not None or bool(cells)  # the kernel was up: the next cell was running
        if stopped is not None and last and not finished and started and len(cells) < len(described):
            cells.append(interrupted_described(described[len(cells)], _ran_until(Path(path), stopped[0]), stopped[1]))
        # The cells the killed run never reached: as a run cut short records them.
        cells += [merge_described(c, None) for c in described[len(cells) :]]
        kernel = dict(entry.kernel) if entry.kernel is not None else None
        start = kernel.pop("kernel_start_s", None) if kernel is not None else None  # the runner's, on the kernel line
        runner = {"pathway": "kernel", "recovered_from": str(path), "kernel_start_s": time_of(start)}
        executions.append(
            NotebookExecution(
                cells=cells,
                runner=runner,
                kernel=kernel,
                status="ok" if finished else "partial",
                interrupted=not finished and last,
            )
        )
    cache_state = run.executions[-1].cache_state if run.executions else "off"
    record = RunRecord(
        kind=header.kind or "profile",
        target=header.target or "",
        fingerprint=dict(header.fingerprint),
        settings=dict(header.settings),
        command=list(header.command),
        started_at=header.started_at or "",
    )
    if run.uuid is not None:
        record.measurements["run_uuid"] = run.uuid
    fill_measurements(record, dict(header.notebook), described, executions, cache_state, None)
    record.measurements["recovered_from"] = str(path)
    record.status = "ok" if finished else "partial"
    try:
        mtime = Path(path).stat().st_mtime
        record.ended_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mtime)) + f".{int(mtime % 1 * 1000):03d}Z"
    except OSError:
        pass
    return record


def _ran_until(path: Path, stopped_at: float) -> float | None:
    """Seconds from the live file's last write (the end of the last finished cell, or the kernel's start) to the
    stop signal; None when the file changed after the signal (the cell it was running finished regardless)."""
    try:
        elapsed = stopped_at - path.stat().st_mtime
    except OSError:
        return None
    return elapsed if elapsed >= 0 else None


def _live_files(store_path: str | Path) -> list[Path]:
    """This store's live files: those in its own live folder, and those of the folder older versions shared
    whose header names this store."""
    own = live_folder(store_path)
    found = sorted(own.glob("*.jsonl")) if own.is_dir() else []
    legacy = legacy_live_folder(store_path)
    if legacy.is_dir() and legacy.resolve() != own.resolve():
        found += [p for p in sorted(legacy.glob("*.jsonl")) if belongs_to(p, store_path)]
    return found


def _unreadable(found: UnfinishedRun) -> bool:
    return found.state == "unreadable"


@dataclass(frozen=True, slots=True)
class UnfinishedRun(Encoded):
    """One live file of a store (``runs --unfinished``; its ``--json`` is this, a readable file's ``pid`` last):
    its state (``unfinished``, ``running``, ``not-stored``: a run file the store refused, or ``unreadable``), what
    ran and how far it got, or why it cannot be read."""

    path: str
    state: str
    started_at: str | None = None
    kind: str | None = None
    target: str | None = None
    cells_measured: int | None = None
    code_cells: int | None = None
    executions: int | None = None
    reason: str | None = None  # why an unreadable file cannot be imported
    pid: Annotated[int | None, Write(omit=_unreadable)] = None  # the process that wrote it


def unfinished(store_path: str | Path) -> list[UnfinishedRun]:
    """Every live file of the store at ``store_path``, oldest first."""
    found = []
    for path in _live_files(store_path):
        try:
            run = read_live(path)
        except NbscopeError as exc:
            reason = str(exc).removeprefix(f"{path} ").removeprefix(f"{path}: ")
            found.append(UnfinishedRun(str(path), "unreadable", reason=reason))
            continue
        found.append(
            UnfinishedRun(
                str(path),
                "running" if run.running() else "unfinished",
                started_at=run.header.started_at,
                kind=run.header.kind,
                target=run.header.target,
                cells_measured=run.cells_measured,
                code_cells=run.code_cells,
                executions=len(run.executions),
                pid=run.header.pid,
            )
        )
    return found + [_kept(path) for path in sorted(live_folder(store_path).glob("*.json"))]


def _kept(path: Path) -> UnfinishedRun:
    """A run file :func:`keep_unstored` wrote: measured, not stored (the store refused it)."""
    from nbscope.record.run import load

    try:
        record = load(path)
    except NbscopeError as exc:
        return UnfinishedRun(str(path), "unreadable", reason=str(exc).removeprefix(f"{path}: "))
    cells = len(record.notebook_run().cells)
    return UnfinishedRun(str(path), "not-stored", record.started_at, record.kind, record.target, cells, cells)
