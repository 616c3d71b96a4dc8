"""What each cell's compiled JAX programs are and how often they ran (``nbscope profile --forecast``).

Loaded by ``_nbscope_probe`` when ``NBSCOPE_PROBE_PROGRAMS=<folder>`` is set. Standard library only at
import, and it never imports JAX: a cell is recorded only once the notebook has imported jax. Per cell
it writes, for nbscope to read *outside* the kernel (``nbscope.collect.program``):

* ``cell-<seq>.xplane.pb``: a ``jax.profiler`` session around the cell's code, without the Python
  tracer. Its host events name every program run (XLA:CPU records each thunk with the program's module
  and id), which is how executions are counted; a ``--timeline`` trace, when one is recorded, serves
  instead (two profiler sessions cannot run at once).
* ``programs-<seq>.hlo``, only after a cell that compiled something (or loaded it from the persistent
  cache): the optimised HLO module of each program the cell compiled (``HloModuleProto``, which carries the
  program's id), taken from the executables JAX's ``compile_or_get_cached`` returned during the cell and
  written one at a time: what this holds in memory is one program's HLO, not every live program's. Where
  that hook was not in place when the cell started (the cell that imports jax and compiles at once), an
  empty session with ``enable_hlo_proto`` is stopped instead (``programs-<seq>.xplane.pb``), whose metadata
  holds the HLO of every program alive in the process (~35 µs per live program, jax 0.10.2 on CPU; the
  whole XSpace is held about three times over while it is stopped and written).

The session starts without initialising JAX's backends: a notebook may still change ``jax_platforms``
after ``import jax``, and starting them early would change what it runs. XLA:CPU's host events are
recorded all the same; a cell that itself starts the backend has its device events missing on a GPU.

Both methods run in IPython's pre/post-run events: they must never raise.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

TRACE_NAME = "cell-{seq:04d}.xplane.pb"
PROGRAMS_NAME = "programs-{seq:04d}.xplane.pb"
MODULES_NAME = "programs-{seq:04d}.hlo"  # each: 8 bytes little-endian length, then a serialised HloModuleProto
GPU_NAME = "gpu-{seq:04d}.json"
# Primitives whose lowering differs between XLA:CPU and XLA:GPU (loops, branches, library calls): a
# program with none of them lowers to no while and no library call on the GPU, so it is not exported.
GPU_RELEVANT = {
    "while", "scan", "cond", "lu", "lu_pivots_to_permutation", "triangular_solve", "cholesky", "eig", "eigh",
    "svd", "qr", "geqrf", "householder_product", "orgqr", "schur", "hessenberg", "tridiagonal",
    "tridiagonal_solve", "fft", "threefry2x32", "random_bits", "sort", "custom_linear_solve", "dot_general",
    "conv_general_dilated",
}


class Programs:
    """One profiler session per cell, and the optimised HLO of new programs after compiling cells."""

    def __init__(self, folder: str) -> None:
        # The path goes back to nbscope, whose cwd differs; one folder per kernel, as a traced build
        # starts many kernels with the same setting.
        self.folder = os.path.join(os.path.abspath(folder), f"kernel-{os.getpid()}")
        os.makedirs(self.folder, exist_ok=True)
        self.session: Any = None
        self.skipped: str | None = None
        self.shared = False  # the --timeline trace stands for this cell's trace
        self.lowered: list[tuple[str, Any]] = []  # (function name, closed jaxpr) lowered during the cell
        self.hooked = False
        self.exporting = False
        self.guard: _Guard | None = None
        # The executables JAX compiled (or loaded from its cache) during the cell, held until the cell's end,
        # when their HLO is written; at most MAX_COMPILED a cell (the rest are counted, not held).
        self.compiled: list[Any] = []
        self.compiled_over = 0
        self.compile_hooked = False
        self.watching = False  # the compile hook was in place when the cell started

    def start(self, seq: int, *, shared: bool = False, compile_clock: Callable[[], float] | None = None) -> None:
        """``compile_clock``: a function of no argument giving the seconds JAX has compiled in the cell so far
        (read when the session is cut: calls do not run while JAX compiles)."""
        self.session, self.skipped, self.shared = None, None, shared
        self.lowered = []
        self.compiled, self.compiled_over = [], 0
        if sys.modules.get("jax") is not None and not self.hooked:
            self._hook_lowering()
        self.watching = self.compile_hooked
        if shared or sys.modules.get("jax") is None:
            return
        try:
            self.session = _session(hlo_protos=False)
        except Exception as exc:  # e.g. the notebook runs its own jax.profiler trace
            self.skipped = f"{type(exc).__name__}: {exc}"[:300]
            return
        trace_path = os.path.join(self.folder, TRACE_NAME.format(seq=seq))
        self.guard = _Guard(self.session, trace_path, compile_clock)

    def stop(self, seq: int, *, compiled: bool, timeline_trace: Any = None) -> dict[str, Any] | None:
        """Stop the cell's session; the result goes into the probe line as ``programs``."""
        session, self.session = self.session, None
        guard, self.guard = self.guard, None
        if sys.modules.get("jax") is None:
            return None
        result: dict[str, Any] = {"seq": seq}
        started = time.perf_counter()
        if session is not None:
            try:
                if guard is not None:
                    result["trace"] = guard.finish()
                else:
                    result["trace"] = _write(self.folder, TRACE_NAME.format(seq=seq), session.stop())
                if guard is not None and guard.cut_after is not None:
                    result["window"] = {"cut": True, "reason": guard.reason, "traced_s": guard.cut_after,
                                        "grown_bytes": guard.grown, "kernel_grown_bytes": guard.kernel_grown,
                                        "wait_s": guard.window_wait, "stop_s": guard.stop_s,
                                        "compile_s": guard.compile_at_cut}
            except Exception as exc:
                result["trace_error"] = f"{type(exc).__name__}: {exc}"[:300]
        elif self.shared and isinstance(timeline_trace, dict) and timeline_trace.get("path"):
            result["trace"] = timeline_trace["path"]
            result["shared"] = True
        elif self.skipped:
            result["trace_error"] = self.skipped
        elif not self.shared:
            result["trace_error"] = "no trace: the notebook had not imported jax when the cell started"
        result["trace_stop_s"] = time.perf_counter() - started
        executables, self.compiled = self.compiled, []
        if compiled or executables:
            started = time.perf_counter()
            if self.watching and executables:
                try:
                    result["programs"] = _write_modules(os.path.join(self.folder, MODULES_NAME.format(seq=seq)),
                                                        executables)
                    if self.compiled_over:
                        result["programs_over"] = self.compiled_over  # compiled beyond MAX_COMPILED: no HLO
                except Exception as exc:  # an executable of another kind: the session below reads them all
                    result["programs_note"] = f"{type(exc).__name__}: {exc}"[:300]
            del executables
            if "programs" not in result:
                try:
                    hlo = _session(hlo_protos=True)
                    result["programs"] = _write(self.folder, PROGRAMS_NAME.format(seq=seq), hlo.stop())
                except Exception as exc:
                    result["programs_error"] = f"{type(exc).__name__}: {exc}"[:300]
            result["programs_s"] = time.perf_counter() - started
        if self.lowered:
            started = time.perf_counter()
            try:
                result["gpu_lowering"] = _write(self.folder, GPU_NAME.format(seq=seq),
                                                json.dumps(self._lower_for_gpu()).encode())
            except Exception as exc:
                result["gpu_lowering_error"] = f"{type(exc).__name__}: {exc}"[:300]
            result["gpu_lowering_s"] = time.perf_counter() - started
            self.lowered = []
        return result

    # ---- what the GPU would run -------------------------------------------------------------------
    def _hook_lowering(self) -> None:
        """Keep each program's jaxpr as JAX lowers it, to lower it for the GPU after the cell, and each
        executable JAX compiles, to write its HLO after the cell."""
        self.hooked = True
        self._hook_compiling()
        pxla = sys.modules.get("jax._src.interpreters.pxla")
        original = getattr(pxla, "lower_sharding_computation", None)
        if original is None or getattr(original, "_nbscope", False):
            return
        recorder = self

        def lower_sharding_computation(closed_jaxpr: Any, api_name: Any, fun_name: Any, *args: Any, **kwargs: Any) -> Any:
            if not recorder.exporting and len(recorder.lowered) < MAX_LOWERED:
                recorder.lowered.append((str(fun_name), closed_jaxpr))
            return original(closed_jaxpr, api_name, fun_name, *args, **kwargs)

        lower_sharding_computation._nbscope = True  # type: ignore[attr-defined]
        pxla.lower_sharding_computation = lower_sharding_computation

    def _hook_compiling(self) -> None:
        compiler = sys.modules.get("jax._src.compiler")
        original = getattr(compiler, "compile_or_get_cached", None)
        if original is None:
            return
        if getattr(original, "_nbscope", False):
            self.compile_hooked = True
            return
        recorder = self

        def compile_or_get_cached(*args: object, **kwargs: object) -> Any:
            executable = original(*args, **kwargs)
            if len(recorder.compiled) < MAX_COMPILED:
                recorder.compiled.append(executable)
            else:
                recorder.compiled_over += 1
            return executable

        compile_or_get_cached._nbscope = True  # type: ignore[attr-defined]
        setattr(compiler, "compile_or_get_cached", compile_or_get_cached)  # noqa: B010 (a module found at run time)
        self.compile_hooked = True

    def _lower_for_gpu(self) -> list[dict[str, Any]]:
        """Each program lowered in the cell, lowered again for CUDA (no GPU needed): its loops (name stack
        and source line), branches and library calls."""
        import jax
        from jax._src import core

        found = []
        self.exporting = True
        try:
            for name, closed in self.lowered:
                entry: dict[str, Any] = {"function": name}
                started = time.perf_counter()
                if not _relevant(closed.jaxpr):
                    entry["skipped"], entry["source"] = "no loop, branch or library primitive", "not lowered"
                    found.append(entry)
                    continue
                try:
                    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
                    entry.update(_summarise(_cuda_module(jax, jax.jit(core.jaxpr_as_fun(closed)), avals, entry)))
                except Exception as exc:
                    entry["error"] = f"{type(exc).__name__}: {exc}"[:200]
                entry["seconds"] = time.perf_counter() - started
                found.append(entry)
        finally:
            self.exporting = False
        return found


