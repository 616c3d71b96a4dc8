"""The JSON-lines side files of a run: the probe's lines read as they arrive, and the live file to
which each finished cell record streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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

    def take(self, source_hash: str) -> dict[str, Any] | None:
        """The latest finished probe record for a cell with this hash, removed from the pool."""
        self.poll()
        for seq in sorted(self.cells, reverse=True):
            if self.cells[seq]["hash"] == source_hash:
                return self.cells.pop(seq)
        return None


class LiveFile:
    """The side file to which cell records stream as each finishes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
