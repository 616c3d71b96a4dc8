"""Typed views of the two benchmark records: ``bench`` (the hardware suite, written by ``nbscope.api.bench``
from its workers' documents, ``nbscope.collect.bench``) and ``loops`` (the trip-count sweep, written by
``nbscope.api.loops`` from ``nbscope.collect.loops``).

Read-only dataclasses over the validated document, like ``schema.model`` (its docstring says why dataclasses):
``BenchRun.parse(record.measurements)``, ``BenchSettings.parse(record.settings)`` and
``LoopsRun.parse(record.measurements)``. They carry what readers use; free-form parts nothing reads (a
figure's ``params``, a group's ``sizes``, ``info`` and ``import_s``, a worker's ``traceback``) stay in the
stored document only. A field a record lacks, or holds with the wrong type, reads as ``None`` (unknown).

Numbers are kept as recorded (an integer stays an integer), so a figure carried on into ``--json`` output
is written as the record has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbscope.schema._fields import figure as _measured
from nbscope.schema._fields import integer as _integer
from nbscope.schema._fields import mapping as _object
from nbscope.schema._fields import text as _text

__all__ = [
    "BenchGroup", "BenchRun", "BenchSettings", "BenchTotals", "Estimate", "Extrapolation", "FirstCall", "FitPoint",
    "GroupFigure", "LoopFit", "LoopInfo", "LoopPoint", "LoopsJax", "LoopsRun", "LoopsTotals", "SlopeFit", "Steadiness",
    "Steady", "Sweep", "Throughput", "WorkerRun", "XlaDump",
]








def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _measurements(value: Any) -> tuple[float, ...]:
    return tuple(n for n in (_measured(v) for v in value) if n is not None) if isinstance(value, list) else ()


def _block(value: Any) -> Mapping[str, Any] | None:
    """A part of a figure that is there: a non-empty object (an empty one says nothing, as an absent one)."""
    return value if isinstance(value, Mapping) and value else None




def _at(values: Any, position: int) -> Any:
    return values[position] if isinstance(values, list) and position < len(values) else None


# ---- bench ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstCall:
    """A figure's first call in its fresh process, split into compile and run where a compiler is involved."""

    wall_s: float | None
    compile_s: float | None  # None: no compiler to probe (pure Python, NumPy)
    run_s: float | None

    @classmethod
    def parse(cls, value: Any) -> FirstCall | None:
        block = _block(value)
        if block is None:
            return None
        return cls(wall_s=_measured(block.get("wall_s")), compile_s=_measured(block.get("compile_s")),
                   run_s=_measured(block.get("run_s")))


@dataclass(frozen=True, slots=True)
class Steady:
    """A figure's steady state: statistics of calibrated repeated samples (``collect.bench._stats.summarise``)."""

    median_s: float | None
    min_s: float | None
    max_s: float | None
    mad_s: float | None
    spread: float | None  # MAD / median
    samples: int | None
    inner: int | None  # calls per sample
    uncertainty: float | None  # the spread, raised to the machine's unsteadiness during the run
    samples_s: tuple[float, ...]

    @classmethod
    def parse(cls, value: Any) -> Steady | None:
        block = _block(value)
        if block is None:
            return None
        return cls(median_s=_measured(block.get("median_s")), min_s=_measured(block.get("min_s")),
                   max_s=_measured(block.get("max_s")), mad_s=_measured(block.get("mad_s")),
                   spread=_measured(block.get("spread")), samples=_integer(block.get("samples")),
                   inner=_integer(block.get("inner")), uncertainty=_measured(block.get("uncertainty")),
                   samples_s=_measurements(block.get("samples_s")))


@dataclass(frozen=True, slots=True)
class FitPoint:
    trips: int | None
    median_s: float | None
    mad_s: float | None

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> FitPoint:
        return cls(trips=_integer(value.get("trips")), median_s=_measured(value.get("median_s")),
                   mad_s=_measured(value.get("mad_s")))


