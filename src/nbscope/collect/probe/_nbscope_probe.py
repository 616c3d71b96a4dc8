"""The in-kernel probe: per-cell wall time, JAX and Numba compiles, memory, written as JSON lines.

Loaded into an IPython kernel at start (see ``nbscope.collect.inject``) by file path, so it must work in any
kernel environment: standard library only, nothing heavy at start, and never ``import jax`` or
``import numba`` itself. Listeners attach when the notebook imports those packages (an import hook
on ``sys.meta_path``), so compiles in the importing cell are still counted.

Configuration comes from the environment:
  NBSCOPE_PROBE_OUT   JSON-lines file to append to, or
  NBSCOPE_PROBE_DIR   a folder; the probe writes ``<pid>-<ns>.jsonl`` there (one file per kernel)
  NBSCOPE_PROBE_NVML  "1": also read this process's GPU memory through NVML
  NBSCOPE_PROBE_TIMELINE  a folder: record a jax.profiler trace per cell there (``_nbscope_timeline``)
  NBSCOPE_PROBE_PROGRAMS  a folder: record program runs and HLO per cell there (``_nbscope_program``)
  NBSCOPE_PROBE_HASHES  "0": no per-cell hash of each compiled program (``_nbscope_hashes``)

Line types: ``kernel`` (once), ``start`` (a cell began: lets a reader name the cell that killed a
kernel), ``cell`` (a cell finished). Field meanings are documented in docs/run-record.md.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
import time
import types
from typing import Any

try:  # beside this file in the kernel's probe home
    import _nbscope_events
    import _nbscope_hashes
    from _nbscope_words import whole_words
except ImportError:  # imported as part of the nbscope package
    from nbscope.collect.probe import _nbscope_events, _nbscope_hashes
    from nbscope.collect.probe._nbscope_words import whole_words

PROBE_VERSION = 1

# Private references, taken once at load: a notebook that rebinds, deletes or monkeypatches what it imports
# (``time.perf_counter = ...``, ``del os``, ``json.dumps = ...``) changes none of the probe's figures or lines.
_perf_counter = time.perf_counter
_time = time.time
_time_ns = time.time_ns
_process_time = time.process_time
_getpid = os.getpid
_getcwd = os.getcwd
_pread = os.pread if hasattr(os, "pread") else None
_os_write = os.write
_getframe = sys._getframe
_sha256 = hashlib.sha256
_findall = re.findall
_ENCODE = json.JSONEncoder(default=str).encode
try:
    import resource as _resource  # a small C module of the standard library (not on Windows)

    _getrusage: Any = _resource.getrusage
    _RUSAGE_SELF: Any = _resource.RUSAGE_SELF
except ImportError:
    _getrusage = _RUSAGE_SELF = None
_ALARM_MARKERS = ("slow_operation_alarm", "Very slow compile", "Constant folding an instruction is taking")
_WRAPPED_NAME = re.compile(r"^[\w.]+\((.*)\)$")
# Packages whose frames stand between a compile and the code that asked for it: these names and their
# submodules only ("jaxopt" or "jaxtyping" are libraries of their own, not JAX).
_SKIP_MODULES = ("jax", "jaxlib", "contextlib", "functools", "importlib", "_nbscope_probe", "threading", "logging")
_SKIP_PREFIXES = tuple(f"{name}." for name in _SKIP_MODULES)


def source_hash(source: str) -> str:
    """Identical to nbscope.collect.notebook.source_hash (kept apart: the probe imports nothing of nbscope)."""
    return _sha256(source.rstrip().encode("utf-8")).hexdigest()[:16]


def _base_name(fun_name: str) -> str:
    match = _WRAPPED_NAME.match(fun_name)
    return match.group(1) if match else fun_name


def _thread_sched() -> tuple[float, float, float] | None:
    """(on-CPU seconds, seconds waiting for a CPU, process CPU seconds) of the calling thread so far.

    The wait is the time the thread was ready to run but another process had the CPU
    (``/proc/thread-self/schedstat``, Linux): the part of a cell's wall time that load on the machine adds.
    """
    try:
        with open("/proc/thread-self/schedstat", "rb") as handle:
            on_cpu, waiting = handle.read().split()[:2]
        return int(on_cpu) / 1e9, int(waiting) / 1e9, _process_time()
    except (OSError, ValueError):
        return None


class _ProcMemory:
    """Resident memory of this process from /proc, through descriptors kept open (a few µs a read)."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.statm = self._open("/proc/self/statm", os.O_RDONLY)
        self.status = self._open("/proc/self/status", os.O_RDONLY)
        self.clear_refs = self._open("/proc/self/clear_refs", os.O_WRONLY)

    @staticmethod
    def _open(path: str, flags: int) -> int | None:
        try:
            return os.open(path, flags)
        except OSError:
            return None

    def rss_bytes(self) -> int | None:
        if self.statm is None or _pread is None:
            return None
        try:
            return int(_pread(self.statm, 256, 0).split()[1]) * self.page  # type: ignore[misc]
        except (OSError, ValueError, IndexError):
            return None

    def peak_bytes(self) -> int | None:
        # VmHWM, which the reset below sets back to the resident size (~40 µs a read, once a cell). Not
        # ru_maxrss: Linux keeps the largest of it across execve, so a kernel started by a process of 480 MB
        # reads 480 MB from its first cell on, and every thread that exits raises it to VmHWM for good.
        if self.status is not None and _pread is not None:
            try:
                text = _pread(self.status, 4096, 0)
                at = text.index(b"VmHWM:")
                return int(text[at + 6 : text.index(b"kB", at)]) * 1024
            except (OSError, ValueError):
                pass
        if _getrusage is None:  # no /proc: the process's lifetime peak, whoever started it
            return None
        try:
            return int(_getrusage(_RUSAGE_SELF).ru_maxrss) * 1024
        except (OSError, AttributeError, TypeError, ValueError):
            return None

    def reset_peak(self) -> bool:
        # Writing "5" to clear_refs resets VmHWM (Linux >= 4.0): a per-cell peak, not a lifetime one.
        if self.clear_refs is None:
            return False
        try:
            _os_write(self.clear_refs, b"5")
            return True
        except OSError:
            return False


