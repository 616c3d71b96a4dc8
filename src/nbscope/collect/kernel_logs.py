"""The logs the probe writes in kernels that other tools start (``nbscope trace``): one JSON-lines file per
kernel, read into :class:`KernelLog`, matched to the notebook source whose cells it ran, and turned into that
notebook's cells; and :class:`CellWatchdog`, which stops a cell that runs past ``--cell-timeout`` while the
tool runs, reading the same files as they grow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope._redact import shorten
from nbscope.collect import notebook as notebook_module
from nbscope.collect.runner import merge_cell
from nbscope.schema.build import derive
from nbscope.schema.codec import decode
from nbscope.schema.probe import ProbeCell

if TYPE_CHECKING:
    from nbscope.collect.program import ProgramCollector

MIN_MATCH_SHARE = 0.5  # of a kernel's cells that must belong to a source for the match to count
# After the interrupt, how long a timed-out cell may take to stop before its kernel is ended.
INTERRUPT_GRACE_S = 5.0
WATCH_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class KernelLine:
    """One line a kernel's probe wrote, decoded once: ``type`` is ``kernel`` (the header), ``start`` (a cell began)
    or ``cell`` (a cell ended, with its figures). ``document`` is the line as written: a cell line is merged as
    the collector reads it, and the header is stored whole as the run's ``kernel`` section."""

    type: str | None
    seq: int | None  # the probe's count of executions: a start and its cell line share it
    hash: str  # the cell source's hash
    unix: float | None  # when a cell started (Unix seconds)
    pid: int | None  # the kernel's process (header)
    started_unix: float | None  # when that kernel started (header)
    jax_cache_dir: str | None  # the persistent compile cache it uses (header)
    programs: Any  # the cell's program data (trace --forecast), as recorded
    document: Mapping[str, Any]  # Any: the codec keeps it as recorded (nulls included)

    @staticmethod
    def reshape(value: Mapping[str, object]) -> Mapping[str, object]:
        return {**value, "document": value}


def probe_line(raw: str | bytes) -> KernelLine | None:
    """A probe's JSON line decoded, or None for a line a killed kernel left half-written (or anything not an
    object)."""
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return decode(KernelLine, document) if isinstance(document, dict) else None


@dataclass
class KernelLog:
    """What one kernel's probe wrote."""

    path: Path
    header: KernelLine | None = None
    cells: list[KernelLine] = field(default_factory=list)
    started: list[KernelLine] = field(default_factory=list)

    @property
    def hashes(self) -> list[str]:
        return [c.hash for c in self.cells] + [s.hash for s in self.unfinished]

    @property
    def unfinished(self) -> list[KernelLine]:
        done = {c.seq for c in self.cells}
        return [s for s in self.started if s.seq not in done]


def read_kernel_log(path: Path) -> KernelLog:
    log = KernelLog(path)
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = probe_line(text)  # None: a kernel killed mid-write leaves a partial last line
        if line is None:
            continue
        if line.type == "kernel":
            log.header = line
        elif line.type == "cell":
            log.cells.append(line)
        elif line.type == "start":
            log.started.append(line)
    return log


@dataclass
class CellTimeout:
    """A cell ``--cell-timeout`` stopped: the limit, and whether its kernel had to be ended (and when)."""

    limit_s: float
    started_unix: float
    interrupted_unix: float
    ended_unix: float | None = None  # the cell ignored the interrupt: the kernel was killed then

    @property
    def ended_after_s(self) -> float:
        return (self.ended_unix or self.interrupted_unix) - self.started_unix

    def error(self) -> dict[str, str]:
        ended = (
            f"; it ignored the interrupt for {INTERRUPT_GRACE_S:g} s, so its kernel was ended"
            if self.ended_unix is not None
            else ""
        )
        return {"name": "CellTimeoutError", "message": f"cell exceeded --cell-timeout {self.limit_s:g} s{ended}"}


class CellWatchdog(threading.Thread):
    """Enforces a per-cell time limit on every kernel writing to ``probe_dir``: a cell running past
    ``limit_s`` (by its probe's ``start`` line) gets SIGINT, as Jupyter's own interrupt sends it (the cell
    raises KeyboardInterrupt and the builder sees a failing cell); a cell still running ``INTERRUPT_GRACE_S``
    later has its kernel killed. ``stopped``: kernel log name → probe ``seq`` → what was done."""

    def __init__(self, probe_dir: Path, limit_s: float) -> None:
        super().__init__(daemon=True, name="nbscope-cell-watchdog")
        self.probe_dir, self.limit_s = probe_dir, limit_s
        self.stopped: dict[str, dict[int, CellTimeout]] = {}
        self._finished = threading.Event()
        # Per kernel log, read as it grows (a cell line with program data can be large): bytes read, the
        # kernel's pid, and its running cells (seq → start, Unix seconds).
        self._read: dict[str, int] = {}
        self._kernel: dict[str, KernelLine] = {}  # its probe's header line
        self._running: dict[str, dict[int, float]] = {}

    def run(self) -> None:
        while not self._finished.wait(WATCH_EVERY_S):
            with contextlib.suppress(OSError):  # the probe dir going away: look again next time
                self.check(time.time())

    def finish(self) -> None:
        self._finished.set()
        self.join(2.0)

    def _follow(self, path: Path) -> None:
        with path.open("rb") as handle:
            start = self._read.get(path.name, 0)  # 0: a file not read before
            handle.seek(start)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        self._read[path.name] = start + len(complete)
        running = self._running.setdefault(path.name, {})
        for raw in complete.splitlines():
            line = probe_line(raw)
            if line is None:
                continue
            if line.type == "kernel" and line.pid is not None:
                self._kernel[path.name] = line
            elif line.type == "start" and line.seq is not None and line.unix is not None:
                running[line.seq] = float(line.unix)
            elif line.type == "cell" and line.seq is not None:
                running.pop(line.seq, None)

    def check(self, now: float) -> None:
        if not self.probe_dir.is_dir():
            return
        for path in self.probe_dir.glob("*.jsonl"):
            self._follow(path)
            kernel = self._kernel.get(path.name)
            if kernel is None:
                continue
            stopped_here = self.stopped.setdefault(path.name, {})
            for seq, began in self._running[path.name].items():
                stopped = stopped_here.get(seq)
                if stopped is None and now - began > self.limit_s:
                    stopped_here[seq] = CellTimeout(self.limit_s, began, now)
                    _send(kernel, signal.SIGINT)
                elif (
                    stopped is not None
                    and stopped.ended_unix is None
                    and now - stopped.interrupted_unix > INTERRUPT_GRACE_S
                ):
                    stopped.ended_unix = now
                    _send(kernel, signal.SIGKILL)