# A profiler session records ~2 kB and costs ~4–15 µs per small jitted call while it runs, and ~25–50 µs
# per call to stop (jax 0.10.2 on CPU): a cell of a million calls would grow the kernel by gigabytes. The guard
# stops the session once the cell's thread is busy on the CPU (it makes calls) and the session's memory
# (malloc's heap where it can be read, else the kernel's) has grown steadily (in nearly every one of the last
# STEADY_POLLS polls) by TRACE_BUDGET_BYTES after MIN_TRACE_S, or by HARD_CAP_BYTES in a cell longer than
# HARD_CAP_AFTER_S, or sooner (below); what ran later is counted from the traced part
# (nbscope.collect.program extrapolates, and says so).
MIN_TRACE_S = 0.5
TRACE_BUDGET_BYTES = 16 * 2**20
HARD_CAP_BYTES = 128 * 2**20
HARD_CAP_AFTER_S = 2.0
STEADY_POLLS = 10
# Stopping the session briefly holds the trace about three times over (measured: 128 MB grown, 456 MB at the
# peak), and stopping costs ~25–50 µs per recorded call, on a thread of its own but slowing the cell's. The
# events are many small allocations by the thread that records them: for a cell's own calls, the main
# thread's, in malloc's main heap, whose top is the program break (``sbrk(0)``, a read of a variable); a
# cell's own large arrays are mmapped blocks apart from it (measured: 20,000 traced calls moved the break by
# 40 MB; cos over 50 M float64 values and its result, by nothing). So before MIN_TRACE_S a busy cell whose
# break has moved by EARLY_HEAP_BYTES, rising at every one of the last EARLY_POLLS polls with no compile
# among them (a compile grows the heap too), is cut: about 1,000 calls are traced (polled every EARLY_POLL_S at
# first), and the kernel grows by a few MB. Why so few: later calls stay slower after a session is stopped,
# the more so the more it recorded (benchmarks/profiler_residue.py --kernel, the fastest chunk in kernels:
# 1.005× after 50 recorded calls, 1.03× after 300, 0.99–1.08× after 1,000, 1.05× after 3,000), and a stop after
# ~9,000 takes ~9× as long; a million-call cell went from 1.14× to 1.03–1.11× its time without program data
# (medians over pairs; 1.014× on a quiet machine, 40 pairs), +65 MB to +4–11 MB. So short a window is easily hit by load: the time the cell's thread waited for a CPU in it
# is kept (``wait_s``), and the count is extrapolated over the time it did not wait. (The hard cap judges the
# kernel-wide bound's reading of every thread's heaps, below.) Where the break cannot be read
# (the cell's thread is not the main one, or no sbrk), the kernel's growth stands in, EARLY_CAP_BYTES.
EARLY_HEAP_BYTES = 2 * 2**20
# Arrays up to 32 MB can come from the heap too (glibc raises its mmap threshold after freeing a mmapped
# block): a poll's growth larger than this is an array, not events (a million-call cell's events grow the
# heap by ~0.5 MB per 2.5 ms poll), and counts toward neither the early budget nor its "rising at every poll".
EARLY_JUMP_BYTES = 4 * 2**20
EARLY_CAP_BYTES = 40 * 2**20
EARLY_CAP_AFTER_S = 0.01
EARLY_POLLS = 4
BUSY_SHARE = 0.15  # the cell's thread on the CPU at least this share of the last polls' time: it makes calls
POLL_S = 0.01
EARLY_POLL_S = 0.0025  # the first EARLY_FAST_S: a cell of small calls is cut within ~1,000 calls
EARLY_FAST_S = 0.1
# The kernel-wide bound (issue 34): the rules above watch the cell's own thread, but the session records
# every thread's calls (a sampler's worker, a thread pool, XLA's own workers) into heaps the break does not
# show, and they fire only while the cell's thread is busy. So every poll also reads the kernel's memory
# (/proc/self/statm, ~10 µs: resident bytes and VmData), and counts as events what grew in both alike (a heap
# extended and filled; _events_step), outside JAX's tracing, lowering and compiling (XLA grows the kernel by
# ~100 MB compiling a scan with an LU; its events come after). What is bounded is what the events will hold
# at the next poll: their rate over the last RATE_POLLS polls times the latest of those polls' intervals
# (under load polls came 0.1-0.8 s apart), added to what they hold; past MEMORY_BUDGET_BYTES the session is
# cut, whatever the cell's thread does. Stopping a session peaks at 4-5 times what its events hold (measured,
# jax 0.10.2: a Kalman filter's gradient, 244 MB of events, its stop peaking 1,143 MB above the start), so
# 32 MiB of events is ~160 MB at the stop. glibc's heap statistics (mallinfo2), which the bound read before,
# took 50-100 ms a reading while a session recorded events (2-3 ms without one): the guard went blind just
# after a compile, when the events came fastest. A cell filling a heap itself (small arrays, Python objects)
# is cut early: that costs forecast precision (its counts are extrapolated, and the record says why), never
# the cell. NBSCOPE_PROBE_MEMORY_BUDGET (bytes) sets another budget.
MEMORY_BUDGET_BYTES = 32 * 2**20
RATE_POLLS = 5
# Half the budget while the events grow at this rate or more: a program recording events per iteration
# (benchmarks/lectures/kalman_x64.md: 25-250 MB/s of them), where what the growth counted misses (events
# refilling a heap's freed blocks grow nothing) makes the stop's peak up to 7 times it
# (tests/files/forecast_scan_events.md: 30 MB counted at the cut, +210 MB at the stop). The heaps' statistics
# swung with a loop's reused arrays (forecast_honest.md's 16 MB ones), which is why this was once kept to the
# time after a compile; growth in resident memory does not swing so.
EVENTS_RATE_BYTES_PER_S = 4 * 2**20
COMPILE_HEAP_EVERY = 5
# The kernel-wide rule cuts when a reading of the heaps (on the reader's thread, every CONFIRM_EVERY_S while the
# growth counted is CONFIRM_BYTES or more, and a compile's last) shows them grown since the session started,
# less what compiles kept, by a quarter of the budget (CONFIRM_BYTES at least), or when the events flood
# (SLOW_READING_S below): a program's result in a mmapped block written at memory speed
# within one poll grows the resident memory and the mapping alike (the seed lecture's qm_jax, 13 MB in 10 ms,
# was cut after 0.01 s of a single 10,000,000-step call, and forecast "≈10 calls, likely more").
CONFIRM_BYTES = 4 * 2**20
CONFIRM_EVERY_S = 0.1
# Waiting for that reading would let the events run on (it takes 50-100 ms while they flood): growth at every
# one of the last STEADY_EVENT_POLLS polls while a reading has been under way this long cuts without it. The seed
# lecture's small cells, whose arrays grew the kernel at each of a few 2.5 ms polls, were cut on steady
# growth alone, and lost their upper bound.
SLOW_READING_S = 0.01
STEADY_EVENT_POLLS = 3
AFTER_COMPILE_S = 0.5  # polled every POLL_S this long after a compile's end: its program's events come fastest
MEMORY_JUMP_BYTES_PER_S = 1.5e9
MEMORY_JUMP_MIN_BYTES = 16 * 2**20  # a poll's growth below this is never an array's jump
# glibc trims a heap's top once it holds twice the mmap threshold free (at most 2 x 32 MiB): a poll's shrink
# of the resident memory and the mapping alike this large or more is a block unmapped, not a heap trimmed.
UNMAPPED_BLOCK_BYTES = 64 * 2**20
# A kernel that grows by this much in one traced cell is cut whatever the growth looked like: jumps are a
# guess about what grew, and the session's share of memory this large must not go unchecked.
MEMORY_TOTAL_BYTES = 1024 * 2**20
_COMPILING = ("compile", "lower", "trace_to_jaxpr", "_create_pjit_jaxpr")


