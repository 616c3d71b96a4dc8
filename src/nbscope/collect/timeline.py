"""Per-cell device timelines: what a cell's ``jax.profiler`` trace says about where its time went.

``nbscope profile --timeline`` records one trace per cell inside the kernel
(``probe/_nbscope_timeline.py``); the runner calls :func:`summarise_cell` on it here, in the nbscope
process, so reading the trace never adds to a cell's time.

What the trace holds (read with ``jax.profiler.ProfileData``: planes → lines → events):

* On a **CPU** (measured with jax/jaxlib 0.10.2) there is no device plane. ``/host:CPU`` has one line
  per thread. XLA's CPU runtime records each *thunk* it runs (a fusion, a copy, a sort, a dot, a whole
  while loop) as an event carrying ``hlo_op`` / ``hlo_module`` stats, followed by a near-zero
  ``end: <op>`` marker. Small programs run inline on the calling (Python) thread, larger ones on
  ``tf_XLAPjRtCpuClient`` worker threads. A ``lax.scan`` whose carry is small is compiled into a single
  ``call`` thunk (the whole loop is one op); a larger loop state becomes a ``while`` thunk that runs the
  body's thunks once per iteration (two or more op events per iteration). Host-side JAX calls appear as
  ``PjitFunction(<name>)`` (nested pairs per call), ``DevicePut*`` (host→device), ``np.asarray(jax.Array)``
  (device→host) and ``CommonPjRtBuffer::Await`` (the host waiting for a result: ``block_until_ready``,
  ``np.asarray``). Compiles show as ``lower_sharding_computation`` / ``backend_compile_and_load`` on the
  calling thread and as pass-by-pass events on compiler threads. The CPU trace carries no byte counts.
* On a **GPU** (xprof conventions, not yet checked on hardware by this project) each device has a
  ``/device:GPU:<n>`` plane whose ``XLA Ops`` line holds the HLO ops, ``XLA Modules`` the program runs and
  ``Stream #...`` lines the kernels and ``Memcpy{H2D,D2H,D2D}`` copies (``memcpy_details`` gives
  ``size:<bytes>``); the host plane holds the driver calls (``cuLaunchKernel``, ``cuStreamSynchronize``).

Event stats are read once per event *name*: reading them per event costs ~25 µs each, which for a
loop that ran 100 000 iterations would take longer than the cell did.
"""

from __future__ import annotations

import re
import shutil
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from nbscope.schema.codec import decode
from nbscope.schema.model import Cell
from nbscope.schema.probe import ProbeTimeline
from nbscope.schema.trace_stats import EventStats

SUMMARY_VERSION = 1
CLASSIFICATIONS = ("compute-bound", "launch-bound", "transfer-bound", "host-bound", "compile-bound")

# An op this short costs about what launching it costs (a GPU kernel launch is ~5 µs, a CPU thunk
# ~0.3–1 µs): many of them mean the loop pays per op, not per flop.
TINY_OP_S = 20e-6
MANY_OPS = 1000
# Transfers smaller than this are latency (a loop predicate, a scalar), not bandwidth.
SMALL_TRANSFER_BYTES = 64 * 1024
TOP_OPS = 5
# Tiny ops less than this apart form one burst: the gaps between them are launch latency (a GPU waiting
# for the host to launch the next kernel of a loop), part of what the loop costs per op.
BURST_GAP_NS = 50_000
# Each recorded event costs the traced cell ~1–2 µs and its trace write ~10 µs (measured on CPU).
DISTORTION_EVENTS = 20_000
MEMCPY_STATS_LIMIT = 20_000  # read sizes of at most this many copies; scale the rest by their mean

_DISPATCH = re.compile(r"^(PjitFunction\(|PmapFunction\(|ExecuteReplicated|CommonPjRtLoadedExecutable::ExecutePrepare)")
_EXECUTE = re.compile(
    r"^(CommonPjRtLoadedExecutable::ExecuteHelper|PjRtStreamExecutorLoadedExecutable::Execute"
    r"(Helper)?$|PjRtCApiLoadedExecutable::Execute)"
)
# The trace events of a host→device and a device→host copy (read here and by collect.program).
H2D_EVENTS = (
    "DevicePut",
    "DevicePutWithSharding",
    "batched_copy_array_to_devices_with_sharding",
    "BufferFromPyval",
    "TransferToDevice",
    "TransferLiteralToDevice",
)
D2H_EVENTS = (
    "np.asarray(jax.Array)",
    "CopyToHost",
    "CopyRawToHost",
    "ToLiteral",
    "TransferFromDevice",
    "TransferLiteralFromDevice",
)
_COMPILE = re.compile(
    r"^(backend_compile|lower_sharding_computation|lower_mesh_computation|trace_to_jaxpr|"
    r"jaxpr_to_mlir|compile_or_get_cached|PjRt\w*Client::Compile|.*Compiler::Compile)"
)
_SYNC = re.compile(r"(Buffer::Await$|BlockHostUntilReady|[Ss]ynchronize|block_until_ready)")
_LAUNCH = re.compile(r"^(cuLaunchKernel|cudaLaunchKernel|cuLaunchKernelEx|hipModuleLaunchKernel|hipLaunchKernel)")
_MEMCPY_SIZE = re.compile(r"size:(\d+)")

