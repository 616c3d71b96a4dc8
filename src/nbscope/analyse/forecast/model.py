"""The time one execution of a compiled program takes on a GPU, as a low–high range of named terms.

The terms (docs/forecast.md explains each and where its constants come from):

* **loop**: a ``while`` (``lax.scan``, ``fori_loop``, ``while_loop``) runs its body with the host
  involved every iteration on XLA:GPU. Each iteration costs the device's per-iteration figure
  (``loop_iteration_us`` for a known trip count; ``sync_iteration_us`` when the iteration waits for the
  host: an unknown trip count or a ``cond`` in the body), one launch per kernel beyond the reference body,
  plus the body's own work. Iterations are trip count × the enclosing loops' trip counts. A trip count
  known only at run time is taken from the CPU run's trace (the body's kernels counted: *observed*), else
  *estimated* from the loop's CPU time over its body's cost at this CPU's measured rates (a range, its
  factor stated), else *unknown* (no upper bound). No bound that makes a range wider than 100× is kept.
* **work**: the program's flops, transcendentals (as flop-equivalents) and bytes outside and inside its
  loops, each region on a roofline: ``max(compute, memory)`` with compute at 50–90 % of the dtype's peak
  and memory at 60–90 % of peak bandwidth.
* **launch**: one launch per kernel of the entry computation; **dispatch**: the host side of one jitted
  call on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any

from nbscope.analyse.forecast.devices import Device, Figure
from nbscope.schema.codec import Write, decode, given, known
from nbscope.schema.programs import Execution, Loop, Program, Transfers, Work

# A CPU loop iteration is never faster than this (a compare and a branch take a few cycles): what bounds
# the iterations of a loop whose trip count is only known at run time, from the program's CPU time.
CPU_ITERATION_FLOOR_S = 1e-9
# A scalar while_loop XLA:CPU compiles into one small call: 2.3 ns per iteration warm and 16 ns on its
# first run (21 ns under load), measured with jax 0.10.2 on this project's 2-core machine; the slow end
# of an estimate, with room for a slower or busier CPU.
CPU_ITERATION_SLOW_S = 50e-9


@dataclass(frozen=True, slots=True)
class LoopFigures:
    """A loop term's figures: its trip count, how it is known, and the cost of one iteration."""

    loop: str  # the loop's id in its program
    name: str  # ``lax.scan``, ``counted loop (lax.scan / fori_loop)``
    overhead_text: str  # the per-iteration step cost as words (``8–8.2 µs``)
    iterations: float | int | None  # per execution when known (static or observed)
    iterations_low: float
    iterations_high: float | None
    trip_count_basis: str  # static, observed, estimated or unknown
    per_iteration_low_s: float
    per_iteration_high_s: float
    body_low_s: float
    body_high_s: float
    figure: str  # the device figure the step uses: loop_iteration_us or sync_iteration_us
    bound: str | None  # what an estimated or unknown trip count rests on
    call: str | None  # where the notebook calls the loop's primitive, as the program's metadata names it
    syncs_per_iteration: int | None


@dataclass(frozen=True, slots=True)
class KernelCount:
    kernels: int  # a launch term's kernels


@dataclass(frozen=True, slots=True)
class LibraryCalls:
    library_calls: Mapping[str, int]  # a library term's custom call targets, with their counts


@dataclass(frozen=True, slots=True)
class CopyCount:
    copies: int  # a transfer term's host↔device copies


@dataclass(frozen=True, slots=True)
class ClassCompile:
    """One class of a cell's compiled programs (``accelerator.COMPILE_CLASSES``): how many, and their compile's
    forecast range on the device."""

    name: str
    programs: int
    low_s: float
    high_s: float


@dataclass(frozen=True, slots=True)
class CompileFigures:
    cpu_compile_s: float  # the compile time the CPU run measured
    basis: str  # measured (pinned to the CPU), or the basis of the GPU compile ratio
    # the compile by class of program (a device with class figures: a TPU's)
    classes: Annotated[tuple[ClassCompile, ...], Write(when=given)] = ()


@dataclass(frozen=True, slots=True)
class Unattributed:
    cpu_s: float
    unseen: bool  # the time fell in a trace cut short before any program was seen


@dataclass(frozen=True, slots=True)
class Basis:
    basis: str  # a term carried over as ``measured``


