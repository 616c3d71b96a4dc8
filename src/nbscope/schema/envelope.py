"""A run document's envelope (``record.run``'s format: what ran, when, with which outcome, under which label),
typed: decoded once where a validated document becomes a ``RunRecord``. Its parts that typed views read
(``measurements``, ``fingerprint``, ``settings``) stay the document's own objects: the record keeps and writes
them as they are, and ``schema.model`` and ``schema.machine`` are their typed readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from nbscope._redact import shorten
from nbscope.schema.codec import Check, Read
from nbscope.schema.kinds import KINDS

RUN_STATUSES = ("ok", "partial", "error")


def _kind(kind: str) -> str | None:
    return None if kind in KINDS else f"is {shorten(kind, 40)!r}, not one of {', '.join(KINDS)}"


def _run_status(status: str) -> str | None:
    return None if status in RUN_STATUSES else f"is {shorten(status, 40)!r}, not one of {', '.join(RUN_STATUSES)}"


def _iso_time(text: str) -> str | None:
    """Nothing wrong with ``text`` as an ISO 8601 time (``2026-11-30T07:44:06.362Z``), else what is."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return f"is {shorten(text, 40)!r}, not an ISO 8601 time"
    return None


def in_utc(text: str) -> str:
    """An ISO 8601 time of another zone written in UTC (every reader shows a run's times as UTC, and ``latest`` orders
    runs by them as text); any other text as it is."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if not moment.utcoffset():
        return text
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _named(text: str) -> str | None:
    return None if text.strip() else "is empty: a run names what it ran"


@dataclass(frozen=True, slots=True)
class Envelope:
    """The fields of a run document around its parts, the required ones (``Check(required=...)``) present, as
    ``schema.validate`` checks them (``codec.strict``). An optional one absent reads as a run without it had it."""

    kind: Annotated[str, Check(rule=_kind, required="string")]
    target: Annotated[str, Check(rule=_named, required="string")]
    command: Annotated[tuple[Any, ...], Check(required="array")]
    started_at: Annotated[str, Check(rule=_iso_time, required="string")]
    # None: the run never ended (a run recovered from its live file has it from the file)
    ended_at: Annotated[str | None, Check(rule=_iso_time)]
    status: Annotated[str, Read(otherwise="ok"), Check(rule=_run_status)]
    tool_version: Annotated[str, Check(required="string")]
    schema_version: int
    label: str | None
    settings: Mapping[str, Any]  # {} for a record that has none
    fingerprint: Annotated[Mapping[str, Any], Check(required="object")]
    measurements: Annotated[Mapping[str, Any], Check(required="object")]
