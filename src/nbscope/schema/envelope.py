"""A run document's envelope (``record.run``'s format: what ran, when, with which outcome, under which label),
typed: decoded once where a validated document becomes a ``RunRecord``. Its parts that typed views read
(``measurements``, ``fingerprint``, ``settings``) stay the document's own objects: the record keeps and writes
them as they are, and ``schema.model`` and ``schema.machine`` are their typed readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class Envelope:
    """The fields of a run document around its parts; validation (``schema.validate``) has checked their
    types, and the required ones are present. An optional one absent reads as a run without it had it."""

    kind: str
    target: str
    command: tuple[Any, ...]
    started_at: str
    ended_at: str | None  # None: the run never ended (a run recovered from its live file has it from the file)
    status: Annotated[str, Read(otherwise="ok")]
    tool_version: str
    schema_version: int
    label: str | None
    settings: Mapping[str, Any]  # {} for a record that has none
