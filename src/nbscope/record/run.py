"""The run record: one versioned JSON document per run, the unit every command writes and reads.

The format is documented in ``docs/run-record.md``. Loading validates the envelope; the
``measurements`` object is owned by the run kind (profile, bench, pathways, ...).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope._version import __version__

FORMAT_NAME = "nbscope-run"
SCHEMA_VERSION = 1
REQUIRED_FIELDS = {
    "format": str,
    "schema_version": int,
    "tool_version": str,
    "command": list,
    "started_at": str,
    "kind": str,
    "target": str,
    "fingerprint": dict,
    "measurements": dict,
}


def utc_now() -> str:
    """An ISO 8601 UTC timestamp with milliseconds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


@dataclass
class RunRecord:
    """One run: what ran, where, with which settings, and what it measured."""

    kind: str
    target: str
    fingerprint: dict[str, Any]
    measurements: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    started_at: str = field(default_factory=utc_now)
    ended_at: str | None = None
    status: str = "ok"
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    run_id: int | None = None  # set by the store; not part of the document

    @property
    def digest(self) -> str:
        return str(self.fingerprint.get("digest", ""))

    def finish(self, status: str | None = None) -> RunRecord:
        self.ended_at = utc_now()
        if status is not None:
            self.status = status
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "command": self.command,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "status": self.status,
            "kind": self.kind,
            "target": self.target,
            "settings": self.settings,
            "fingerprint": self.fingerprint,
            "measurements": self.measurements,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_json_default)

    @classmethod
    def from_dict(cls, document: Any, *, source: str = "document") -> RunRecord:
        validate(document, source=source)
        return cls(
            kind=document["kind"],
            target=document["target"],
            fingerprint=document["fingerprint"],
            measurements=document["measurements"],
            settings=document.get("settings") or {},
            command=document["command"],
            started_at=document["started_at"],
            ended_at=document.get("ended_at"),
            status=document.get("status", "ok"),
            tool_version=document["tool_version"],
            schema_version=document["schema_version"],
        )

    def headline(self) -> dict[str, Any]:
        """The few totals that `nbscope runs` lists."""
        totals = self.measurements.get("totals") or {}
        keys = ("wall_s", "compile_s", "cells", "compiles", "figures", "notebooks")
        return {k: totals[k] for k in keys if k in totals}


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def validate(document: Any, *, source: str = "document") -> None:
    """Raise NbscopeError with one line if ``document`` is not a run record this version can read."""
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise NbscopeError(f"{source} is not an nbscope run record (no \"format\": \"{FORMAT_NAME}\")")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):  # JSON true is not a version
        raise NbscopeError(f"{source}: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise NbscopeError(
            f"{source} has schema version {version}; this nbscope ({__version__}) reads up to "
            f"{SCHEMA_VERSION}: upgrade nbscope"
        )
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(document.get(name), kind):
            raise NbscopeError(f"{source}: field {name!r} is missing or not a {kind.__name__}")


def loads(text: str, *, source: str = "document") -> RunRecord:
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NbscopeError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return RunRecord.from_dict(document, source=source)


def load(path: str | Path) -> RunRecord:
    """Read and validate a run record from a JSON file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NbscopeError(f"{path}: no such file") from None
    except OSError as exc:
        raise NbscopeError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NbscopeError(f"{path} is not a text file, so not a run record") from None
    return loads(text, source=str(path))


def dump(record: RunRecord, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.to_json())
    tmp.replace(path)
    return path
