"""Compile StableHLO modules for a TPU topology on a machine without one (``nbscope.collect.target_compile``).

Run by nbscope with the Python of its target environment, which holds jax, jaxlib and libtpu; it imports nothing
of nbscope. Arguments: the topology (``v5e:1x1``) and its chips per host (``1,1,1``). It reads JSON lines
``{"key": ..., "module": <zlib-compressed StableHLO bytecode, base64>}`` from stdin and writes, as each compile
ends, one JSON line: the compile's seconds (wall, and the process's CPU time, which a busy machine does not
stretch), XLA:TPU's own cost of the program (flops and bytes as the chip runs
them, float64's emulation included), its device memory, or the compiler's error. The first line it writes names
the device, jax and libtpu.

XLA:TPU compiles for a topology's devices without a chip (``jax.experimental.topologies``, as MaxText's
``train_compile.py`` does); libtpu warns at import that it finds no TPU worker, and that is expected.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import sys
import time
import zlib
from typing import Any


def _cost(executable: Any) -> dict[str, float]:
    cost = executable.cost_analysis()
    cost = cost[0] if isinstance(cost, list) and cost else cost
    names = {"flops": "flops", "bytes accessed": "bytes", "transcendentals": "transcendentals"}
    names["optimal_seconds"] = "optimal_s"
    # XLA marks a figure it could not work out with a negative value: left out, as unknown.
    return {names[k]: float(v) for k, v in (cost or {}).items() if k in names and float(v) >= 0}


def _memory(executable: Any) -> int | None:
    stats = executable.get_compiled_memory_stats()
    sizes = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes")
    if not all(hasattr(stats, name) for name in sizes):
        return None
    return int(sum(getattr(stats, name) for name in sizes) - getattr(stats, "alias_size_in_bytes", 0))


def main() -> int:
    topology, bounds = sys.argv[1], tuple(int(b) for b in sys.argv[2].split(","))
    import jax
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax.experimental import topologies
    from jaxlib import xla_client
    from jaxlib.mlir import ir

    description = topologies.get_topology_desc(platform="tpu", topology_name=topology, chips_per_host_bounds=bounds)
    device: Any = description.devices[0]
    devices = xla_client.DeviceList((device,))
    libtpu = importlib.metadata.version("libtpu")
    print(json.dumps({"device_kind": device.device_kind, "jax": jax.__version__, "libtpu": libtpu}), flush=True)
    for line in sys.stdin:
        item: dict[str, str] = json.loads(line)
        found: dict[str, object] = {"key": item["key"]}
        started, cpu = time.perf_counter(), time.process_time()
        try:
            with mlir.make_ir_context():
                module = ir.Module.parse(zlib.decompress(base64.b64decode(item["module"])))
                options = compiler.get_compile_options(num_replicas=1, num_partitions=1, device_assignment=[device])
                executable = compiler.backend_compile_and_load(device.client, module, devices, options, [])
            found["compile_s"] = time.perf_counter() - started
            found["compile_cpu_s"] = time.process_time() - cpu
            found.update(_cost(executable))
            found["device_bytes"] = _memory(executable)
        except Exception as exc:  # the compiler's refusal is the finding: its message, whole
            found["compile_s"] = time.perf_counter() - started
            found["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
