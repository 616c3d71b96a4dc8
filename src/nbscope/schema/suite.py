"""Typed views of the two benchmark records: ``bench`` (the hardware suite, written by ``nbscope.api.bench``
from its workers' documents, ``nbscope.collect.bench``) and ``loops`` (the trip-count sweep, written by
``nbscope.api.loops`` from ``nbscope.collect.loops``).

Read-only dataclasses over the validated document, like ``schema.model`` (its docstring says why dataclasses),
built by ``schema.codec.decode``: ``decode(BenchRun, record.measurements)``, ``decode(BenchSettings,
record.settings)`` and ``decode(LoopsRun, record.measurements)``. They carry what readers use; free-form parts
nothing reads (a figure's ``params``, a group's ``sizes``, ``info`` and ``import_s``, a worker's ``traceback``)
stay in the stored document only. A field a record lacks, or holds with the wrong type, reads as ``None``
(unknown); an empty part of a figure (``{}``) reads as an absent one.

Numbers are kept as recorded (an integer stays an integer), so a figure carried on into ``--json`` output
is written as the record has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema import _fields
from nbscope.schema.codec import Measured, MeasuredTime, Read, Write, given, known, never

__all__ = [
    "BenchGroup",
    "BenchRun",
    "BenchSettings",
    "BenchTotals",
    "LoopEstimate",
    "Extrapolation",
    "FirstCall",
    "FitPoint",
    "GroupFigure",
    "LoopFit",
    "LoopInfo",
    "LoopPoint",
    "LoopsJax",
    "LoopsRun",
    "LoopsTotals",
    "SlopeFit",
    "Steadiness",
    "Steady",
    "Sweep",
    "Throughput",
    "WorkerRun",
    "XlaDump",
]


def _measurements(value: object) -> tuple[float, ...]:
    """The figures of an array, as recorded; those that are not figures left out."""
    return tuple(n for n in map(_fields.figure, value) if n is not None) if isinstance(value, list) else ()


def _points(sweep: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A sweep's trip counts as points: the record keeps their figures as parallel lists, aligned by position;
    a trip count or a median that is not a measurement drops its position."""
    trip_counts, seconds = sweep.get("trip_counts"), sweep.get("seconds")
    if not isinstance(trip_counts, list) or not isinstance(seconds, list):
        return []

    def at(key: str, position: int) -> Any:
        values = sweep.get(key)
        return values[position] if isinstance(values, list) and position < len(values) else None

    return [
        {
            "trips": trips,
            "seconds": median,
            "first_call_s": at("first_call_s", position),
            "inner": at("inner", position),
            "samples": at("samples", position),
            "cpu_seconds": at("cpu_seconds", position),
        }
        for position, (trips, median) in enumerate(zip(trip_counts, seconds, strict=False))
        if _fields.integer(trips) is not None and _fields.figure(median) is not None
    ]


# ---- bench ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstCall:
    """A figure's first call in its fresh process, split into compile and run where a compiler is involved."""

    wall_s: MeasuredTime
    compile_s: MeasuredTime  # None: no compiler to probe (pure Python, NumPy)
    run_s: MeasuredTime

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class Steady:
    """A figure's steady state: statistics of calibrated repeated samples (``collect.bench._stats.summarise``)."""

    median_s: MeasuredTime
    min_s: MeasuredTime
    max_s: MeasuredTime
    mad_s: MeasuredTime
    spread: Measured  # MAD / median
    samples: int | None
    inner: int | None  # calls per sample
    uncertainty: Measured  # the spread, raised to the machine's unsteadiness during the run
    samples_s: Annotated[tuple[float, ...], Read(_measurements)]

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class FitPoint:
    trips: int | None
    median_s: MeasuredTime
    mad_s: MeasuredTime