@dataclass(frozen=True, slots=True)
class SlopeFit:
    """A per-iteration figure: the slope of a least-squares line through trip counts' medians (the loops group)."""

    per_iter_s: float | None
    per_iter_us: float | None
    intercept_s: float | None
    slope_stderr_s: float | None
    spread: float | None  # the slope's standard error over the slope
    r2: float | None
    uncertainty: float | None
    points: tuple[FitPoint, ...]

    @classmethod
    def parse(cls, value: Any) -> SlopeFit | None:
        block = _block(value)
        if block is None:
            return None
        points = block.get("points")
        return cls(per_iter_s=_measured(block.get("per_iter_s")), per_iter_us=_measured(block.get("per_iter_us")),
                   intercept_s=_measured(block.get("intercept_s")),
                   slope_stderr_s=_measured(block.get("slope_stderr_s")), spread=_measured(block.get("spread")),
                   r2=_measured(block.get("r2")), uncertainty=_measured(block.get("uncertainty")),
                   points=tuple(FitPoint.parse(p) for p in points if isinstance(p, Mapping))
                   if isinstance(points, list) else ())


@dataclass(frozen=True, slots=True)
class Throughput:
    value: float | None
    unit: str | None  # GFLOP/s, G elem/s, GB/s, M iter/s, ...

    @classmethod
    def parse(cls, value: Any) -> Throughput | None:
        block = _block(value)
        if block is None:
            return None
        return cls(value=_measured(block.get("value")), unit=_text(block.get("unit")))


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

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> GroupFigure:
        return cls(key=_text(value.get("key")), group=_text(value.get("group")), name=_text(value.get("name")),
                   label=_text(value.get("label")), dtype=_text(value.get("dtype")), device=_text(value.get("device")),
                   first=FirstCall.parse(value.get("first")), steady=Steady.parse(value.get("steady")),
                   fit=SlopeFit.parse(value.get("fit")), throughput=Throughput.parse(value.get("throughput")),
                   warnings=_texts(value.get("warnings")), note=_text(value.get("note")))


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """One worker process of a group (one dtype): how it ended and what it costs."""

    dtype: str | None
    status: str | None  # ok, skipped, error
    reason: str | None
    wall_s: float | None
    worker_s: float | None
    cpu_s: float | None
    background_cores: float | None  # cores other processes kept busy meanwhile, on average
    peak_rss_bytes: float | None
    exit_code: int | None
    notes: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return self.status == "error"

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> WorkerRun:
        return cls(dtype=_text(value.get("dtype")), status=_text(value.get("status")), reason=_text(value.get("reason")),
                   wall_s=_measured(value.get("wall_s")), worker_s=_measured(value.get("worker_s")),
                   cpu_s=_measured(value.get("cpu_s")), background_cores=_measured(value.get("background_cores")),
                   peak_rss_bytes=_measured(value.get("peak_rss_bytes")), exit_code=_integer(value.get("exit_code")),
                   notes=_texts(value.get("notes")))


@dataclass(frozen=True, slots=True)
class BenchGroup:
    """A group of the suite (python, numpy, ..., loops): its worker runs and their figures."""

    title: str | None
    status: str | None  # ok, skipped (its library is missing), error (a worker failed)
    reason: str | None
    wall_s: float | None
    peak_rss_bytes: float | None
    background_cores: float | None
    warnings: tuple[str, ...]
    runs: tuple[WorkerRun, ...]
    figures: tuple[GroupFigure, ...]

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    @classmethod
    def parse(cls, value: Any) -> BenchGroup:
        value = _object(value)

        def parts(key: str) -> list[Mapping[str, Any]]:
            items = value.get(key)
            return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []

        return cls(title=_text(value.get("title")), status=_text(value.get("status")), reason=_text(value.get("reason")),
                   wall_s=_measured(value.get("wall_s")), peak_rss_bytes=_measured(value.get("peak_rss_bytes")),
                   background_cores=_measured(value.get("background_cores")), warnings=_texts(value.get("warnings")),
                   runs=tuple(WorkerRun.parse(r) for r in parts("runs")),
                   figures=tuple(GroupFigure.parse(f) for f in parts("figures")))


@dataclass(frozen=True, slots=True)
class BenchTotals:
    figures: int | None  # timed values: each first call, steady state and fitted slope
    rows: int | None
    wall_s: float | None
    groups: int | None
    groups_ok: int | None
    groups_skipped: int | None
    groups_failed: int | None
    warnings: int | None  # figures' warnings, summed
    peak_rss_bytes: float | None
    background_cores: float | None  # the most any group saw
    interrupted: bool
    machine_spread: float | None

    @classmethod
    def parse(cls, value: Any) -> BenchTotals:
        value = _object(value)
        return cls(figures=_integer(value.get("figures")), rows=_integer(value.get("rows")),
                   wall_s=_measured(value.get("wall_s")), groups=_integer(value.get("groups")),
                   groups_ok=_integer(value.get("groups_ok")), groups_skipped=_integer(value.get("groups_skipped")),
                   groups_failed=_integer(value.get("groups_failed")), warnings=_integer(value.get("warnings")),
                   peak_rss_bytes=_measured(value.get("peak_rss_bytes")),
                   background_cores=_measured(value.get("background_cores")),
                   interrupted=value.get("interrupted") is True, machine_spread=_measured(value.get("machine_spread")))