# glibc's struct mallinfo2 (2.33+): uordblks is the heap's bytes in use over all arenas, mmapped blocks apart.
_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
_LIBC: dict[str, Any] = {}  # mallinfo2, sbrk and malloc_trim, resolved once per kernel (None where missing)


def _libc(name: str) -> Any:
    """glibc's ``mallinfo2`` (bytes in use over every thread's heap), ``sbrk`` (the program break) or
    ``malloc_trim`` (freed heap back to the system) as a function of no argument, looked up on first use;
    None where the C library has none."""
    if name not in _LIBC:
        _LIBC[name] = None
        try:
            import ctypes  # standard library; only once a cell traces

            if name == "mallinfo2":
                class MallInfo2(ctypes.Structure):
                    _fields_ = [(field, ctypes.c_size_t) for field in _MALLINFO2_FIELDS]

                function = ctypes.CDLL(None).mallinfo2
                function.restype, function.argtypes = MallInfo2, []
                _LIBC[name] = lambda: int(function().uordblks)
            elif name == "malloc_trim":
                function = ctypes.CDLL(None).malloc_trim
                function.restype, function.argtypes = ctypes.c_int, [ctypes.c_size_t]
                _LIBC[name] = lambda: int(function(0))
            else:
                function = ctypes.CDLL(None).sbrk
                function.restype, function.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
                if function(0):
                    _LIBC[name] = lambda: int(function(0) or 0)
        except (OSError, AttributeError, TypeError):
            pass
    return _LIBC[name]