def _is_that_kernel(header: KernelLine) -> bool:
    """The process with the header's pid started before the probe wrote it (not a later one given its number)."""
    import psutil

    if header.pid is None:
        return False
    try:
        return psutil.Process(header.pid).create_time() <= (header.started_unix or 0.0) + 1.0
    except (psutil.Error, TypeError, ValueError):
        return False


def _send(kernel: KernelLine, signum: int) -> None:
    """Signal the kernel that wrote this probe header, never a later process given its number."""
    if kernel.pid is None or not _is_that_kernel(kernel):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(kernel.pid, signum)


def read_notebooks(paths: Iterable[Path]) -> list[notebook_module.Notebook]:
    notebooks = []
    for path in paths:
        with contextlib.suppress(NbscopeError):
            notebooks.append(notebook_module.read(path))
    return notebooks


def match(log: KernelLog, sources: list[notebook_module.Notebook]) -> notebook_module.Notebook | None:
    """The source whose code cells best cover the hashes this kernel executed."""
    hashes = log.hashes
    if not hashes:
        return None
    best, best_share = None, 0.0
    for nb in sources:
        own = {c.source_hash for c in nb.code_cells}
        share = sum(h in own for h in hashes) / len(hashes)
        if share > best_share:
            best, best_share = nb, share
    return best if best_share >= MIN_MATCH_SHARE else None


def cells_from_log(
    nb: notebook_module.Notebook,
    log: KernelLog,
    *,
    stopped: bool = False,
    stopped_unix: float | None = None,
    signal_name: str = "SIGINT",
    programs: ProgramCollector | None = None,
    timeouts: dict[int, CellTimeout] | None = None,
) -> tuple[list[dict[str, object]], str]:
    """Cell records for a source from one kernel's probe lines; a started-but-unfinished cell killed it,
    unless nbscope itself was ``stopped`` (by ``signal_name``, at ``stopped_unix``): then that cell is
    ``interrupted``, with the time it had run. With a ``programs`` collector (``trace --forecast``), each
    cell's program data is read too. ``timeouts`` (by the probe's ``seq``): the cells ``--cell-timeout``
    stopped, recorded as ``timeout``."""
    from nbscope.collect._cells import FINISHED_ANYWAY, interrupted_described

    timeouts = timeouts or {}
    started_unix = {s.hash: s.unix for s in log.unfinished}
    started_seq = {s.hash: s.seq for s in log.unfinished if s.seq is not None}
    by_hash: dict[str, list[KernelLine]] = {}
    for line in log.cells:
        by_hash.setdefault(line.hash, []).append(line)
    died = {s.hash for s in log.unfinished}
    cells, status = [], "ok"
    for code_cell in nb.code_cells:
        queue = by_hash.get(code_cell.source_hash)
        if queue:
            line = queue.pop(0)
            probe = decode(ProbeCell, line.document)
            record = merge_cell(code_cell, probe)
            if programs is not None and probe.programs is not None:
                try:
                    record["programs"] = programs.cell(probe.programs, record)
                except Exception as exc:  # broken program data must not lose the cell's other figures
                    record["programs"] = {"error": shorten(f"{type(exc).__name__}: {exc}", 300)}
            if line.seq is not None and line.seq in timeouts:
                error = timeouts[line.seq].error()
                if record["status"] == "ok":
                    error["message"] += FINISHED_ANYWAY
                record.update(status="timeout", error=error)
                status = "partial"
            elif record["status"] == "error" and "raises-exception" in code_cell.tags:
                record["status"] = "expected-error"
        elif code_cell.source_hash in died:  # started and never finished: the run is partial
            status = "partial"
            died.discard(code_cell.source_hash)
            if started_seq.get(code_cell.source_hash, -1) in timeouts:
                stop = timeouts[started_seq[code_cell.source_hash]]  # it ignored the interrupt: its kernel was ended
                record = merge_cell(code_cell, None, status="timeout", wall_s=stop.ended_after_s, error=stop.error())
            elif stopped:
                began = started_unix.get(code_cell.source_hash)
                elapsed = stopped_unix - began if began is not None and stopped_unix else None
                record = interrupted_described(code_cell.describe(), elapsed, signal_name)  # as `profile` records it
            else:
                record = merge_cell(code_cell, None, status="kernel-died")
                record["error"] = {"name": "DeadKernelError", "message": "the kernel died while running this cell"}
        else:
            skipped = not code_cell.source.strip() or "skip-execution" in code_cell.tags
            record = merge_cell(code_cell, None, status="skipped" if skipped else "not-run")
        cells.append(derive(record))
    return cells, status