Interval = tuple[float, float]  # nanoseconds: jax.profiler's events carry them as floats


class TraceEvent(Protocol):
    """What nbscope reads of an event of a ``jax.profiler.ProfileData`` trace."""

    @property
    def name(self) -> str: ...
    @property
    def start_ns(self) -> float: ...
    @property
    def duration_ns(self) -> float: ...
    @property
    def stats(self) -> Iterable[tuple[str, Any]]: ...


class TraceLine(Protocol):
    """A thread's (or a device stream's) line of events."""

    @property
    def name(self) -> str: ...
    @property
    def events(self) -> Iterable[TraceEvent]: ...


class TracePlane(Protocol):
    """A host's or a device's plane of lines."""

    @property
    def name(self) -> str: ...
    @property
    def lines(self) -> Iterable[TraceLine]: ...
    @property
    def stats(self) -> Iterable[tuple[str, Any]]: ...


class TraceData(Protocol):
    """A trace as ``jax.profiler.ProfileData`` reads it."""

    @property
    def planes(self) -> Iterable[TracePlane]: ...


# ---- intervals ---------------------------------------------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping cover of the intervals (nanoseconds)."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def bursts(merged: list[Interval], gap_ns: float) -> list[Interval]:
    """Merged intervals joined across gaps up to ``gap_ns``: stretches of back-to-back work."""
    joined: list[Interval] = []
    for start, end in merged:
        if joined and start - joined[-1][1] <= gap_ns:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
        else:
            joined.append((start, end))
    return joined


def covered(merged: list[Interval]) -> float:
    return sum(end - start for start, end in merged)


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the intersection of two merged interval lists."""
    total: float = 0
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            total += end - start
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _top_level(events: list[Interval]) -> int:
    """How many events are not nested inside another (JAX records a call and its inner call)."""
    count, reach = 0, None
    for start, end in sorted(events):
        if reach is None or start >= reach:
            count += 1
            reach = end
        else:
            reach = max(reach, end)
    return count


# ---- reading the trace -------------------------------------------------------------------------


@dataclass
class _Op:
    start: float
    end: float
    name: str
    module: str | None
    line: int


@dataclass
class TraceEvents:
    """The events of one trace, sorted into what the summary needs."""

    platform: str = "cpu"
    events: int = 0
    span_ns: float = 0
    ops: list[_Op] = field(default_factory=list)
    programs: int = 0
    module_runs: int = 0
    dispatch: dict[int, list[Interval]] = field(default_factory=dict)  # per host line
    busy_on_line: dict[int, list[Interval]] = field(default_factory=dict)  # ops, compiles, waits, copies
    compile: list[Interval] = field(default_factory=list)
    syncs: list[Interval] = field(default_factory=list)
    h2d: list[Interval] = field(default_factory=list)
    d2h: list[Interval] = field(default_factory=list)
    copies: list[tuple[float, float, str, int | None]] = field(default_factory=list)  # device copies
    launches: int = 0


def find_xplane(trace: str | Path) -> Path:
    """The ``.xplane.pb`` file of a trace folder (the newest, if a folder holds several)."""
    path = Path(trace)
    if path.is_file():
        return path
    found = sorted(path.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no .xplane.pb under {path}")
    return found[-1]


def read_trace(trace: str | Path) -> TraceEvents:
    """Read a trace file or folder with ``jax.profiler.ProfileData`` (imports jax)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(find_xplane(trace)))
    result = TraceEvents()
    first, last = None, None
    line_id = 0
    for plane in data.planes:
        name = plane.name
        if name.startswith("/device:"):
            result.platform = name.split(":")[1].lower() if name.count(":") >= 2 else name
            lines = list(plane.lines)
            has_op_line = any(line.name == "XLA Ops" for line in lines)
            for line in lines:
                line_id += 1
                first, last = _read_device_line(result, line, line_id, has_op_line, first, last)
        elif name.startswith("/host:") and name != "/host:metadata":
            for line in plane.lines:
                line_id += 1
                first, last = _read_host_line(result, line, line_id, first, last)
    result.span_ns = (last - first) if first is not None and last is not None else 0
    return result