class _CellCounters:
    """What one cell compiled; reset at each cell start."""

    def __init__(self) -> None:
        self.functions: dict[str, dict[str, Any]] = {}
        self.trace_s = self.lower_s = self.backend_s = 0.0
        self.backend_events = 0
        self.cache_requests = self.cache_hits = self.cache_misses = 0
        self.cache_retrieval_s = self.cache_saved_s = 0.0
        self.hit_pending = False
        self.numba: list[dict[str, Any]] = []
        self.alarms: list[str] = []

    def compile_s(self) -> float:
        """JAX's trace, lowering and backend compile so far: the one sum of them in the kernel."""
        return self.trace_s + self.lower_s + self.backend_s

    def function(self, fun_name: str) -> dict[str, Any]:
        name = _base_name(fun_name)
        entry = self.functions.get(name)
        if entry is None:
            entry = {
                "name": name,
                "count": 0,
                "trace_s": 0.0,
                "lower_s": 0.0,
                "backend_s": 0.0,
                "cache_hits": 0,
                "shapes": [],
                "caller": _caller_module(),
            }
            self.functions[name] = entry
        return entry


def _caller_module() -> str:
    """The module of the first frame outside JAX: ``__main__`` for notebook code."""
    frame = _getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not isinstance(module, str):
            return ""
        if module not in _SKIP_MODULES and not module.startswith(_SKIP_PREFIXES):
            return module
        frame = frame.f_back
    return ""