@dataclass(frozen=True, slots=True)
class SlopeFit:
    """A per-iteration figure: the slope of a least-squares line through trip counts' medians (the loops group)."""

    per_iter_s: Measured
    per_iter_us: Measured
    intercept_s: Measured
    slope_stderr_s: Measured
    spread: Measured  # the slope's standard error over the slope
    r2: Measured
    uncertainty: Measured
    points: tuple[FitPoint, ...]

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class Throughput:
    value: Measured
    unit: str | None  # GFLOP/s, G elem/s, GB/s, M iter/s, ...

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class GroupFigure:
    """One row of a group: a first call, a steady state or a fitted slope (each where measured), with its dtype."""

    key: str | None  # ``group.name[dtype]``
    group: str | None
    name: str | None
    label: str | None
    dtype: str | None
    device: str | None  # ``gpu:0 (NVIDIA L4)``, ``cpu``; None where no device is involved
    first: FirstCall | None
    steady: Steady | None
    fit: SlopeFit | None
    throughput: Throughput | None
    warnings: tuple[str, ...]
    note: str | None

    def reported(self, *, machine: bool = True) -> tuple[float, float] | None:
        """The (value, relative uncertainty) the figure reports, or None when it has none (a first call).

        The uncertainty is the figure's ``uncertainty`` (its spread, raised to the machine's unsteadiness
        during the run) or, with ``machine=False`` or in records without it, its spread alone."""
        for value, spread, uncertainty in (
            (self.steady.median_s, self.steady.spread, self.steady.uncertainty) if self.steady else (None, None, None),
            (self.fit.per_iter_s, self.fit.spread, self.fit.uncertainty) if self.fit else (None, None, None),
        ):
            if spread is not None and value is not None:
                return float(value), float(uncertainty if machine and uncertainty is not None else spread)
        return None


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """One worker process of a group (one dtype): how it ended and what it costs. Written (``api.bench``) with
    the fields it has, in this order: a field the worker's document lacks is left out."""

    dtype: Annotated[str | None, Write(when=known)]
    status: Annotated[str | None, Write(when=known)]  # ok, skipped, error
    reason: Annotated[str | None, Write(when=known)]
    wall_s: Annotated[Measured, Write(when=known)]
    worker_s: Annotated[Measured, Write(when=known)]
    cpu_s: Annotated[Measured, Write(when=known)]
    background_cores: Annotated[Measured, Write(when=known)]  # cores other processes kept busy meanwhile, on average
    peak_rss_bytes: Annotated[Measured, Write(when=known)]
    exit_code: Annotated[int | None, Write(when=known)]
    import_s: Annotated[Mapping[str, Measured] | None, Write(when=known)] = None  # each library's import
    info: Annotated[Mapping[str, Any] | None, Write(when=known)] = None  # what the group reports of its library
    notes: Annotated[tuple[str, ...] | None, Write(when=known)] = None
    traceback: Annotated[str | None, Write(when=known)] = None  # a failed worker's
    reference_s: Annotated[tuple[Measured, ...] | None, Write(when=known)] = None  # the reference workload's times
    # The worker's figures, as it wrote them: its group keeps them (``BenchGroup.figures``), not the run's document.
    figures: Annotated[tuple[Mapping[str, Any], ...], Write(when=never)] = ()

    @property
    def failed(self) -> bool:
        return self.status == "error"


@dataclass(frozen=True, slots=True)
class BenchGroup:
    """A group of the suite (python, numpy, ..., loops): its worker runs and their figures."""

    title: str | None
    status: str | None  # ok, skipped (its library is missing), error (a worker failed)
    reason: str | None
    wall_s: MeasuredTime
    peak_rss_bytes: Measured
    background_cores: Measured
    warnings: tuple[str, ...]
    runs: tuple[WorkerRun, ...]
    figures: tuple[GroupFigure, ...]

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"


@dataclass(frozen=True, slots=True)
class BenchTotals:
    figures: int | None  # timed values: each first call, steady state and fitted slope
    rows: int | None
    wall_s: MeasuredTime
    groups: int | None
    groups_ok: int | None
    groups_skipped: int | None
    groups_failed: int | None
    warnings: int | None  # figures' warnings, summed
    peak_rss_bytes: Measured
    background_cores: Measured  # the most any group saw
    interrupted: Annotated[bool, Read(_fields.yes)]
    machine_spread: Measured


