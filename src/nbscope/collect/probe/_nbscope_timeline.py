"""Per-cell ``jax.profiler`` traces inside the kernel (``nbscope profile --timeline``).

Loaded by ``_nbscope_probe`` when ``NBSCOPE_PROBE_TIMELINE=<folder>`` is set. Standard library only at
import, and it never imports JAX itself: a cell gets a trace only once the notebook has imported jax
(``start`` does nothing before). Each traced cell writes ``<folder>/cell-<seq>/plugins/profile/<ts>/
<host>.xplane.pb``, the layout ``jax.profiler.trace`` uses; nbscope reads it *outside* the kernel
(``nbscope.collect.timeline.summarise_cell``), so summarising never adds to a cell's time.

Two ways to record:

* traces that nbscope deletes after summarising (the folder is the run's temporary probe home): a bare
  profiler session whose XSpace is written as is. ``jax.profiler.stop_trace`` also converts every trace
  to ``trace.json.gz``, which doubled the stop time of a 400 000-event trace (12 s → 4–6 s measured);
* traces kept with ``--keep-traces``: ``jax.profiler.start_trace``/``stop_trace``, whose
  ``trace.json.gz`` opens in Perfetto.

Both methods are called from IPython's pre/post-run events: they must never raise, or IPython would
print a traceback into the notebook's outputs. Starting a trace starts JAX's backends, so a cell gets a
trace only once the notebook's own code has started them: the cell that first runs JAX work is not
traced (its record says why), and a cell may still configure JAX before that.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

try:  # beside this file in the kernel's probe home
    from _nbscope_words import whole_words
except ImportError:  # imported as part of the nbscope package
    from nbscope.collect.probe._nbscope_words import whole_words

BACKENDS_NOT_STARTED = "JAX had not started its backends when the cell began (tracing would have started them)"


class Timeline:
    """One ``jax.profiler`` trace per cell, in its own sub-folder of ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(folder)  # the path goes back to nbscope, whose cwd differs
        # The probe home marks its temporary folders with the probe's own copy (see nbscope.collect.inject).
        self.temporary = os.path.basename(self.folder) == "traces" and os.path.isfile(
            os.path.join(os.path.dirname(self.folder), "lib", "_nbscope_probe.py")
        )
        self.current: str | None = None  # the running trace's folder
        self.session: Any = None  # the bare profiler session (temporary traces only)
        self.skipped: str | None = None  # why the current cell has no trace (reported by stop)
        self.options: Any = None

    def start(self, seq: int) -> None:
        self.current, self.session, self.skipped = None, None, None
        jax = sys.modules.get("jax")
        if jax is None:  # importing jax here would cost the cell ~0.7 s and change what it measures
            return
        try:
            profiler = sys.modules.get("jax.profiler") or getattr(jax, "profiler", None)
            if profiler is None:  # a half-imported jax (the import failed or is still running)
                return
            if not _backends_started():
                # Tracing starts JAX's backends; before the notebook has done so itself, that would run
                # ahead of the cell's own code (a cell may set jax_num_cpu_devices, XLA_FLAGS, ...).
                self.skipped = BACKENDS_NOT_STARTED
                return
            if self.options is None:
                self.options = _options(profiler)
            target = os.path.join(self.folder, f"cell-{seq:04d}")
            if os.path.exists(target):  # a second kernel writing to a kept-traces folder (--repeat)
                target = f"{target}-{os.getpid()}"
            self.session = _bare_session(self.options) if self.temporary else None
            if self.session is None:
                try:
                    profiler.start_trace(target, profiler_options=self.options)
                except TypeError:  # a JAX whose start_trace takes no options: its defaults apply
                    profiler.start_trace(target)
            self.current = target
        except Exception as exc:  # e.g. the notebook runs its own jax.profiler trace
            self.skipped = whole_words(f"{type(exc).__name__}: {exc}", 300)

    def stop(self, seq: int) -> dict[str, Any] | None:
        """Stop the cell's trace; the result is stored in the probe line as ``timeline_trace``."""
        if self.current is None:
            return {"skipped": self.skipped, "seq": seq} if self.skipped else None
        target, self.current = self.current, None
        session, self.session = self.session, None
        started = time.perf_counter()
        try:
            if session is not None:
                _write_xspace(target, session.stop())
            else:
                profiler = sys.modules.get("jax.profiler")
                if profiler is None:
                    raise RuntimeError("jax.profiler is gone")
                profiler.stop_trace()
        except Exception as exc:  # the notebook stopped our trace itself, or the trace failed
            return {"path": target, "seq": seq, "error": whole_words(f"{type(exc).__name__}: {exc}", 300)}
        # Collecting and writing the trace happens here, in post_run_cell: outside the probe's code
        # time but inside the kernel's request; the summary reports it so a reader can tell them apart.
        return {"path": target, "seq": seq, "stop_s": time.perf_counter() - started}


def _backends_started() -> bool:
    """Whether JAX has started its backends (never starts them itself)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    started = getattr(bridge, "backends_are_initialized", None)
    if callable(started):
        return bool(started())
    return bool(getattr(bridge, "_backends", None))  # an older JAX: its registry of started backends


def _options(profiler: Any) -> Any:
    """Profiler options without the Python tracer.

    By default jax.profiler records every Python function call: a cell that runs a Python loop would
    record millions of events and run many times slower. The host and device tracers stay on: they hold
    the XLA ops, dispatches, transfers and waits that the summary reads.
    """
    factory = getattr(profiler, "ProfileOptions", None)
    if factory is None:  # older JAX: start_trace has no options, the defaults apply
        return None
    options = factory()
    try:
        options.python_tracer_level = 0
    except (AttributeError, TypeError):
        pass
    return options


def _bare_session(options: Any) -> Any:
    """A profiler session without jax.profiler's export step, or None where this JAX lacks one."""
    if options is None:
        return None
    try:
        from jax._src import xla_bridge
        from jax._src.lib import _profiler
    except ImportError:
        return None
    # As start_trace does: initialise the backends first, or their tracers are not registered.
    xla_bridge.get_backend()
    return _profiler.ProfilerSession(options)


def _write_xspace(target: str, data: bytes) -> str:
    """Write a serialised XSpace where jax.profiler would: ``plugins/profile/<ts>/<host>.xplane.pb``."""
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    folder = os.path.join(target, "plugins", "profile", stamp)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{socket.gethostname() or 'host'}.xplane.pb")
    with open(path, "wb") as handle:
        handle.write(data)
    return path