def _stats(event: TraceEvent) -> EventStats:
    try:
        stats = dict(event.stats)
    except Exception:  # a stat of a type the binding cannot convert
        stats = {}
    return decode(EventStats, stats)


def _span(event: TraceEvent, first: float | None, last: float | None) -> tuple[float, float, float, float]:
    """An event's start and end (ns), and the trace's first and last instants widened to cover it."""
    start = event.start_ns
    end = start + event.duration_ns
    return start, end, start if first is None else min(first, start), end if last is None else max(last, end)


def _read_host_line(
    result: TraceEvents, line: TraceLine, line_id: int, first: float | None, last: float | None
) -> tuple[float | None, float | None]:
    kinds: dict[str, tuple[str, str | None]] = {}  # event name -> (kind, module), decided once per name
    dispatch: list[Interval] = []
    busy: list[Interval] = []
    for event in line.events:
        result.events += 1
        name = event.name
        start, end, first, last = _span(event, first, last)
        if name not in kinds:
            kinds[name] = _host_kind(name, event)
        what, module = kinds[name]
        if what == "other":
            continue
        if what == "op":
            result.ops.append(_Op(start, end, name, module, line_id))
            busy.append((start, end))
        elif what in ("execute", "dispatch"):
            dispatch.append((start, end))
            if what == "execute":  # one run of a compiled program: dispatch time, and a program count
                result.programs += 1
        elif what in ("compile", "sync", "h2d", "d2h"):  # host busy with something other than dispatch
            {"compile": result.compile, "sync": result.syncs, "h2d": result.h2d, "d2h": result.d2h}[what].append(
                (start, end)
            )
            busy.append((start, end))
        elif what == "launch":
            result.launches += 1
    if dispatch:
        result.dispatch[line_id] = dispatch
    if busy:
        result.busy_on_line[line_id] = busy
    return first, last


def _host_kind(name: str, event: TraceEvent) -> tuple[str, str | None]:
    if name.startswith("end: ") or name.startswith("$"):  # op completion markers, Python tracer events
        return ("other", None)
    if _EXECUTE.match(name):
        return ("execute", None)
    if _DISPATCH.match(name):
        return ("dispatch", None)
    if name in H2D_EVENTS:
        return ("h2d", None)
    if name in D2H_EVENTS:
        return ("d2h", None)
    if _COMPILE.match(name):
        return ("compile", None)
    if _SYNC.search(name):
        return ("sync", None)
    if _LAUNCH.match(name):
        return ("launch", None)
    stats = _stats(event)
    if stats.hlo_op is not None:  # an XLA:CPU thunk: the CPU's "device" work
        return ("op", stats.hlo_module)
    return ("other", None)


def _read_device_line(
    result: TraceEvents, line: TraceLine, line_id: int, has_op_line: bool, first: float | None, last: float | None
) -> tuple[float | None, float | None]:
    line_name = line.name
    is_stream = line_name.startswith("Stream")
    if not (line_name == "XLA Ops" or is_stream):
        events = sum(1 for _ in line.events)
        result.events += events
        if line_name == "XLA Modules":
            result.module_runs += events
        return first, last
    module_of: dict[str, str | None] = {}
    memcpy_read = 0
    for event in line.events:
        result.events += 1
        name = event.name
        start, end, first, last = _span(event, first, last)
        if is_stream and "memcpy" in name.lower():
            size = None
            if memcpy_read < MEMCPY_STATS_LIMIT:
                memcpy_read += 1
                match = _MEMCPY_SIZE.search(_stats(event).memcpy_details)
                size = int(match.group(1)) if match else None
            result.copies.append((start, end, name, size))
            continue
        if is_stream and ("memset" in name.lower() or has_op_line):
            continue  # with an XLA Ops line, the stream kernels are the same work again
        if name not in module_of:
            module_of[name] = _stats(event).hlo_module
        result.ops.append(_Op(start, end, name, module_of[name], line_id))
    return first, last


# ---- the summary -------------------------------------------------------------------------------