class Probe:
    """Per-cell measurements in one kernel process."""

    def __init__(self, shell: Any, out_path: str) -> None:
        self.shell = shell
        self.out_path = out_path
        self.out = open(out_path, "a", buffering=1, encoding="utf-8")
        self.sequence = 0
        self.counters = _CellCounters()
        self.cell_start = 0.0
        self.cell_start_unix = 0.0
        self.request_start: float | None = None  # set once the kernel's execute_request is wrapped
        self.pending: dict[str, Any] | None = None
        self.status_hooked = False  # the kernel's busy/idle status messages are seen (see _hook_status)
        self.busy_at: float | None = None  # when the current shell request's "busy" went out
        self.held: dict[str, Any] | None = None  # a finished cell's line, written as "idle" goes out
        self.rss_before: int | None = None
        self.sched_before: tuple[float, float, float] | None = None
        self.memory = _ProcMemory()
        self.peak_reset = False
        self.jax_attached = False
        self.numba_attached = False
        self.cache_state: str | None = None
        self.numba_current: dict[str, Any] | None = None
        self.gpu = _GpuMemory() if os.environ.get("NBSCOPE_PROBE_NVML") == "1" else None
        self.gpu_before: int | None = None
        self.jax_devices = _JaxDevices()
        self.device_before: tuple[int, int] | None = None
        self.timeline = _recorder("NBSCOPE_PROBE_TIMELINE", "_nbscope_timeline", "Timeline", "timeline")
        self.programs = _recorder("NBSCOPE_PROBE_PROGRAMS", "_nbscope_program", "load", "program data")
        self.program_hashes = _program_hashes()
        self.kernel_line: dict[str, Any] = {
            "type": "kernel",
            "probe_version": PROBE_VERSION,
            "pid": _getpid(),
            "cwd": _getcwd(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "started_unix": _time(),
            "session": os.environ.get("JPY_SESSION_NAME"),
            "jax_cache_dir": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
            "jax_platforms": os.environ.get("JAX_PLATFORMS"),
        }
        self._write(self.kernel_line)

    # ---- output -------------------------------------------------------------------------------
    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(_ENCODE(record) + "\n")

    # ---- IPython events -----------------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        self.sequence += 1
        self.counters = _CellCounters()
        source = getattr(info, "raw_cell", "") or ""
        self._write({"type": "start", "seq": self.sequence, "hash": source_hash(source), "unix": _time()})
        if self.program_hashes is not None:
            self.program_hashes.take()  # compiled between cells: no cell's
        self.rss_before = self.memory.rss_bytes()
        self.peak_reset = self.memory.reset_peak()
        if self.gpu is not None:
            self.gpu_before = self.gpu.used_bytes()
        self.device_before = self.jax_devices.memory()
        if self.timeline is not None:
            self.timeline.start(self.sequence)
        if self.programs is not None:
            # The timeline's trace serves both only when it runs: it skips cells before the notebook has
            # started JAX's backends, where the programs' own session (which starts none) still records.
            self.programs.start(
                self.sequence,
                shared=self.timeline is not None and self.timeline.current is not None,
                compile_clock=self._compile_seconds,
            )
        # Programs an earlier cell dispatched, waited for before the session started, are the cell's time: the
        # cell would have waited for them itself where it used their results.
        waited = self.programs.start_wait_s if self.programs is not None else 0.0
        self.cell_start_unix = _time() - waited
        self.sched_before = _thread_sched()
        self.cell_start = _perf_counter() - waited

    def _compile_seconds(self) -> float:
        """JAX's trace, lower and backend compile seconds in the cell so far (what the cell model calls compile)."""
        return self.counters.compile_s()

    def post_run_cell(self, result: Any) -> None:
        wall = _perf_counter() - self.cell_start
        sched = _thread_sched()
        trace = self.timeline.stop(self.sequence) if self.timeline is not None else None
        counters = self.counters
        programs = None
        if self.programs is not None:
            # nbscope's own lowering for CUDA traces and lowers every new program again: its JAX events go to
            # counters of their own, not into the notebook's compile figures.
            own = self.counters = _CellCounters()
            try:
                programs = self.programs.stop(self.sequence, compiled=counters.backend_events > 0, timeline_trace=trace)
            finally:
                self.counters = counters
            if programs is not None and (own.trace_s or own.lower_s or own.backend_s):
                programs["gpu_lowering_jax_s"] = own.compile_s()  # within gpu_lowering_s
        error = result.error_in_exec or result.error_before_exec
        info = getattr(result, "info", None)
        source = getattr(info, "raw_cell", "") or ""
        record: dict[str, Any] = {
            "type": "cell",
            "seq": self.sequence,
            "hash": source_hash(source),
            "execution_count": result.execution_count,
            "wall_s": wall,
            # The profiler session's split around each compile (--forecast) is nbscope's: in collection_s.
            "code_s": max(0.0, wall - (programs["split_s"] if programs and "split_s" in programs else 0.0)),
            "started_unix": self.cell_start_unix,
            "status": "error" if error is not None else "ok",
            "error": None if error is None else {"name": type(error).__name__, "message": _error_message(error)},
            "jax": self._jax_summary(counters) if self.jax_attached else None,
            "numba": self._numba_summary(counters) if self.numba_attached else None,
            "alarms": counters.alarms,
            "rss": self._rss_record(),
            "gpu_memory": None,
            "sched": None
            if sched is None or self.sched_before is None
            else {
                "on_cpu_s": sched[0] - self.sched_before[0],  # the cell's thread
                "wait_s": sched[1] - self.sched_before[1],
                "cpu_s": sched[2] - self.sched_before[2],  # every thread of the kernel
            },
        }
        hashes = self.program_hashes.take() if self.program_hashes is not None else None
        if hashes:
            record["programs_hash"] = hashes
        if trace is not None:
            record["timeline_trace"] = trace
        if programs is not None:
            record["programs"] = programs
        if self.gpu is not None:
            record["gpu_memory"] = {"before_bytes": self.gpu_before, "after_bytes": self.gpu.used_bytes()}
        self._device_memory(record)
        if self.request_start is None:
            self._write(record)
        else:
            self.pending = record  # written when the kernel's execute_request handler returns

    def _device_memory(self, record: dict[str, Any]) -> None:
        """The accelerator memory JAX's allocator held at the cell's start and end, and the cell's peak where the
        cell raised the kernel's high-water mark (else unknown: the allocator's peak cannot be reset); and, the
        first time JAX's backend is seen started, what it is (rewritten into the kernel's line)."""
        if "jax_backend" not in self.kernel_line:
            described = self.jax_devices.describe()
            if described is not None:
                self.kernel_line["jax_backend"] = described
                self._write(self.kernel_line)
        after = self.jax_devices.memory()
        if after is None:
            return
        before = self.device_before or (0, 0)  # JAX started during the cell: it held nothing before
        record["device_memory"] = {
            "before_bytes": before[0],
            "after_bytes": after[0],
            "peak_bytes": after[1] if after[1] > before[1] else None,
        }

    def _rss_record(self) -> dict[str, Any]:
        after, peak = self.memory.rss_bytes(), self.memory.peak_bytes()
        # The kernel updates the high-water mark lazily: never report a peak below what was seen.
        seen = [v for v in (self.rss_before, after, peak) if v is not None]
        return {
            "before_bytes": self.rss_before,
            "after_bytes": after,
            "peak_bytes": max(seen) if seen else None,
            "peak_is_per_cell": self.peak_reset,
        }

    # ---- the kernel's request ----------------------------------------------------------------
    def wrap_execute_request(self) -> bool:
        """Time the kernel's whole execute_request (what nbclient sees as busy→idle), not just the code.

        ipykernel spends ~1.5 ms before ``pre_run_cell`` and ~1 ms after ``post_run_cell`` (transforms,
        history, reply); a cell's wall time includes it, and the record reports it as overhead. Around
        the handler it also runs hooks and flushes stdout/stderr through its IO thread, which on a busy
        machine adds several ms: where the kernel's status messages can be hooked (``_hook_status``),
        wall time runs from the ``busy`` message to the ``idle`` one, the very points nbclient times.
        """
        kernel = getattr(self.shell, "kernel", None)
        handlers = getattr(kernel, "shell_handlers", None)
        if not isinstance(handlers, dict) or "execute_request" not in handlers:
            return False
        original = handlers["execute_request"]
        probe = self

        async def execute_request(*args: Any, **kwargs: Any) -> Any:
            probe.request_start = _perf_counter()
            try:
                result = original(*args, **kwargs)
                if hasattr(result, "__await__"):
                    result = await result
                return result
            finally:
                probe.finish_request(_perf_counter() - probe.request_start)
                probe.ensure_registered()

        handlers["execute_request"] = execute_request
        self.request_start = 0.0
        self._hook_status(kernel)
        return True

    def _hook_status(self, kernel: Any) -> None:
        """Note when the kernel publishes a shell request's ``busy`` and ``idle`` status."""
        publish = getattr(kernel, "_publish_status", None)
        if not callable(publish):
            return
        probe = self

        def _publish_status(status: Any, *args: Any, **kwargs: Any) -> Any:
            if (args[0] if args else kwargs.get("channel", "shell")) == "shell":
                if status == "busy":
                    probe.busy_at = _perf_counter()
                elif status == "idle":
                    probe.write_held(_perf_counter())  # before "idle" leaves: the runner finds the line
                    probe.busy_at = None
            return publish(status, *args, **kwargs)

        try:
            kernel._publish_status = _publish_status
        except (AttributeError, TypeError):
            return
        self.status_hooked = True

    def ensure_registered(self) -> None:
        """Register the cell callbacks again where the notebook removed them (``callbacks['pre_run_cell'].clear()``),
        which would blind the probe for every later cell; run after each request, so the next cell is measured.
        A ``warning`` line names the cell that removed them (it has no probe record of its own)."""
        events = getattr(self.shell, "events", None)
        callbacks = getattr(events, "callbacks", None)
        if events is None or not isinstance(callbacks, dict):
            return
        ours = (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell))
        missing = [(event, callback) for event, callback in ours if callback not in callbacks.get(event, ())]
        if not missing:
            return
        for event, callback in missing:
            events.register(event, callback)
        self._write(
            {
                "type": "warning",
                "seq": self.sequence,
                "message": "the notebook removed nbscope's cell callbacks: this cell is not measured; "
                "they are registered again for the cells after it",
            }
        )

    def finish_request(self, request_s: float) -> None:
        record, self.pending = self.pending, None
        if record is None:
            return
        record["wall_s"] = request_s
        self.write_held(None)  # a line still held (its "idle" never came): write it as it is
        if self.status_hooked and self.busy_at is not None:
            self.held = record  # written, with busy→idle as wall time, when "idle" goes out
        else:
            self._write(record)

    def write_held(self, idle_at: float | None) -> None:
        record, self.held = self.held, None
        if record is None:
            return
        if idle_at is not None and self.busy_at is not None:
            record["wall_s"] = idle_at - self.busy_at
        self._write(record)

    # ---- JAX ----------------------------------------------------------------------------------
    def attach_jax(self, jax_module: types.ModuleType) -> None:
        if self.jax_attached:
            return
        import logging

        from jax import monitoring

        monitoring.register_event_duration_secs_listener(self._on_jax_duration)
        monitoring.register_event_listener(self._on_jax_event)
        _capture_compile_shapes(self, logging.getLogger("jax._src.interpreters.pxla"))
        if self.program_hashes is not None:
            self.program_hashes.attach()
        if self.programs is not None:  # executions are counted from the notebook's first call on
            self.programs.counter.attach()
        self.jax_attached = True

    def _on_jax_duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        counters = self.counters
        fun_name = kwargs.get("fun_name")
        if event == _nbscope_events.JAX_TRACE:
            counters.trace_s += seconds
            if fun_name:
                counters.function(fun_name)["trace_s"] += seconds
        elif event == _nbscope_events.JAX_LOWER:
            counters.lower_s += seconds
            if fun_name:
                counters.function(fun_name)["lower_s"] += seconds
        elif event == _nbscope_events.JAX_BACKEND:
            if self.programs is not None:  # the profiler session split around this compile: nbscope's time
                seconds = max(0.0, seconds - self.programs.take_split_s())
            counters.backend_s += seconds
            counters.backend_events += 1
            if fun_name:
                entry = counters.function(fun_name)
                entry["backend_s"] += seconds
                entry["count"] += 1
                if counters.hit_pending:
                    entry["cache_hits"] += 1
            counters.hit_pending = False
        elif event == _nbscope_events.CACHE_RETRIEVAL:
            counters.cache_retrieval_s += seconds
        elif event == _nbscope_events.CACHE_SAVED:
            counters.cache_saved_s += seconds

    def _on_jax_event(self, event: str, **kwargs: Any) -> None:
        counters = self.counters
        if event == _nbscope_events.CACHE_REQUESTS:
            counters.cache_requests += 1
        elif event == _nbscope_events.CACHE_HITS:
            counters.cache_hits += 1
            counters.hit_pending = True
        elif event == _nbscope_events.CACHE_MISSES:
            counters.cache_misses += 1
        elif event == _nbscope_events.CACHE_TASKS_USING:
            self.cache_state = "on"
        elif event == _nbscope_events.CACHE_TASK_DISABLED:
            self.cache_state = "disabled"

    def _jax_summary(self, counters: _CellCounters) -> dict[str, Any]:
        notebook_names = self._notebook_function_names() if counters.functions else set()
        kinds = {"user": 0, "eager": 0, "library": 0}
        functions = []
        for entry in counters.functions.values():
            caller = entry.pop("caller")
            name = entry["name"]
            if name in notebook_names or (name.startswith("<") and caller == "__main__"):
                kind = "user"
            elif caller not in ("__main__", "") and not caller.startswith("IPython"):
                kind = "library"
            else:
                kind = "eager"
            entry["kind"] = kind
            entry["caller"] = caller
            kinds[kind] += entry["count"] - entry["cache_hits"]
            functions.append(entry)
        return {
            "compiles": counters.backend_events - counters.cache_hits,
            "backend_events": counters.backend_events,
            "user_compiles": kinds["user"],
            "eager_compiles": kinds["eager"],
            "library_compiles": kinds["library"],
            "trace_s": counters.trace_s,
            "lower_s": counters.lower_s,
            "backend_s": counters.backend_s,
            "cache_state": self.cache_state,
            "cache_requests": counters.cache_requests,
            "cache_hits": counters.cache_hits,
            "cache_misses": counters.cache_misses,
            "cache_retrieval_s": counters.cache_retrieval_s,
            "cache_saved_s": counters.cache_saved_s,
            "functions": functions,
        }

    def _notebook_function_names(self) -> set[str]:
        """Names of functions defined in notebook code (nested ones too), from the user namespace.

        Objects in the namespace are the notebook's: their ``__getattr__`` may answer anything or raise
        anything, so they are read through ``_wrapped`` (no user code runs) and one that still
        fails is passed over alone. An exception here would reach IPython as "Error in callback".
        """
        names: set[str] = set()
        seen: set[int] = set()

        def add_code(code: types.CodeType) -> None:
            if id(code) in seen:
                return
            seen.add(id(code))
            names.add(code.co_name)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    add_code(const)

        def add_function(value: Any) -> None:
            # type(), not isinstance(): isinstance may ask the object for __class__, running its code
            if type(value) in (staticmethod, classmethod, types.MethodType):
                value = value.__func__
            if type(value) is types.FunctionType and value.__module__ == "__main__":
                add_code(value.__code__)

        for value in list(self.shell.user_ns.values()):
            try:
                is_class = issubclass(type(value), type)  # type(): isinstance may run the object's code
                if not is_class and not callable(value):  # arrays, modules, data: nothing JAX compiles
                    continue
                for _ in range(0 if is_class else 5):  # unwrap jax.jit, functools.wraps, partial
                    inner = _wrapped(value)
                    if inner is None or inner is value:
                        break
                    value = inner
                if is_class:
                    attributes = _class_attributes(value)
                    if attributes.get("__module__") == "__main__":
                        for member in attributes.values():
                            add_function(member)
                else:
                    add_function(value)
            except Exception:  # one odd object must not cost the cell its record
                continue
        return names

    # ---- Numba --------------------------------------------------------------------------------
    def attach_numba(self, numba_module: types.ModuleType) -> None:
        if self.numba_attached:
            return
        probe = self

        def started(ev: Any) -> None:
            data = ev.data or {}
            dispatcher = data.get("dispatcher")
            function = getattr(dispatcher, "py_func", None)
            cache = getattr(dispatcher, "_cache", None)  # Numba's NullCache unless cache=True
            probe.numba_current = {
                "name": getattr(function, "__qualname__", str(dispatcher)),
                "signature": str(data.get("args")),
                # "__main__" for a notebook's own function; a package's module otherwise (code the reader cannot edit)
                "module": getattr(function, "__module__", None),
                "cache": None if cache is None else type(cache).__name__ != "NullCache",
            }

        def ended(ev: Any, seconds: float) -> None:
            if probe.numba_current is not None:
                probe.numba_current["seconds"] = seconds
                probe.counters.numba.append(probe.numba_current)
                probe.numba_current = None

        _nbscope_events.register_numba_listener(started, ended)
        self.numba_attached = True

    def _numba_summary(self, counters: _CellCounters) -> dict[str, Any]:
        return {
            "compiles": len(counters.numba),
            "compile_s": sum(f["seconds"] for f in counters.numba),
            "functions": counters.numba,
        }

    # ---- stderr alarms ------------------------------------------------------------------------
    def watch_stderr(self) -> None:
        """XLA's C++ logging reaches ipykernel's captured stderr; note slow-compile alarms in it."""
        stream = sys.stderr
        original = getattr(stream, "write", None)
        if original is None:
            return
        probe = self

        def write(text: str) -> int:
            if isinstance(text, str) and any(marker in text for marker in _ALARM_MARKERS):
                for line in text.splitlines():
                    if any(marker in line for marker in _ALARM_MARKERS):
                        probe.counters.alarms.append(whole_words(line.strip(), 300))
            return original(text)

        try:
            stream.write = write
        except (AttributeError, TypeError):
            pass


