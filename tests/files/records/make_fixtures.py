"""Builds the synthetic GPU fixtures from real CPU runs (run once: python make_fixtures.py).

The ``cpu_*.json`` records are real: ``nbscope profile tests/files/diag_<name>.ipynb`` on a 2-core CPU
machine without a GPU. The ``synthetic_*.json`` records are those runs with the fingerprint's GPU
section replaced by a Tesla T4 (the fake NVML module in tests/fake_nvml, through nbscope's own
fingerprint code) and per-cell figures edited to what the seed measured on a T4 runner. Every synthetic
file says so in its ``_fixture_note``; none of its GPU figures was measured.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

from nbscope.collect import fingerprint as fp
from nbscope.schema.build import totals

HERE = Path(__file__).resolve().parent
FAKE_NVML = HERE.parents[1] / "fake_nvml" / "pynvml.py"
T4_TOTAL = 15360 * 2**20


def _fake_nvml() -> Any:
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_NVML)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.RETURN_BYTES, module.FAIL = False, ""
    return module


def _load(name: str) -> dict[str, Any]:
    return json.loads((HERE / name).read_text())


def on_gpu(document: dict[str, Any], *, device: int = 0) -> dict[str, Any]:
    """The record as if run where JAX picks a GPU by default: fake NVML's device, a CUDA plugin installed."""
    record = copy.deepcopy(document)
    gpu = fp._gpus(_fake_nvml())
    gpu["devices"] = [gpu["devices"][device]]
    gpu["devices"][0]["index"] = 0
    record["fingerprint"]["gpu"] = gpu
    record["fingerprint"]["versions"]["jax_plugins"] = {"jax-cuda12-pjrt": "0.10.2", "jax-cuda12-plugin": "0.10.2"}
    record["fingerprint"]["digest"] = fp.digest(record["fingerprint"])
    return record


def set_cell(record: dict[str, Any], index: int, *, wall: float, compile_s: float | None = None) -> None:
    cell = record["measurements"]["cells"][index]
    compile_s = cell["compile_s"] if compile_s is None else compile_s
    cell["wall_s"] = cell["roundtrip_s"] = wall
    cell["code_s"] = wall
    cell["compile_s"] = compile_s
    cell["run_s"] = max(0.0, wall - compile_s)
    cell["overhead_s"] = 0.0
    cell["compile_share"] = min(1.0, compile_s / wall) if wall else 0.0


def retotal(record: dict[str, Any]) -> None:
    m = record["measurements"]
    m["totals"] = totals(m["cells"], m["runner"], m["totals"]["cache_state"])


def write(name: str, record: dict[str, Any], note: str) -> None:
    record = {"_fixture_note": note, **record}
    (HERE / name).write_text(json.dumps(record, indent=1) + "\n")


def latency_loop() -> None:
    # Seed: the lecture's lax.scan of 10 M steps took ≈ 81.6 s on a T4 (≈ 8 µs per step); 1 M steps ≈ 8.2 s.
    record = on_gpu(_load("cpu_latency_loop.json"))
    set_cell(record, 0, wall=3.4)  # import and CUDA start
    set_cell(record, 2, wall=0.49 + 8.2, compile_s=0.49)  # logistic_path, first call
    set_cell(record, 3, wall=8.2, compile_s=0.0)  # logistic_path, second call
    set_cell(record, 4, wall=0.66, compile_s=0.64)  # vectorised bump: fast on the GPU
    set_cell(record, 5, wall=0.002, compile_s=0.0)
    retotal(record)
    write(
        "synthetic_t4_latency_loop.json",
        record,
        "SYNTHETIC, not measured on a GPU: the real CPU run cpu_latency_loop.json of tests/files/diag_latency_loop.ipynb "
        "with a Tesla T4 fingerprint (fake NVML) and cells 3-4 (logistic_path, lax.scan of 1 M steps) set to 8.2 s each "
        "from the seed's T4 figure (81.6 s for 10 M steps); vectorised cells 5-6 set faster than on CPU.",
    )


def x64() -> None:
    # float64 on a T4 runs at 1/32 of float32: the CPU's 0.35 s cumsum made ~5x slower.
    record = on_gpu(_load("cpu_x64.json"))
    set_cell(record, 0, wall=3.4)
    set_cell(record, 1, wall=1.72 + 1.9, compile_s=1.72)
    set_cell(record, 2, wall=1.9, compile_s=0.0)
    retotal(record)
    write(
        "synthetic_t4_x64.json",
        record,
        "SYNTHETIC, not measured on a GPU: the real CPU run cpu_x64.json of tests/files/diag_x64.ipynb (jax_enable_x64, "
        "float64 compiles) with a Tesla T4 fingerprint (fake NVML, fp64 class 1/32) and the float64 cells' run "
        "times set to 1.9 s.",
    )


def gpu_memory() -> None:
    # JAX preallocates 75 % of GPU memory at the first operation; another process held 4 GiB already.
    record = on_gpu(_load("cpu_latency_loop.json"))
    device = record["fingerprint"]["gpu"]["devices"][0]
    device["memory_used_bytes"] = 4 * 2**30
    device["memory_free_bytes"] = T4_TOTAL - 4 * 2**30
    preallocated = int(0.75 * T4_TOTAL)
    for cell in record["measurements"]["cells"]:
        first = cell["index"] == 2
        before = 0 if cell["index"] <= 2 else preallocated
        after = 0 if cell["index"] < 2 else preallocated
        cell["gpu_memory"] = {"before_bytes": before, "after_bytes": after}
        del first
    record["fingerprint"]["digest"] = fp.digest(record["fingerprint"])
    write(
        "synthetic_t4_gpu_memory.json",
        record,
        "SYNTHETIC, not measured on a GPU: the real CPU run cpu_latency_loop.json with a Tesla T4 fingerprint (fake "
        "NVML, 15360 MiB) showing 4 GiB used by another process at the start, and per-cell GPU memory of the kernel "
        "set to JAX's default preallocation (75 % of the device) from the first JAX operation on.",
    )


def slow_compile_alarm() -> None:
    # XLA's slow_operation_alarm text, as XLA prints it; the probe keeps the lines that carry its markers.
    record = copy.deepcopy(_load("cpu_unrolled_loop.json"))
    record["measurements"]["cells"][1]["alarms"] = [
        "E0000 00:00:1733000000.000000 1234 slow_operation_alarm.cc:73] Constant folding an instruction is taking > 1s:",
        "[Compiling module jit_simulate] Very slow compile? If you want to file a bug, run with envvar "
        "XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.",
    ]
    write(
        "synthetic_cpu_slow_compile_alarm.json",
        record,
        "SYNTHETIC: the real CPU run cpu_unrolled_loop.json of tests/files/diag_unrolled_loop.ipynb with two XLA "
        "slow-compile alarm lines added to cell 2 (XLA did not print them in the real run).",
    )


if __name__ == "__main__":
    latency_loop()
    x64()
    gpu_memory()
    slow_compile_alarm()