def _leaf_ops(ops: list[_Op]) -> list[_Op]:
    """Ops that contain no other op on the same thread (a CPU ``while`` thunk contains its body's)."""
    by_line: dict[int, list[_Op]] = {}
    for op in ops:
        by_line.setdefault(op.line, []).append(op)
    leaves: list[_Op] = []
    for line_ops in by_line.values():
        line_ops.sort(key=lambda o: (o.start, -o.end))
        for index, op in enumerate(line_ops):
            following = line_ops[index + 1] if index + 1 < len(line_ops) else None
            if following is None or following.start >= op.end:
                leaves.append(op)
    return leaves


class TopOp(TypedDict):
    name: str
    module: str | None
    count: int
    total_s: float
    longest_s: float


class Transfers(TypedDict):
    count: int
    host_to_device: int
    device_to_host: int
    bytes: int | None
    mean_bytes: float | None
    seconds: float
    source: str


def _top_ops(ops: list[_Op], limit: int = TOP_OPS) -> list[TopOp]:
    table: dict[tuple[str, str | None], TopOp] = {}
    for op in ops:
        duration = (op.end - op.start) / 1e9
        entry = table.setdefault(
            (op.name, op.module), {"name": op.name, "module": op.module, "count": 0, "total_s": 0.0, "longest_s": 0.0}
        )
        entry["count"] += 1
        entry["total_s"] += duration
        entry["longest_s"] = max(entry["longest_s"], duration)
    return sorted(table.values(), key=lambda e: e["total_s"], reverse=True)[:limit]


def summarise(events: TraceEvents, wall_s: float | None, compile_s: float | None) -> dict[str, object]:
    """The timeline summary of one cell from its trace events (see docs/run-record.md)."""
    span_s = events.span_ns / 1e9
    wall = wall_s if isinstance(wall_s, (int, float)) and wall_s > 0 else span_s
    busy_cover = union((op.start, op.end) for op in events.ops)
    busy_s = covered(busy_cover) / 1e9
    leaves = _leaf_ops(events.ops)
    durations = [(op.end - op.start) / 1e9 for op in leaves]
    ops = len(leaves)
    per_op_s = busy_s / ops if ops else None
    many_tiny = ops >= MANY_OPS and per_op_s is not None and per_op_s <= TINY_OP_S

    # Dispatch is host time inside JAX calls while no op runs anywhere: on a CPU a large program runs on
    # worker threads while the calling thread waits inside the call, and that wait is the op's time.
    dispatch_s, dispatches = 0.0, 0
    for line_id, calls in events.dispatch.items():
        cover = union(calls)
        other = union(events.busy_on_line.get(line_id, []) + busy_cover)
        dispatch_s += (covered(cover) - overlap(cover, other)) / 1e9
        dispatches += _top_level(calls)

    transfers = _transfers(events)
    sync_cover = union(events.syncs)
    compile_s = min(compile_s, wall) if isinstance(compile_s, (int, float)) else covered(union(events.compile)) / 1e9

    # Split the cell's time into what it was spent on. Tiny ops and tiny copies cost their launch, not
    # their work, and so do the gaps between them; device time overlapping the host (async dispatch)
    # can make the parts exceed the wall, so the host part is what is left, never negative.
    tiny_copies = transfers["count"] >= MANY_OPS and (transfers["mean_bytes"] or 0) < SMALL_TRANSFER_BYTES
    latency_s = 0.0
    if many_tiny or tiny_copies:
        spans = list(busy_cover) if many_tiny else []
        spans += [(c[0], c[1]) for c in events.copies] if tiny_copies else []
        latency_s = covered(bursts(union(spans), BURST_GAP_NS)) / 1e9
    parts = {
        "compile-bound": compile_s,
        "transfer-bound": 0.0 if tiny_copies else transfers["seconds"],
        "compute-bound": 0.0 if many_tiny else busy_s,
        "launch-bound": dispatch_s + latency_s,
    }
    parts["host-bound"] = max(0.0, wall - sum(parts.values()))
    classification = max(parts, key=lambda k: parts[k])
    shares = {k.split("-")[0]: (v / wall if wall > 0 else None) for k, v in parts.items()}

    warnings = []
    if events.events >= DISTORTION_EVENTS:
        warnings.append(
            f"{events.events} trace events: recording them slowed this cell (≈1–2 µs each); its times "
            "under --timeline are inflated, the classification still holds"
        )
    return {
        "version": SUMMARY_VERSION,
        "platform": events.platform,
        "wall_s": wall,
        "traced_s": span_s,
        "device_busy_s": busy_s,
        "device_busy_share": busy_s / wall if wall > 0 else None,
        "ops": ops,
        "op_events": len(events.ops),
        "programs": events.programs or events.module_runs or None,
        "median_op_s": statistics.median(durations) if durations else None,
        "mean_op_s": per_op_s,
        "dispatches": dispatches,
        "dispatch_s": dispatch_s,
        "kernel_launches": events.launches or None,
        "transfers": transfers,
        "syncs": {"count": _top_level(events.syncs), "wait_s": covered(sync_cover) / 1e9},
        "compile_s": compile_s,
        "host_s": parts["host-bound"],
        "shares": shares,
        "classification": classification,
        "reason": _reason(classification, parts, wall, ops, per_op_s, transfers),
        "top_ops": _top_ops(events.ops),
        "events": events.events,
        "warnings": warnings,
    }


