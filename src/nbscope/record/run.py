"""The run record: one versioned JSON document per run, the unit every command writes and reads.

The format is documented in ``docs/run-record.md``. Loading validates the envelope; the
``measurements`` object is owned by the run kind (profile, bench, pathways, ...).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, TypeVar

from nbscope._errors import NbscopeError
from nbscope._redact import redact
from nbscope._version import __version__
from nbscope.record.secrets import command_for_record
from nbscope.schema import codec, process_environment
from nbscope.schema.envelope import Envelope
from nbscope.schema.kinds import KINDS
from nbscope.schema.kinds import PROFILE_KINDS as PROFILE_KINDS  # its readers import it from here too
from nbscope.schema.status import CELL_STATUSES

if TYPE_CHECKING:
    from nbscope.schema.machine import Machine, Settings
    from nbscope.schema.model import NotebookRun

FORMAT_NAME = "nbscope-run"
# 2: each code cell carries its whole source and its line range (``cells[].source``, ``lines``); times are
# finite and never negative; statuses and kinds are from the lists below. A version 1 document still loads:
# it migrates in memory (its cells' code is then read from the notebook only when unchanged, see
# ``record.sources``).
SCHEMA_VERSION = 2
View = TypeVar("View")
_VIEWED = ("measurements", "fingerprint", "settings")  # the parts of a record its typed views are read from
RUN_STATUSES = ("ok", "partial", "error")
# Durations that can only be >= 0 (a difference such as ``cache_saving_s`` or a fit's ``intercept_s`` may be
# negative, and is only checked to be finite).
DURATIONS = ("wall_s", "code_s", "compile_s", "run_s", "overhead_s", "roundtrip_s", "trace_s", "lower_s", "collection_s",
             "backend_s", "elapsed_s", "median_s", "min_s", "max_s", "mad_s")
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


# A label names runs for later reference (``--label main-cpu``; ``nbscope show main-cpu``): letters, digits
# and ``. _ - + /``, not only digits (those are run ids) and not ``latest``; no ``:``, which separates a label
# from a notebook in a run reference (``main-cpu:lecture.md``).
# How deep a record's JSON may nest (a real one is under 15 levels): deeper is refused, not a RecursionError.
MAX_DEPTH = 100
# How far ahead of this machine's clock a run may be dated (clocks of CI runners drift by seconds, not days).
CLOCK_SKEW_S = 24 * 3600
LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,99}")
LABEL_ENV = "NBSCOPE_LABEL"


def check_label(label: str | None) -> str | None:
    """``label`` if it can name runs, None for none; else a one-line NbscopeError."""
    if label is None or label == "":
        return None
    if not LABEL_PATTERN.fullmatch(label) or label.isdigit() or label == "latest":
        raise NbscopeError(
            f"label {label!r} cannot name runs: use letters, digits and . _ - + / (at most 100), not only "
            "digits (those are run ids), not 'latest', no ':'"
        )
    return label


def default_label() -> str | None:
    """The label of runs recorded now: ``$NBSCOPE_LABEL`` (what ``--label`` sets), or none."""
    return check_label(process_environment.read().label or None)


@contextmanager
def labelled(label: str | None) -> Iterator[None]:
    """Runs recorded inside carry ``label`` (checked first), also those of worker processes started there;
    ``$NBSCOPE_LABEL`` is restored afterwards. None leaves it as it is."""
    label = check_label(label)
    if label is None:
        yield
        return
    before = process_environment.read().label
    os.environ[LABEL_ENV] = label
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LABEL_ENV, None)
        else:
            os.environ[LABEL_ENV] = before


def utc_now() -> str:
    """An ISO 8601 UTC timestamp with milliseconds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def _format_name(record: RunRecord) -> str:
    return FORMAT_NAME


