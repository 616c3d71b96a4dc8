"""What each cell's compiled JAX programs are and how often they ran (``nbscope profile --forecast``).

Loaded by ``_nbscope_probe`` when ``NBSCOPE_PROBE_PROGRAMS=<folder>`` is set. Standard library only at
import, and it never imports JAX: a cell is recorded only once the notebook has imported jax. Per cell
it writes, for nbscope to read *outside* the kernel (``nbscope.collect.program``):

* ``cell-<seq>.xplane.pb``: a ``jax.profiler`` session around the cell's code, without the Python
  tracer. Its host events name every program run (XLA:CPU records each thunk with the program's module
  and id), which is how executions are counted; a ``--timeline`` trace, when one is recorded, serves
  instead (two profiler sessions cannot run at once).
* ``programs-<seq>.xplane.pb``, only after a cell that compiled something (or loaded it from the
  persistent cache): an empty session with ``enable_hlo_proto``, whose metadata holds the optimised HLO
  of every program alive in the process. Collecting them costs ~35 µs per live program (measured with
  jax 0.10.2 on CPU), so it is done only where a cell added programs.

The session starts without initialising JAX's backends: a notebook may still change ``jax_platforms``
after ``import jax``, and starting them early would change what it runs. XLA:CPU's host events are
recorded all the same; a cell that itself starts the backend has its device events missing on a GPU.

Both methods run in IPython's pre/post-run events: they must never raise.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

TRACE_NAME = "cell-{seq:04d}.xplane.pb"
PROGRAMS_NAME = "programs-{seq:04d}.xplane.pb"


class Programs:
    """One profiler session per cell, and the optimised HLO of new programs after compiling cells."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(folder)  # the path goes back to nbscope, whose cwd differs
        os.makedirs(self.folder, exist_ok=True)
        self.session: Any = None
        self.skipped: str | None = None
        self.shared = False  # the --timeline trace stands for this cell's trace

    def start(self, seq: int, *, shared: bool = False) -> None:
        self.session, self.skipped, self.shared = None, None, shared
        if shared or sys.modules.get("jax") is None:
            return
        try:
            self.session = _session(hlo_protos=False)
        except Exception as exc:  # e.g. the notebook runs its own jax.profiler trace
            self.skipped = f"{type(exc).__name__}: {exc}"[:300]

    def stop(self, seq: int, *, compiled: bool, timeline_trace: Any = None) -> dict[str, Any] | None:
        """Stop the cell's session; the result goes into the probe line as ``programs``."""
        session, self.session = self.session, None
        if sys.modules.get("jax") is None:
            return None
        result: dict[str, Any] = {"seq": seq}
        started = time.perf_counter()
        if session is not None:
            try:
                result["trace"] = _write(self.folder, TRACE_NAME.format(seq=seq), session.stop())
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
        if compiled:
            started = time.perf_counter()
            try:
                hlo = _session(hlo_protos=True)
                result["programs"] = _write(self.folder, PROGRAMS_NAME.format(seq=seq), hlo.stop())
            except Exception as exc:
                result["programs_error"] = f"{type(exc).__name__}: {exc}"[:300]
            result["programs_s"] = time.perf_counter() - started
        return result


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


def _write(folder: str, name: str, data: bytes) -> str:
    path = os.path.join(folder, name)
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