@dataclass(frozen=True, slots=True)
class Steadiness:
    """The machine's own steadiness over the run: a fixed reference workload timed now and then
    (``collect.bench._stats.steadiness``)."""

    workload: str | None
    samples: int | None
    median_s: float | None
    p10_s: float | None
    p90_s: float | None
    min_s: float | None
    max_s: float | None
    spread: float | None  # half the 10–90 % range over the median

    @classmethod
    def parse(cls, value: Any) -> Steadiness | None:
        if not isinstance(value, Mapping):
            return None
        return cls(workload=_text(value.get("workload")), samples=_integer(value.get("samples")),
                   median_s=_measured(value.get("median_s")), p10_s=_measured(value.get("p10_s")),
                   p90_s=_measured(value.get("p90_s")), min_s=_measured(value.get("min_s")),
                   max_s=_measured(value.get("max_s")), spread=_measured(value.get("spread")))


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

    @classmethod
    def parse(cls, measurements: Mapping[str, Any]) -> BenchRun:
        groups = measurements.get("groups")
        return cls(groups={str(name): BenchGroup.parse(group) for name, group in groups.items()}
                   if isinstance(groups, Mapping) else {},
                   totals=BenchTotals.parse(measurements.get("totals")),
                   machine=Steadiness.parse(measurements.get("machine")),
                   warnings=_texts(measurements.get("warnings")))


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """How a bench run was asked to run (its record's ``settings``)."""

    size: str | None  # quick, default, seed
    dtype: str | None  # as given: float32, float64 or both
    dtypes: tuple[str, ...]
    only: tuple[str, ...] | None  # None: every group
    jax_platform: str | None

    @classmethod
    def parse(cls, settings: Mapping[str, Any] | None) -> BenchSettings:
        settings = settings or {}
        only = settings.get("only")
        return cls(size=_text(settings.get("size")), dtype=_text(settings.get("dtype")),
                   dtypes=_texts(settings.get("dtypes")), only=_texts(only) if isinstance(only, list) else None,
                   jax_platform=_text(settings.get("jax_platform")))


# ---- loops ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopFit:
    """``seconds = a + b·trips`` by least squares (``collect.loops.linear_fit``)."""

    a_s: float | None  # what a call costs whatever its length
    b_s: float | None  # what one more iteration costs
    us_per_iter: float | None
    r2: float | None
    us_per_iter_top: float | None  # the slope of the two longest loops alone (a check on the fit's)

    @classmethod
    def parse(cls, value: Any) -> LoopFit | None:
        block = _block(value)
        if block is None:
            return None
        return cls(a_s=_measured(block.get("a_s")), b_s=_measured(block.get("b_s")),
                   us_per_iter=_measured(block.get("us_per_iter")), r2=_measured(block.get("r2")),
                   us_per_iter_top=_measured(block.get("us_per_iter_top")))


@dataclass(frozen=True, slots=True)
class LoopPoint:
    """One trip count of a sweep (the record keeps these as parallel lists)."""

    trips: int
    seconds: float  # the median sample
    first_call_s: float | None  # with its compile (trip counts are usually static)
    inner: int | None  # calls per sample
    samples: tuple[float, ...]
    cpu_seconds: float | None  # the process's CPU time, median: the loop's cost without the machine's load