@dataclass
class RunRecord(codec.Encoded):
    """One run: what ran, where, with which settings, and what it measured. Its document (``to_dict``) lists
    ``document_keys``, the format's name first."""

    kind: str
    target: str
    fingerprint: dict[str, Any]
    measurements: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: command_for_record(sys.argv))  # --env values hidden
    started_at: str = field(default_factory=utc_now)
    ended_at: str | None = None
    status: str = "ok"
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    # What the user named the run (``--label``); runs recorded while ``$NBSCOPE_LABEL`` is set carry it.
    # absent, not null, when None: an unlabelled run's document is as before labels
    label: Annotated[str | None, codec.Write(when=codec.known)] = field(default_factory=default_label)
    run_id: int | None = None  # set by the store; not part of the document
    # The code of a notebook the user named for this run (``--notebook``; ``record.sources.naming``), by source
    # hash, for the cells the record does not carry itself; not part of the document.
    named_sources: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    # The typed views of a loaded record, by class, decoded on first use (None: a record still being written,
    # whose document a job may change in place, decodes on every call).
    _views: dict[type, Any] | None = field(default=None, init=False, compare=False, repr=False)
    document_keys = (("format", _format_name), "schema_version", "tool_version", "command", "started_at", "ended_at",
                     "status", "kind", "target", "settings", "fingerprint", "measurements", "label")

    @property
    def digest(self) -> str:
        return self.machine().digest

    def measurement_settings(self) -> dict[str, Any]:
        """The settings that change what a run measures: only runs that agree on them are compared by
        the automatic gate baseline or put in one history series."""
        return _measured(self.run_settings())

    def content_hash(self) -> str:
        """SHA-256 of the document as JSON with sorted keys: the same run exported and imported again has
        the same hash, so the store keeps it once."""
        return content_hash(json.loads(self.to_json(indent=None)))

    def finish(self, status: str | None = None) -> RunRecord:
        self.ended_at = utc_now()
        if status is not None:
            self.status = status
        return self

    def to_json(self, indent: int | None = 1) -> str:
        # NaN and infinities are not JSON: a figure that is not a number is written as unknown (null). No credential
        # of a URL (an index URL, a requirement, a command line) is kept: the store, exports and --json get this text.
        return redact(json.dumps(_finite(self.to_dict()), indent=indent, default=_json_default, allow_nan=False))

    @classmethod
    def from_dict(cls, document: object, *, source: str = "document") -> RunRecord:
        document = migrate(validate(document, source=source))
        envelope = codec.decode(Envelope, document)
        record = cls(
            kind=envelope.kind,
            target=envelope.target,
            fingerprint=document["fingerprint"],
            measurements=document["measurements"],
            settings=dict(envelope.settings),
            command=list(envelope.command),
            started_at=envelope.started_at,
            ended_at=envelope.ended_at,
            status=envelope.status,
            tool_version=envelope.tool_version,
            schema_version=envelope.schema_version,
            label=envelope.label,
        )
        record._views = {}
        return record

    def notebook_run(self) -> NotebookRun:
        """This run's cells, totals and notebook as typed, read-only objects (a ``profile`` or ``trace`` run;
        for other kinds, the cells and totals they have)."""
        from nbscope.schema.model import NotebookRun

        return self.measured(NotebookRun)

    def measured(self, cls: type[View]) -> View:
        """The parts of this run's measurements that ``cls`` types (``notebook_run``'s, or another view's), decoded
        once for a loaded record."""
        return self._view(cls, self.measurements)

    def machine(self) -> Machine:
        """The machine this run ran on (its fingerprint), typed."""
        from nbscope.schema.machine import Machine

        return self._view(Machine, self.fingerprint)

    def run_settings(self) -> Settings:
        """How this run was asked to run (its settings), typed."""
        from nbscope.schema.machine import Settings

        return self._view(Settings, self.settings)

    def settle(self) -> None:
        """The record is written (its job stores it as it is): from here on its typed views are decoded once, as a
        loaded record's are."""
        if self._views is None:
            self._views = {}

    def with_named_sources(self, named: Mapping[str, str]) -> RunRecord:
        """This record with the code of a notebook the user named (``record.sources.naming``); the same
        documents, so the same typed views."""
        named_record = replace(self, named_sources=named)
        named_record._views = self._views
        return named_record

    def _view(self, cls: type[View], document: Mapping[str, Any]) -> View:
        """``cls`` decoded from a part of the document: once for a record loaded from a document (what the store
        and exports hand out, which readers never change), afresh for a record a job is still writing."""
        if self._views is None:
            return codec.decode(cls, document)
        if cls not in self._views:
            self._views[cls] = codec.decode(cls, document)
        return self._views[cls]  # type: ignore[no-any-return]

    def __setattr__(self, name: str, value: object) -> None:
        if name in _VIEWED and getattr(self, "_views", None):
            self._views = {}  # a part replaced: its views are read again
        object.__setattr__(self, name, value)

    def headline(self) -> dict[str, Any]:
        """The few totals that `nbscope runs` lists."""
        totals = self.measurements.get("totals") or {}
        keys = ("wall_s", "compile_s", "cells", "compiles", "figures", "notebooks")
        return {k: totals[k] for k in keys if k in totals}


def measurement_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``jax_platform`` (backend asked for), ``jax_cache`` (off, cold, warm or a folder), ``timeline``
    (tracing costs time) and ``repeat`` (medians of N runs are not single runs) of a run's settings;
    absent ones as the defaults a run without them had (``schema.machine.Settings`` reads them so)."""
    return _measured(_settings(settings))


def _settings(settings: Mapping[str, Any] | None) -> Settings:
    """Settings as a run's document (or ``measurement_settings``) has them, typed."""
    from nbscope.schema.machine import Settings

    return codec.decode(Settings, settings)