@dataclass(frozen=True, slots=True)
class Calls:
    """How many calls of its program a term adds up, and why it is what it is."""

    calls: int
    calls_basis: Annotated[str | None, Write(when=known)] = None  # ``extrapolated`` from a trace cut short
    pinned: Annotated[str | None, Write(when=known)] = None  # why the calls stay on the CPU


TermFigures = LoopFigures | KernelCount | LibraryCalls | CopyCount | CompileFigures | Unattributed | Basis


@dataclass(frozen=True, slots=True)
class Term:
    """One named part of a forecast: ``low_s``–``high_s`` (``high_s`` None: no upper bound).

    ``figures`` holds the figures of its kind (a loop's iterations and per-iteration cost, a compile's basis,
    …) and ``called`` its calls, both written into the term's own JSON object; the properties below are the
    ones the rest of nbscope reads."""

    kind: str  # loop | work | launch | library | dispatch | transfer | host | compile | unattributed | cpu
    low_s: float
    high_s: float | None
    words: str
    program: str | None = None
    function: str | None = None
    figures: Annotated[TermFigures | None, Write(inline=True)] = None
    called: Annotated[Calls | None, Write(inline=True)] = None

    def scaled(self, times: float) -> Term:
        return replace(self, low_s=self.low_s * times, high_s=None if self.high_s is None else self.high_s * times)

    @property
    def calls(self) -> int:
        """How many calls of its program the term adds up (1 unless the forecast scaled it)."""
        return self.called.calls if self.called is not None else 1

    @property
    def loop(self) -> LoopFigures | None:
        """A loop term's figures (None for any other term)."""
        return self.figures if isinstance(self.figures, LoopFigures) else None

    @property
    def name(self) -> str | None:
        """A loop's name (``lax.scan``, ``counted loop (lax.scan / fori_loop)``)."""
        return self.loop.name if self.loop is not None else None

    @property
    def iterations(self) -> float | int | None:
        """A loop's iterations per execution when known (static or observed), else None."""
        return self.loop.iterations if self.loop is not None else None

    @property
    def overhead_text(self) -> str | None:
        """A loop's per-iteration step cost as words (``8–8.2 µs``)."""
        return self.loop.overhead_text if self.loop is not None else None

    @property
    def trip_count_basis(self) -> str | None:
        """How a loop's trip count is known: static, observed, estimated or unknown."""
        return self.loop.trip_count_basis if self.loop is not None else None

    @property
    def unseen(self) -> bool:
        """An unattributed term's time fell in a trace cut short before any program was seen."""
        return isinstance(self.figures, Unattributed) and self.figures.unseen


@dataclass(frozen=True, slots=True)
class CpuRates:
    """This CPU's best achieved flops/s and bytes/s in the run (what a trip-count estimate divides by), and
    the jitted function each came from."""

    flops_per_s: float | None = None
    flops_from: str | None = None
    bytes_per_s: float | None = None
    bytes_from: str | None = None
    bytes_first: bool = False  # the document lists the rate the run found first first

    @property
    def document_keys(self) -> tuple[str, ...]:
        flops = ("flops_per_s", "flops_from") if self.flops_per_s is not None else ()
        memory = ("bytes_per_s", "bytes_from") if self.bytes_per_s is not None else ()
        return (*memory, *flops) if self.bytes_first else (*flops, *memory)


@dataclass(frozen=True, slots=True)
class LoopOnCpu:
    """What the CPU run's trace showed of one loop, per execution of its program."""

    iterations: float | None
    cpu_s_each: float | None
    basis: str | None = None  # "re-run": counted in a sampled call run again (else from the trace's kernels)


def observed_loops(execution: Execution) -> tuple[float | None, dict[str, LoopOnCpu]]:
    """One execution's CPU time and, per loop, what the CPU run's trace showed of it (iterations and CPU time
    per execution of the program): what :func:`program_terms` reads a loop's trip count from."""
    count = execution.runs
    cpu_each = (execution.cpu_s / count) if execution.cpu_s and count else None
    return cpu_each, {
        loop_id: LoopOnCpu(
            iterations=seen.iterations,
            cpu_s_each=(seen.cpu_s / count) if seen.cpu_s and count else None,
            basis=seen.basis,
        )
        for loop_id, seen in execution.loops.items()
    }