# Below DEBUG: JAX logs nothing at this level, and a level the notebook sets itself (even DEBUG) differs
# from it, which tells the probe the notebook took over the logger.
_PROBE_LOG_LEVEL = 9


def _capture_compile_shapes(probe: Probe, logger: Any) -> None:
    """Read each compile's argument shapes from the DEBUG record JAX logs, without printing anything.

    JAX only creates that record when its logger is enabled for DEBUG, so the probe lowers the logger's
    level; a filter on the logger reads the record and then drops every record the notebook's own logging
    set-up would not have let through. With ``logging.basicConfig()`` the root handler prints whatever
    reaches it, whatever its level, so without the filter the DEBUG records would appear in cell outputs.
    """
    import logging  # JAX imported it already: free here

    original_level = logger.level

    def user_threshold() -> int:
        if logger.level != _PROBE_LOG_LEVEL:  # the notebook set this logger's level itself since
            return logging.NOTSET
        if original_level != logging.NOTSET:
            return original_level
        parent = logger.parent
        return parent.getEffectiveLevel() if parent is not None else logging.WARNING

    def keep(record: Any) -> bool:
        try:
            message = record.msg
            if isinstance(message, str) and message.startswith("Compiling ") and record.args:
                fun_name, shapes = str(record.args[0]), str(record.args[1])
                probe.counters.function(fun_name)["shapes"].append(_short_shapes(shapes))
            return record.levelno >= user_threshold()
        except Exception:  # a probe failure must never break the notebook's logging
            return True

    if original_level == logging.NOTSET or original_level > logging.DEBUG:
        logger.setLevel(_PROBE_LOG_LEVEL)
    logger.addFilter(keep)


