"""The JSON-lines side files of a run: the probe's lines read as they arrive, and where each finished cell
record streams (a :class:`LineSink`: the record stage's live-file writer, ``nbscope.record.live.LiveWriter``,
owns that file's format; collect only hands it the lines it measured)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from nbscope.schema.codec import decode
from nbscope.schema.probe import ProbeCell, ProbeLine, ProbeStart, ProbeWarning


class ProbeReader:
    """Reads the probe's JSON lines incrementally, each decoded once (``schema.probe``); the kernel's line is
    kept as written, as the run record carries it (``measurements.kernel``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.kernel: dict[str, Any] | None = None
        self.cells: dict[int, ProbeCell] = {}
        self.started: dict[int, ProbeStart] = {}

    def poll(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        complete, _, _ = chunk.rpartition("\n")
        if not complete:
            return
        self.offset += len(complete.encode("utf-8")) + 1
        for line in complete.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = decode(ProbeLine, record).type
            if kind == "kernel":
                self.kernel = record
            elif kind == "cell":
                cell = decode(ProbeCell, record)
                self.cells[cell.seq] = cell
            elif kind == "start":
                start = decode(ProbeStart, record)
                self.started[start.seq] = start
            elif kind == "warning" and self.kernel is not None:
                # Kept with the kernel's line, which the run record carries (``kernel.warnings``), naming the cell
                # by the source hash of its start line.
                warning = decode(ProbeWarning, record)
                started = self.started.get(warning.seq) if warning.seq is not None else None
                self.kernel.setdefault("warnings", []).append(
                    {"hash": started.hash if started is not None else None, "message": warning.message}
                )

    def take(self, source_hash: str) -> ProbeCell | None:
        """The latest finished probe line for a cell with this hash, removed from the pool."""
        self.poll()
        for seq in sorted(self.cells, reverse=True):
            if self.cells[seq].hash == source_hash:
                return self.cells.pop(seq)
        return None


class LineSink(Protocol):
    """Where the runner streams each finished cell record (and the probe's kernel line) as it has it."""

    def write(self, line: dict[str, Any]) -> None: ...


class Discard:
    """A sink that keeps nothing: a run with no live file."""

    def write(self, line: dict[str, Any]) -> None:
        pass
