"""The checks of an untrusted run document, made once at load: every reader after it trusts the types.

Records come from other machines, CI artifacts and hand edits. A document that breaks the format is refused here
with the field named (:class:`InvalidRunDocument`, one line), so that the record and what reads it handle typed
values only. The format is documented in ``docs/run-record.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, TypeGuard

from nbscope.schema.kinds import KINDS
from nbscope.schema.status import CELL_STATUSES


class InvalidRunDocument(ValueError):
    """A document that is not a run record this version reads; its message is one line naming the field."""


FORMAT_NAME = "nbscope-run"
# 2: each code cell carries its whole source and its line range (``cells[].source``, ``lines``); times are
# finite and never negative; statuses and kinds are from the lists below. A version 1 document still loads:
# it migrates in memory (its cells' code is then read from the notebook only when unchanged, see
# ``record.sources``).
SCHEMA_VERSION = 2

RUN_STATUSES = ("ok", "partial", "error")
# Durations that can only be >= 0 (a difference such as ``cache_saving_s`` or a fit's ``intercept_s`` may be
# negative, and is only checked to be finite).
DURATIONS = (
    "wall_s",
    "code_s",
    "compile_s",
    "run_s",
    "overhead_s",
    "roundtrip_s",
    "trace_s",
    "lower_s",
    "collection_s",
    "backend_s",
    "elapsed_s",
    "median_s",
    "min_s",
    "max_s",
    "mad_s",
)
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

# How deep a record's JSON may nest (a real one is under 15 levels): deeper is refused, not a RecursionError.
MAX_DEPTH = 100
# How far ahead of this machine's clock a run may be dated (clocks of CI runners drift by seconds, not days).
CLOCK_SKEW_S = 24 * 3600


def utc_now() -> str:
    """An ISO 8601 UTC timestamp with milliseconds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def validate(document: object, *, source: str, reader: str) -> dict[str, Any]:
    """``document`` as a run record this version can read; InvalidRunDocument with one line if it is not one.
    ``reader`` is the version of nbscope reading it, which a document of a later schema names."""
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise InvalidRunDocument(f'{source} is not an nbscope run record (no "format": "{FORMAT_NAME}")')
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):  # JSON true is not a version
        raise InvalidRunDocument(f"{source}: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise InvalidRunDocument(
            f"{source} has schema version {version}; this nbscope ({reader}) reads up to "
            f"{SCHEMA_VERSION}: upgrade nbscope"
        )
    _check_depth(document, source)
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(document.get(name), kind):
            raise InvalidRunDocument(f"{source}: field {name!r} is missing or not a {kind.__name__}")
    for name in ("started_at", "ended_at"):
        if document.get(name) is not None:
            timestamp(document[name], f"{source}: field {name!r}")
    check_not_future(document["started_at"], source)  # also a run stored before this check: not `latest` forever
    for name in ("ended_at", "status", "label"):
        if document.get(name) is not None and not isinstance(document[name], str):
            raise InvalidRunDocument(f"{source}: field {name!r} is {_a(_json_type(document[name]))}, not a string")
    if document.get("settings") is not None and not isinstance(document["settings"], dict):
        raise InvalidRunDocument(f"{source}: field 'settings' is {_a(_json_type(document['settings']))}, not an object")
    if document["kind"] not in KINDS:
        raise InvalidRunDocument(f"{source}: field 'kind' is {document['kind']!r}, not one of {', '.join(KINDS)}")
    if document.get("status") is not None and document["status"] not in RUN_STATUSES:
        raise InvalidRunDocument(
            f"{source}: field 'status' is {document['status']!r}, not one of {', '.join(RUN_STATUSES)}"
        )
    _check_finite(document, "", source)
    spec = MEASUREMENTS[document["kind"]]
    _check(document["measurements"], spec, "measurements", source)
    _check_loop_parents(document["measurements"], source)
    return document