@dataclass(frozen=True, slots=True)
class Sweep:
    """One placement's sweep: its trip counts' times and the line through them."""

    placement: str | None  # default, cpu
    device: str | None
    platform: str | None
    device_kind: str | None
    loop: str | None  # the loop's target
    points: tuple[LoopPoint, ...]  # in increasing trip count
    rounds: int | None
    fit: LoopFit | None  # None: fewer than two trip counts
    cpu_fit: LoopFit | None
    notes: tuple[str, ...]

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> Sweep:
        trip_counts, seconds = value.get("trip_counts"), value.get("seconds")
        points = []
        if isinstance(trip_counts, list) and isinstance(seconds, list):
            for position, (trips, median) in enumerate(zip(trip_counts, seconds, strict=False)):
                if _integer(trips) is None or _measured(median) is None:
                    continue  # not a measurement: the other lists stay aligned by position
                samples = _at(value.get("samples"), position)
                points.append(LoopPoint(
                    trips=trips, seconds=median, first_call_s=_measured(_at(value.get("first_call_s"), position)),
                    inner=_integer(_at(value.get("inner"), position)),
                    samples=_measurements(samples), cpu_seconds=_measured(_at(value.get("cpu_seconds"), position)),
                ))
        return cls(placement=_text(value.get("placement")), device=_text(value.get("device")),
                   platform=_text(value.get("platform")), device_kind=_text(value.get("device_kind")),
                   loop=_text(value.get("loop")), points=tuple(points), rounds=_integer(value.get("rounds")),
                   fit=LoopFit.parse(value.get("fit")), cpu_fit=LoopFit.parse(value.get("cpu_fit")),
                   notes=_texts(value.get("notes")))


@dataclass(frozen=True, slots=True)
class Estimate:
    """The fit's time at the extrapolation's trip count on one sweep's device."""

    device: str | None
    placement: str | None
    seconds: float | None
    measured_up_to: int | None  # the sweep's longest loop

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> Estimate:
        return cls(device=_text(value.get("device")), placement=_text(value.get("placement")),
                   seconds=_measured(value.get("seconds")), measured_up_to=_integer(value.get("measured_up_to")))


@dataclass(frozen=True, slots=True)
class Extrapolation:
    trip_count: int | None  # ``--at``
    estimates: tuple[Estimate, ...]

    @classmethod
    def parse(cls, value: Any) -> Extrapolation:
        value = _object(value)
        estimates = value.get("estimates")
        return cls(trip_count=_integer(value.get("trip_count")),
                   estimates=tuple(Estimate.parse(e) for e in estimates if isinstance(e, Mapping))
                   if isinstance(estimates, list) else ())


@dataclass(frozen=True, slots=True)
class LoopInfo:
    target: str | None  # MODULE:FUNCTION, or the built-in example's name
    description: str | None

    @classmethod
    def parse(cls, value: Any) -> LoopInfo | None:
        if not isinstance(value, Mapping):
            return None
        return cls(target=_text(value.get("target")), description=_text(value.get("description")))


@dataclass(frozen=True, slots=True)
class LoopsJax:
    """The JAX the sweep's fresh process found."""

    version: str | None
    default_device: str | None
    platform: str | None
    x64: bool | None

    @classmethod
    def parse(cls, value: Any) -> LoopsJax | None:
        if not isinstance(value, Mapping):
            return None
        x64 = value.get("x64")
        return cls(version=_text(value.get("version")), default_device=_text(value.get("default_device")),
                   platform=_text(value.get("platform")), x64=x64 if isinstance(x64, bool) else None)


@dataclass(frozen=True, slots=True)
class XlaDump:
    """Where ``--xla-dump`` left XLA's files, and how many."""

    dir: str | None
    files: int | None

    @classmethod
    def parse(cls, value: Any) -> XlaDump | None:
        block = _block(value)
        if block is None:
            return None
        return cls(dir=_text(block.get("dir")), files=_integer(block.get("files")))


@dataclass(frozen=True, slots=True)
class LoopsTotals:
    sweeps: int | None
    wall_s: float | None
    us_per_iter: float | None  # the first fitted sweep's
    r2_min: float | None
    at: int | None
    at_s: float | None  # the first estimate

    @classmethod
    def parse(cls, value: Any) -> LoopsTotals:
        value = _object(value)
        return cls(sweeps=_integer(value.get("sweeps")), wall_s=_measured(value.get("wall_s")),
                   us_per_iter=_measured(value.get("us_per_iter")), r2_min=_measured(value.get("r2_min")),
                   at=_integer(value.get("at")), at_s=_measured(value.get("at_s")))


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

    @classmethod
    def parse(cls, measurements: Mapping[str, Any]) -> LoopsRun:
        sweeps = measurements.get("sweeps")
        return cls(loop=LoopInfo.parse(measurements.get("loop")), jax=LoopsJax.parse(measurements.get("jax")),
                   sweeps=tuple(Sweep.parse(s) for s in sweeps if isinstance(s, Mapping)) if isinstance(sweeps, list) else (),
                   extrapolation=Extrapolation.parse(measurements.get("extrapolation")),
                   notes=_texts(measurements.get("notes")), xla_dump=XlaDump.parse(measurements.get("xla_dump")),
                   totals=LoopsTotals.parse(measurements.get("totals")))
