"""An exported audit file (``nbscope audit -o``, ``nbscope merge -o``) beyond its run record: ``runs``, the
profile records its entries point to, keyed by their run id in the store that wrote the file, and whether its
entries can be merged. Read once, where the file is read; the records themselves are read (and validated) as
runs when they are used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema.codec import Read

__all__ = ["AuditFile"]


def _embedded(value: object) -> Mapping[int, Mapping[str, Any]] | None:
    """The embedded runs by their id (entries that are not a run id and a record's object left out); none when
    the file has none, None when ``runs`` is not an object."""
    if not value:
        return {}
    if not isinstance(value, Mapping):
        return None
    return {
        int(key): run
        for key, run in value.items()
        if str(key).isascii() and str(key).isdigit() and isinstance(run, Mapping)
    }


def _entries(measurements: object) -> str:
    """Whether the audit's ``notebooks`` can be merged: ``ok``, ``missing`` (no list of them) or ``incomplete`` (an
    entry lacks its path or backend)."""
    notebooks = measurements.get("notebooks") if isinstance(measurements, Mapping) else None
    if not isinstance(notebooks, list):
        return "missing"
    if any(not isinstance(e, Mapping) or "path" not in e or "backend" not in e for e in notebooks):
        return "incomplete"
    return "ok"


@dataclass(frozen=True, slots=True)
class AuditFile:
    runs: Annotated[Mapping[int, Mapping[str, Any]] | None, Read(_embedded)]  # None: not an object (refused)
    entries: Annotated[str, Read(_entries, key="measurements")]