def timestamp(value: object, where: str) -> float:
    """Seconds since the epoch of an ISO 8601 time (``2026-11-30T07:44:06.362Z``); refused in one line when it is
    not one."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidRunDocument(f"{where} is {str(value)[:40]!r}, not an ISO 8601 time")
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


def _check_loop_parents(measurements: Mapping[str, Any], source: str) -> None:
    """Each loop's parent names a loop of the same program, and no chain of parents comes back to where it
    started (readers walk the chain up: a cycle would never end)."""
    table = measurements.get("programs")
    programs = table.get("programs") if isinstance(table, dict) else None
    if not isinstance(programs, dict):
        return
    for key, program in programs.items():
        loops = program.get("loops") if isinstance(program, dict) else None
        if not isinstance(loops, list):
            continue
        parents = {str(loop.get("id") or ""): loop.get("parent") for loop in loops if isinstance(loop, dict)}
        where = f"measurements.programs.programs[{str(key)[:60]!r}].loops"
        for loop_id, parent in parents.items():
            if parent is not None and str(parent) not in parents:
                raise InvalidRunDocument(
                    f"{source}: {where}: loop {loop_id[:60]!r} has parent {str(parent)[:60]!r}, "
                    "which is no loop of its program"
                )
            chain = [loop_id]
            while parent is not None:
                parent = str(parent)
                if parent in chain:
                    shown = " -> ".join(c[:40] for c in [*chain, parent])
                    raise InvalidRunDocument(f"{source}: {where}: the loops' parents form a cycle ({shown})")
                chain.append(parent)
                parent = parents.get(parent)


class NotANumber(float):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a document's text: Python's json reads them, JSON has no such
    values, so loading keeps them marked to refuse them with the field named."""

    def __new__(cls, token: str) -> NotANumber:
        made = super().__new__(cls, float(token.replace("Infinity", "inf")))
        made.token = token
        return made

    token: str


# No measured time is longer than this (about 32 years): a larger one is a crafted or broken record, which would
# print as an absurd duration and dominate every total and ratio.
MAX_SECONDS = 1e9