def _roofline(work: Work, device: Device, model: dict[str, Figure]) -> tuple[float, float, str]:
    """(low, high) seconds for some work on the device, and whether compute or memory bounds it."""
    flops = work.flops or 0.0
    flops64 = min(flops, work.flops_f64 or 0.0)
    trans = work.transcendentals or 0.0
    trans64 = min(trans, work.transcendentals_f64 or 0.0)
    nbytes = work.bytes or 0.0
    fp32, fp64 = device.figure("fp32_tflops"), device.figure("fp64_tflops")
    eff, mem_eff = model["compute_efficiency"], model["memory_efficiency"]
    t32, t64 = model["transcendental_flops_f32"], model["transcendental_flops_f64"]
    bandwidth = device.figure("memory_gbs")

    def compute(peak32: float, peak64: float, share: float, per32: float, per64: float) -> float:
        ops32 = (flops - flops64) + (trans - trans64) * per32
        ops64 = flops64 + trans64 * per64
        return ops32 / (peak32 * 1e12 * share) + ops64 / (peak64 * 1e12 * share)

    compute_low = compute(fp32.high, fp64.high, eff.high, t32.low, t64.low)
    compute_high = compute(fp32.low, fp64.low, eff.low, t32.high, t64.high)
    memory_low = nbytes / (bandwidth.high * 1e9 * mem_eff.high)
    memory_high = nbytes / (bandwidth.low * 1e9 * mem_eff.low)
    bound = "compute" if compute_high >= memory_high else "memory"
    return max(compute_low, memory_low), max(compute_high, memory_high), bound


def _iteration_overhead(loop: Loop, device: Device, model: dict[str, Figure]) -> tuple[float, float, str]:
    """Per-iteration cost of the loop machinery (seconds, low and high) and which figure it uses."""
    known, sync, launch = (
        device.figure("loop_iteration_us"),
        device.figure("sync_iteration_us"),
        device.figure("launch_us"),
    )
    syncs = loop.syncs_per_iteration or 0
    extra = max(0, (loop.kernels_per_iteration or 0) - int(model["reference_body_kernels"].low))
    if syncs:
        low = sync.low + (syncs - 1) * max(0.0, sync.low - known.low) + extra * launch.low
        high = sync.high + (syncs - 1) * max(0.0, sync.high - known.high) + extra * launch.high
        figure = "sync_iteration_us"
    else:
        low, high = known.low + extra * launch.low, known.high + extra * launch.high
        figure = "loop_iteration_us"
    if loop.select_conds and not syncs:
        # A cond XLA:CPU turned into a select may stay a conditional (a sync) on the GPU.
        high = sync.high + extra * launch.high
    return low * 1e-6, high * 1e-6, figure


def loop_name(loop: Loop) -> str:
    if loop.kind:
        return loop.kind
    return "counted loop (lax.scan / fori_loop)" if loop.trip_count is not None else "lax.while_loop"


COUNTED_BY = {  # an observed trip count's source (``LoopOnCpu.basis``)
    "trace": "counted from the loop body's kernels in the CPU run's trace",
    "re-run": "counted in the cell's calls run again with an iteration counter (its first and latest 2**k-th)",
    "re-run earlier": "counted in an earlier cell's call of the program, run again with an iteration counter",
}
ESTIMATE_FACTOR = 4.0  # an iteration's bookkeeping may cost this many times its body's work
MAX_RANGE = 100.0  # no bound is kept that makes a term's range wider than this (high / low)


def duration(value: float) -> str:
    """``3 ns``, ``28 µs``, ``24 ms``, ``1.2 s``: a duration at any scale, three figures at most."""
    if value <= 0:
        return "0 s"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value / 1e-9:.2g} ns"


def span(low: float, high: float) -> str:
    """``28–88 µs`` (one unit), ``3 ns–1.2 µs``, ``8 µs`` (one figure)."""
    if high <= low * 1.005:
        return duration(low)
    low_text, high_text = duration(low), duration(high)
    if low_text.split()[1] == high_text.split()[1]:
        return f"{low_text.split()[0]}–{high_text}"
    return f"{low_text}–{high_text}"


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def cpu_iteration_s(work: Work, rates: CpuRates | None) -> float:
    """The least one iteration takes on this CPU: its work at the rates the run measured, and 1 ns."""
    times = [CPU_ITERATION_FLOOR_S]
    if rates is not None and rates.flops_per_s:
        flops = (work.flops or 0.0) + (work.transcendentals or 0.0)
        times.append(flops / rates.flops_per_s)
    if rates is not None and rates.bytes_per_s:
        times.append((work.bytes or 0.0) / rates.bytes_per_s)
    return max(times)