@dataclass(frozen=True, slots=True)
class Steadiness:
    """The machine's own steadiness over the run: a fixed reference workload timed now and then
    (``collect.bench._stats.steadiness``)."""

    workload: str | None
    samples: int | None
    median_s: MeasuredTime
    p10_s: MeasuredTime
    p90_s: MeasuredTime
    min_s: MeasuredTime
    max_s: MeasuredTime
    spread: Measured  # half the 10–90 % range over the median


@dataclass(frozen=True, slots=True)
class BenchRun:
    """The measurements of a ``bench`` record, typed."""

    groups: Mapping[str, BenchGroup]  # in the suite's order
    totals: BenchTotals
    machine: Steadiness | None  # None: too few reference probes
    warnings: tuple[str, ...]

    @property
    def figures(self) -> tuple[GroupFigure, ...]:
        """Every group's figures, in the suite's order."""
        return tuple(figure for group in self.groups.values() for figure in group.figures)


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """How a bench run was asked to run (its record's ``settings``)."""

    size: str | None  # quick, default, seed
    dtype: str | None  # as given: float32, float64 or both
    dtypes: tuple[str, ...]
    only: tuple[str, ...] | None  # None: every group
    jax_platform: str | None


# ---- loops ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopFit:
    """``seconds = a + b·trips`` by least squares (``collect.loops.linear_fit``)."""

    a_s: Measured  # what a call costs whatever its length
    b_s: Measured  # what one more iteration costs
    us_per_iter: Measured
    r2: Measured
    us_per_iter_top: Measured  # the slope of the two longest loops alone (a check on the fit's)

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class LoopPoint:
    """One trip count of a sweep (the record keeps these as parallel lists)."""

    trips: int
    seconds: Annotated[float, Read(_fields.figure)]  # the median sample
    first_call_s: MeasuredTime  # with its compile (trip counts are usually static)
    inner: int | None  # calls per sample
    samples: Annotated[tuple[float, ...], Read(_measurements)]
    cpu_seconds: Measured  # the process's CPU time, median: the loop's cost without the machine's load


@dataclass(frozen=True, slots=True)
class Sweep:
    """One placement's sweep: its trip counts' times and the line through them."""

    placement: str | None  # default, cpu
    device: str | None
    platform: str | None
    device_kind: str | None
    loop: str | None  # the loop's target
    trip_counts: tuple[int, ...]  # as swept, in increasing order
    points: tuple[LoopPoint, ...]  # in increasing trip count
    rounds: int | None
    fit: LoopFit | None  # None: fewer than two trip counts
    cpu_fit: LoopFit | None
    notes: tuple[str, ...]

    @staticmethod
    def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**value, "points": _points(value)}


@dataclass(frozen=True, slots=True)
class LoopEstimate:
    """The fit's time at the extrapolation's trip count on one sweep's device."""

    device: str | None
    placement: str | None
    seconds: Measured  # a + b·n: negative where a fit's slope is (noise), as recorded
    measured_up_to: int | None  # the sweep's longest loop


@dataclass(frozen=True, slots=True)
class Extrapolation:
    trip_count: int | None  # ``--at``
    estimates: tuple[LoopEstimate, ...]


@dataclass(frozen=True, slots=True)
class LoopInfo:
    target: str | None  # MODULE:FUNCTION, or the built-in example's name
    description: str | None


@dataclass(frozen=True, slots=True)
class LoopsJax:
    """The JAX the sweep's fresh process found."""

    version: str | None
    default_device: str | None
    platform: str | None
    x64: bool | None


@dataclass(frozen=True, slots=True)
class XlaDump:
    """Where ``--xla-dump`` left XLA's files, and how many."""

    dir: str | None
    files: int | None

    present = staticmethod(given)


@dataclass(frozen=True, slots=True)
class LoopsTotals:
    sweeps: int | None
    wall_s: MeasuredTime
    us_per_iter: Measured  # the first fitted sweep's
    r2_min: Measured
    at: int | None
    at_s: Measured  # the first estimate


@dataclass(frozen=True, slots=True)
class LoopsRun:
    """The measurements of a ``loops`` record, typed."""

    loop: LoopInfo | None
    jax: LoopsJax | None
    sweeps: tuple[Sweep, ...]
    extrapolation: Extrapolation
    notes: tuple[str, ...]
    xla_dump: XlaDump | None
    totals: LoopsTotals