def _error_message(error: BaseException) -> str:
    """The cell's exception as text, without the C++ stack XLA appends to its errors (``    @     0x…`` frames);
    an exception whose ``__str__`` itself fails is named, not raised."""
    try:
        text = str(error)
        frames = text.find("    @     0x")
        message: str = whole_words(text[:frames].rstrip(": \n") if frames > 0 else text, 500)
        return message
    except Exception as exc:
        return f"(its message could not be read: {type(exc).__name__})"


def _wrapped(value: Any) -> Any:
    """What a wrapper wraps (``__wrapped__``, or ``func`` of a partial), read without running user code."""
    kind = type(value)
    if kind is types.FunctionType:  # functools.wraps stores __wrapped__ in the function's own dict
        return value.__dict__.get("__wrapped__")
    if kind is functools.partial:
        return value.func
    inner = _stored_attribute(value, "__wrapped__")
    return inner if inner is not None else _stored_attribute(value, "func")


# The type's own accessors, read once: looking ``__mro__`` or ``__dict__`` up on an object or class would go
# through its (meta)class, which the notebook may have written.
_MRO_OF = type.__dict__["__mro__"].__get__
_DICT_OF_CLASS = type.__dict__["__dict__"].__get__
_SLOTS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def _stored_attribute(value: Any, name: str) -> Any:
    """``value.name`` where it is data stored on the instance (its dict, or a C-level slot), else None.

    Never runs the notebook's code: ``__getattr__``, ``__getattribute__`` and properties are not called, so
    an object that answers every attribute (a mock, a lazy proxy) is not taken for a jitted function. The
    same lookup as ``inspect.getattr_static``, limited to what the probe needs, at a fraction of its cost.
    """
    try:
        for klass in _MRO_OF(type(value)):
            found = _DICT_OF_CLASS(klass).get(name)
            if found is not None:
                # a slot (functools.partial.func) is the instance's data; a method or property is not
                return found.__get__(value, type(value)) if isinstance(found, _SLOTS) else None
        instance_dict = object.__getattribute__(value, "__dict__")  # as getattr_static reads it
    except Exception:
        return None
    return instance_dict.get(name) if type(instance_dict) is dict else None