# A stopped session whose events came to this much once written freed several times as much (the stop copies
# them: 66 MiB of events gave a 15 MiB result); below it, trimming would walk the heap for little.
TRIM_AFTER_BYTES = 2**20


def _release_freed() -> None:
    """Hand the heap a stopped session freed back to the system (glibc's ``malloc_trim``): its events and the
    stop's copies (~5x the events) stay resident otherwise, and the next cell starts that much higher (measured:
    jax_intro's cell 57 started 243 MB above the same cell without ``--forecast``)."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim()


ON_CPU, WAITING = 0, 1  # schedstat's fields: nanoseconds on a CPU, and waiting for one while ready to run


def _schedstat(native_id: int, field: int) -> float | None:
    """A thread's seconds on a CPU (ON_CPU) or waiting for one (WAITING), from its schedstat (Linux), in
    nanoseconds: the early polls are 2.5 ms apart, where stat's utime counts 10 ms ticks."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as handle:
            return int(handle.read().split()[field]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _memory_budget() -> int:
    try:
        return max(1, int(os.environ.get("NBSCOPE_PROBE_MEMORY_BUDGET") or MEMORY_BUDGET_BYTES))
    except ValueError:
        return MEMORY_BUDGET_BYTES


def _rss() -> int | None:
    statm = _statm()
    return statm[0] if statm is not None else None


def _statm() -> tuple[int, int] | None:
    """The kernel's resident bytes and its private writable mappings' bytes (``VmData``: the heaps as far as
    they are grown, mmapped blocks whole from their mapping), from one read of /proc/self/statm."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            fields = handle.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return int(fields[1]) * page, int(fields[5]) * page
    except (OSError, ValueError, IndexError):
        return None


def _events_step(resident: int, data: int, jump: int, unwritten: int) -> tuple[int, int]:
    """How much of one poll's growth counts as the session's events, and the bytes mapped but not yet written
    after it. A heap extended and filled grows the resident memory and the mapping alike (glibc's arenas map
    as they fill); a heap refilled after ``malloc_trim`` handed its pages back grows the resident memory only,
    as does an array written into a block mapped earlier (``jnp.cos`` over 50 M values: 400 MB at the speed
    it computes). So what a poll maps beyond what it writes (an array's block, a thread's stack; by
    MEMORY_JUMP_MIN_BYTES or more, a block mapped, maybe as another was freed: ``y = jnp.cos(x)`` again,
    whose mapping nets out; such a poll counts nothing) is kept as unwritten, resident growth beyond the
    mapping's is the writing of those blocks as far as they go, and the rest counts. A jump (pages written at
    memory speed) never counts."""
    if resident < 0 and data < 0:
        # A heap given back (its top trimmed: both shrink) was the notebook's memory, which a loop reusing
        # arrays regrows (forecast_honest.md's 16 MB ones): counted only upward, its swings added up to a cut.
        # A larger shrink is a block unmapped (an array freed), which the events never were.
        shrink = max(resident, data)
        return (shrink if -shrink < UNMAPPED_BLOCK_BYTES else 0), unwritten
    lead = data - resident
    if lead >= MEMORY_JUMP_MIN_BYTES:  # a block mapped: what the poll wrote is its first pages, not events
        return 0, unwritten + lead
    unwritten += max(0, data - max(0, resident)) if data > 0 else 0
    beyond = resident - max(0, data)  # resident growth in blocks mapped before this poll
    written = min(max(0, beyond), unwritten)
    if resident > jump:
        return 0, unwritten - written
    return max(0, min(resident, data)) + max(0, beyond - written), unwritten - written


def _events_ahead(history: list[tuple[float, int]], intervals: list[float]) -> tuple[float, float]:
    """The events' rate over the polls in ``history`` ((clock, events) each, oldest first) and what they will
    hold at the next poll if it comes as late as the latest of ``intervals``: the stop is what outgrows the
    bound (it peaks at 4-5 times what the events hold), and on a loaded machine a poll comes 0.1-0.8 s late,
    so the session is judged by what its events will hold then, and cut now if that is over the budget. Only
    growth in all but one of the polls is a rate."""
    (first_clock, first_events), (clock, events) = history[0], history[-1]
    rises = sum(1 for (_, a), (_, b) in zip(history, history[1:], strict=False) if b > a)
    rate = (events - first_events) / (clock - first_clock) if clock > first_clock else 0.0
    # Events grow at (nearly) every poll; one step is a level, not a rate to project.
    steady = rises >= max(1, len(history) - 2)
    return rate, events + (max(0.0, rate) * max(intervals, default=0.0) if steady else 0.0)


def _in_jax_compile(frame: Any) -> bool:
    depth = 0
    while frame is not None and depth < 200:
        code = frame.f_code
        if "jax" in code.co_filename and any(word in code.co_name for word in _COMPILING):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


class _HeapReader:
    """Reads the heaps' bytes in use on a thread of its own, one reading at a time, each asked for with a kind
    and a value handed back with it."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.read = read
        self.base = read()  # as the session starts: nothing recorded yet, 2-3 ms
        self.asked: tuple[str, int | None] | None = None
        self.pending: tuple[str, int | None] | None = None  # a compile's end, asked while a reading was under way
        self.asked_at = 0.0
        self.done: list[tuple[str, int | None, int]] = []  # appended here, popped by the guard (atomic both)
        self.wanted = threading.Event()
        self.closed = False
        threading.Thread(target=self._run, name="nbscope-heap-reader", daemon=True).start()

    def ask(self, kind: str, value: int | None) -> None:
        """A reading, unless one is under way (then the next poll asks again; a compile's end waits for it)."""
        if self.asked is None:
            self.asked, self.asked_at = (kind, value), time.perf_counter()
            self.wanted.set()
        elif kind == "end":
            self.pending = (kind, value)

    def take(self) -> list[tuple[str, int | None, int]]:
        done = []
        while self.done:
            done.append(self.done.pop(0))
        if self.asked is None and self.pending is not None:
            self.asked, self.pending, self.asked_at = self.pending, None, time.perf_counter()
            self.wanted.set()
        return done

    def slow(self, clock: float) -> bool:
        """A reading has been under way SLOW_READING_S or more: the heaps' locks are busy, as they are while a
        session records events fast (a reading takes 2-3 ms otherwise)."""
        return self.asked is not None and clock - self.asked_at >= SLOW_READING_S

    def close(self) -> None:
        self.closed = True
        self.wanted.set()

    def _run(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            asked = self.asked
            if self.closed:
                return
            if asked is not None:
                reading = self.read()
                self.done.append((asked[0], asked[1], reading))
                self.asked = None


class _Guard:
    """Stops a profiler session from a thread of its own when it grows too big (stop releases the GIL)."""

    def __init__(self, session: Any, path: str, compile_clock: Callable[[], float] | None = None) -> None:
        self.session = session
        self.compile_clock = compile_clock
        self.compile_at_cut: float | None = None  # JAX's compile seconds in the cell when the session was cut
        self.path = path  # a cut session's events are written here at once: holding them would keep them in memory
        self.native_id = threading.get_native_id()  # the cell's thread (the guard is made in pre_run_cell)
        self.thread_id = threading.get_ident()
        self.started = time.perf_counter()
        self.waited = _schedstat(self.native_id, WAITING)
        self.window_wait: float | None = None
        self.base = _rss()
        # The cell's own heap, for the early rule: its events go to the main thread's heap, whose top is the
        # break, only when the cell runs on the main thread.
        on_main = threading.current_thread() is threading.main_thread()
        self.brk = _libc("sbrk") if self.base is not None and on_main else None
        self.brk_base = self.brk() if self.brk is not None else None
        self.written: str | None = None
        self.error: BaseException | None = None
        self.cut_after: float | None = None
        self.reason: str | None = None  # which rule cut the session ("memory budget": the kernel-wide one)
        self.kernel_grown: int | None = None  # the kernel's resident growth since the session started, at the cut
        self.memory_budget = _memory_budget()
        self.events_budget = self.memory_budget // 2  # the heaps growing at an event rate: see EVENTS_RATE_BYTES_PER_S
        self.stop_s: float | None = None  # how long stopping the cut session took (the cell ran on meanwhile)
        self.grown = 0
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        if self.base is not None:  # no /proc: no guard (macOS, Windows)
            self.thread = threading.Thread(target=self._watch, name="nbscope-trace-guard", daemon=True)
            self.thread.start()

    @staticmethod
    def _poll_s(elapsed: float, compiled_at: float) -> float:
        if elapsed < EARLY_FAST_S:
            return EARLY_POLL_S
        after_compile = compiled_at >= 0 and time.perf_counter() - compiled_at < AFTER_COMPILE_S
        return POLL_S if elapsed < MIN_TRACE_S or after_compile else 2 * POLL_S

    def _compiling(self) -> bool:
        """The cell's thread is inside JAX's tracing, lowering or compiling: its memory grows steadily
        then, and what it compiles runs after, so the session must not be cut."""
        return _in_jax_compile(sys._current_frames().get(self.thread_id))

    def _compiling_anywhere(self) -> bool:
        """Any thread but the guard's is inside JAX's tracing, lowering or compiling (a worker thread
        compiles too): the kernel's growth then is the compiler's, not the session's."""
        own = threading.get_ident()
        return any(_in_jax_compile(frame) for ident, frame in sys._current_frames().items() if ident != own)

    def _watch(self) -> None:
        # Every thread's heaps' bytes in use (glibc's mallinfo2), read only while JAX compiles (every
        # COMPILE_HEAP_EVERY polls, and as it starts and ends), on a thread of its own: it walks the heaps with
        # their locks held, 2-3 ms, but 50-100 ms while a session records events fast, and the guard must not
        # go blind then (a compile's end, when its program's events come fastest).
        reads = _libc("mallinfo2")
        heap = _HeapReader(reads) if reads is not None else None
        try:
            self._poll(heap)
        finally:
            if heap is not None:
                heap.close()

    def _poll(self, heap: _HeapReader | None) -> None:
        # The session's events are what is bounded: where the break can be read, the cell's own heap is judged
        # (a cell's large arrays are not in it), else the kernel's memory.
        read, base = (self.brk, self.brk_base) if self.brk_base is not None else (_rss, self.base)
        early_cap = EARLY_HEAP_BYTES if self.brk_base is not None else EARLY_CAP_BYTES
        statm = _statm()
        kernel_last, data_last = statm if statm is not None else (None, None)
        events = 0  # the kernel's growth that reads as heap growth: every thread's events (see _events_step)
        unwritten = 0  # bytes mapped since the start that no poll saw written yet
        history: list[tuple[float, int]] = []  # (clock, events) at the last RATE_POLLS polls: the events' rate
        intervals: list[float] = []  # the last RATE_POLLS polls' intervals: how late the next one may come
        was_compiling, compiled_at = False, -1.0  # when a compile was last seen over (the events tier)
        compile_high: int | None = None  # the heaps' highest reading in a compile
        compile_low: int | None = None  # and the lowest since
        compile_start = heap_base = heap.base if heap is not None else 0  # the heaps at the compile's start, the session's
        excluded = 0  # what the heaps kept of what grew while JAX compiled (its executables, caches)
        confirmed, confirm_asked = False, -1.0  # a reading of the heaps showed them grown (see CONFIRM_BYTES)
        heap_grown = 0  # the heaps' growth at the latest reading, less what compiles kept
        polled = self.started
        recent: list[int] = []
        events_grown = 0  # the break's moves in polls that moved it by less than an array's jump
        compiled: list[bool] = []  # whether each recent poll found the cell's thread compiling
        cpu: list[tuple[float, float | None]] = []
        polls = 0
        while not self.done.wait(self._poll_s(time.perf_counter() - self.started, compiled_at)):
            clock = time.perf_counter()
            elapsed, interval, polled = clock - self.started, clock - polled, clock
            statm = _statm()
            kernel = statm[0] if statm is not None else None
            now = (statm[0] if statm is not None else None) if read is _rss else read() if read is not None else None
            kernel_grown = kernel - self.base if kernel is not None and self.base is not None else None
            if statm is not None and kernel_last is not None and data_last is not None and kernel_grown is not None:
                compiling = self._compiling_anywhere()
                if heap is not None:
                    # What a compile grew is left out, but a program dispatched before runs meanwhile and
                    # records events (the Kalman likelihood's eager scan: ~30 MB while the next operation
                    # compiled): what the heaps' bytes in use gained after their lowest reading since the
                    # compile's highest (the compiler freeing its memory) counts once the compile is over.
                    if compiling and (not was_compiling or polls % COMPILE_HEAP_EVERY == 0):
                        heap.ask("compile", None if not was_compiling else compile_low)
                    elif was_compiling and not compiling:
                        heap.ask("end", compile_low)
                    elif events >= CONFIRM_BYTES and clock - confirm_asked >= CONFIRM_EVERY_S:
                        heap.ask("confirm", None)
                        confirm_asked = clock
                    for kind, low, reading in heap.take():
                        if kind == "end":
                            events += max(0, reading - low) if low is not None else 0
                            excluded += max(0, min(reading, low if low is not None else reading) - compile_start)
                        elif kind != "confirm" and (low is None or compile_high is None or compile_low is None or reading > compile_high):
                            compile_high = compile_low = reading
                            compile_start = reading if low is None else compile_start
                        elif kind != "confirm" and compile_low is not None:
                            compile_low = min(compile_low, reading)
                        # The heaps grew (less what compiles left): the growth counted is events, not a
                        # program's result in a mmapped block (qm_jax's output, written at memory speed).
                        if kind != "compile":
                            heap_grown = reading - heap_base - excluded
                            confirmed = confirmed or heap_grown >= CONFIRM_BYTES
                if was_compiling and not compiling:
                    compiled_at = clock
                was_compiling = compiling
                jump = max(MEMORY_JUMP_MIN_BYTES, int(MEMORY_JUMP_BYTES_PER_S * interval))
                if not compiling:
                    step, unwritten = _events_step(statm[0] - kernel_last, statm[1] - data_last, jump, unwritten)
                    events = max(0, events + step)
                kernel_last, data_last = statm
                history = [*history[-(RATE_POLLS - 1):], (clock, events)]
                intervals = [*intervals[-(RATE_POLLS - 1):], interval]
                rate, ahead = _events_ahead(history, intervals)
                limit = self.events_budget if rate >= EVENTS_RATE_BYTES_PER_S else self.memory_budget
                # Growth at every one of the last polls while a reading of the heaps is slow is events being
                # recorded fast; else the growth may be a program's result, and waits for the heaps to confirm it.
                latest = history[-STEADY_EVENT_POLLS:]
                steady = len(latest) == STEADY_EVENT_POLLS and all(
                    b > a for (_, a), (_, b) in zip(latest, latest[1:], strict=False))
                flooding = steady and heap is not None and heap.slow(clock)
                # The heaps' own growth must bear the budget out (a quarter of it: the stop multiplies what
                # they hold), else the growth counted is the notebook's arrays (forecast_honest.md's loop
                # grew the kernel by 330 MB of 16 MB results in 0.35 s, its heaps by less than 34 MB).
                borne = heap_grown >= max(CONFIRM_BYTES, limit // 4)
                if (ahead > limit and (borne or flooding or heap is None)) or kernel_grown > MEMORY_TOTAL_BYTES:
                    self._cut(elapsed, max(events, 0), "memory budget", kernel_grown)
                    return
            if now is None or base is None:
                continue
            polls += 1
            step = now - recent[-1] if recent else now - base
            events_grown += step if 0 < step <= EARLY_JUMP_BYTES else 0
            recent = [*recent[-(STEADY_POLLS - 1):], now]
            compiled = [*compiled[-(EARLY_POLLS - 1):], self._compiling()]
            cpu = [*cpu[-(STEADY_POLLS - 1):], (time.perf_counter(), _schedstat(self.native_id, ON_CPU))]
            if elapsed < EARLY_CAP_AFTER_S:
                continue
            # The profiler's events grow memory steadily while the cell's thread keeps making calls (it is
            # busy on the CPU). A cell's own large array grows the kernel too, as its pages are first written:
            # that growth is not the session's, and cutting would lose the long-running program's events.
            rises = sum(1 for a, b in zip(recent, recent[1:], strict=False) if b > a)
            steady = len(recent) == STEADY_POLLS and rises >= STEADY_POLLS - 2
            (t0, c0), (t1, c1) = cpu[0], cpu[-1]
            calling = c0 is None or c1 is None or (t1 > t0 and (c1 - c0) / (t1 - t0) >= BUSY_SHARE)
            grown = now - base
            grown_all = max(grown, events if confirmed else 0)  # every thread's events, once the heaps showed them
            early = elapsed < MIN_TRACE_S
            last = recent[-EARLY_POLLS:]
            steps = [b - a for a, b in zip(last, last[1:], strict=False)]
            small = self.brk_base is None or all(step <= EARLY_JUMP_BYTES for step in steps)
            rising = (len(last) == EARLY_POLLS and all(step > 0 for step in steps) and small
                      and len(compiled) == EARLY_POLLS and not any(compiled))
            early_grown = events_grown if self.brk_base is not None else grown
            if calling and ((early and rising and early_grown > early_cap)
                            or (not early and steady and grown > TRACE_BUDGET_BYTES)
                            or (max(grown, grown_all) > HARD_CAP_BYTES and elapsed > HARD_CAP_AFTER_S)
                            ) and not self._compiling():
                reason = ("early" if early and rising and early_grown > early_cap
                          else "trace budget" if not early and steady and grown > TRACE_BUDGET_BYTES else "heap cap")
                self._cut(elapsed, max(grown, grown_all), reason, kernel_grown)
                return

    def _cut(self, elapsed: float, grown: int, reason: str, kernel_grown: int | None) -> None:
        """Stop the session now, from this thread, and write its events (the cell runs on meanwhile)."""
        with self.lock:
            if self.done.is_set():
                return
            self.cut_after, self.grown, self.reason, self.kernel_grown = elapsed, grown, reason, kernel_grown
            try:
                self.compile_at_cut = float(self.compile_clock()) if self.compile_clock is not None else None
            except Exception:  # the probe's counters, read from this thread: never let it stop the cut
                self.compile_at_cut = None
            waited = _schedstat(self.native_id, WAITING)
            if waited is not None and self.waited is not None:
                self.window_wait = waited - self.waited
            stopping = time.perf_counter()
            try:
                self.written = self._stop_and_write()
            except BaseException as exc:  # handed to finish(), never raised in this thread
                self.error = exc
            self.stop_s = time.perf_counter() - stopping
            self.done.set()

    def _stop_and_write(self) -> str:
        data = self.session.stop()
        written = _write_to(self.path, data)
        if len(data) >= TRIM_AFTER_BYTES:  # a small session frees little: no walk of the heap after every cell
            _release_freed()
        return written

    def finish(self) -> str:
        """The path of the session's events: stopped and written now, or when it was cut."""
        with self.lock:
            if not self.done.is_set():
                self.done.set()
                return self._stop_and_write()
        if self.error is not None:
            raise self.error
        return self.written or _write_to(self.path, b"")


MAX_LOWERED = 200  # programs lowered for the GPU per cell at most (a cell compiling thousands says so)
# Executables held from their compile to the cell's end at most (holding keeps them alive that long; a cell
# that compiles thousands of programs and drops them would otherwise keep them all).
MAX_COMPILED = 200


def _relevant(jaxpr: Any, depth: int = 0) -> bool:
    for equation in jaxpr.eqns:
        if equation.primitive.name in GPU_RELEVANT:
            return True
        if depth < 8:
            for value in equation.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", None)
                    inner = getattr(inner, "jaxpr", inner)  # ClosedJaxpr -> Jaxpr
                    if inner is not None and hasattr(inner, "eqns") and _relevant(inner, depth + 1):
                        return True
    return False


_LOC = re.compile(r"^(#loc\d+) = (.*)$", re.M)
_FILE_LINE = re.compile(r'loc\("([^"]+)":(\d+):\d+')


def _summarise(text: str) -> dict[str, Any]:
    """Loops, branches and custom calls of a StableHLO module, with each loop's name stack and line."""
    locations = dict(_LOC.findall(text))

    def expand(reference: str, depth: int = 0) -> str:
        value = locations.get(reference, reference)
        if depth > 12:
            return value
        return re.sub(r"#loc\d+", lambda m: expand(m.group(0), depth + 1), value)

    loops: list[dict[str, Any]] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "stablehlo.while" not in line:
            continue
        # The while's location is on the line that closes its regions, at its own indentation.
        indent = len(line) - len(line.lstrip())
        for closing in lines[index + 1:]:
            if closing.startswith(" " * indent + "}") and not closing.startswith(" " * (indent + 1)) and "loc(" in closing:
                where = expand(closing[closing.index("loc(") + 4:].rstrip(")").strip())
                stack = re.match(r'loc\("([^"]*)"', where)
                source = _FILE_LINE.search(where)
                loops.append({"stack": stack.group(1) if stack else None,
                              "file": source.group(1) if source else None,
                              "line": int(source.group(2)) if source else None})
                break
    calls: dict[str, int] = {}
    for target in re.findall(r"custom_call @([\w.]+)", text):
        calls[target] = calls.get(target, 0) + 1
    return {"loops": loops, "custom_calls": calls,
            "conditionals": text.count("stablehlo.case") + text.count("stablehlo.if")}


def _cuda_module(jax: Any, function: Any, avals: list[Any], entry: dict[str, Any]) -> str:
    """The StableHLO text, with locations, of ``function`` lowered for CUDA at ``avals``; ``entry["source"]``
    says how it was made, also when that fails. Lowering the traced function for the platform gives the
    module ``jax.export`` gives, for about two thirds of the time (no serialising and parsing back:
    measured 21 against 33 ms, and 35 against 50 ms, per program); a JAX without ``lowering_platforms``
    gets ``jax.export``."""
    entry["source"] = "lower (cuda)"
    try:
        lowered = function.trace(*avals).lower(lowering_platforms=("cuda",))
    except (AttributeError, TypeError):
        entry["source"] = "jax.export (cuda)"
        return jax.export.export(function, platforms=["cuda"])(*avals).mlir_module()
    return lowered.as_text(debug_info=True)


def _session(*, hlo_protos: bool) -> Any:
    """A bare profiler session (no export step) without the Python tracer."""
    from jax._src.lib import _profiler  # jax is imported already: this is free

    profiler = sys.modules.get("jax.profiler") or getattr(sys.modules["jax"], "profiler", None)
    factory = getattr(profiler, "ProfileOptions", None)
    if factory is None:
        raise RuntimeError("this JAX has no jax.profiler.ProfileOptions")
    options = factory()
    options.python_tracer_level = 0  # a Python loop would otherwise record millions of events
    options.enable_hlo_proto = hlo_protos
    return _profiler.ProfilerSession(options)


def _write_modules(path: str, executables: list[Any]) -> str:
    """Each executable's optimised HLO modules, serialised and written one at a time (a program's HLO at a
    time in memory, however many the cell compiled)."""
    with open(path, "wb") as handle:
        for executable in executables:
            for module in executable.hlo_modules():
                data = module.as_serialized_hlo_module_proto()
                handle.write(len(data).to_bytes(8, "little"))
                handle.write(data)
                del data
    return path


def _write(folder: str, name: str, data: bytes) -> str:
    return _write_to(os.path.join(folder, name), data)


def _write_to(path: str, data: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def load(folder: str | None) -> Programs | None:
    """The recorder for ``NBSCOPE_PROBE_PROGRAMS``, or None when it is not set."""
    if not folder:
        return None
    try:
        return Programs(folder)
    except OSError as exc:
        print(f"nbscope probe: program data unavailable: {exc!r}", file=sys.__stderr__)
        return None