def _transfers(events: TraceEvents) -> Transfers:
    if events.copies:  # device-side copies (GPU): exact count, direction and size
        h2d = [c for c in events.copies if "H2D" in c[2] or "HtoD" in c[2]]
        d2h = [c for c in events.copies if "D2H" in c[2] or "DtoH" in c[2]]
        host = h2d + d2h
        sizes = [c[3] for c in host if c[3] is not None]
        mean = statistics.fmean(sizes) if sizes else None
        total = int(mean * len(host)) if mean is not None else None  # beyond MEMCPY_STATS_LIMIT: scaled
        h2d_count, d2h_count, source = len(h2d), len(d2h), "device copies"
        seconds = covered(union((c[0], c[1]) for c in host)) / 1e9
    else:  # the CPU trace names host-side copy calls but carries no sizes
        h2d_count, d2h_count, source = _top_level(events.h2d), _top_level(events.d2h), "host calls"
        total = mean = None
        seconds = covered(union(events.h2d + events.d2h)) / 1e9
    return {
        "count": h2d_count + d2h_count,
        "host_to_device": h2d_count,
        "device_to_host": d2h_count,
        "bytes": total,
        "mean_bytes": mean,
        "seconds": seconds,
        "source": source,
    }


def _reason(
    classification: str, parts: dict[str, float], wall: float, ops: int, per_op_s: float | None, transfers: Transfers
) -> str:
    share = parts[classification] / wall if wall > 0 else 0.0
    if classification == "launch-bound":
        if ops >= MANY_OPS and per_op_s is not None and per_op_s <= TINY_OP_S:
            return f"{ops} device ops averaging {per_op_s * 1e6:.2g} µs: {share:.0%} of the cell is per-op launch cost"
        return f"{share:.0%} of the cell is host-side dispatch of JAX calls"
    if classification == "compute-bound":
        return f"device busy {share:.0%} of the cell in {ops} op(s)"
    if classification == "transfer-bound":
        return f"{transfers['count']} host↔device copies take {share:.0%} of the cell"
    if classification == "compile-bound":
        return f"compiling takes {share:.0%} of the cell"
    return f"{share:.0%} of the cell runs on the host (Python, NumPy) with the device idle"


# ---- the runner's entry point ------------------------------------------------------------------


def _is_temporary(folder: Path) -> bool:
    """A trace folder inside an nbscope probe home (a temporary folder), not a --keep-traces one."""
    parent = folder.parent
    return parent.name == "traces" and (parent.parent / "lib" / "_nbscope_probe.py").is_file()


def summarise_cell(trace: ProbeTimeline, record: dict[str, object], *, keep: bool | None = None) -> dict[str, object]:
    """Summarise a cell's trace (what the probe's ``Timeline.stop`` returned) for the cell record.

    Deletes the raw trace afterwards unless ``keep`` is true; by default traces inside the run's
    temporary probe folder are deleted and traces in a ``--keep-traces`` folder are kept.
    """
    if trace.skipped:
        return {"version": SUMMARY_VERSION, "classification": None, "skipped": trace.skipped}
    path = Path(trace.path or "")
    if keep is None:
        keep = not _is_temporary(path)
    try:
        if trace.error:
            return {"version": SUMMARY_VERSION, "classification": None, "error": trace.error}
        xplane = find_xplane(path)
        size = xplane.stat().st_size
        cell = decode(Cell, record)
        summary = summarise(read_trace(xplane), cell.code_s if cell.code_s is not None else cell.wall_s, cell.compile_s)
        summary["trace_bytes"] = size
        summary["stop_s"] = trace.stop_s
        summary["trace"] = str(path) if keep else None
        return summary
    finally:
        if not keep and path.name and path.exists():
            shutil.rmtree(path, ignore_errors=True)