def _class_attributes(cls: type) -> dict[str, Any]:
    """A class's own attributes (``vars(cls)`` without asking its metaclass)."""
    return dict(_DICT_OF_CLASS(cls))


def _short_shapes(text: str) -> str:
    # "(ShapedArray(float32[3]), ShapedArray(int32[], weak_type=True))" -> "float32[3], int32[]"
    return ", ".join(_findall(r"ShapedArray\((\w+\[[^\]]*\])", text)) or whole_words(text, 200)


class _JaxDevices:
    """JAX's backend as the notebook started it, read and never started from here (the probe does not import jax):
    ``jax._src.xla_bridge`` holds the started backends once the notebook has used JAX."""

    def _backend(self) -> Any:
        modules = sys.modules
        bridge = modules.get("jax._src.xla_bridge")
        if bridge is None or not getattr(bridge, "_backends", None):
            return None
        return getattr(bridge, "_default_backend", None)

    def describe(self) -> dict[str, Any] | None:
        backend = self._backend()
        if backend is None:
            return None
        try:
            devices = backend.local_devices()
            stats = (devices[0].memory_stats() or {}) if devices else {}
            jaxlib = next((sys.modules[m] for m in ("jaxlib.version", "jaxlib") if m in sys.modules), None)
            return {
                "platform": str(backend.platform),
                "device_kind": str(devices[0].device_kind) if devices else None,
                "devices": len(devices),
                "memory_bytes_per_device": stats.get("bytes_limit"),
                "platform_version": whole_words(str(getattr(backend, "platform_version", "") or ""), 200) or None,
                "jax": getattr(sys.modules["jax"], "__version__", None) if "jax" in sys.modules else None,
                "jaxlib": getattr(jaxlib, "__version__", None),
            }
        except Exception:
            return None

    def memory(self) -> tuple[int, int] | None:
        """Bytes in use and the high-water mark over the backend's devices; None: no accelerator backend."""
        backend = self._backend()
        if backend is None or str(getattr(backend, "platform", "cpu")) == "cpu":
            return None
        try:
            stats = [device.memory_stats() or {} for device in backend.local_devices()]
            in_use = sum(s["bytes_in_use"] for s in stats if "bytes_in_use" in s)
            return in_use, sum(s.get("peak_bytes_in_use", 0) for s in stats)
        except Exception:
            return None


