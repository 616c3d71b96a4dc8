"""The checks of an untrusted run document, made once at load: every reader after it trusts the types.

Records come from other machines, CI artifacts and hand edits. A document that breaks the format is refused here
with the field named (:class:`InvalidRunDocument`, one line), so that the record and what reads it handle typed
values only. The format is documented in ``docs/run-record.md``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from nbscope._redact import shorten
from nbscope.schema import _fields, codec, trial
from nbscope.schema.envelope import Envelope, in_utc


class InvalidRunDocument(ValueError):
    """A document that is not a run record this version reads; its message is one line naming the field."""


FORMAT_NAME = "nbscope-run"
# 2: each code cell carries its whole source and its line range (``cells[].source``, ``lines``); times are
# finite and never negative; statuses and kinds are from the lists below. A version 1 document still loads:
# it migrates in memory (its cells' code is then read from the notebook only when unchanged, see
# ``record.sources``).
SCHEMA_VERSION = 2

# How deep a record's JSON may nest (a real one is under 15 levels): deeper is refused, not a RecursionError.
MAX_DEPTH = 100
# How far ahead of this machine's clock a run may be dated (clocks of CI runners drift by seconds, not days).
CLOCK_SKEW_S = 24 * 3600


def utc_now() -> str:
    """An ISO 8601 UTC timestamp with milliseconds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def validate(document: object, *, source: str, reader: str) -> tuple[dict[str, Any], Envelope, Any]:
    """``document`` as a run record this version can read, its envelope and its measurements typed
    (``codec.strict``'s results); InvalidRunDocument with one line if it is not one. ``reader`` is the version of
    nbscope reading it, which a document of a later schema names."""
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise InvalidRunDocument(f'{source} is not an nbscope run record (no "format": "{FORMAT_NAME}")')
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:  # JSON true is not a version
        raise InvalidRunDocument(f"{source}: schema_version is missing or not an integer from 1 to {SCHEMA_VERSION}")
    if version > SCHEMA_VERSION:
        raise InvalidRunDocument(
            f"{source} has schema version {version}; this nbscope ({reader}) reads up to "
            f"{SCHEMA_VERSION}: upgrade nbscope"
        )
    _check_depth(document, source)
    _check_values(_fields.without_surrogates(document), "", source)  # surrogates replaced before any text is read
    for key in ("started_at", "ended_at"):
        if key in document and isinstance(document[key], str):
            document[key] = in_utc(document[key])
    try:
        envelope = codec.strict(Envelope, document, "")
        check_not_future(envelope.started_at, source)  # also a run stored before this check: not `latest` forever
        measured: Any = codec.strict(_measured(envelope.kind), document["measurements"], "measurements")
        trial.refuse(envelope.kind, envelope.settings, getattr(measured, "trial", None))
    except codec.Invalid as exc:
        raise InvalidRunDocument(f"{source}: {exc}") from None
    return document, envelope, measured


def _measured(kind: str) -> type:
    """The typed model of a kind's measurements, which ``codec.strict`` checks them against."""
    from nbscope.schema.audit import Audit
    from nbscope.schema.model import NotebookRun
    from nbscope.schema.pathways import PathwaysRun
    from nbscope.schema.suite import BenchRun, LoopsRun

    return {"bench": BenchRun, "loops": LoopsRun, "pathways": PathwaysRun, "audit": Audit}.get(kind, NotebookRun)


def timestamp(value: object, where: str) -> float:
    """Seconds since the epoch of an ISO 8601 time (``2026-11-30T07:44:06.362Z``); refused in one line when it is
    not one."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidRunDocument(f"{where} is {shorten(str(value), 40)!r}, not an ISO 8601 time")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def check_not_future(started_at: object, source: str) -> None:
    """Refuse a run dated later than this machine's clock allows (:data:`CLOCK_SKEW_S`): it would be every
    command's ``latest`` until then."""
    when = timestamp(started_at, f"{source}: field 'started_at'")
    if when > time.time() + CLOCK_SKEW_S:
        raise InvalidRunDocument(
            f"{source}: field 'started_at' is {started_at}, in the future of this machine's "
            f"clock ({utc_now()}); refused"
        )


def _check_depth(document: object, source: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRunDocument(f"{source} is nested deeper than {MAX_DEPTH} levels; not a run record")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values() if isinstance(item, (dict, list)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value if isinstance(item, (dict, list)))


class NotANumber(float):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a document's text: Python's json reads them, JSON has no such
    values, so loading keeps them marked to refuse them with the field named."""

    def __new__(cls, token: str) -> NotANumber:
        made = super().__new__(cls, float(token.replace("Infinity", "inf")))
        made.token = token
        return made

    token: str


MAX_SECONDS = codec.MAX_SECONDS  # no time in a record is longer (``*_s`` anywhere, typed or not)


def _check_values(value: object, where: str, source: str, unit: str = "") -> None:
    """Every number finite, at most 2^63, and at most :data:`MAX_SECONDS` for a time; a time or size (``unit``:
    under a ``*_s`` or ``*_bytes`` key, typed or not: ``history --metric`` reads any by name) a number, or an array
    or object of them."""
    if isinstance(value, float) and not math.isfinite(value):
        shown = value.token if isinstance(value, NotANumber) else repr(value)
        raise InvalidRunDocument(f"{source}: {where.lstrip('.') or 'the document'} is {shown}, not a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if abs(value) > 2**63 or (unit == "_s" and abs(value) > MAX_SECONDS):
            raise InvalidRunDocument(
                f"{source}: {where.lstrip('.')} is {codec.shown(value)}, larger than any measurement"
            )
    elif unit and isinstance(value, (str, bool)):
        raise InvalidRunDocument(f"{source}: {where.lstrip('.')} is {codec.a(codec.json_type(value))}, not a number")
    if isinstance(value, dict):
        for key, item in value.items():
            named = next((u for u in ("_s", "_bytes") if isinstance(key, str) and key.endswith(u)), unit)
            _check_values(item, f"{where}.{codec.step(key)}", source, named)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_values(item, f"{where}[{i}]", source, unit)