def _trip_counts(
    loops: list[Loop],
    observed: Mapping[str, LoopOnCpu],
    cpu_s_each: float | None,
    rates: CpuRates | None,
    nested: list[Loop] | None = None,
) -> dict[str, tuple[float, float | None, str, str | None]]:
    """Per loop: (low, high) iterations per execution (enclosing loops included), how they are known
    (static, observed, estimated, unknown), and for an estimate or an unknown, what it rests on. A loop's count
    comes from its bounds (static or observed), capped by what its condition allows (``Loop.trip_cap``); it is
    estimated from CPU time only where that time is its own: never for a loop with loops inside it (``nested``:
    the program's loops only XLA:CPU builds, which count too)."""
    by_id = {loop.id: loop for loop in loops}
    parents = {loop.parent for loop in [*loops, *(nested or ())] if loop.parent is not None}
    found: dict[str, tuple[float, float | None, str, str | None]] = {}

    def solve(loop_id: str) -> tuple[float, float | None, str, str | None]:
        if loop_id in found:
            return found[loop_id]
        loop = by_id[loop_id]
        parent = loop.parent
        outer = solve(parent) if parent is not None and parent in by_id else (1.0, 1.0, "static", None)
        trips = loop.trip_count
        seen = observed.get(loop_id) or LoopOnCpu(iterations=None, cpu_s_each=None)
        result: tuple[float, float | None, str, str | None]
        if trips is not None and outer[2] == "static":
            result = (outer[0] * trips, outer[0] * trips, "static", None)
        elif seen.iterations is not None and seen.iterations >= 1:
            count = seen.iterations
            result = (count, count, "observed", COUNTED_BY[seen.basis if seen.basis in COUNTED_BY else "trace"])
        elif trips is not None:
            high = None if outer[1] is None else outer[1] * trips
            result = (outer[0] * trips, high, outer[2], outer[3])
        else:
            loop_s = seen.cpu_s_each
            if loop_s is None and len(loops) == 1 and not nested:
                loop_s = cpu_s_each  # the program's only loop: its time is the program's, at most
            if loop_id in parents:
                loop_s = None  # its time is its inner loops' too: no estimate from it
            fast = cpu_iteration_s(loop.per_iteration, rates)
            cap = loop.trip_cap
            if cap is not None and outer[1] is not None:
                low = max(1.0, outer[0])
                if loop_s:  # its own time gives a floor below the cap
                    low = max(low, min(cap * outer[0], loop_s / max(ESTIMATE_FACTOR * fast, CPU_ITERATION_SLOW_S)))
                result = (
                    low,
                    max(low, cap * outer[1]),
                    "estimated",
                    f"at most {cap:,} iterations per run: its condition stops it there (a counter against a constant)",
                )
            elif loop_s and (rates is not None or not (loop.per_iteration.flops or loop.per_iteration.bytes)):
                # An iteration costs at least its body's work at this CPU's best measured rates (and 1 ns);
                # without measured rates a body with work has no known cost here, and its time no count.
                # loop bookkeeping can make it a few times that, or tens of ns for a scalar body.
                slow = max(ESTIMATE_FACTOR * fast, CPU_ITERATION_SLOW_S)
                factor = slow / fast
                high = max(1.0, loop_s / fast)
                result = (
                    max(1.0, loop_s / slow),
                    high,
                    "estimated",
                    f"estimated from the loop's CPU time ({duration(loop_s)}) at {span(fast, slow)} per "
                    f"iteration (its body's work at this CPU's measured rates, and loop bookkeeping); "
                    f"may be off by ×{factor:.2g}",
                )
            else:
                result = (
                    max(1.0, outer[0]),
                    None,
                    "unknown",
                    "the trip count is known only at run time and the CPU run did not show it",
                )
        found[loop_id] = result
        return result

    for loop in loops:
        solve(loop.id)
    return found