class _GpuMemory:
    """GPU memory used by this process, through NVML (only when asked: importing pynvml costs ~10 ms)."""

    def __init__(self) -> None:
        self.nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            self.nvml = None

    def used_bytes(self) -> int | None:
        if self.nvml is None:
            return None
        pid, total = _getpid(), 0
        try:
            for handle in self.handles:
                for process in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if process.pid == pid and process.usedGpuMemory:
                        total += process.usedGpuMemory
        except Exception:
            return None
        return total


def _program_hashes() -> Any:
    """The per-cell hashes of compiled programs (``_nbscope_hashes``); ``NBSCOPE_PROBE_HASHES=0``: none."""
    return None if os.environ.get("NBSCOPE_PROBE_HASHES") == "0" else _nbscope_hashes.ProgramHashes()


def _recorder(variable: str, module_name: str, make: str, what: str) -> Any:
    """An optional per-cell recorder, made by ``make`` of ``module_name`` (a file beside this one) when the
    environment's ``variable`` names a folder: the jax.profiler tracer, or the program recorder."""
    folder = os.environ.get(variable)
    if not folder:
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"nbscope probe: {what} unavailable: {exc!r}", file=sys.__stderr__)
        return None
    return getattr(module, make)(folder)


class _ImportWatcher:
    """A ``sys.meta_path`` finder that runs a callback right after a watched package finishes importing."""

    def __init__(self, callbacks: dict[str, Any]) -> None:
        self.callbacks = dict(callbacks)
        self.busy: set[str] = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        callback = self.callbacks.get(name)
        if callback is None or name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        original = spec.loader.exec_module
        watcher = self

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            watcher.callbacks.pop(name, None)
            try:
                callback(module)
            except Exception as exc:  # a probe failure must never break the notebook
                print(f"nbscope probe: could not attach to {name}: {exc!r}", file=sys.__stderr__)

        spec.loader.exec_module = exec_module
        return spec


def load_ipython_extension(shell: Any) -> None:
    """IPython extension entry point (``--InteractiveShellApp.extra_extensions=_nbscope_probe``)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = install(shell)


_PROBE: Probe | None = None


def install(shell: Any) -> Probe | None:
    """Start the probe in this IPython shell (called by the kernel start-up file)."""
    out = os.environ.get("NBSCOPE_PROBE_OUT")
    if not out:
        folder = os.environ.get("NBSCOPE_PROBE_DIR")
        if not folder:
            return None
        os.makedirs(folder, exist_ok=True)
        out = os.path.join(folder, f"{_getpid()}-{_time_ns()}.jsonl")
    probe = Probe(shell, out)
    shell.events.register("pre_run_cell", probe.pre_run_cell)
    shell.events.register("post_run_cell", probe.post_run_cell)
    probe.watch_stderr()
    probe.wrap_execute_request()
    callbacks = {"jax": probe.attach_jax, "numba": probe.attach_numba}
    for name, callback in list(callbacks.items()):
        if name in sys.modules:
            callback(sys.modules[name])
            del callbacks[name]
    if callbacks:
        sys.meta_path.insert(0, _ImportWatcher(callbacks))
    return probe
