"""What each cell's compiled JAX programs are and how often they ran (``nbscope profile --forecast``).

Loaded by ``_nbscope_probe`` when ``NBSCOPE_PROBE_PROGRAMS=<folder>`` is set. Standard library only at
import, and it never imports JAX: a cell is recorded only once the notebook has imported jax. Per cell
it writes, for nbscope to read *outside* the kernel (``nbscope.collect.program``):

* ``cell-<seq>.xplane.pb``: a ``jax.profiler`` session around the cell's code, without the Python
  tracer. Its host events name every program run (XLA:CPU records each thunk with the program's module
  and id), which is how executions are counted; a ``--timeline`` trace, when one is recorded, serves
  instead (two profiler sessions cannot run at once). The session is stopped as each compile begins and a new
  one started as it ends (a compile's passes are tens of thousands of events no reader uses), and after a loop's
  compile it is stopped once or more to look at the loop's first events: the file holds each part's XSpace, one
  after the other (``nbscope.collect.program`` puts them on one clock).
* ``programs-<seq>.hlo``, only after a cell that compiled something (or loaded it from the persistent
  cache): the optimised HLO module of each program the cell compiled (``HloModuleProto``, which carries the
  program's id), taken from the executables JAX's ``compile_or_get_cached`` returned during the cell and
  written one at a time: what this holds in memory is one program's HLO, not every live program's. Where
  that hook was not in place when the cell started (the cell that imports jax and compiles at once), an
  empty session with ``enable_hlo_proto`` is stopped instead (``programs-<seq>.xplane.pb``), whose metadata
  holds the HLO of every program alive in the process (~35 µs per live program, jax 0.10.2 on CPU; the
  whole XSpace is held about three times over while it is stopped and written).

* ``target-<seq>.jsonl``, beside each cell's HLO: every program the cell compiled, as the StableHLO module JAX handed
  XLA:CPU (its bytecode, zlib-compressed, base64), keyed by program id, for nbscope to compile for a TPU without one
  (``nbscope.collect.target_compile``). Taking the module's bytecode costs ~0.06 ms a program; a program with a
  primitive JAX lowers differently for the TPU (linear algebra, callbacks, ``TARGET_DEPENDENT``) is lowered again
  for the TPU after the cell instead (5-16 ms a program), and a lowering that fails keeps its error (``eig`` has
  no TPU lowering: the chip's own message).

The session starts without initialising JAX's backends: a notebook may still change ``jax_platforms``
after ``import jax``, and starting them early would change what it runs. XLA:CPU's host events are
recorded all the same; a cell that itself starts the backend has its device events missing on a GPU.

Both methods run in IPython's pre/post-run events: they must never raise.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sys
import threading
import time
import weakref
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

try:  # beside this file in the kernel's probe home
    import _nbscope_trips
    from _nbscope_words import whole_words
except ImportError:  # imported as part of the nbscope package
    from nbscope.collect.probe import _nbscope_trips
    from nbscope.collect.probe._nbscope_words import whole_words

TRACE_NAME = "cell-{seq:04d}.xplane.pb"
PROGRAMS_NAME = "programs-{seq:04d}.xplane.pb"
MODULES_NAME = "programs-{seq:04d}.hlo"  # each: 8 bytes little-endian length, then a serialised HloModuleProto
GPU_NAME = "gpu-{seq:04d}.json"
TARGET_NAME = "target-{seq:04d}.jsonl"
# Primitives with a lowering of their own for the CPU or the TPU (``jax._src.interpreters.mlir``'s platform-specific
# lowerings, jax 0.10.2) or whose lowering depends on the platform (callbacks): a program holding one is lowered
# again for the TPU; any other's CPU module is the TPU's too.
TARGET_DEPENDENT = {
    "approx_top_k", "check", "cholesky", "conv_general_dilated", "debug_callback", "debug_print", "device_put",
    "dot_general", "eig", "eigh", "geqp3", "geqrf", "hessenberg", "householder_product", "lu", "ormqr",
    "ragged_dot_general", "random_gamma", "schur", "select_and_scatter_add", "svd", "threefry2x32",
    "triangular_solve", "tridiagonal", "tridiagonal_solve", "pure_callback", "io_callback", "callback",
}  # fmt: skip
# Primitives whose lowering differs between XLA:CPU and XLA:GPU (loops, branches, library calls): a
# program with none of them lowers to no while and no library call on the GPU, so it is not exported.
GPU_RELEVANT = {
    "while",
    "scan",
    "cond",
    "lu",
    "lu_pivots_to_permutation",
    "triangular_solve",
    "cholesky",
    "eig",
    "eigh",
    "svd",
    "qr",
    "geqrf",
    "householder_product",
    "orgqr",
    "schur",
    "hessenberg",
    "tridiagonal",
    "tridiagonal_solve",
    "fft",
    "threefry2x32",
    "random_bits",
    "sort",
    "custom_linear_solve",
    "dot_general",
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
        # id(executable) → its module's bytecode as compiled for the CPU, or the closed jaxpr to lower for the TPU
        self.target: dict[int, bytes | Any] = {}
        self.target_lines: list[str] = []  # the cell's target modules, written as the cell ends
        self.relower: list[tuple[int, Any]] = []  # (program id, closed jaxpr) to lower for the TPU at the cell's end
        # NBSCOPE_PROBE_TARGET=0 keeps no module (benchmarks/target_overhead.py measures what keeping them costs)
        self.keep_target = os.environ.get("NBSCOPE_PROBE_TARGET", "1") != "0"
        self.hooked = False
        self.exporting = False
        self.guard: _Guard | None = None
        # The executables JAX compiled (or loaded from its cache) during the cell, held until their HLO is written:
        # at the cell's end, or once HOLD_COMPILED are held (a cell compiling hundreds would hold them all).
        self.compiled: list[Any] = []
        self.modules_path = ""
        self.flushed = False  # some of the cell's HLO is written already
        self.compile_hooked = False
        self.watching = False  # the compile hook was in place when the cell started
        # Waiting, before lowering, for programs dispatched earlier (see _wait_for_dispatched); and as the cell
        # started, before its session, for an earlier cell's (_wait_in_flight).
        self.dispatch_wait_s = self.start_wait_s = 0.0
        self.heavy = False  # the last cell's session recorded heavily: it was cut, or its stop took HEAVY_STOP_S
        # A compile is not recorded: the session is stopped as one starts and a new one started as the last ends
        # (see _compile_starts). How many compiles run now, the parts' stops' time, and why a part failed.
        self.compiles_open = 0
        self.split_lock = threading.Lock()
        self.split_s = 0.0
        self.split_unclaimed_s = 0.0  # of split_s, what no compile's timing has given back yet (take_split_s)
        self.split_error: str | None = None
        self.trace_path: str | None = None  # the cell's trace, once a part of it was written
        self.paused: _Guard | None = None  # the guard of the part stopped for the compile running now
        self.parts = 0  # the cell's parts stopped for a compile so far (at most MAX_PARTS)
        self.last_lowered: Any = None  # the closed jaxpr JAX lowered last: the program a compile makes
        self.running_at_lowering = False  # programs dispatched earlier still ran as JAX lowered the last one
        self.counter = _Counter()
        self.born = self.cell_started = time.perf_counter()
        self.trips_s = 0.0  # counting loops' iterations (_count_trips), over the kernel
        self.counting: dict[int, tuple[Any, list[Any]]] = {}  # id(executable) → its counting function, whiles' lines

    def start(self, seq: int, *, shared: bool = False, compile_clock: Callable[[], float] | None = None) -> None:
        """``compile_clock``: a function of no argument giving the seconds JAX has compiled in the cell so far
        (read when the session is cut: calls do not run while JAX compiles)."""
        self.session, self.skipped, self.shared = None, None, shared
        self.split_s, self.split_error, self.trace_path = 0.0, None, None
        self.parts = 0
        self.split_unclaimed_s = 0.0
        self.lowered, self.last_lowered = [], None
        self.target, self.target_lines, self.relower = {}, [], []
        self.dispatch_wait_s = self.start_wait_s = 0.0
        self.compiled, self.flushed = [], False
        self.modules_path = os.path.join(self.folder, MODULES_NAME.format(seq=seq))
        if "jax" in sys.modules and not self.hooked:
            self._hook_lowering()
        self.watching = self.compile_hooked
        self.counter.start()
        self.cell_started = time.perf_counter()
        if shared or "jax" not in sys.modules:
            return
        # Programs the last cell dispatched may run on into this one; where its session recorded heavily, they
        # are waited for before this session starts (see _wait_in_flight).
        pending = _in_flight()
        if pending and (self.heavy or _flooding()) and not self._wait_in_flight(pending):
            self.skipped = (
                f"no trace: programs an earlier cell dispatched still ran after {IN_FLIGHT_WAIT_S:.0f} s "
                "(their events would have filled the session)"
            )
            return
        try:
            self.session = _session(hlo_protos=False)
        except Exception as exc:  # e.g. the notebook runs its own jax.profiler trace
            self.skipped = whole_words(f"{type(exc).__name__}: {exc}", 300)
            return
        trace_path = os.path.join(self.folder, TRACE_NAME.format(seq=seq))
        with self.split_lock:
            self.guard = _Guard(self.session, trace_path, compile_clock)
            if self.compiles_open:  # a thread of the notebook's compiles as the cell starts: not recorded either
                self._pause()

    def stop(self, seq: int, *, compiled: bool, timeline_trace: Any = None) -> dict[str, Any] | None:
        """Stop the cell's session; the result goes into the probe line as ``programs``."""
        with self.split_lock:  # a compile ending on another thread now starts no part
            session, self.session = self.session, None
            guard, self.guard = self.guard, None
            self.paused = None
        if "jax" not in sys.modules:
            return None
        result: dict[str, Any] = {"seq": seq}
        started = time.perf_counter()
        if session is not None or guard is not None:
            try:
                if guard is not None:
                    result["trace"] = guard.finish()
                elif session is not None:
                    result["trace"] = _write(self.folder, TRACE_NAME.format(seq=seq), session.stop())
                if guard is not None and guard.cut_after is not None:
                    result["window"] = {
                        "cut": True,
                        "reason": guard.reason,
                        "traced_s": guard.cut_after,
                        "grown_bytes": guard.grown,
                        "kernel_grown_bytes": guard.kernel_grown,
                        "wait_s": guard.window_wait,
                        "stop_s": guard.stop_s,
                        "compile_s": guard.compile_at_cut,
                    }
            except Exception as exc:
                result["trace_error"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
        elif self.shared and isinstance(timeline_trace, dict) and timeline_trace.get("path"):
            result["trace"] = timeline_trace["path"]
            result["shared"] = True
        elif self.trace_path is not None:  # the session was stopped for a compile, and no part followed
            result["trace"] = self.trace_path
        elif self.skipped:
            result["trace_error"] = self.skipped
        elif not self.shared:
            result["trace_error"] = "no trace: the notebook had not imported jax when the cell started"
        if self.split_error and "trace" in result:
            result["trace_note"] = self.split_error
        result["trace_stop_s"] = time.perf_counter() - started
        if self.split_s:
            result["split_s"] = self.split_s  # within the cell's code (the probe leaves it out of code_s)
        # A cut for its parts or their time says the cell compiled often, not that its programs recorded heavily.
        cut_heavy = guard is not None and guard.cut_after is not None and guard.reason not in ("parts", "split time")
        self.heavy = guard is not None and (cut_heavy or result["trace_stop_s"] >= HEAVY_STOP_S)
        waits = {"dispatch_wait_s": self.dispatch_wait_s, "in_flight_wait_s": self.start_wait_s}
        result.update((name, seconds) for name, seconds in waits.items() if seconds)
        executables, self.compiled = self.compiled, []
        if compiled or executables or self.flushed:
            started = time.perf_counter()
            if self.watching and (executables or self.flushed):
                try:
                    result["programs"] = _write_modules(
                        self.modules_path, executables, self.counter.program_of, append=self.flushed
                    )
                    self._target_of(executables)
                except Exception as exc:  # an executable of another kind: the session below reads them all
                    result["programs_note"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
            del executables
            if "programs" not in result:
                try:
                    hlo = _session(hlo_protos=True)
                    result["programs"] = _write(self.folder, PROGRAMS_NAME.format(seq=seq), hlo.stop())
                except Exception as exc:
                    result["programs_error"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
            result["programs_s"] = time.perf_counter() - started
        self.counter.report(result)
        self._count_trips(result)
        self._lowerings(seq, result)
        return result

    def _lowerings(self, seq: int, result: dict[str, Any]) -> None:
        """Write what the cell's new programs are for the TPU and the GPU into ``result``."""
        if self.target_lines or self.relower:
            self._write_target(seq, result)
        if self.lowered:
            started = time.perf_counter()
            try:
                result["gpu_lowering"] = _write(
                    self.folder, GPU_NAME.format(seq=seq), json.dumps(self._lower_for_gpu()).encode()
                )
            except Exception as exc:
                result["gpu_lowering_error"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
            result["gpu_lowering_s"] = time.perf_counter() - started
            self.lowered = []

    def _count_trips(self, result: dict[str, Any]) -> None:
        """Each sampled program's while loops' iterations per call (``loop_trips``: program id → [file, line,
        iterations] per while), counted by running its sampled calls again (_nbscope_trips) after the cell's time: the
        mean of the cell's first call and its latest 2**k-th (a solver called over parameters converges in as many
        steps as each needs). Its JAX
        events, compile and call are nbscope's: none reaches the cell's or the next cell's figures. A call costs
        about the cell's time over the program's calls in it: the kernel spends at most TRIPS_SHARE of its time so
        far (beyond TRIPS_FREE_S) on them. Not while programs still run (a call's time is then not known)."""
        counter, started = self.counter, time.perf_counter()
        samples, budget = dict(counter.samples), TRIPS_FREE_S + TRIPS_SHARE * (started - self.born) - self.trips_s
        counter.samples.clear()  # the same dict the hooks hold
        if not samples or _in_flight():
            result.update(
                {"loop_trips_error": "programs still ran as the cell ended: not run again"} if samples else {}
            )
            return
        held = (dict(counter.pending), set(counter.written), dict(counter.by_name))
        found: dict[str, list[Any]] = {}
        self.exporting, self.compiled, counter.sampling, kept = True, [], False, self.compiled
        try:
            for key, calls in samples.items():
                each = (started - self.cell_started) / max(1, counter.counts.get(key, 1))
                try:
                    counted = []
                    for args in calls:  # as many as the budget allows
                        if key not in counter.program_of or time.perf_counter() - started + each > budget:
                            break
                        if key not in self.counting:
                            function, where = _nbscope_trips.counting(counter.loopy[key])
                            self.counting[key] = (sys.modules["jax"].jit(function), where)
                        counted.append(self.counting[key][0](*args).tolist())
                    trips = [sum(n) / len(counted) for n in zip(*counted, strict=True)]
                    where = self.counting[key][1] if counted else []
                    found.update({str(counter.program_of[key]): [[*w, n] for w, n in zip(where, trips, strict=True)]})
                except Exception as exc:
                    result["loop_trips_error"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
        finally:
            self.exporting, self.compiled = False, kept
            # In place: the hooks hold these.
            counter.pending.clear()
            counter.pending.update(held[0])
            counter.by_name.clear()
            counter.by_name.update(held[2])
            counter.written.intersection_update(held[1])
            counter.counts.clear()
        self.trips_s += time.perf_counter() - started
        counter.sampling = self.trips_s < TRIPS_FREE_S + TRIPS_SHARE * (time.perf_counter() - self.born)
        result["loop_trips"], result["loop_trips_s"] = found, time.perf_counter() - started

    # ---- what the GPU would run -------------------------------------------------------------------
    def _hook_lowering(self) -> None:
        """Keep each program's jaxpr as JAX lowers it, to lower it for the GPU after the cell, and each
        executable JAX compiles, to write its HLO after the cell; count every execution (_Counter)."""
        self.hooked = True
        self._hook_compiling()
        self.counter.install()
        self.counter.count_reads()
        pxla = sys.modules.get("jax._src.interpreters.pxla")
        original = getattr(pxla, "lower_sharding_computation", None)
        if original is None or getattr(original, "_nbscope", False):
            return
        recorder = self

        def lower_sharding_computation(
            closed_jaxpr: Any, api_name: Any, fun_name: Any, *args: Any, **kwargs: Any
        ) -> Any:
            if not recorder.exporting:
                recorder._wait_for_dispatched()
                recorder.last_lowered = closed_jaxpr
                if len(recorder.lowered) < MAX_LOWERED:
                    recorder.lowered.append((str(fun_name), closed_jaxpr))
            return original(closed_jaxpr, api_name, fun_name, *args, **kwargs)

        lower_sharding_computation._nbscope = True  # type: ignore[attr-defined]
        pxla.lower_sharding_computation = lower_sharding_computation

    def _wait_for_dispatched(self) -> None:
        """While the session records, let the programs JAX dispatched earlier finish before the next one is
        lowered and compiled. XLA:CPU runs a dispatched program on its own threads while the caller goes on,
        so without this a program's events come while JAX compiles the next operation (the Kalman
        likelihood's eager scan: ~70 MB of events at up to 500 MB/s, all of it during the compile of the
        ``jnp.sum`` after it), and the guard, which must leave a compile's own growth out, cannot count them
        in time. Waited for here, outside JAX's trace, lower and compile timings (it is the programs' run
        time), the guard counts them as they come. At most DISPATCH_WAIT_S (a host callback that compiles
        must not wait for the program that called it), not once the session is cut, and only while the
        programs record events fast (the heaps rise at DISPATCH_EVENTS_BYTES_PER_S or more over
        DISPATCH_PROBE_S): waiting for programs that record few changes when the notebook's arrays are
        written and freed (jax_intro's eager ``f`` over 50 M values, each operation's 400 MB result: waited
        for, the cell peaked 200 to 400 MB higher than without --forecast)."""
        guard = self.guard
        if guard is None or guard.done.is_set():
            return
        me = threading.get_ident()
        started = time.perf_counter()
        guard.waiting.add(me)
        try:
            pending = _in_flight()
            if pending and _recording_fast(pending):
                _wait_ready(pending, started + DISPATCH_WAIT_S, guard.done)
            # Programs still running as the compile after this lowering begins: the session is not split for it
            # (see _compile_starts), else what they ran meanwhile would be in no part.
            self.running_at_lowering = any(not _ready(array) for array in pending)
        except Exception:  # the probe must never break the notebook's compile
            pass
        finally:
            guard.waiting.discard(me)
            self.dispatch_wait_s += time.perf_counter() - started

    def _wait_in_flight(self, pending: list[Any]) -> bool:
        """Before the cell's session starts, let programs an earlier cell dispatched finish, when the last
        cell's session recorded heavily (it was cut, or stopping it took HEAVY_STOP_S): JAX returns from a call
        before its program ends, and a session started meanwhile records that program's events, which come
        faster than any poll can cut them (QuantEcon's ar1_bayes: ``mcmc.run`` returns while its NUTS loop runs
        on; the next cell's session held 9 to 23 MB of its events at the guard's first poll, 17 to 40 ms in, and
        peaked 150 to 230 MB over the same cell without --forecast as they were stopped; a session started and
        stopped at once to look took 0.7 to 0.9 s to stop, and as much memory). Programs that record few are
        not waited for: waiting changes when the notebook's arrays are written and freed (jax_intro's
        ``jnp.cos`` after a ``jnp.linspace`` of 400 MB then peaked 400 MB higher than without --forecast). The
        cell would wait for them anyway where it uses their results: the wait is counted in its time (the probe
        starts the cell's clock before it) and recorded as ``in_flight_wait_s``. False when they still run after
        IN_FLIGHT_WAIT_S: the cell then has no trace, and says why."""
        started = time.perf_counter()
        try:
            return _wait_ready(pending, started + IN_FLIGHT_WAIT_S)
        finally:
            self.start_wait_s = time.perf_counter() - started

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
            lowered = recorder.last_lowered  # the program compiled now (``_resume`` takes it as the compile ends)
            recorder._compile_starts()
            try:
                executable = original(*args, **kwargs)
            finally:
                recorder._compile_ends()
            if recorder.watching:
                recorder.counter.written.add(id(executable))
                recorder.compiled.append(executable)
                recorder._keep_target(executable, args[1] if len(args) > 1 else kwargs.get("computation"), lowered)
                if len(recorder.compiled) >= HOLD_COMPILED:
                    recorder._timed(recorder._flush)
            return executable

        compile_or_get_cached._nbscope = True  # type: ignore[attr-defined]
        setattr(compiler, "compile_or_get_cached", compile_or_get_cached)  # noqa: B010 (a module found at run time)
        self.compile_hooked = True

    # ---- a compile is not recorded ---------------------------------------------------------------
    def _compile_starts(self) -> None:
        """XLA compiles now (or loads from its cache): stop the cell's session first and write what it recorded.
        A compile records tens of thousands of events (its passes: ~61k, ~50 MB of heap, for QuantEcon
        bayes_nonconj's NUTS sampler), which the guard must leave out of its judgement (the compiler's own memory
        grows as fast) and which the stop then copies several times over, just as the program compiled runs
        and records its own. None of them is read (``nbscope.collect.program`` reads programs' executions). A
        new session starts as the compile ends (_compile_ends); its events are appended to the same file (two
        serialised XSpaces, one after the other, parse as one with the planes of both). Not while programs
        dispatched earlier still run (they ran on as the program compiling now was lowered): what they record
        during the compile would be in no part (a loop's iterations lost), so the session records through it."""
        running, self.running_at_lowering = self.running_at_lowering, False
        with self.split_lock:
            self.compiles_open += 1
            if self.compiles_open == 1 and not running:
                self._timed(self._pause)

    def _compile_ends(self) -> None:
        with self.split_lock:
            self.compiles_open = max(0, self.compiles_open - 1)
            if self.compiles_open == 0 and self.paused is not None:
                self._timed(self._resume)

    def _flush(self) -> None:
        """Write the HLO of the executables held so far (never raises: what fails is read from a session instead)."""
        held, self.compiled = self.compiled, []
        try:
            _write_modules(self.modules_path, held, self.counter.program_of, append=self.flushed)
            self.flushed = True
            self._target_of(held)
        except Exception:
            self.compiled = held

    def _timed(self, step: Callable[[], None]) -> None:
        """Run a step of the split inside a compile's timing: its time is the cell's ``split_s``, and given back by
        the compile's event (take_split_s)."""
        started = time.perf_counter()
        step()
        seconds = time.perf_counter() - started
        self.split_s += seconds
        self.split_unclaimed_s += seconds

    def take_split_s(self) -> float:
        """The split's time within the compile JAX just timed (its backend compile event), given back once: the
        probe leaves it out of the cell's compile figures (it is nbscope's, recorded as ``split_s``)."""
        with self.split_lock:
            seconds, self.split_unclaimed_s = self.split_unclaimed_s, 0.0
        return seconds

    def _pause(self) -> None:
        """Stop the recording part (under split_lock; never raises)."""
        guard = self.guard
        if guard is None or guard.done.is_set() or self.exporting:  # a cut session records nothing more
            return
        self.parts += 1
        if self.parts >= MAX_PARTS:  # the cell's trace ends at this compile, as a cut: no part follows
            guard.note_cut(time.perf_counter(), guard.grown, "parts", None)
        elif self.split_s >= _max_split_s():
            guard.note_cut(time.perf_counter(), guard.grown, "split time", None)
        try:
            self.trace_path = guard.finish()
        except Exception as exc:  # the part's events are lost: the trace says so
            self.split_error = whole_words(f"a part of the trace was lost: {type(exc).__name__}: {exc}", 300)
        self.session, self.guard, self.paused = None, None, guard

    def _resume(self) -> None:
        """Start the next part as the compile ends (under split_lock; never raises)."""
        before, self.paused = self.paused, None
        if before is None:
            return
        if before.cut_after is not None:  # cut as the compile began: what ran after stays extrapolated from it
            self.guard = before
            return
        try:
            jaxpr, self.last_lowered = self.last_lowered, None
            loops = jaxpr is not None and _has_equation(getattr(jaxpr, "jaxpr", jaxpr), _small_loop)
            self.session = _session(hlo_protos=False)
            self.guard = _Guard(self.session, before.path, before.compile_clock, after=before, loops=loops)
        except Exception as exc:
            self.session = None
            self.split_error = whole_words(f"no trace after a compile: {type(exc).__name__}: {exc}", 300)

    # ---- what the TPU would compile ---------------------------------------------------------------
    def _keep_target(self, executable: Any, module: Any, closed: Any) -> None:
        """Keep what the TPU would compile of a program just compiled: its CPU module's bytecode, or its jaxpr
        (``closed``) where the TPU lowers it otherwise (never raises)."""
        if not self.keep_target:
            return
        try:
            if closed is not None and _has_equation(closed.jaxpr, _target_dependent):
                self.target[id(executable)] = closed
            elif module is not None:
                buffer = io.BytesIO()
                module.operation.write_bytecode(file=buffer)
                self.target[id(executable)] = buffer.getvalue()
        except Exception:  # a module of another kind: this program is forecast from its classes
            return

    def _target_of(self, executables: list[Any]) -> None:
        """Turn the kept modules of executables whose program ids are now known into the cell's target lines."""
        for executable in executables:
            kept = self.target.pop(id(executable), None)
            program = self.counter.program_of.get(id(executable))
            if kept is None or program is None:
                continue
            if isinstance(kept, bytes):
                self.target_lines.append(_target_line(program, "cpu module", kept))
            elif len(self.relower) < MAX_LOWERED:
                self.relower.append((program, kept))

    def _write_target(self, seq: int, result: dict[str, Any]) -> None:
        """Write the cell's target modules into ``result`` (``target``, its time, or why it failed)."""
        started = time.perf_counter()
        try:
            result["target"] = self._target_file(seq)
        except Exception as exc:
            result["target_error"] = whole_words(f"{type(exc).__name__}: {exc}", 300)
        result["target_s"] = time.perf_counter() - started

    def _target_file(self, seq: int) -> str:
        """The cell's target modules, those lowered again for the TPU included (a failed lowering keeps its
        error)."""
        import jax
        from jax._src import core

        self.exporting = True
        try:
            for program, closed in self.relower:
                try:
                    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
                    traced = jax.jit(core.jaxpr_as_fun(closed)).trace(*avals)
                    buffer = io.BytesIO()
                    traced.lower(lowering_platforms=("tpu",)).compiler_ir().operation.write_bytecode(file=buffer)
                    self.target_lines.append(_target_line(program, "lowered for tpu", buffer.getvalue()))
                except Exception as exc:
                    error = whole_words(f"{type(exc).__name__}: {exc}", 600)
                    self.target_lines.append(json.dumps({"program": program, "lowering_error": error}))
        finally:
            self.exporting = False
        lines, self.target_lines, self.relower = self.target_lines, [], []
        return _write(self.folder, TARGET_NAME.format(seq=seq), "".join(line + "\n" for line in lines).encode())

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
                if not _has_equation(closed.jaxpr, _gpu_relevant):
                    entry["skipped"], entry["source"] = "no loop, branch or library primitive", "not lowered"
                    found.append(entry)
                    continue
                try:
                    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
                    entry.update(_summarise(_cuda_module(jax, jax.jit(core.jaxpr_as_fun(closed)), avals, entry)))
                except Exception as exc:
                    entry["error"] = whole_words(f"{type(exc).__name__}: {exc}", 200)
                entry["seconds"] = time.perf_counter() - started
                found.append(entry)
        finally:
            self.exporting = False
        return found


class _Counter:
    """Every execution of every compiled program, counted with its program at no memory per event: the trace,
    where it is kept, adds timings, not existence. JAX runs a program either in Python (its first call, and
    calls that cannot take the C++ fast path), in ``pjit._pjit_call_impl_python``, wrapped here to count the
    executable it ran, and to learn which executable each jitted function's fast path will run (by the
    function and, where it has several, the shapes of its arguments); or in C++, whose fast path calls JAX's
    post-hook (``api._post_hook_state``, what ``jax_debug_nans`` uses) after each execution: ~0.4-1.2 µs a
    call against ~3.7 µs for a small jitted call (jax 0.10.2 on this CPU). Counts are keyed by the
    executable; its program id is learnt as its HLO is written (``_write_modules``)."""

    def __init__(self) -> None:
        self.counts: defaultdict[int, int] = defaultdict(int)  # id(executable) → executions in the cell
        self.unresolved: defaultdict[str, int] = defaultdict(int)  # fast-path calls whose executable is not known
        self.fast: dict[int, dict[Any, int]] = {}  # id(function) → its argument signature → id(executable)
        self.program_of: dict[int, int] = {}  # id(executable) → program id
        self.pending: dict[int, Any] = {}  # executables run in the cell whose program id is not known yet
        self.written: set[int] = set()  # ids of the cell's executables whose HLO the probe writes (not pending)
        self.by_name: dict[str, int] = {}  # a program's name → id(its latest executable), for other jitted calls
        self.by_jaxpr: dict[int, int] = {}  # id(a jaxpr JAX ran eagerly) → id(its executable)
        self.single: dict[int, tuple[Any, int]] = {}  # id(jitted function) → a weak reference to it, id(its executable)
        self.hook: Any = None
        self.state: Any = None  # JAX's post-hook setting (``api._post_hook_state``)
        self.config: Any = None  # ``jax._src.config``
        self.check: Any = None  # JAX's NaN check (``api._nan_check_posthook``)
        self.previous: Any = None  # the post-hook in place before ours (jax_debug_nans'), still called
        self.leaves: Any = None
        # Programs with a ``while`` (id(executable) → its closed jaxpr; None: none), and the flat arguments of the
        # first call in the cell of each, run again after the cell to count its loops' iterations (_nbscope_trips).
        self.loopy: dict[int, Any] = {}
        self.samples: dict[int, list[tuple[Any, ...]]] = {}  # the first call's and the latest 2**k-th's
        self.wanted: set[int] = set()  # programs with a while, sampled in the cell
        # Host reads (a value fetched, a block on a result), and per executable how many there had been at its last
        # call: a call followed by one before the program's next call (or the cell's end) waited for its result.
        self.reads, self.reading = 0, False
        self.read_at: dict[int, int] = {}
        self.synced: defaultdict[int, int] = defaultdict(int)
        self.sampling = True  # False once the kernel's counting has taken its share (Programs._count_trips)

    def install(self) -> None:
        pjit, api, tree, self.config = (
            sys.modules.get(name) for name in ("jax._src.pjit", "jax._src.api", "jax._src.tree_util", "jax._src.config")
        )
        state = getattr(api, "_post_hook_state", None)
        self.check = getattr(api, "_nan_check_posthook", None)
        run_python = getattr(pjit, "_run_python_pjit", None)
        call_python = getattr(pjit, "_pjit_call_impl_python", None)
        if state is None or run_python is None or call_python is None or tree is None or self.hook is not None:
            return
        counts, fast, unresolved, by_name, counter = self.counts, self.fast, self.unresolved, self.by_name, self
        single, by_jaxpr, wanted = self.single, self.by_jaxpr, self.wanted
        self.leaves = tree.tree_leaves

        def _pjit_call_impl_python(*args: object, **kwargs: object) -> Any:
            result = call_python(*args, **kwargs)
            executable = getattr(result[1], "xla_executable", None)
            if executable is None:  # another kind of executable: not counted, and the cell says so
                unresolved["?"] += 1
                return result
            key = by_name[str(kwargs.get("name", "?"))] = id(executable)
            if "jaxpr" in kwargs:
                by_jaxpr[id(kwargs["jaxpr"])] = key
            counter.note(key)
            counter.ran(key, executable, args, kwargs)
            return result

        def _run_python_pjit(p: object, args_flat: object, fun: object, args: object, kwargs: object) -> Any:
            result = run_python(p, args_flat, fun, args, kwargs)
            executable = result[5]
            if executable is not None:
                try:
                    signature = counter.signature(args, kwargs)
                    fast.setdefault(id(fun), {})[signature] = id(executable.xla_executable)
                    single.clear()  # a function may have more executables now
                except Exception:  # the probe must never break the notebook's call
                    pass
            return result

        def resolve(function: object, args: object, kwargs: object) -> int | None:
            wrapped = id(getattr(function, "__wrapped__", None))
            known = fast.get(wrapped)
            if known and len(known) == 1:
                key = next(iter(known.values()))
                try:  # a weak reference: the function (and what it closes over) is not kept alive here
                    single[id(function)] = (weakref.ref(function), key)
                except TypeError:
                    pass
                return key
            try:  # several: by its arguments; none: a jitted call JAX made itself (``_pjit_call_impl``), by its jaxpr
                if known:
                    return known[counter.signature(args, kwargs)]
                miss = getattr(function, "_cache_miss", None)
                names = miss.__code__.co_freevars if miss is not None else ()
                if "jaxpr" in names:
                    return by_jaxpr[id(miss.__closure__[names.index("jaxpr")].cell_contents)]  # type: ignore[union-attr]
                return by_name[getattr(function, "__name__", "?")]
            except Exception:
                return None

        def hook(function: object, args: object, kwargs: object, output: object) -> None:
            try:
                entry = single[id(function)]
                key = entry[1] if entry[0]() is function else resolve(function, args, kwargs)
            except KeyError:
                key = resolve(function, args, kwargs)
            if key is not None:
                counter.note(key)
                if key in wanted and counts[key] & (counts[key] - 1) == 0:  # its 1st, 2nd, 4th, 8th... call
                    counter.sample(key, (args, kwargs))
            else:
                unresolved[getattr(function, "__name__", "?")] += 1
            if counter.previous is not None:
                counter.previous(function, args, kwargs, output)

        self.hook, self.state = hook, state
        self._keep_in_place(hook)
        _pjit_call_impl_python._nbscope = _run_python_pjit._nbscope = True  # type: ignore[attr-defined]
        setattr(pjit, "_pjit_call_impl_python", _pjit_call_impl_python)  # noqa: B010 (a module found at run time)
        setattr(pjit, "_run_python_pjit", _run_python_pjit)  # noqa: B010

    def _keep_in_place(self, hook: Callable[..., None]) -> None:
        """JAX resets the post-hook whenever ``debug_nans`` or ``debug_infs`` changes, globally or on a thread, and
        its own operations set them locally while they trace (``with config.debug_nans(False)`` in its linear
        algebra and reductions), which left the thread's hook None for the rest of the cell: JAX's updates are
        replaced by ones that keep this hook in place, calling its NaN check where those options ask for it."""
        config, check, state = self.config, self.check, self.state
        options: list[Any] = [getattr(config, name, None) for name in ("debug_nans", "debug_infs")]
        if config is None or check is None or any(not hasattr(o, "_update_thread_local_hook") for o in options):
            return
        counter = self

        def checked(function: object, args: object, kwargs: object, output: object) -> None:
            previous, counter.previous = counter.previous, None
            try:
                hook(function, args, kwargs, output)
            finally:
                counter.previous = previous
            check(function, args, kwargs, output)

        def update_global(_: object) -> None:
            checking = config._read("jax_debug_nans") or config._read("jax_debug_infs")
            counter.previous = check if checking else None
            state.set_global(hook)

        def update_local(_: object) -> None:
            checking = any(option.get_local() is True for option in options)
            state.set_local(checked if checking else hook)

        for option in options:
            option._update_thread_local_hook, option._update_global_hook = update_local, update_global

    def note(self, key: int) -> None:
        """A call of the executable ``key``: counted, and its previous call synchronous if the host read since."""
        self.counts[key] += 1
        if key in self.read_at and self.read_at[key] != self.reads:
            self.synced[key] += 1
        self.read_at[key] = self.reads

    def count_reads(self) -> None:
        """Count the host's reads of arrays: ``ArrayImpl._value`` (float(), bool(), print, .tolist()) and
        ``block_until_ready`` (np.asarray's C++ path is not seen)."""
        kind = getattr(sys.modules["jax._src.array"], "ArrayImpl", None) if "jax._src.array" in sys.modules else None
        found = dict(getattr(kind, "__dict__", {}))
        value, block = (found.get(name) for name in ("_value", "block_until_ready"))
        if not isinstance(value, property) or value.fget is None or block is None or self.reading:
            return
        self.reading = True
        counter, fget = self, value.fget

        def read(array: object) -> object:
            counter.reads += 1
            return fget(array)

        def block_until_ready(array: object) -> object:
            counter.reads += 1
            return block(array)

        setattr(kind, "_value", property(read))  # noqa: B010 (a class found at run time)
        setattr(kind, "block_until_ready", block_until_ready)  # noqa: B010

    def ran(self, key: int, executable: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        """A program ran in Python (``_pjit_call_impl_python``): whether it has a while (its first run), its flat
        arguments kept if so (the first call in the cell), and its executable if its program id is not known yet."""
        if key not in self.loopy and "jaxpr" in kwargs:
            self.loopy[key] = kwargs["jaxpr"] if _nbscope_trips.has_while(kwargs["jaxpr"]) else None
            if self.loopy[key] is not None and self.sampling:
                self.wanted.add(key)
        if key in self.wanted and self.counts[key] & (self.counts[key] - 1) == 0:
            self.sample(key, args)
        if key not in self.program_of and key not in self.written:
            self.pending[key] = executable  # compiled before the compile hook: its id read at the cell's end

    def sample(self, key: int, args: object) -> None:
        """Keep a call's arguments, flat, where they are the program's (no static argument among them)."""
        try:
            leaves = self.leaves(args)
            avals = self.loopy[key].in_avals
            if len(leaves) == len(avals) and all(
                getattr(x, "shape", ()) == a.shape for x, a in zip(leaves, avals, strict=True)
            ):
                kept = self.samples.setdefault(key, [])
                kept[min(len(kept), 1) :] = [tuple(leaves)]
        except Exception:  # the probe must never break the notebook's call
            pass

    def signature(self, args: object, kwargs: object) -> tuple[Any, ...]:
        """The arguments' shapes and dtypes (other leaves by type): which of a function's executables runs."""
        return tuple(
            (leaf.shape, leaf.dtype) if hasattr(leaf, "dtype") and hasattr(leaf, "shape") else type(leaf)
            for leaf in self.leaves((args, kwargs))
        )

    def attach(self) -> None:
        """JAX was just imported (in the middle of a cell): count from now on."""
        self.install()
        self.count_reads()
        self.start()

    def start(self) -> None:
        """A cell starts: counts from zero, with the hook in place (a notebook's ``jax_debug_nans`` replaces it)."""
        self.counts.clear()
        self.read_at.clear()
        self.synced.clear()
        self.samples.clear()
        self.wanted.clear()  # the same set the hooks hold
        self.wanted.update(key for key, jaxpr in self.loopy.items() if jaxpr is not None and self.sampling)
        self.unresolved.clear()
        if self.hook is None:
            return
        try:
            current = self.state.get_global()
            if current is not self.hook:
                self.previous = current
                self.state.set_global(self.hook)
            # JAX sets the thread's own value whenever ``debug_nans`` is set locally (its export does), to None
            # when off, which hides the global hook on that thread: the cell's thread gets it too.
            if self.state.value is not self.hook:
                self.state.set_local(self.hook)
        except Exception:
            pass

    def report(self, result: dict[str, Any]) -> None:
        """The cell's counts into the probe's line: ``counts`` by program id, ``uncounted`` executions whose
        program is not known, and ``counts_note`` when the hook was replaced during the cell."""
        if self.hook is None:
            return
        pending, self.pending = self.pending, {}
        self.written.clear()
        for key, executable in pending.items():  # compiled before the compile hook was in place
            if key not in self.program_of:
                try:
                    module = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
                    if (program := _module_id(module)) is not None:
                        self.program_of[key] = program
                except Exception:
                    pass
        del pending
        by_program: defaultdict[str, int] = defaultdict(int)
        unknown = sum(self.unresolved.values())
        for key, runs in self.counts.items():
            if key in self.program_of:
                by_program[str(self.program_of[key])] += runs
            else:
                unknown += runs
        result["counts"] = dict(by_program)
        for key, at in self.read_at.items():  # the cell's last call, read after it (or at its end: %%time, print)
            self.synced[key] += at != self.reads
        synced = {str(self.program_of[k]): n for k, n in self.synced.items() if n and k in self.program_of}
        result.update({"synced": synced} if synced else {})
        if unknown:
            result["uncounted"] = unknown
        try:
            if self.state.value is not self.hook:
                result["counts_note"] = "JAX's post-hook was replaced during the cell: fast-path calls not counted"
        except Exception:
            pass


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
# is kept (``wait_s``), and the count is extrapolated over the time it did not wait. (glibc's mallinfo2 sees
# every thread's heap but walks it, ~0.5 ms, with its locks held: polled every 10 ms, it slowed the traced
# calls by a third; it serves the hard cap, read every HEAP_EVERY polls.) Where the break cannot be read
# (the cell's thread is not the main one, or no sbrk), the kernel's growth stands in, EARLY_CAP_BYTES.
EARLY_HEAP_BYTES = 2 * 2**20
# Arrays up to 32 MB can come from the heap too (glibc raises its mmap threshold after freeing a mmapped
# block): a poll's growth larger than this is an array, not events (a million-call cell's events grow the
# heap by ~0.5 MB per 2.5 ms poll), and counts toward neither the early budget nor its "rising at every poll".
EARLY_JUMP_BYTES = 4 * 2**20
EARLY_CAP_BYTES = 40 * 2**20
HEAP_EVERY = 25
EARLY_CAP_AFTER_S = 0.01
EARLY_POLLS = 4
BUSY_SHARE = 0.15  # the cell's thread on the CPU at least this share of the last polls' time: it makes calls
POLL_S = 0.01
EARLY_POLL_S = 0.0025  # the first EARLY_FAST_S: a cell of small calls is cut within ~1,000 calls
EARLY_FAST_S = 0.1
FAST_AFTER_COMPILE_S = 0.1
# A part started as a loop's compile ended first looks at the program's events (_Guard._look) for LOOK_WINDOW_S: each
# look is stopped when the kernel grew LOOK_GROWTH_BYTES or after its length, and the part is cut when its events
# came to FLOOD_BYTES_PER_S or more once serialised (QuantEcon bayes_nonconj's NUTS sampler: ~10 MB/s with
# the guard starved of CPU; a loop that records none: ~0.2 MB/s, the empty session's own bytes).
LOOK_POLL_S = 0.001
LOOK_CARRY_BYTES = 2**20  # looked at only after the compile of a loop carrying at most this much (_small_loop)
LOOK_FIRST_S = 0.005  # each look after it twice as long: few stops cut through a long kernel (see _recovered)
LOOKS = 6
LOOK_WINDOW_S = 0.2
LOOK_GROWTH_BYTES = 4 * 2**20
LOOK_FLOOD_MIN_BYTES = 64 * 2**10  # ~1,000 events: an empty session alone is 1-3 kB, a look as short as 1 ms
# The kernel-wide bound (issue 34): the rules above watch the cell's own thread, but the session records
# every thread's calls (a sampler's worker, a thread pool, XLA's own workers) into heaps the break does not
# show, and they fire only while the cell's thread is busy. So every poll also reads the kernel's resident
# memory (/proc/self/statm, ~10 µs), and the session is cut, whatever the cell's thread does, once the
# kernel has grown steadily by MEMORY_BUDGET_BYTES since it started. Stopping a session peaks at about 5 times
# what its events hold (measured, jax 0.10.2: a scan with LAPACK calls in its body, 172 MiB of events, a stop
# peaking 854 MiB over the cell's start; 882 MiB, 4.4 GB), and the growth counted here falls short of the
# events on such scans (a Kalman filter's cells cut at 32 MiB counted still added +246 to +419 MB; +44 to
# +191 MB at 8 MiB). The default is 16 MiB (2026-12-06): at 32 MiB, cuts on real lectures held 28–38 MB of
# heap and their stops peaked 4.7–7.8 times that over the cell's start (QuantEcon aiyagari: +160 to +220 MB;
# bayes_nonconj's NUTS: +244 MB, +201 over the cell without). 8 MiB also cut tests/files/forecast_honest.md's
# 50 calls of a loop and undercounted them (450 iterations of 1,000): a smaller budget costs loop counts
# observed, which a longer trace or a budget passed in gives back. What the
# notebook itself allocates counts too unless it comes as a jump (a poll's growth faster than
# MEMORY_JUMP_BYTES_PER_S: an array's pages written at memory speed, not events recorded call by call) or
# while a thread is inside JAX's tracing, lowering or compiling (XLA grows the kernel by ~100 MB compiling
# a program with a scan and an LU, and its events come after). Once that growth passes the budget, glibc's
# heaps (mallinfo2, every thread's, mmapped arrays apart) are read, where they can be, and their growth
# since the start (less what grew while JAX compiled) stands for it instead, so a cell whose results fill memory keeps its trace; a cell
# filling malloc's heap itself (small arrays, Python objects) is cut early: that costs forecast precision (its counts are extrapolated,
# and the record says why), never the cell. NBSCOPE_PROBE_MEMORY_BUDGET (bytes) sets another budget.
MEMORY_BUDGET_BYTES = 16 * 2**20
# Half the budget (8 MiB by default) when, since a compile's end, the heaps rose at this rate or more at two readings in
# a row (HEAP_RATE_S apart at least; the first as the part after the compile starts): the program
# just compiled recording events, whose stop peaks at about 5 times what they hold (benchmarks/lectures/
# kalman_x64.md: up to ~1 GB/s of events right after a compile, first into the memory the compiler freed, where
# the kernel's resident size does not show them). The heaps are read every HEAP_RATE_S for HEAP_WATCH_S after
# each compile of a program with a small loop (_small_loop). One rise is as likely a result in the heap (a
# 1000x1000 float64 matmul's 8 MB); without a compile a heap swinging with reused arrays reads alike
# (forecast_honest.md's loop of 16 MB arrays).
EVENTS_RATE_BYTES_PER_S = 4 * 2**20
HEAP_RATE_S = 0.02
HEAP_WATCH_S = 0.5
MEMORY_JUMP_BYTES_PER_S = 1.5e9
MEMORY_JUMP_MIN_BYTES = 16 * 2**20  # a poll's growth below this is never an array's jump
# A kernel that grows by this much in one traced cell is cut whatever the growth looked like: jumps are a
# guess about what grew, and the session's share of memory this large must not go unchecked.
MEMORY_TOTAL_BYTES = 1024 * 2**20
_COMPILING = ("compile", "lower", "trace_to_jaxpr", "_create_pjit_jaxpr")


# glibc's struct mallinfo2 (2.33+): uordblks is the heap's bytes in use over all arenas, mmapped blocks apart.
_MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


_LIBC: dict[str, Any] = {}  # mallinfo2 and sbrk, resolved once per kernel (None where missing)


def _libc(name: str) -> Any:
    """glibc's ``mallinfo2`` (bytes in use over every thread's heap), ``sbrk`` (the program break) or
    ``malloc_trim`` (freed heap back to the system) as a function of no argument, looked up on first use; None
    where the C library has none."""
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


def _max_split_s() -> float:
    try:
        return max(0.0, float(os.getenv("NBSCOPE_PROBE_MAX_SPLIT_S") or MAX_SPLIT_S))
    except ValueError:
        return MAX_SPLIT_S


def _memory_budget() -> int:
    try:
        return max(1, int(os.environ.get("NBSCOPE_PROBE_MEMORY_BUDGET") or MEMORY_BUDGET_BYTES))
    except ValueError:
        return MEMORY_BUDGET_BYTES


def _rss() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _in_jax_compile(frame: Any) -> bool:
    depth = 0
    while frame is not None and depth < 200:
        code = frame.f_code
        if "jax" in code.co_filename and any(word in code.co_name for word in _COMPILING):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


class _Guard:
    """Stops a profiler session from a thread of its own when it grows too big (stop releases the GIL)."""

    def __init__(
        self,
        session: Any,
        path: str,
        compile_clock: Callable[[], float] | None = None,
        *,
        after: _Guard | None = None,
        loops: bool = False,
    ) -> None:
        """``after``: the guard of the cell's part before, stopped for a compile that just ended: this part's
        events are appended to its file, and the window a cut gives is the cell's, from its first part.
        ``loops``: the program that compile made has a loop over small values (see _look)."""
        self.session = session
        self.after_compile = after is not None
        self.loops = loops
        self.compile_clock = compile_clock
        self.compile_at_cut: float | None = None  # JAX's compile seconds in the cell when the session was cut
        self.path = path  # a cut session's events are written here at once: holding them would keep them in memory
        # The cell's thread: the first part's guard is made in pre_run_cell, a later one where a compile ended.
        self.native_id: int = after.native_id if after is not None else threading.get_native_id()
        self.thread_id: int = after.thread_id if after is not None else threading.get_ident()
        self.started = time.perf_counter()
        self.cell_started: float = after.cell_started if after is not None else self.started
        self.waited: float | None = after.waited if after is not None else _schedstat(self.native_id, WAITING)
        self.append = after is not None
        self.window_wait: float | None = None
        self.base = _rss()
        # The cell's own heap, for the early rule: its events go to the main thread's heap, whose top is the
        # break, only when the cell runs on the main thread.
        on_main = self.thread_id == threading.main_thread().ident
        self.brk = _libc("sbrk") if self.base is not None and on_main else None
        self.brk_base = self.brk() if self.brk is not None else None
        self.written: str | None = None
        self.error: BaseException | None = None
        self.cut_after: float | None = None
        self.reason: str | None = None  # which rule cut the session ("memory budget": the kernel-wide one)
        self.kernel_grown: int | None = None  # the kernel's resident growth since the session started, at the cut
        self.memory_budget = _memory_budget()
        # The budget once the heaps rise after a compile: see EVENTS_RATE_BYTES_PER_S.
        self.events_budget = max(1, self.memory_budget // 2)
        self.stop_s: float | None = None  # how long stopping the cut session took (the cell ran on meanwhile)
        self.grown = 0
        self.done = threading.Event()
        self.wake = threading.Event()  # set by finish(): the guard's thread ends at once, not at its next poll
        self.waiting: set[int] = set()  # threads waiting for dispatched programs before lowering: not compiling
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        if self.base is not None:  # no /proc: no guard (macOS, Windows)
            self.thread = threading.Thread(target=self._watch, name="nbscope-trace-guard", daemon=True)
            self.thread.start()

    def _poll_s(self, clock: float, fast_until: float) -> float:
        """The wait before the next poll: short at first, and from a compile's end, or while the cell's
        thread waits for dispatched programs, for FAST_AFTER_COMPILE_S: the program just compiled runs then, and
        its events can come at up to ~1 GB/s (the Kalman filter's ``jit(grad)``: 21 MB in one 21 ms poll)."""
        elapsed = clock - self.started
        if elapsed < EARLY_FAST_S or clock < fast_until or self.waiting:
            return EARLY_POLL_S
        return POLL_S if elapsed < MIN_TRACE_S else 2 * POLL_S

    def _compiling(self) -> bool:
        """The cell's thread is inside JAX's tracing, lowering or compiling: its memory grows steadily
        then, and what it compiles runs after, so the session must not be cut."""
        return self.thread_id not in self.waiting and _in_jax_compile(sys._current_frames().get(self.thread_id))

    def _compiling_anywhere(self) -> bool:
        """Any thread but the guard's is inside JAX's tracing, lowering or compiling (a worker thread
        compiles too): the kernel's growth then is the compiler's, not the session's."""
        own = threading.get_ident()
        return any(
            _in_jax_compile(frame)
            for ident, frame in sys._current_frames().items()
            if ident != own and ident not in self.waiting
        )

    def _look(self) -> bool:
        """A program with a loop, compiled just now, runs now, and can record events at hundreds of MB/s (QuantEcon
        bayes_nonconj's NUTS sampler: 370 MB/s). A stop while they come costs ~15x what it stops (20 MB: a 1 s stop,
        +340 MB), and reading the heaps then takes 50-100 ms, which blinds the guard's rules; the kernel's resident
        growth cannot tell them from the loop's result written as it runs (the seed lecture's ``qm_jax``, cut for
        it, was forecast as ten calls). So the part's first events are looked at, in up to LOOKS looks, the first
        LOOK_FIRST_S long and each next twice as long, each ended early once the kernel grew LOOK_GROWTH_BYTES,
        within LOOK_WINDOW_S (the program may start some milliseconds after its compile; each stop cuts
        through the kernels running then, whose events are lost but whose end markers are not, see
        ``nbscope.collect.program``): the part is cut at the first look whose events came to
        FLOOD_BYTES_PER_S or more once serialised; else a new session records on. Whether the part ended
        (cut, or the cell's end came first)."""
        length = LOOK_FIRST_S
        for _ in range(LOOKS):
            if time.perf_counter() - self.started >= LOOK_WINDOW_S:
                break
            looked, base = time.perf_counter(), _rss()
            length, longest = 2 * length, length
            while not self.wake.wait(LOOK_POLL_S):
                now = _rss()
                if time.perf_counter() - looked >= longest or (
                    now is not None and base is not None and now - base >= LOOK_GROWTH_BYTES
                ):
                    break
            with self.lock:
                if self.done.is_set():
                    return True
                if self._looked_at_flood(looked, base):
                    return True
        return False

    def _looked_at_flood(self, looked: float, base: int | None) -> bool:
        """Stop the session of one look (under the lock) and write its events; cut the part there when they came
        fast, else start the next session. Whether the part ended."""
        stopping = time.perf_counter()
        try:
            data = self.session.stop()
            self.written = _write_to(self.path, data, append=self.append)
            self.append = True
        except BaseException as exc:  # handed to finish(), never raised in this thread
            self.error = exc
            self.done.set()
            return True
        reason = "events flood"
        if len(data) < LOOK_FLOOD_MIN_BYTES or len(data) / max(stopping - looked, LOOK_POLL_S) < FLOOD_BYTES_PER_S:
            try:
                self.session = _session(hlo_protos=False)
                return False
            except Exception:  # the looks' events are written: the trace ends there, as if cut
                reason = "no session after a look"
        now = _rss()
        self.note_cut(
            stopping,
            now - base if now is not None and base is not None else 0,
            reason,
            now - self.base if now is not None and self.base is not None else None,
        )
        self.stop_s = time.perf_counter() - stopping
        self.done.set()
        return True

    def _watch(self) -> None:
        if self.after_compile and self.loops and self._look():
            return
        # The session's events are what is bounded: where the break can be read, the cell's own heap is judged
        # (a cell's large arrays are not in it), else the kernel's memory; the hard cap judges every heap.
        read, base = (self.brk, self.brk_base) if self.brk_base is not None else (_rss, self.base)
        early_cap = EARLY_HEAP_BYTES if self.brk_base is not None else EARLY_CAP_BYTES
        # Every thread's heap, for the hard cap: read here, not on the cell's thread (a walk of the heap).
        heap = _libc("mallinfo2")
        whole, whole_base = (heap, heap()) if heap is not None else (_rss, self.base)
        whole_now = whole_base
        kernel_last, kernel_grown, kernel_steady = self.base, 0, 0  # the kernel-wide bound's readings
        # The heaps' growth the bound judges leaves out what grew while JAX compiled (executables stay in
        # the heap): read as a compile is first seen and once it is over.
        heap_base, heap_at_compile = whole_base, None
        # The last two readings of the heaps' growth (time, bytes, the kernel's resident bytes), to tell events
        # being recorded from a level.
        heap_read: list[tuple[float, int, int]] = []
        compiled_at = -1.0  # when the last compile was seen over (its reading of the heaps starts the events tier)
        polled = self.started
        recent: list[int] = []
        events_grown = 0  # the break's moves in polls that moved it by less than an array's jump
        compiled: list[bool] = []  # whether each recent poll found the cell's thread compiling
        cpu: list[tuple[float, float | None]] = []
        polls = 0
        fast_until = 0.0  # polled every EARLY_POLL_S until then (a compile just ended)
        heap_watch_until = 0.0  # the heaps read every HEAP_RATE_S until then (a compile just ended)
        if self.after_compile and whole is heap and whole_base is not None:
            # A part started as a compile ended: the program it made runs now, and its events can come at up to
            # ~1 GB/s (the Kalman filter's ``jit(grad)``: 21 MB in one 21 ms poll), first into the memory the
            # compiler freed, which stays resident (the Kalman vmap: 40 MB while the kernel's did not move).
            compiled_at, heap_read = self.started, [(self.started, 0, self.base or 0)]
            fast_until = self.started + FAST_AFTER_COMPILE_S
            if self.loops:
                # Only a program with a loop over small values records that fast (see _look), and reading the
                # heaps takes their locks: read so after every eager compile, they kept the notebook's freed
                # arrays resident (benchmarks/parts_heap.py: ~800 MB more at the peak over 1,200 compiles).
                heap_watch_until = self.started + HEAP_WATCH_S
        was_compiling = False
        while True:
            self.wake.wait(self._poll_s(time.perf_counter(), fast_until))
            self.wake.clear()
            if self.done.is_set():
                return
            clock = time.perf_counter()
            elapsed, interval, polled = clock - self.started, clock - polled, clock
            kernel = _rss() if read is not _rss else None
            now = read() if read is not None else None
            kernel = now if read is _rss else kernel
            if kernel is not None and kernel_last is not None and self.base is not None:
                compiling = self._compiling_anywhere()
                step, kernel_last = kernel - kernel_last, kernel
                jump = max(MEMORY_JUMP_MIN_BYTES, MEMORY_JUMP_BYTES_PER_S * interval)
                counted = step if 0 < step <= jump and not compiling else 0
                kernel_steady += counted
                # What one more poll at this poll's rate adds before a stop could begin: events are judged
                # where the session will be by then (a flood of 500 MB/s adds 10 MB a poll, and the stop holds
                # about five times what it stops). A single step too, though it may be a result written (see
                # docs/forecast.md: waiting for a second step let NUTS and Kalman floods past the bound).
                ahead = counted
                if was_compiling and not compiling:
                    fast_until = clock + FAST_AFTER_COMPILE_S
                was_compiling = compiling
                if heap is not None and heap_base is not None and compiling != (heap_at_compile is not None):
                    if compiling:
                        heap_at_compile = heap()
                    else:
                        # What the heaps grew by while JAX traced, lowered and compiled stays (executables,
                        # caches) and is not the session's. Programs dispatched earlier ran before the lowering
                        # (Programs._wait_for_dispatched), so none recorded meanwhile.
                        heap_end = heap()
                        heap_base += heap_end - (heap_at_compile or heap_end)
                        heap_at_compile = None
                        kernel_steady = max(kernel_steady, heap_end - heap_base)
                        heap_read = [(clock, heap_end - heap_base, kernel)]  # the next rate starts here
                        compiled_at = clock
                kernel_grown = kernel - self.base
                heap_due = kernel_steady + ahead > self.memory_budget
                # After a compile the heaps are read whatever the kernel did: the program just compiled records
                # its events first into the memory the compiler freed, which stays resident (the Kalman vmap:
                # 40 MB of events while the kernel's memory did not move).
                events_due = (kernel_steady + ahead > self.events_budget or clock < heap_watch_until) and (
                    not heap_read or clock - heap_read[-1][0] >= HEAP_RATE_S
                )
                if (heap_due or events_due) and not compiling and heap is not None and heap_base is not None:
                    # Where malloc's heaps can be read, they decide: the session's events are small blocks
                    # in them, a program's result is a mmapped block apart (cos over 50 M values grows the
                    # kernel by 200 MB at the speed it computes, no jump). Read only when the kernel grew.
                    whole_now = heap()
                    heap_read = [*heap_read[-2:], (clock, whole_now - heap_base, kernel)]
                    since_compile = len(heap_read) >= 2 and heap_read[-2][0] >= compiled_at >= 0
                    if heap_due or since_compile:
                        kernel_steady = whole_now - heap_base
                        # Judged ahead by the heaps' own last rise, not the kernel's step: a result written into
                        # a mapping of its own grows the kernel, not the heaps (jax_intro's eager f over 50 M
                        # values: 10 MB a 2.5 ms poll, which cut it before its cos ran), and only when they rose
                        # at the reading before too (one rise alone: forecast_matmul.md's 8 MB product).
                        ahead = max(0, heap_read[-1][1] - heap_read[-2][1]) if len(heap_read) >= 2 else 0
                judged, limit = kernel_steady, self.memory_budget
                heap_rises = [
                    later[1] - earlier[1]
                    for earlier, later in zip(heap_read, heap_read[1:], strict=False)
                    if earlier[0] >= compiled_at >= 0
                    and later[1] - earlier[1] >= EVENTS_RATE_BYTES_PER_S * (later[0] - earlier[0])
                ]
                if len(heap_rises) >= 2 and not compiling:
                    # Since a compile's end (the compiler's memory just freed: a clean start) the heaps kept
                    # growing, at two readings in a row: the events of the program just compiled, which the stop
                    # multiplies (~5x). One rise is as likely a result in the heap (the 8 MB of a 1000x1000
                    # float64 matmul); without a compile a heap swinging with reused arrays reads alike
                    # (tests/files/forecast_honest.md's loop of 16 MB arrays), so the budget stays.
                    judged, limit = max(kernel_steady, heap_read[-1][1]), self.events_budget
                    ahead = max(ahead, heap_rises[-1])
                if judged + ahead > limit or kernel_grown > MEMORY_TOTAL_BYTES:
                    self._cut(elapsed, max(judged, 0), "memory budget", kernel_grown)
                    return
            if now is None or base is None:
                continue
            polls += 1
            if whole is _rss:
                whole_now = kernel
            elif polls % HEAP_EVERY == 0 and whole is not None:
                whole_now = whole()
            step = now - recent[-1] if recent else now - base
            events_grown += step if 0 < step <= EARLY_JUMP_BYTES else 0
            recent = [*recent[-(STEADY_POLLS - 1) :], now]
            compiled = [*compiled[-(EARLY_POLLS - 1) :], self._compiling()]
            cpu = [*cpu[-(STEADY_POLLS - 1) :], (time.perf_counter(), _schedstat(self.native_id, ON_CPU))]
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
            grown_all = (whole_now - whole_base) if whole_now is not None and whole_base is not None else grown
            early = elapsed < MIN_TRACE_S
            last = recent[-EARLY_POLLS:]
            steps = [b - a for a, b in zip(last, last[1:], strict=False)]
            small = self.brk_base is None or all(step <= EARLY_JUMP_BYTES for step in steps)
            rising = (
                len(last) == EARLY_POLLS
                and all(step > 0 for step in steps)
                and small
                and len(compiled) == EARLY_POLLS
                and not any(compiled)
            )
            early_grown = events_grown if self.brk_base is not None else grown
            rules = (
                ("early", early and rising and early_grown > early_cap),
                ("trace budget", not early and steady and grown > TRACE_BUDGET_BYTES),
                ("heap cap", max(grown, grown_all) > HARD_CAP_BYTES and elapsed > HARD_CAP_AFTER_S),
            )
            reason = next((name for name, broken in rules if broken), None)  # the first rule the cell broke
            if calling and reason is not None and not self._compiling():
                self._cut(elapsed, max(grown, grown_all), reason, kernel_grown)
                return

    def _cut(self, elapsed: float, grown: int, reason: str, kernel_grown: int | None) -> None:
        """Stop the session now, from this thread, and write its events (the cell runs on meanwhile)."""
        with self.lock:
            if self.done.is_set():
                return
            self.note_cut(self.started + elapsed, grown, reason, kernel_grown)
            stopping = time.perf_counter()
            try:
                self.written = self._stop_and_write()
            except BaseException as exc:  # handed to finish(), never raised in this thread
                self.error = exc
            self.stop_s = time.perf_counter() - stopping
            self.done.set()

    def note_cut(self, at: float, grown: int, reason: str, kernel_grown: int | None) -> None:
        """What a cut at ``at`` (perf_counter) leaves of the cell's window: from the cell's first part, with JAX's
        compile time in the cell and the cell's thread's wait for a CPU up to then."""
        self.cut_after = at - self.cell_started
        self.grown, self.reason, self.kernel_grown = grown, reason, kernel_grown
        try:
            self.compile_at_cut = float(self.compile_clock()) if self.compile_clock is not None else None
        except Exception:  # the probe's counters, read from this thread: never let it stop the cut
            self.compile_at_cut = None
        waited = _schedstat(self.native_id, WAITING)
        if waited is not None and self.waited is not None:
            self.window_wait = waited - self.waited

    def _stop_and_write(self) -> str:
        data = self.session.stop()
        written = _write_to(self.path, data, append=self.append)
        if len(data) >= TRIM_AFTER_BYTES:  # a small session frees little: no walk of the heap after every cell
            _release_freed()
        return written

    def finish(self) -> str:
        """The path of the session's events: stopped and written now, or when it was cut."""
        with self.lock:
            if not self.done.is_set():
                self.done.set()
                self.wake.set()
                return self._stop_and_write()
        if self.error is not None:
            raise self.error
        return self.written or _write_to(self.path, b"", append=self.append)


# A cell's trace is stopped for a compile and restarted after it at most this many times; the last stop cuts
# it ("parts"). Each restart leaves freed heap resident: a cell of 1,200 eager float64 operations, each compiled
# for its shape, peaked 2.35-2.63 GB over its start against 2.12-2.27 GB without program data, and 2.14-2.27 GB
# with this cap (docs/forecast.md). After the cut the counter (_Counter) counts executions, as after any cut.
MAX_PARTS = 64
# ... and only while stopping and restarting it has cost the cell less than this in all. A part costs ~1.5 ms
# on a CPU but 0.45-0.65 s on a TPU v5e (the session's stop): 64 parts made a 6 s cell of 100 eager compiles
# take 48 s there. The last stop cuts it ("split time"); NBSCOPE_PROBE_MAX_SPLIT_S sets it in seconds.
MAX_SPLIT_S = 2.0
DISPATCH_WAIT_S = 2.0
DISPATCH_POLL_S = 0.001
# Waited for only when the programs in flight grow the heaps this fast (their events; the Kalman eager scan:
# 25-500 MB/s), read over DISPATCH_PROBE_S: a result is a mmapped block apart, which the heaps do not show.
DISPATCH_PROBE_S = 0.002
DISPATCH_EVENTS_BYTES_PER_S = 16 * 2**20
# At a cell's start nothing of the notebook's runs yet, so the wait for programs still running can be longer;
# it is bounded all the same (a program may run for minutes while the notebook goes on with other work).
IN_FLIGHT_WAIT_S = 10.0
HEAVY_STOP_S = 0.1  # a cell's session whose stop took this long recorded heavily (~2,000 calls' events)
IN_FLIGHT_PROBE_S = 0.002
# A session whose events came to this much a second once serialised records a flood (_flooding, _Guard._look).
FLOOD_BYTES_PER_S = 4 * 2**20
IN_FLIGHT_CHECKED = 2000  # the newest live arrays looked at for programs still running (JAX lists the newest first)


def _flooding() -> bool:
    """Whether programs running now record events fast: a session held for IN_FLIGHT_PROBE_S, then stopped,
    came to FLOOD_BYTES_PER_S or more once serialised (a loop whose body calls LAPACK: ~100 MB/s;
    ``jnp.linspace`` over 50 M values: next to nothing). Stopping costs about ten times as long as the session
    recorded such a flood, so the look is short. Taken to flood where no session can be made."""
    try:
        session = _session(hlo_protos=False)
        started = time.perf_counter()
        time.sleep(IN_FLIGHT_PROBE_S)
        held = time.perf_counter() - started
        return len(session.stop()) / held >= FLOOD_BYTES_PER_S
    except Exception:  # the notebook runs its own jax.profiler trace: then no session of the cell's either
        return True


def _recording_fast(pending: list[Any]) -> bool:
    """Whether programs still running record events fast into the session: the heaps read DISPATCH_PROBE_S
    apart rise at DISPATCH_EVENTS_BYTES_PER_S or more (the Kalman eager scan: 25-500 MB/s). Where the heaps
    cannot be read, they are taken to."""
    heap = _libc("mallinfo2")
    if heap is None:
        return True
    started, before = time.perf_counter(), heap()
    time.sleep(DISPATCH_PROBE_S)
    rate = (heap() - before) / max(time.perf_counter() - started, DISPATCH_PROBE_S)
    return rate >= DISPATCH_EVENTS_BYTES_PER_S and any(not _ready(array) for array in pending)


def _wait_ready(pending: list[Any], deadline: float, stop: threading.Event | None = None) -> bool:
    """Wait until every array of ``pending`` is ready, the ``deadline`` (perf_counter) passes or ``stop`` is
    set; whether all became ready."""
    while pending and time.perf_counter() < deadline and not (stop is not None and stop.is_set()):
        time.sleep(DISPATCH_POLL_S)
        pending = [array for array in pending if not _ready(array)]
    return not pending


def _in_flight() -> list[Any]:
    """The newest arrays whose programs still run; none before JAX's backends are up (listing arrays would
    start them, and a notebook may still choose its platform)."""
    try:
        jax = sys.modules["jax"]  # looked for only once the notebook has imported it
        bridge = getattr(getattr(jax, "_src", None), "xla_bridge", None)
        if not getattr(bridge, "_backends", None):
            return []
        return [array for array in jax.live_arrays()[:IN_FLIGHT_CHECKED] if not _ready(array)]
    except Exception:  # the probe must never break the notebook's cell
        return []


def _ready(array: object) -> bool:
    try:
        is_ready = getattr(array, "is_ready", None)
        return is_ready is None or bool(is_ready())
    except Exception:  # deleted or donated meanwhile: nothing to wait for
        return True


# Counting loops' iterations by running a sampled call again costs that call and a compile: the kernel spends on it
# at most TRIPS_FREE_S, then TRIPS_SHARE of its time.
TRIPS_FREE_S = 5.0
TRIPS_SHARE = 0.25
MAX_LOWERED = 200  # programs lowered for the GPU per cell at most (a cell compiling thousands says so)
# Executables held before their HLO is written, mid-cell: a cell that compiles hundreds of programs (an eager scan
# called with 200 lengths) held them all until its end, each alive no longer in the notebook's JAX caches.
HOLD_COMPILED = 8


def _has_equation(jaxpr: object, matches: Callable[[object], bool], depth: int = 0) -> bool:
    """Whether ``jaxpr`` or one nested in it has an equation that ``matches``."""
    for equation in getattr(jaxpr, "eqns", ()):
        if matches(equation):
            return True
        if depth < 8:
            for value in equation.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", None)
                    inner = getattr(inner, "jaxpr", inner)  # ClosedJaxpr -> Jaxpr
                    if inner is not None and hasattr(inner, "eqns") and _has_equation(inner, matches, depth + 1):
                        return True
    return False


def _target_dependent(equation: object) -> bool:
    return getattr(getattr(equation, "primitive", None), "name", None) in TARGET_DEPENDENT


def _target_line(program: int, how: str, module: bytes) -> str:
    return json.dumps({"program": program, "how": how, "module": base64.b64encode(zlib.compress(module)).decode()})


def _gpu_relevant(equation: object) -> bool:
    return getattr(getattr(equation, "primitive", None), "name", None) in GPU_RELEVANT


def _small_loop(equation: object) -> bool:
    """A ``while`` or ``scan`` whose carried values come to at most LOOK_CARRY_BYTES: its kernels are short, and it
    can record events as fast as it runs (NUTS, a Kalman filter); a loop over large arrays (a 16 MB carry doubled
    in place) runs kernels of milliseconds and records few."""
    name = getattr(getattr(equation, "primitive", None), "name", None)
    if name not in ("while", "scan"):
        return False
    outputs = list(getattr(equation, "outvars", ()))
    params = getattr(equation, "params", {})
    carried = outputs[: params["num_carry"]] if name == "scan" and "num_carry" in params else outputs
    size = 0
    for variable in carried:
        aval = getattr(variable, "aval", None)
        size += int(getattr(aval, "size", 1) or 1) * int(getattr(getattr(aval, "dtype", None), "itemsize", 8))
    return size <= LOOK_CARRY_BYTES


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
        for closing in lines[index + 1 :]:
            if (
                closing.startswith(" " * indent + "}")
                and not closing.startswith(" " * (indent + 1))
                and "loc(" in closing
            ):
                where = expand(closing[closing.index("loc(") + 4 :].rstrip(")").strip())
                stack = re.match(r'loc\("([^"]*)"', where)
                source = _FILE_LINE.search(where)
                loops.append(
                    {
                        "stack": stack.group(1) if stack else None,
                        "file": source.group(1) if source else None,
                        "line": int(source.group(2)) if source else None,
                    }
                )
                break
    calls: dict[str, int] = {}
    for target in re.findall(r"custom_call @([\w.]+)", text):
        calls[target] = calls.get(target, 0) + 1
    return {
        "loops": loops,
        "custom_calls": calls,
        "conditionals": text.count("stablehlo.case") + text.count("stablehlo.if"),
    }


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


def _write_modules(path: str, executables: list[Any], program_of: dict[int, int], *, append: bool = False) -> str:
    """Each executable's optimised HLO modules, serialised and written one at a time (a program's HLO at a
    time in memory, however many the cell compiled); ``program_of`` learns each executable's program id
    (its first module's), which the execution counts are keyed by."""
    with open(path, "ab" if append else "wb") as handle:
        for executable in executables:
            for number, module in enumerate(executable.hlo_modules()):
                data = module.as_serialized_hlo_module_proto()
                if number == 0 and (program_id := _module_id(data)) is not None:
                    program_of[id(executable)] = program_id
                handle.write(len(data).to_bytes(8, "little"))
                handle.write(data)
                del data
    return path


def _module_id(data: bytes) -> int | None:
    """``HloModuleProto.id`` (field 5, a varint) of a serialised module: the program id the trace's events carry
    (``nbscope.collect._xspace.hlo_modules`` reads it alike)."""
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, index = _varint(data, index)
            if field == 5:
                return value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            size, index = _varint(data, index)
            index += size
        elif wire in (1, 5):
            index += 8 if wire == 1 else 4
        else:
            return None
    return 0  # proto3 leaves a zero id out


def _varint(data: bytes, index: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, index


def _write(folder: str, name: str, data: bytes) -> str:
    return _write_to(os.path.join(folder, name), data)


def _write_to(path: str, data: bytes, *, append: bool = False) -> str:
    with open(path, "ab" if append else "wb") as handle:
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
