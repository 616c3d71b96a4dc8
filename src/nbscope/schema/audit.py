"""The typed model of an audit (a run record of kind ``audit``, written by ``nbscope.api.audit`` from the figures
``nbscope.analyse.audit`` makes) and of the tag an audit puts on each profile it runs (``measurements["audit"]``).

Frozen dataclasses, decoded and encoded by ``schema.codec``: ``decode(Audit, record.measurements)`` reads a
stored or merged audit, ``encode(audit)`` writes the measurements as stored (key order, and which keys a
document leaves out, as the audit has always written them). Figures are kept as recorded (``Measured``), so a
merge writes an earlier audit's numbers back unchanged. A diagnosis finding and a backend recommendation stay
the documents their own classes wrote (``Finding.to_dict``, ``Recommendation.to_dict``): the audit carries them,
its views read only their title, backend and fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any

from nbscope._redact import shorten
from nbscope.schema.codec import Check, Measured, MeasuredTime, Read, Write, never

# A run's own statuses that measured the notebook (an entry's other statuses: error, unavailable, not-run).
MEASURED = ("ok", "partial")


def _unless_false(value: object) -> bool:
    """A yes unless the document records a no (false, 0): a document without it (or with null) says yes."""
    return value is None or bool(value)


def _in_book(path: str) -> str | None:
    """A notebook's path in its book: relative, and never above the book's folder (a merge's file may be crafted)."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if path.startswith(("/", "~")) or ".." in parts or (parts and ":" in parts[0]):
        return f"is {shorten(path, 60)!r}, not a path inside the book"
    return None


# ---- the tag on each profile an audit ran ---------------------------------------------------------------


def _interrupted(tag: AuditTag) -> bool:
    return bool(tag.interrupted)


def _finished(tag: AuditTag) -> bool:
    return not tag.interrupted


@dataclass(frozen=True, slots=True)
class AuditTag:
    """What an audit notes on a profile it ran (``measurements["audit"]``): which notebook of which book, on which
    backend, where; a notebook the audit's stop cut short says so (``interrupted``) and is run again next time."""

    path: str
    book: Annotated[str | None, Write(omit=_interrupted)]
    source_hash: str | None
    backend: str | None
    gpu: Any  # the CUDA_VISIBLE_DEVICES value it was pinned to
    env: Mapping[str, Any]
    worker: Annotated[Any, Write(omit=_interrupted)]  # host, pid, Dask address
    elapsed_s: Annotated[MeasuredTime, Write(omit=_interrupted)]
    interrupted: Annotated[bool | None, Write(omit=_finished)] = None


@dataclass(frozen=True, slots=True)
class AuditedRun:
    """A profile's measurements as an audit reads them: the tag it noted there (None: a profile no audit ran)."""

    audit: AuditTag | None


# ---- a lecture's GPU forecast from its CPU run --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DominantTerm:
    """A lecture's largest GPU-side forecast term (a loop, work, launches, ...), added up over its cells."""

    kind: str | None
    function: str | None
    words: str
    low_s: float | None
    high_s: float | None  # None: no upper bound
    cells: tuple[int, ...]
    lines: tuple[int | None, ...]  # each cell's line in its file, when known


@dataclass(frozen=True, slots=True)
class DeviceForecast:
    """A CPU run's forecast on one GPU, in brief."""

    name: str | None
    cpu_s: MeasuredTime
    low_s: Measured
    high_s: Measured
    verdict: str | None
    all_on_gpu: str | None
    slowdown: Measured
    dominant: DominantTerm | None
    keep_on_cpu: tuple[str, ...]
    plan: Mapping[str, Any] | None  # the forecast's placement plan, as it writes it


def _refused(summary: ForecastSummary) -> bool:
    return summary.error is not None


def _made(summary: ForecastSummary) -> bool:
    return summary.error is None


@dataclass(frozen=True, slots=True)
class ForecastSummary:
    """A CPU run's GPU forecast per GPU it was recorded for; only ``error`` when the forecast refused the run."""

    gpus: Annotated[tuple[str, ...], Write(omit=_refused)]
    has_jax: Annotated[bool, Read(_unless_false), Write(omit=_refused)]
    devices: Annotated[Mapping[str, DeviceForecast], Write(omit=_refused)]
    notes: Annotated[tuple[str, ...], Write(omit=_refused)]
    error: Annotated[str | None, Write(omit=_made)] = None


# ---- one notebook on one backend ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One notebook on one backend (``measurements["notebooks"]``): how its run ended, its figures, its top
    findings, and the file and run it came from in a merge."""

    path: Annotated[str, Check(rule=_in_book)]
    target: str | None
    source_hash: str | None
    backend: str
    run_id: Any  # its profile in the store (an int), None without one
    status: str | None  # ok / partial (the profile's), error, unavailable, not-run
    reused: bool
    wall_s: MeasuredTime
    compile_s: MeasuredTime
    run_s: MeasuredTime
    execute_s: MeasuredTime
    kernel_start_s: MeasuredTime
    elapsed_s: MeasuredTime
    cells: int | None
    cells_failed: int | None
    compiles: int | None
    top_finding: Mapping[str, Any] | None  # the strongest finding, as Finding.to_dict wrote it
    top_findings: tuple[Mapping[str, Any], ...] | None  # None: not diagnosed
    findings: int | None  # how many findings the diagnosis made
    diagnosis: str | None  # why not diagnosed
    recommendation: Mapping[str, Any] | None  # analyse.recommend's choice, in brief
    forecast: ForecastSummary | None
    digest: str | None
    machine: str | None
    worker: Any
    gpu: Any
    started_at: str | None
    error: str | None
    attempts: Annotated[int | None, Write(omit=lambda entry: entry.attempts is None)] = None
    source_run_id: Annotated[Any, Write(omit=lambda entry: entry.source_run_id is None)] = None  # a merge's
    source_file: Annotated[str | None, Write(omit=lambda entry: entry.source_file is None)] = None

    @property
    def measured(self) -> bool:
        """It ran and has a wall time: a figure to compare backends by."""
        return self.status in MEASURED and self.wall_s is not None


# ---- per lecture, and the blast radius --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackendRun:
    """A lecture's run on one backend, as the audit table shows it."""

    status: str | None
    wall_s: float | None
    run_id: Any  # the run in the store (an int), None without one
    cells_failed: int | None
    error: str | None


def _whole_finding(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A finding document read as a cause: its title (the rule's name when it has none), and itself whole."""
    return {**value, "title": value.get("title") or value.get("rule") or "", "document": value}


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """What a lecture's line says of its backend recommendation (the brief of it an audit entry stores)."""

    recommendation: str  # cpu, gpu or mixed
    reason: str | None


@dataclass(frozen=True, slots=True)
class TopCause:
    """The strongest finding of a lecture's slower run: diagnose's finding, as stored, with its backend."""

    title: Annotated[str, Write(when=never)]
    backend: Annotated[str | None, Write(when=never)]
    action: Annotated[str | None, Write(when=never)]  # the fix in one line
    fix: Annotated[str | None, Write(when=never)]
    document: Annotated[Mapping[str, Any], Write(inline=True)]  # the finding as written, with ``backend``

    reshape = staticmethod(_whole_finding)


@dataclass(frozen=True, slots=True)
class Lecture:
    """One notebook of the audit: its total per backend, the winner and the top diagnosed cause with its fix."""

    path: str
    backends: Mapping[str, BackendRun]
    cpu_s: float | None
    gpu_backend: str | None
    gpu_s: float | None
    winner: str | None  # a backend, "tie", or None when the two were not both measured
    ratio: float | None  # slower over faster
    incomplete: bool
    top_finding: TopCause | None
    recommendation: Mapping[str, Any] | None  # analyse.recommend's choice, in brief
    forecast: ForecastSummary | None  # the CPU run's
    action: str | None


@dataclass(frozen=True, slots=True)
class GpuForecastRange:
    """One GPU's forecast for a lecture, in brief."""

    low_s: float | None
    high_s: float | None
    verdict: str | None
    slowdown: float | None


@dataclass(frozen=True, slots=True)
class BlastLecture:
    """One lecture of the blast radius: its CPU time and its forecast on the first GPU named."""

    path: str
    cpu_s: float | None
    low_s: float | None
    high_s: float | None
    slowdown: float | None
    verdict: str | None
    all_on_gpu: str | None
    dominant: DominantTerm | None
    keep_on_cpu: tuple[str, ...]
    has_jax: Annotated[bool, Read(_unless_false)]
    gpus: Mapping[str, GpuForecastRange]


@dataclass(frozen=True, slots=True)
class ForecastError:
    """A lecture the forecast refused, and why."""

    path: str
    error: str


def _no_gpu(radius: BlastRadius) -> bool:
    return radius.gpu is None


def _with_lectures(value: Mapping[str, Any]) -> bool:
    return value.get("lectures") is not None


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """The GPU blast radius of a CPU-only fleet run (``audit --forecast``)."""

    gpu: str | None  # the first GPU forecast (device table key); None when no lecture could be forecast
    gpu_name: Annotated[str | None, Write(omit=_no_gpu)]
    gpus: tuple[str, ...]
    lectures: tuple[BlastLecture, ...]
    errors: tuple[ForecastError, ...]
    summary: str

    present = staticmethod(_with_lectures)


# ---- the whole audit ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether the audit could run a backend, and why not."""

    available: bool
    platform: str | None
    reason: str | None
    devices: Annotated[tuple[str, ...] | None, Write(omit=lambda info: info.devices is None)] = None


@dataclass(frozen=True, slots=True)
class AuditTotals:
    notebooks: int
    runs: int  # measured
    profiled: int  # this time
    reused: int  # from the store
    failed: int
    partial: int
    not_run: int
    unavailable: int
    cells_failed: int
    wall_s: MeasuredTime  # the audit's own wall time (None for a merge)
    cpu_s: MeasuredTime  # sums of notebook totals
    gpu_s: MeasuredTime
    compile_s: MeasuredTime
    compared: int  # lectures with both a CPU and a GPU run
    slower_on_gpu: int


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """What an audit was asked (its record's ``settings``) that a merge reads: its backends and its shard."""

    backends: tuple[str, ...]
    shard: str | None  # "i/n"


@dataclass(frozen=True, slots=True)
class MergedFile:
    """An audit file a merge read."""

    file: str
    target: str | None
    started_at: str | None
    status: str | None
    digest: str | None
    machine: str | None
    shard: str | None
    wall_s: MeasuredTime
    runs_imported: int


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which of the book's notebooks the merged files cover."""

    expected: int
    covered: int
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    shards: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Discovery:
    """What an audit's ``discovery`` names that a merge reads: the book's notebooks."""

    notebooks: tuple[str, ...]


def _merged(audit: Audit) -> bool:
    return audit.merged_from is not None


@dataclass(frozen=True, slots=True)
class Audit:
    """An audit's measurements (a run record of kind ``audit``), as stored: an audit run here writes its shard
    (and its Dask workers), a merge the files it read and what they cover."""

    workers: Annotated[Mapping[str, Any] | None, Write(omit=lambda audit: audit.workers is None)]
    totals: AuditTotals
    backends: Mapping[str, Availability]
    discovery: Mapping[str, Any]  # the book as discovered: source, root, config, notebooks, skipped, ...
    notebooks: tuple[AuditEntry, ...]
    lectures: tuple[Lecture, ...]
    summary: str
    forecast: Annotated[BlastRadius | None, Write(omit=lambda audit: audit.forecast is None)]
    shard: Annotated[Mapping[str, Any] | None, Write(omit=_merged)]
    merged_from: Annotated[tuple[MergedFile, ...] | None, Write(omit=lambda audit: audit.merged_from is None)] = None
    coverage: Annotated[Coverage | None, Write(omit=lambda audit: audit.coverage is None)] = None

    @property
    def gpu_backend(self) -> str | None:
        return self.lectures[0].gpu_backend if self.lectures else None

    @property
    def failures(self) -> tuple[AuditEntry, ...]:
        """The entries that have no run: an error, or not run (interrupted)."""
        return tuple(e for e in self.notebooks if e.status in ("error", "not-run"))

    @property
    def missing(self) -> tuple[str, ...]:
        """A merge: the notebooks of the book no merged file covered."""
        return self.coverage.missing if self.coverage is not None else ()
