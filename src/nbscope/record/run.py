"""The run record: one versioned JSON document per run, the unit every command writes and reads.

The format is documented in ``docs/run-record.md``. Loading validates the document (``schema.validate``); the
``measurements`` object is owned by the run kind (profile, bench, pathways, ...).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from nbscope._errors import NbscopeError
from nbscope._redact import redact
from nbscope._version import __version__
from nbscope.record.secrets import command_for_record
from nbscope.schema import codec, process_environment
from nbscope.schema import validate as run_document
from nbscope.schema.envelope import Envelope
from nbscope.schema.kinds import PROFILE_KINDS as PROFILE_KINDS  # its readers import it from here too
from nbscope.schema.validate import FORMAT_NAME, SCHEMA_VERSION, utc_now

if TYPE_CHECKING:
    from nbscope.schema.machine import Machine, Settings
    from nbscope.schema.model import NotebookRun

View = TypeVar("View")
_VIEWED = ("measurements", "fingerprint", "settings")  # the parts of a record its typed views are read from


# A label names runs for later reference (``--label main-cpu``; ``nbscope show main-cpu``): letters, digits
# and ``. _ - + /``, not only digits (those are run ids) and not ``latest``; no ``:``, which separates a label
# from a notebook in a run reference (``main-cpu:lecture.md``).
LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,99}")
LABEL_ENV = "NBSCOPE_LABEL"
FILE_SUFFIXES = (".json", ".jsonl", ".ipynb", ".md", ".py")  # what a run reference or a command reads as a file


def object_in(document: Mapping[str, object], key: str) -> dict[str, object]:
    """The object ``document`` holds at ``key``, itself (its writers change it in place), else a new empty one."""
    value = document.get(key)
    return value if isinstance(value, dict) else {}


def objects_in(document: Mapping[str, object], key: str) -> list[dict[str, object]]:
    """The objects of the array ``document`` holds at ``key`` (a record's cells), in a new list."""
    value = document.get(key)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def check_label(label: str | None) -> str | None:
    """``label`` if it can name runs, None for none; else a one-line NbscopeError."""
    if label is None or label == "":
        return None
    if not LABEL_PATTERN.fullmatch(label) or label.isdigit() or label == "latest":
        raise NbscopeError(
            f"label {label!r} cannot name runs: use letters, digits and . _ - + / (at most 100), not only "
            "digits (those are run ids), not 'latest', no ':'"
        )
    if label.lower().endswith(FILE_SUFFIXES):  # `show r1.json` reads the file r1.json, not the run labelled so
        raise NbscopeError(f"label {label!r} cannot name runs: it reads as a file name (ends in {Path(label).suffix})")
    return label


def default_label() -> str | None:
    """The label of runs recorded now: ``$NBSCOPE_LABEL`` (what ``--label`` sets), or none."""
    return check_label(process_environment.read().label or None)


def _format_name(record: RunRecord) -> str:
    return FORMAT_NAME


@dataclass
class RunRecord(codec.Encoded):
    """One run: what ran, where, with which settings, and what it measured. Its document (``to_dict``) lists
    ``document_keys``, the format's name first."""

    kind: str
    target: str
    fingerprint: dict[str, object]
    measurements: dict[str, object] = field(default_factory=dict)
    settings: dict[str, object] = field(default_factory=dict)
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
    document_keys = (
        ("format", _format_name),
        "schema_version",
        "tool_version",
        "command",
        "started_at",
        "ended_at",
        "status",
        "kind",
        "target",
        "settings",
        "fingerprint",
        "measurements",
        "label",
    )

    @property
    def digest(self) -> str:
        return self.machine().digest

    def measurement_settings(self) -> dict[str, object]:
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
    def from_dict(cls, document: object, *, source: str = "document", parsed: bool = False) -> RunRecord:
        document, envelope, measured = _checked(document, source)
        document = migrate(document)
        record = cls(
            kind=envelope.kind,
            target=envelope.target,
            fingerprint=object_in(document, "fingerprint"),
            measurements=object_in(document, "measurements"),
            settings=dict(envelope.settings),
            command=list(envelope.command),
            started_at=envelope.started_at,
            ended_at=envelope.ended_at,
            status=envelope.status,
            tool_version=envelope.tool_version,
            schema_version=envelope.schema_version,
            label=envelope.label,
        )
        # ``parsed``: the document was parsed for this record alone (``loads``), so its typed measurements are the
        # strict decode's; a caller's own dict may be changed in place after, so its views are decoded on first use.
        record._views = {type(measured): measured} if parsed else {}
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

    def _view(self, cls: type[View], document: Mapping[str, object]) -> View:
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

    def totals(self) -> Mapping[str, object]:
        """This run's totals, whatever its kind, each figure by name as recorded (empty: none recorded)."""
        from nbscope.schema.recorded_figures import RecordedFigures

        return self.measured(RecordedFigures).totals

    def headline(self) -> dict[str, object]:
        """The few totals that `nbscope runs` lists."""
        totals = self.totals()
        keys = ("wall_s", "compile_s", "cells", "compiles", "figures", "notebooks")
        return {k: totals[k] for k in keys if k in totals}


def measurement_settings(settings: Mapping[str, object] | None) -> dict[str, object]:
    """``jax_platform`` (backend asked for), ``jax_cache`` (off, cold, warm or a folder), ``timeline``
    (tracing costs time) and ``repeat`` (medians of N runs are not single runs) of a run's settings;
    absent ones as the defaults a run without them had (``schema.machine.Settings`` reads them so)."""
    return _measured(_settings(settings))


def _settings(settings: Mapping[str, object] | None) -> Settings:
    """Settings as a run's document (or ``measurement_settings``) has them, typed."""
    from nbscope.schema.machine import Settings

    return codec.decode(Settings, settings)


def _measured(settings: Settings) -> dict[str, object]:
    return {
        "jax_platform": settings.jax_platform,
        "jax_cache": settings.jax_cache,
        "timeline": settings.timeline,
        "repeat": settings.repeat,
    }


def series_settings(settings: Mapping[str, object] | None) -> dict[str, object]:
    """The measurement settings and ``env`` (the ``--env`` variables, their values as stored: a hash for any that
    may be a secret): what puts two runs of a notebook in different history series. The gate's automatic
    baseline compares only the measurement settings: a run under another ``--env`` is still a baseline."""
    typed = _settings(settings)
    return {**_measured(typed), "env": dict(sorted(typed.env.items()))}


def describe_settings(settings: Mapping[str, object]) -> str:
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
    return "gpu" if first in ("cuda", "gpu", "rocm") else first


def observed_backend(record: RunRecord) -> dict[str, Any] | None:
    """The backend JAX reported in the run itself (the kernel's probe, the loops or bench worker), which outranks
    every setting and default: None when the run never started JAX."""
    from nbscope.schema.suite import BenchRun, LoopsRun

    platform, source = None, ""
    if record.kind == "loops":
        sweeps = record.measured(LoopsRun).sweeps
        platform = next((s.platform for s in sweeps if s.placement == "default" and s.platform), None)
        source = "the loops worker's JAX"
    elif record.kind == "bench":
        runs = (run for group in record.measured(BenchRun).groups.values() for run in group.runs)
        platform = next((str(run.info["backend"]) for run in runs if run.info and "backend" in run.info), None)
        source = "the bench worker's JAX"
    elif record.kind in ("profile", "trace", "trial"):
        kernel = record.notebook_run().kernel
        platform = kernel.jax_backend.platform if kernel is not None and kernel.jax_backend is not None else None
        source = "the kernel's JAX backend"
    return {"platform": _platform_word(platform), "source": source} if platform else None


def platform_of(record: RunRecord) -> str | None:
    """The platform a run's JAX used (``backend_of``'s), None where unknown."""
    platform = backend_of(record)["platform"]
    return platform if isinstance(platform, str) else None


def backend_of(record: RunRecord) -> dict[str, Any]:
    """The JAX backend a run used, and how we know: ``{"platform": "cpu"|"gpu"|"tpu"|None, "source": ...}``."""
    observed = observed_backend(record)
    if observed is not None:
        return observed
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


def content_hash(document: Mapping[str, object]) -> str:
    """SHA-256 (hex) of a parsed run document written as JSON with sorted keys."""
    text = json.dumps(_finite(document), sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _checked(document: object, source: str) -> tuple[dict[str, object], Envelope, Any]:
    """``document`` once ``schema.validate`` has found it a run record this version reads, and its measurements
    typed; else its one line, as the NbscopeError every command reports."""
    try:
        return run_document.validate(document, source=source, reader=__version__)
    except run_document.InvalidRunDocument as exc:
        raise NbscopeError(str(exc)) from None


def migrate(document: dict[str, object]) -> dict[str, object]:
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


def check_not_future(record: RunRecord, source: str) -> None:
    """Refuse, in one line, a run dated later than this machine's clock allows (``schema.validate.CLOCK_SKEW_S``):
    it would be every command's ``latest`` until then."""
    try:
        run_document.check_not_future(record.started_at, source)
    except run_document.InvalidRunDocument as exc:
        raise NbscopeError(str(exc)) from None


def loads(text: str, *, source: str = "document") -> RunRecord:
    try:
        # A record from before redaction too (its --env values are hidden by the store, from their values).
        document = json.loads(redact(text, assignments=False), parse_constant=run_document.NotANumber)
    except json.JSONDecodeError as exc:
        raise NbscopeError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError as exc:
        raise NbscopeError(f"{source} is not valid JSON ({exc.reason})") from None
    except RecursionError:
        raise NbscopeError(
            f"{source} is nested deeper than {run_document.MAX_DEPTH} levels; not a run record"
        ) from None
    except ValueError:  # Python's bound on reading an integer of thousands of digits
        raise NbscopeError(f"{source} holds a number of thousands of digits; not a run record") from None
    return RunRecord.from_dict(document, source=source, parsed=True)


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