def _loop_term(
    loop: Loop,
    count_of: tuple[float, float | None, str, str | None],
    device: Device,
    model: dict[str, Figure],
    key: str | None,
    function: str | None,
) -> Term:
    """One execution's term of a loop: its iterations (``count_of``: low, high, basis, why) × (its step's
    overhead + its body's work)."""
    low_iterations, high_iterations, basis, why = count_of
    over_low, over_high, figure = _iteration_overhead(loop, device, model)
    body_low, body_high, _ = _roofline(loop.per_iteration, device, model)
    per_low, per_high = over_low + body_low, over_high + body_high
    low_s = low_iterations * per_low
    high_s = None if high_iterations is None else high_iterations * per_high
    capped = loop.trip_cap is not None and basis == "estimated" and why is not None and why.startswith("at most")
    if high_s is not None and low_s > 0 and high_s / low_s > MAX_RANGE and not capped:
        # A bound this loose says nothing: the count is unknown, and the cell says so.
        why = f"{why}: a range over ×{MAX_RANGE:g}, too wide to bound the forecast" if why else None
        high_s, high_iterations, basis = None, None, "unknown"
    name = loop_name(loop)
    if basis == "static":
        count = f"{low_iterations:,.0f} iterations"
    elif basis == "observed":
        count = f"{low_iterations:,.0f} iterations (observed)"
    elif basis == "estimated" and high_iterations is not None:
        count = f"≈{low_iterations:,.0f}–{high_iterations:,.0f} iterations (estimated)"
    else:
        count = "an unknown number of iterations"
    if device.platform == "tpu":  # the loop runs on the chip's scalar unit: no host in an iteration
        why_words = "on the chip, testing its condition" if figure == "sync_iteration_us" else "on the chip"
    else:
        why_words = "each waits for the host" if figure == "sync_iteration_us" else "host-driven"
    parts = f"{span(over_low, over_high)} step, {why_words}"
    if body_high > 0:
        parts += f" + {span(body_low, body_high)} body work"
    return Term(
        kind="loop",
        low_s=low_s,
        high_s=high_s,
        words=f"{name} of {count} × ({parts})",
        program=key,
        function=function,
        figures=LoopFigures(
            loop=loop.id,
            name=name,
            overhead_text=span(over_low, over_high),
            iterations=_whole(low_iterations) if basis in ("static", "observed") else None,
            iterations_low=low_iterations,
            iterations_high=high_iterations,
            trip_count_basis=basis,
            per_iteration_low_s=per_low,
            per_iteration_high_s=per_high,
            body_low_s=body_low,
            body_high_s=body_high,
            figure=figure,
            bound=why if basis in ("estimated", "unknown") else None,
            call=loop.call,
            syncs_per_iteration=loop.syncs_per_iteration,
        ),
    )


def _library_terms(program: Program, model: dict[str, Figure], key: str | None, function: str | None) -> list[Term]:
    """The GPU library calls (cuSOLVER, cuBLAS, ...) the program's lowering for CUDA makes, if any."""
    calls = {t: n for t, n in (program.gpu.custom_calls if program.gpu else {}).items() if library_of(t)}
    if not calls:
        return []
    each = model["library_call_us"]
    library_calls = sum(calls.values())
    names = ", ".join(f"{library_of(t)} {t}" + (f" × {n}" if n > 1 else "") for t, n in sorted(calls.items()))
    return [
        Term(
            kind="library",
            low_s=library_calls * each.low * 1e-6,
            high_s=library_calls * each.high * 1e-6,
            words=(
                f"{library_calls} GPU library call{'s' if library_calls != 1 else ''} ({names}) × {each.text(' µs')}"
            ),
            program=key,
            function=function,
            figures=LibraryCalls(calls),
        )
    ]


