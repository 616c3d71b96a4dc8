"""JAX set-up shared by the JAX groups: import with the requested dtype, compile probe, inputs on device.

Imported only inside workers, after the worker checked that jax imports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, cast

from nbscope.collect.bench._arrays import host_array
from nbscope.collect.bench._context import BenchContext
from nbscope.collect.probe import _nbscope_events as events

if TYPE_CHECKING:
    import jax
    import numpy as np
    from jax import Array

__all__ = ["compile_probe", "device_name", "host_array", "on_device", "setup"]

_PHASES = events.JAX_COMPILE_PHASES
_CACHE_HIT = events.CACHE_HITS

_events: list[tuple[str, float]] = []  # (event, seconds); listeners are process-global: register once
_registered = False


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    if event in _PHASES:
        _events.append((event, float(duration_secs)))


def _on_event(event: str, **_: object) -> None:
    if event == _CACHE_HIT:
        _events.append((event, 0.0))


def setup(ctx: BenchContext) -> None:
    """Import jax with x64 matching the dtype, start its backend, and note the device and timings."""
    global _registered
    import jax
    import jax.monitoring

    # x64 is process-wide: that is why every dtype gets its own worker.
    jax.config.update("jax_enable_x64", ctx.dtype == "float64")
    if not _registered:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _registered = True
    start = time.perf_counter()
    try:
        devices = jax.devices()
    except Exception as exc:  # jax 0.10 raises a bare AssertionError when no requested platform starts
        from nbscope.schema import process_environment  # only here: the worker starts without the codec

        platforms = process_environment.read().jax_platforms or "(default)"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuntimeError(f"no JAX backend for JAX_PLATFORMS={platforms}: {detail}") from exc
    ctx.info["backend_init_s"] = time.perf_counter() - start
    ctx.info["jax_version"] = jax.__version__
    ctx.info["backend"] = jax.default_backend()
    ctx.info["x64"] = bool(jax.config.read("jax_enable_x64"))
    ctx.info["devices"] = [device_name(d) for d in devices]


def device_name(device: jax.Device) -> str:
    kind = getattr(device, "device_kind", "") or ""
    name = f"{device.platform}:{device.id}"
    return f"{name} ({kind})" if kind and kind.lower() != device.platform else name


@contextmanager
def compile_probe() -> Iterator[dict[str, float]]:
    """Compile time seen by jax.monitoring during the block: trace + lower + backend compile."""
    mark = len(_events)
    result: dict[str, float] = {}
    try:
        yield result
    finally:
        seen = _events[mark:]
        phases = {name: 0.0 for name in _PHASES.values()}
        hits = 0
        for event, seconds in seen:
            if event == _CACHE_HIT:
                hits += 1
            elif event in _PHASES:
                phases[_PHASES[event]] += seconds
        backend_events = sum(1 for event, _ in seen if event == events.JAX_BACKEND)
        result.update(phases)
        result["compile_s"] = sum(phases.values())
        result["compiles"] = backend_events - hits  # a persistent-cache hit also reports a backend duration
        result["cache_hits"] = hits


def on_device(jax: ModuleType, array: np.ndarray, device: jax.Device | None = None) -> jax.Array:
    """Put an input on the device before timing, so first calls measure compile + run, not transfer."""
    value = jax.device_put(array, device) if device is not None else jax.device_put(array)
    return cast("Array", value.block_until_ready())