def _measured(settings: Settings) -> dict[str, Any]:
    return {"jax_platform": settings.jax_platform, "jax_cache": settings.jax_cache, "timeline": settings.timeline,
            "repeat": settings.repeat}


def series_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The measurement settings and ``env`` (the ``--env`` variables, their values as stored: a hash for any that
    may be a secret): what puts two runs of a notebook in different history series. The gate's automatic
    baseline compares only the measurement settings: a run under another ``--env`` is still a baseline."""
    typed = _settings(settings)
    return {**_measured(typed), "env": dict(sorted(typed.env.items()))}


def describe_settings(settings: Mapping[str, Any]) -> str:
    """``backend cpu · cache warm · timeline · repeat 4`` (defaults left out; ``default settings`` if all are)."""
    typed, parts = _settings(settings), []
    if typed.jax_platform:
        parts.append(f"backend {typed.jax_platform}")
    if typed.jax_cache != "off":
        parts.append(f"cache {typed.jax_cache}")
    if typed.timeline:
        parts.append("timeline")
    if typed.repeat != 1:
        parts.append(f"repeat {typed.repeat}")
    return " · ".join(parts) or "default settings"


def _platform_word(value: str) -> str:
    first = value.split(",")[0].strip().lower()
    if first in ("cuda", "gpu", "rocm"):
        return "gpu"
    return first


def backend_of(record: RunRecord) -> dict[str, Any]:
    """The JAX backend a run used, and how we know: ``{"platform": "cpu"|"gpu"|"tpu"|None, "source": ...}``."""
    machine, settings = record.machine(), record.run_settings()
    if settings.jax_platform:
        return {"platform": _platform_word(settings.jax_platform), "source": "settings.jax_platform"}
    recorded = process_environment.read(settings.environment(machine))
    for name, value in (("JAX_PLATFORMS", recorded.jax_platforms), ("JAX_PLATFORM_NAME", recorded.jax_platform_name)):
        if value:
            return {"platform": _platform_word(value), "source": f"environment {name}"}
    if machine.jax_runtime and machine.jax_runtime.default_backend:
        return {"platform": _platform_word(machine.jax_runtime.default_backend), "source": "fingerprint.jax_runtime"}
    if machine.gpus and any("cuda" in name for name in machine.jax_plugins):
        # JAX picks the GPU by default when its CUDA plugin is installed and a device is visible.
        return {"platform": "gpu", "source": "default: GPU present and jax CUDA plugin installed"}
    if machine.gpus and not machine.jax_plugins:
        return {"platform": "cpu", "source": "default: GPU present but no jax GPU plugin installed"}
    return {"platform": "cpu", "source": "default: no GPU visible"}


def content_hash(document: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a parsed run document written as JSON with sorted keys."""
    text = json.dumps(_finite(document), sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def migrate(document: dict[str, Any]) -> dict[str, Any]:
    """A validated document of an earlier schema version, as this version reads it.

    Version 1 → 2 adds nothing that can be derived: its cells carry no source, which readers see as "code not
    recorded" (``record.sources`` then reads an unchanged notebook). The document keeps the version it was
    written with, so that a reader knows which fields it can expect.
    """
    return document


def _finite(value: object) -> object:
    """``value`` with every NaN or infinite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _json_default(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def validate(document: object, *, source: str = "document") -> dict[str, Any]:
    """``document`` as a run record this version can read; NbscopeError with one line if it is not one."""
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
    _check_depth(document, source)
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(document.get(name), kind):
            raise NbscopeError(f"{source}: field {name!r} is missing or not a {kind.__name__}")
    for name in ("started_at", "ended_at"):
        if document.get(name) is not None:
            timestamp(document[name], f"{source}: field {name!r}")
    _check_not_future(document["started_at"], source)  # also a run stored before this check: not `latest` forever
    for name in ("ended_at", "status", "label"):
        if document.get(name) is not None and not isinstance(document[name], str):
            raise NbscopeError(f"{source}: field {name!r} is {_a(_json_type(document[name]))}, not a string")
    if document.get("settings") is not None and not isinstance(document["settings"], dict):
        raise NbscopeError(f"{source}: field 'settings' is {_a(_json_type(document['settings']))}, not an object")
    if document["kind"] not in KINDS:
        raise NbscopeError(f"{source}: field 'kind' is {document['kind']!r}, not one of {', '.join(KINDS)}")
    if document.get("status") is not None and document["status"] not in RUN_STATUSES:
        raise NbscopeError(
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
        raise NbscopeError(f"{where} is {str(value)[:40]!r}, not an ISO 8601 time")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def check_not_future(record: RunRecord, source: str) -> None:
    """Refuse, in one line, a run dated later than this machine's clock allows (:data:`CLOCK_SKEW_S`): it
    would be every command's ``latest`` until then."""
    _check_not_future(record.started_at, source)


def _check_not_future(started_at: object, source: str) -> None:
    when = timestamp(started_at, f"{source}: field 'started_at'")
    if when > time.time() + CLOCK_SKEW_S:
        raise NbscopeError(f"{source}: field 'started_at' is {started_at}, in the future of this machine's "
                           f"clock ({utc_now()}); refused")


def _check_depth(document: object, source: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise NbscopeError(f"{source} is nested deeper than {MAX_DEPTH} levels; not a run record")
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
                raise NbscopeError(f"{source}: {where}: loop {loop_id[:60]!r} has parent {str(parent)[:60]!r}, "
                                   "which is no loop of its program")
            chain = [loop_id]
            while parent is not None:
                parent = str(parent)
                if parent in chain:
                    shown = " -> ".join(c[:40] for c in [*chain, parent])
                    raise NbscopeError(f"{source}: {where}: the loops' parents form a cycle ({shown})")
                chain.append(parent)
                parent = parents.get(parent)


class _NotANumber(float):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a document's text: Python's json reads them, JSON has no such
    values, so loading keeps them marked to refuse them with the field named."""

    def __new__(cls, token: str) -> _NotANumber:
        made = super().__new__(cls, float(token.replace("Infinity", "inf")))
        made.token = token
        return made

    token: str


# No measured time is longer than this (about 32 years): a larger one is a crafted or broken record, which would
# print as an absurd duration and dominate every total and ratio.
MAX_SECONDS = 1e9


def _check_finite(value: object, where: str, source: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        shown = value.token if isinstance(value, _NotANumber) else repr(value)
        raise NbscopeError(f"{source}: {where.lstrip('.') or 'the document'} is {shown}, not a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        field = where.rpartition(".")[2]
        if abs(value) > 2**63 or (field.endswith("_s") and abs(value) > MAX_SECONDS):
            shown = f"{value:.3g}" if abs(value) < 1e300 else "a number of more than 300 digits"
            raise NbscopeError(f"{source}: {where.lstrip('.')} is {shown}, larger than any measurement")
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
_COUNTS = {n: "number" for n in (
    "cells", "cells_run", "cells_ok", "cells_failed", "compiles", "backend_events", "user_compiles",
    "eager_compiles", "library_compiles", "numba_compiles", "cache_requests", "cache_hits", "cache_misses",
    "figures", "notebooks", "count",
)}
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
    }
    for kind in ("profile", "trace")
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


def _refuse(source: str, where: str, value: object, wanted: str) -> NbscopeError:
    return NbscopeError(f"{source}: {where} is {_a(_json_type(value))}, not {_a(wanted)}")


def _is_measure(name: str) -> bool:
    return name.endswith(("_s", "_bytes"))


def _check_measure(value: object, where: str, source: str) -> None:
    """A time or size: a number or null, or an array or object of them; a duration is never negative."""
    if value is None:
        return
    if _is_number(value):
        if value < 0 and where.rpartition(".")[2].split("[")[0] in DURATIONS:
            raise NbscopeError(f"{source}: {where} is {value!r}: a duration cannot be negative")
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
                raise NbscopeError(f"{source}: {where} is {value!r}, not one of {', '.join(item_spec)}")
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


def loads(text: str, *, source: str = "document") -> RunRecord:
    try:
        # A record from before redaction too (its --env values are hidden by the store, from their values).
        document = json.loads(redact(text, assignments=False), parse_constant=_NotANumber)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NbscopeError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise NbscopeError(f"{source} is nested deeper than {MAX_DEPTH} levels; not a run record") from None
    except ValueError:  # Python's bound on reading an integer of thousands of digits
        raise NbscopeError(f"{source} holds a number of thousands of digits; not a run record") from None
    return RunRecord.from_dict(document, source=source)


def load(path: str | Path) -> RunRecord:
    """Read and validate a run record from a JSON file."""
    from nbscope._files import read_bounded

    path = Path(path)
    data = read_bounded(path, what="run record")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NbscopeError(f"{path} is not a text file, so not a run record") from None
    return loads(text, source=str(path))


def dump(record: RunRecord, path: str | Path) -> Path:
    """Write a run as JSON to ``path`` (``-`` or ``/dev/stdout``: standard output) by :mod:`nbscope._files`'
    rules: atomically, only over a regular file, and only in an existing folder."""
    from nbscope._files import write_text

    write_text(path, record.to_json() + "\n")
    return Path(path)