def program_terms(
    program: Program | Mapping[str, Any],
    device: Device,
    model: dict[str, Figure],
    cpu_s_per_execution: float | None = None,
    observed: Mapping[str, LoopOnCpu] | None = None,
    rates: CpuRates | None = None,
) -> list[Term]:
    """The terms of one execution of ``program`` on ``device`` (a program's document, as ``collect.hlo.describe``
    returns it, is read as a :class:`~nbscope.schema.programs.Program`).

    ``observed``: per loop id, what the CPU run's trace showed per execution; ``rates``: this CPU's measured
    flops/s and bytes/s, for estimates."""
    if not isinstance(program, Program):
        program = decode(Program, program)
    key, function = program.key, program.function
    entry = program.entry
    loops = [loop for loop in program.loops if not loop.cpu_only]
    # A loop only XLA:CPU builds (threefry rounds, LU steps) is no GPU loop: its work is done by GPU
    # kernels, so it joins the program's work outside loops (counted at its static trip count, or once).
    for loop in program.loops:
        if loop.cpu_only:
            entry = entry.plus(loop.per_iteration, float(loop.trip_count or 1) * float(loop.outer_iterations or 1))
    work_low, work_high, work_bound = _roofline(entry, device, model)
    counts = _trip_counts(
        loops, observed or {}, cpu_s_per_execution, rates, [loop for loop in program.loops if loop.cpu_only]
    )
    terms = [_loop_term(loop, counts[loop.id], device, model, key, function) for loop in loops]
    # A loop body's own work is part of its loop term (per iteration); this term is the work outside loops.
    if work_low or work_high:
        terms.append(
            Term(
                kind="work",
                low_s=work_low,
                high_s=work_high,
                words=_work_words(entry, device, work_bound),
                program=key,
                function=function,
            )
        )
    kernels = entry.kernels or 0
    launch = device.figure("launch_us")
    if kernels:
        terms.append(
            Term(
                kind="launch",
                low_s=kernels * launch.low * 1e-6,
                high_s=kernels * launch.high * 1e-6,
                words=f"{kernels} kernel launch{'es' if kernels != 1 else ''} × {launch.text(' µs')}",
                program=key,
                function=function,
                figures=KernelCount(kernels),
            )
        )
    terms += _library_terms(program, model, key, function)
    dispatch = device.figure("dispatch_us")
    terms.append(
        Term(
            kind="dispatch",
            low_s=dispatch.low * 1e-6,
            high_s=dispatch.high * 1e-6,
            words=f"jitted call × {dispatch.text(' µs')}",
            program=key,
            function=function,
        )
    )
    return terms


_LIBRARIES = (
    ("cusolver", "cuSOLVER"),
    ("hipsolver", "hipSOLVER"),
    ("cublas", "cuBLAS"),
    ("cufft", "cuFFT"),
    ("cudnn", "cuDNN"),
    ("cu_", "CUDA kernel"),
)


def library_of(target: str) -> str | None:
    """The GPU library behind a custom call target of the CUDA lowering (``cusolver_getrf_ffi``)."""
    return next((name for prefix, name in _LIBRARIES if target.lower().startswith(prefix)), None)


def _work_words(work: Work, device: Device, bound: str) -> str:
    flops = (work.flops or 0.0) + (work.transcendentals or 0.0)
    nbytes = work.bytes or 0.0
    f64 = (work.flops_f64 or 0.0) + (work.transcendentals_f64 or 0.0)
    if bound == "compute":
        dtype = "float64" if f64 > flops / 2 else "float32"
        peak = device.figure("fp64_tflops" if dtype == "float64" else "fp32_tflops")
        return f"{dtype} arithmetic: {_si(flops)}FLOP at {peak.text(' TFLOP/s')} peak"
    return f"memory traffic: {_si(nbytes)}B at {device.figure('memory_gbs').text(' GB/s')}"


def _si(value: float) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "


def transfer_term(transfers: Transfers | None, device: Device, model: dict[str, Figure]) -> Term | None:
    """Host↔device copies of a cell: their bytes over the host link plus a fixed cost each."""
    if transfers is None:
        return None
    copies = (transfers.host_to_device or 0) + (transfers.device_to_host or 0)
    if not copies:
        return None
    link, latency = device.figure("host_link_gbs"), model["transfer_latency_us"]
    low_bytes, high_bytes = transfers.bytes_low or 0.0, transfers.bytes_high or 0.0
    low = copies * latency.low * 1e-6 + low_bytes / (link.high * 1e9)
    high = copies * latency.high * 1e-6 + high_bytes / (link.low * 1e9)
    size = f"{_si(high_bytes)}B" if high_bytes == low_bytes else f"{_si(low_bytes)}B–{_si(high_bytes)}B"
    unsized = transfers.unsized or 0
    words = f"{copies} host↔device cop{'ies' if copies != 1 else 'y'} ({size} at {link.text(' GB/s')}"
    words += f"; {unsized} of unknown size)" if unsized else ")"
    return Term(kind="transfer", low_s=low, high_s=high, words=words, figures=CopyCount(copies))
