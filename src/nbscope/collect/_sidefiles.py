"""The JSON-lines side files of a run: the probe's lines read as they arrive, and where each finished cell
record streams (a :class:`LineSink`: the record stage's live-file writer, ``nbscope.record.live.LiveWriter``,
owns that file's format; collect only hands it the lines it measured)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol


class ProbeReader:
    """Reads the probe's JSON lines incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.kernel: dict[str, Any] | None = None
        self.cells: dict[int, dict[str, Any]] = {}
        self.started: dict[int, dict[str, Any]] = {}

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
            kind = record.get("type")
            if kind == "kernel":
                self.kernel = record
            elif kind == "cell":
                self.cells[record["seq"]] = record
            elif kind == "start":
                self.started[record["seq"]] = record
            elif kind == "warning" and self.kernel is not None:
                # Kept with the kernel's line, which the run record carries (``kernel.warnings``), naming the cell
                # by the source hash of its start line.
                start = self.started.get(record.get("seq"), {})
                self.kernel.setdefault("warnings", []).append(
                    {"hash": start.get("hash"), "message": str(record.get("message", ""))})

    def take(self, source_hash: str) -> dict[str, Any] | None:
        """The latest finished probe record for a cell with this hash, removed from the pool."""
        self.poll()
        for seq in sorted(self.cells, reverse=True):
            if self.cells[seq]["hash"] == source_hash:
                return self.cells.pop(seq)
        return None


class LineSink(Protocol):
    """Where the runner streams each finished cell record (and the probe's kernel line) as it has it."""

    def write(self, line: dict[str, Any]) -> None: ...


class Discard:
    """A sink that keeps nothing: a run with no live file."""

    def write(self, line: dict[str, Any]) -> None:
        pass
