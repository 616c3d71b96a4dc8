"""Host↔device copies: ``device_put`` (host→device) and ``np.asarray`` of a fresh device array.

On a CPU backend the "device" is host memory and device→host may share the buffer instead of
copying: the figure is kept (it is what code pays there) with a note.
"""

from __future__ import annotations

import jax
import numpy as np

from nbscope.collect.bench import _jax
from nbscope.collect.bench._context import BenchContext


def run(ctx: BenchContext) -> None:
    _jax.setup(ctx)
    device = jax.devices()[0]
    name = _jax.device_name(device)
    nbytes = int(ctx.param("bytes"))
    host = _jax.host_array(nbytes // np.dtype(ctx.dtype).itemsize, ctx.dtype, seed=5)
    gigabytes = host.nbytes / 1e9

    ctx.bench(
        "host_to_device",
        f"host→device {host.nbytes / 2**20:.0f} MiB",
        lambda: jax.device_put(host, device).block_until_ready(),
        params={"bytes": host.nbytes},
        device=name,
        work=(gigabytes, "GB/s"),
    )

    on_device = _jax.on_device(jax, host, device)
    copy = jax.jit(lambda a: a * 2)

    def fresh() -> object:
        # A new device array every call: an array converted once caches its host copy.
        return copy(on_device).block_until_ready()

    cpu_note = (
        "CPU backend: device memory is host memory; the result may share the buffer"
        if device.platform == "cpu"
        else None
    )
    ctx.bench(
        "device_to_host",
        f"device→host {host.nbytes / 2**20:.0f} MiB",
        lambda array: np.asarray(array),
        setup=fresh,
        params={"bytes": host.nbytes},
        device=name,
        work=(gigabytes, "GB/s"),
        note=cpu_note,
        max_inner=max(1, 64 * 2**20 // host.nbytes),  # fresh arrays held at once: at most 64 MiB
    )
