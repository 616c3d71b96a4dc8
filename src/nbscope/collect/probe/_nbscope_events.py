"""The compile events nbscope listens to: JAX monitoring event names and an outermost-only Numba compile
listener, shared by the in-kernel probe and the bench workers.

Standard library only, and nothing imported at load: the probe copies it beside itself into every kernel
(imported there as ``_nbscope_events``), the bench imports it as ``nbscope.collect.probe._nbscope_events``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# jax.monitoring duration events, one of each per compiled function (fun_name= from JAX 0.6.1).
JAX_TRACE = "/jax/core/compile/jaxpr_trace_duration"
JAX_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
JAX_BACKEND = "/jax/core/compile/backend_compile_duration"  # also fires on a persistent-cache hit
JAX_COMPILE_PHASES = {JAX_TRACE: "trace_s", JAX_LOWER: "lower_s", JAX_BACKEND: "backend_s"}
# Persistent compilation cache: plain events, and two durations.
CACHE_REQUESTS = "/jax/compilation_cache/compile_requests_use_cache"
CACHE_HITS = "/jax/compilation_cache/cache_hits"
CACHE_MISSES = "/jax/compilation_cache/cache_misses"
CACHE_TASKS_USING = "/jax/compilation_cache/tasks_using_cache"
CACHE_TASK_DISABLED = "/jax/compilation_cache/task_disabled_cache"
CACHE_RETRIEVAL = "/jax/compilation_cache/cache_retrieval_time_sec"
CACHE_SAVED = "/jax/compilation_cache/compile_time_saved_sec"

NUMBA_COMPILE = "numba:compile"
# Taken at load: a notebook that monkeypatches time.perf_counter does not change a compile's seconds.
_perf_counter = time.perf_counter


def register_numba_listener(on_start: Callable[[Any], None] | None, on_end: Callable[[Any, float], None]) -> Any:
    """Register a ``numba:compile`` listener that reports outermost compiles only (nested compiles of
    overloads emit their own, overlapping events): ``on_start(event)``, then ``on_end(event, seconds)``.
    Call it after the notebook (or worker) imported numba; returns the listener."""
    from numba.core import event

    class _OutermostCompile(event.Listener):
        def __init__(self) -> None:
            self.depth = 0
            self.started = 0.0

        def on_start(self, ev: Any) -> None:
            self.depth += 1
            if self.depth == 1:
                self.started = _perf_counter()
                if on_start is not None:
                    on_start(ev)

        def on_end(self, ev: Any) -> None:
            if self.depth == 1:
                on_end(ev, _perf_counter() - self.started)
            self.depth = max(self.depth - 1, 0)

    listener = _OutermostCompile()
    event.register(NUMBA_COMPILE, listener)
    return listener
