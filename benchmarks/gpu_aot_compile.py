"""XLA:GPU's compile for a GPU this machine does not have: JAX's CUDA plugin compiles from a target description
(a ``GpuTargetConfigProto`` in text form) for a compile-only device, with no GPU and no CUDA driver. Each program
is compiled for the T4 (sm_75) and the H100 (sm_90), float32 and float64, in a fresh process, beside its CPU
compile; the GPU-optimised module's work is counted by XLA's HloCostAnalysis (through the CPU client: the
compile-only GPU executable answers ``UNIMPLEMENTED: GetCostAnalysis is not supported``).

    python3 -m venv /tmp/cuda-aot && /tmp/cuda-aot/bin/pip install jax==0.10.2 jaxlib==0.10.2 \\
        jax-cuda12-plugin==0.10.2 jax-cuda12-pjrt==0.10.2     # ~480 MB; no nvidia-* wheels needed
    /tmp/cuda-aot/bin/python benchmarks/gpu_aot_compile.py  # one JSON line per target, dtype and program

Its output on the 2-core CI-class machine (2026-12-08) is tests/files/device/gpu_aot/gpu_aot_compile.jsonl.

Without ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` the plugin's start checks the CUDA driver (``cuInit``), fails on a
machine without one and is not registered: ``get_topology_desc(platform="cuda")`` then raises "topology not
implemented for cuda". The figures below are the datasheets' (XLA's ``specs/h100_sxm.txtpb`` for the H100; XLA
ships no T4 spec). Without autotuning (no device) XLA picks default GEMM tiles: the compile is the real compiler's,
its kernels' speed is not what autotuned ones reach.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

TARGETS: dict[str, dict[str, Any]] = {
    # compute capability, SMs, FP32 lanes per SM, clock GHz, memory bytes, bandwidth B/s, L2 bytes, shared per SM
    "t4": {"cc": (7, 5), "sms": 40, "fpus": 64, "ghz": 1.59, "memory": 15_828_320_256, "bw": 320e9, "l2": 4 << 20,
           "shared": 65_536, "threads": 1024, "name": "Tesla T4"},
    "h100": {"cc": (9, 0), "sms": 132, "fpus": 128, "ghz": 1.98, "memory": 85_520_809_984, "bw": 3.35e12,
             "l2": 50 << 20, "shared": 233_472, "threads": 2048, "name": "NVIDIA H100 80GB HBM3"},
}  # fmt: skip
PROGRAMS = ["elementwise", "matmul", "scan", "while_loop", "solve"]


def target_config(key: str) -> str:
    t = TARGETS[key]
    major, minor = t["cc"]
    optin = t["shared"] - 1024 if major >= 8 else t["shared"]
    return f"""gpu_device_info {{
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  threads_per_block_limit: 1024 threads_per_warp: 32 threads_per_core_limit: {t["threads"]}
  shared_memory_per_block: 49152 shared_memory_per_block_optin: {optin} shared_memory_per_core: {t["shared"]}
  core_count: {t["sms"]} fpus_per_core: {t["fpus"]} clock_rate_ghz: {t["ghz"]}
  device_memory_size: {t["memory"]} memory_bandwidth: {int(t["bw"])} l2_cache_size: {t["l2"]}
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  thread_dim_limit_x: 1024 thread_dim_limit_y: 1024 thread_dim_limit_z: 64
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 patch: 0 }}
device_description_str: "{t["name"]}"
"""


def one(key: str, dtype: str, program: str) -> dict[str, Any]:
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax._src.lib import _jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    jax.config.update("jax_enable_x64", dtype == "float64")
    started = time.perf_counter()
    topology = topologies.get_topology_desc(platform="cuda", target_config=target_config(key), topology="1x1x1")
    topology_s = time.perf_counter() - started
    gpu = SingleDeviceSharding(topology.devices[0])

    def elementwise(x: Any, y: Any) -> Any:
        return jnp.cos(x**2 + y**2) / (1 + x**2 + y**2)

    def matmul(a: Any, b: Any) -> Any:
        return a @ b

    def scan(x0: Any) -> Any:
        return lax.scan(lambda c, _: (4.0 * c * (1 - c), c), x0, None, length=100_000)[1]

    def while_loop(v: Any) -> Any:
        def body(state: Any) -> Any:
            v, _, i = state
            new = jnp.maximum(1.0 + 0.96 * jnp.roll(v, 1), 0.5 * v)
            return new, jnp.max(jnp.abs(new - v)), i + 1

        return lax.while_loop(lambda s: (s[1] > 1e-6) & (s[2] < 10_000), body, (v, jnp.ones((), v.dtype), 0))

    def solve(a: Any, b: Any) -> Any:
        return jnp.linalg.solve(a, b)

    shapes = {
        "elementwise": ((3000, 3000), (3000, 3000)),
        "matmul": ((2000, 2000), (2000, 2000)),
        "scan": ((),),
        "while_loop": ((1000,),),
        "solve": ((500, 500), (500,)),
    }[program]
    function = {"elementwise": elementwise, "matmul": matmul, "scan": scan, "while_loop": while_loop, "solve": solve}[
        program
    ]
    row: dict[str, Any] = {"target": key, "dtype": dtype, "program": program, "topology_s": round(topology_s, 3)}
    try:
        on_cpu = [jax.ShapeDtypeStruct(s, jnp.dtype(dtype)) for s in shapes]
        started = time.perf_counter()
        cpu_lowered = jax.jit(function).lower(*on_cpu)
        cpu_lowered.compile()
        row["cpu_compile_s"] = round(time.perf_counter() - started, 3)
        cost = cpu_lowered.cost_analysis() or {}
        row["lowered_flops"], row["lowered_bytes"] = cost.get("flops"), cost.get("bytes accessed")
        on_gpu = [jax.ShapeDtypeStruct(s, jnp.dtype(dtype), sharding=gpu) for s in shapes]
        started = time.perf_counter()
        compiled = jax.jit(function).lower(*on_gpu).compile()
        row["gpu_compile_s"] = round(time.perf_counter() - started, 3)
        modules = compiled.runtime_executable().hlo_modules()
        counted = _jax.hlo_module_cost_analysis(jax.devices("cpu")[0].client, modules[0])
        row["gpu_flops"], row["gpu_bytes"] = counted.get("flops"), counted.get("bytes accessed")
        memory = compiled.memory_analysis()
        row["gpu_temp_bytes"] = memory.temp_size_in_bytes if memory is not None else None
        text = compiled.as_text()
        row["kernels"] = sorted(k for k in ("__cublas$lt", "__cublas$gemm", "triton", "cusolver", "while") if k in text)
        row["fusions"] = text.count(" fusion(")
    except Exception as error:  # the compiler's message is the result
        row["error"] = f"{type(error).__name__}: {str(error)[:400]}"
    return row


def main() -> None:
    for key in TARGETS:
        for dtype in ("float32", "float64"):
            for program in PROGRAMS:
                run = subprocess.run(
                    [sys.executable, __file__, key, dtype, program], capture_output=True, text=True, timeout=300
                )
                lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
                print(lines[-1] if lines else json.dumps({"target": key, "error": run.stderr.strip()[-400:]}))


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(json.dumps(one(*sys.argv[1:])), flush=True)
    else:
        main()
