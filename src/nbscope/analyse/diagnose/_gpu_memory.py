"""GPU memory preallocation or contention.

JAX preallocates 75 % of GPU memory per process unless told otherwise; a second JAX kernel on the same
GPU then fails or crawls, and memory already used by other processes leaves this one short.
"""

from __future__ import annotations

from collections.abc import Iterator

from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, Skip

NAME = "gpu-memory"
PREALLOCATED_SHARE = 0.6  # a process holding this share of the GPU has preallocated (default 0.75)
OTHERS_SHARE = 0.10  # memory used by other processes at the start worth naming
FULL_SHARE = 0.90
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "out of memory", "Out of memory", "OOM", "CUDA_ERROR_OUT_OF_MEMORY")
ALLOCATOR_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


def _gib(value: float | None) -> str:
    return f"{value / 2**30:.1f} GiB" if value is not None else "not recorded"


def evaluate(ctx: Context) -> Iterator[Outcome]:
    device = ctx.machine.gpu  # JAX's default device when it runs on a GPU
    if device is None:
        return  # no GPU: nothing to contend for
    if ctx.backend.platform != "gpu":
        return  # JAX ran on the CPU; the GPU was not used by this notebook
    total = device.memory_total_bytes
    if total is None or total <= 0:
        yield Skip(NAME, f"GPU memory size not recorded for {device.name}")
        return
    env = ctx.settings.environment(ctx.machine)
    allocator = {k: env[k] for k in ALLOCATOR_VARIABLES if k in env}
    others = device.memory_used_bytes
    used = [(cell, after) for cell in ctx.run.cells if (after := cell.gpu_memory.after_bytes) is not None]
    oom = [c for c in ctx.run.cells if c.error and any(m in c.error.message + c.error.name for m in OOM_MARKERS)]
    if not used and not oom:
        yield Skip(NAME, "needs per-cell GPU memory of the kernel process (NVML in the kernel); none recorded")
        return
    peak_cell, peak = max(used, key=lambda item: item[1]) if used else (None, 0)
    evidence: dict[str, object] = {
        "device": device.name,
        "memory_total_bytes": total,
        "kernel_peak_bytes": peak,
        "kernel_peak_share": round(peak / total, 3),
        "peak_cell": peak_cell.index if peak_cell else None,
        "others_at_start_bytes": others,
        "allocator_settings": allocator or None,
        "out_of_memory_cells": [c.index for c in oom],
        "seconds_at_stake": 0.0,
    }
    preallocated = peak / total >= PREALLOCATED_SHARE and not allocator
    crowded = others is not None and others / total >= OTHERS_SHARE
    full = others is not None and (others + peak) / total >= FULL_SHARE
    if oom:
        where = oom[0].label
        yield Finding(
            rule=NAME,
            title="GPU out of memory",
            cell_index=oom[0].index,
            severity="high",
            confidence=0.95,
            evidence=evidence,
            summary=f"{where} ran out of GPU memory on the {device.name}"
            + (f" with {_gib(others)} already used by other processes" if crowded else ""),
            highlights=[("device", f"{device.name}, {_gib(total)}"), ("others at start", _gib(others))],
            action="one JAX notebook per GPU, or XLA_PYTHON_CLIENT_MEM_FRACTION per process",
            fix="Run one JAX notebook per GPU at a time, or give each process a share: "
            "XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 (or XLA_PYTHON_CLIENT_PREALLOCATE=false) in its environment; free large "
            "arrays (`del x`) between steps.",
        )
        return
    if preallocated or full:
        problem = []
        if preallocated:
            problem.append(
                f"the kernel holds {_gib(peak)} of {_gib(total)} ({peak / total:.0%}): JAX's default preallocation"
            )
        if crowded:
            problem.append(f"other processes held {_gib(others)} when the run started")
        yield Finding(
            rule=NAME,
            title="GPU memory preallocation" if preallocated and not crowded else "GPU memory contention",
            cell_index=None,
            severity="high" if full else "medium",
            confidence=0.9,
            evidence=evidence,
            summary=f"on the {device.name}, " + "; ".join(problem),
            highlights=[
                ("kernel peak", f"{_gib(peak)} of {_gib(total)} ({peak / total:.0%})"),
                ("others at start", _gib(others)),
                ("allocator settings", ", ".join(f"{k}={v}" for k, v in allocator.items()) or "none"),
            ],
            action="set XLA_PYTHON_CLIENT_PREALLOCATE=false (or a MEM_FRACTION) per kernel",
            fix="For parallel builds set XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION=<share> "
            "per kernel, and never run two JAX kernels on one GPU unguarded (one notebook per GPU at a time).",
        )


RULE = Rule(NAME, evaluate)