def _check_finite(value: object, where: str, source: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        shown = value.token if isinstance(value, NotANumber) else repr(value)
        raise InvalidRunDocument(f"{source}: {where.lstrip('.') or 'the document'} is {shown}, not a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        field = where.rpartition(".")[2]
        if abs(value) > 2**63 or (field.endswith("_s") and abs(value) > MAX_SECONDS):
            shown = f"{value:.3g}" if abs(value) < 1e300 else "a number of more than 300 digits"
            raise InvalidRunDocument(f"{source}: {where.lstrip('.')} is {shown}, larger than any measurement")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}", source)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_finite(item, f"{where}[{i}]", source)


# --- the shape of measurements -----------------------------------------------------------------------------
# Records come from other machines and CI artifacts: every reader trusts the types below, so a record that
# breaks them is refused on load with the field named, instead of failing somewhere inside a command.
# A spec is a JSON type name ("number", "integer", "string", "boolean", "object", "array"; all allow null),
# a dict (an object whose listed fields have those specs), ("array", spec) or ("map", spec) (an object's
# values). Fields not listed are free, except that times and sizes (``*_s``, ``*_bytes``) are numbers,
# or arrays or objects of numbers, everywhere.

Spec = Any
_NUMBERS = {n: "number" for n in ("compile_share", "spread")}
_COUNTS = {
    n: "number"
    for n in (
        "cells",
        "cells_run",
        "cells_ok",
        "cells_failed",
        "compiles",
        "backend_events",
        "user_compiles",
        "eager_compiles",
        "library_compiles",
        "numba_compiles",
        "cache_requests",
        "cache_hits",
        "cache_misses",
        "figures",
        "notebooks",
        "count",
    )
}
_FUNCTION: Spec = {"name": "string", "kind": "string", "shapes": "array", **_COUNTS}
_CELL: Spec = {
    "index": "integer!",
    "cell_index": "integer",
    "line": "integer",
    "execution_count": "integer",
    "source_hash": "string",
    "first_line": "string",
    "code_line": "string",
    "status": ("enum", CELL_STATUSES),
    "source": "string",
    "lines": ("array", "integer"),
    "tags": "array",
    "error": {"name": "string", "message": "string"},
    "samples": "object",  # per repeat: wall_s, compile_s (times, checked as such), status
    "jax": {**_COUNTS, "cache_state": "string", "functions": ("array", _FUNCTION)},
    "numba": {**_COUNTS, "functions": ("array", "object")},
    "alarms": "array",
    "rss": "object",
    "gpu_memory": "object",
    "device_memory": "object",
    "sched": {"on_cpu_s": "number", "wait_s": "number", "cpu_s": "number"},
    "timeline": {"classification": "string", "top_ops": ("array", "object")},
    **_NUMBERS,
}
_COMMON: Spec = {"totals": {**_COUNTS, "cache_state": "string"}, "cells": ("array", "object")}
MEASUREMENTS: dict[str, Spec] = {
    kind: {
        **_COMMON,
        "notebook": {"path": "string", "format": "string"},
        "runner": "object",
        "kernel": "object",
        "cells": ("array", _CELL),
        "repeats": "integer",
        "live_file": "string",
        "trial": "object",  # a trial's judgement, on its remedy side (nbscope.analyse.trial)
    }
    for kind in ("profile", "trace", "trial")
}
MEASUREMENTS["bench"] = {**_COMMON, "groups": ("map", "object"), "machine": "object"}
MEASUREMENTS["pathways"] = {**_COMMON, "pathways": ("map", "object"), "verdict": "string"}
MEASUREMENTS["loops"] = {**_COMMON, "sweeps": ("array", "object")}
MEASUREMENTS["audit"] = {**_COMMON, "notebooks": ("array", "object"), "lectures": "array"}
MEASUREMENTS["jupyter-cache"] = {**_COMMON, "notebook": {"path": "string"}}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_SIMPLE = {
    "number": _is_number,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _a(type_name: str) -> str:
    return "null" if type_name == "null" else ("an " if type_name[0] in "aeiou" else "a ") + type_name


def _refuse(source: str, where: str, value: object, wanted: str) -> InvalidRunDocument:
    return InvalidRunDocument(f"{source}: {where} is {_a(_json_type(value))}, not {_a(wanted)}")


def _is_measure(name: str) -> bool:
    return name.endswith(("_s", "_bytes"))


def _check_measure(value: object, where: str, source: str) -> None:
    """A time or size: a number or null, or an array or object of them; a duration is never negative."""
    if value is None:
        return
    if _is_number(value):
        if value < 0 and where.rpartition(".")[2].split("[")[0] in DURATIONS:
            raise InvalidRunDocument(f"{source}: {where} is {value!r}: a duration cannot be negative")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_measure(item, f"{where}[{i}]", source)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_measure(item, f"{where}.{key}", source)
    else:
        raise _refuse(source, where, value, "number")


def _check(value: object, spec: Spec, where: str, source: str) -> None:
    if isinstance(spec, str):
        required = spec.endswith("!")
        name = spec.rstrip("!")
        if (value is None and not required) or (value is not None and _SIMPLE[name](value)):
            if isinstance(value, (dict, list)):
                _check_free(value, where, source)
            return
        raise _refuse(source, where, value, name)
    if isinstance(spec, tuple):
        container, item_spec = spec
        if value is None:
            return
        if container == "enum":
            if value not in item_spec:
                raise InvalidRunDocument(f"{source}: {where} is {value!r}, not one of {', '.join(item_spec)}")
            return
        if container == "array":
            if not isinstance(value, list):
                raise _refuse(source, where, value, "array")
            for i, item in enumerate(value):
                _check(item, item_spec, f"{where}[{i}]", source)
        else:
            if not isinstance(value, dict):
                raise _refuse(source, where, value, "object")
            for key, item in value.items():
                _check(item, item_spec, f"{where}.{key}", source)
        return
    if value is None:
        return
    if not isinstance(value, dict):
        raise _refuse(source, where, value, "object")
    for key, item in value.items():
        if key in spec:
            _check(item, spec[key], f"{where}.{key}", source)
        elif _is_measure(str(key)):
            _check_measure(item, f"{where}.{key}", source)
        elif isinstance(item, (dict, list)):
            _check_free(item, f"{where}.{key}", source)


def _check_free(value: object, where: str, source: str) -> None:
    """Fields with no spec of their own: only their times and sizes are checked."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, (dict, list)):
                _check_free(item, f"{where}[{i}]", source)
    elif isinstance(value, dict):
        _check(value, {}, where, source)
