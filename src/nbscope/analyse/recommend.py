"""The backend a notebook should use (CPU, GPU, or GPU with some functions pinned to the CPU): from the measured
cells of a CPU run and a GPU run, or, with no GPU run, from the GPU forecast of a CPU run with program data.

A recommendation, not a diagnosis: ``diagnose`` names causes; this chooses between backends from figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope import _units as units
from nbscope.analyse import compare as compare_module
from nbscope.record.cells import CellPair, pair_cells
from nbscope.record.model import Cell
from nbscope.record.run import RunRecord
from nbscope.record.sources import sources_of

if TYPE_CHECKING:
    from nbscope.analyse.diagnose._source import NotebookCode

__all__ = ["recommend", "recommend_forecast"]

PIN_MIN_GAIN_S = 0.1  # a cell moves to the CPU only if that saves at least this ...
PIN_MIN_RATIO = 1.3  # ... and the accelerator is at least this much slower on it
MIXED_MIN_GAIN = 0.05  # mixed must beat the best single backend by 5 % to be worth the extra code


def _jax_work(cell: Cell | None, calls: set[str], jitted: set[str]) -> set[str]:
    """User JAX functions a cell compiles or (by its source) calls."""
    if cell is None:
        return set()
    names = {f.name for f in cell.jax.of_kind("user")} if cell.jax else set()
    names |= calls & jitted
    return names


def _total_s(run: RunRecord) -> float:
    """A run's measured cell times added up (kernel start excluded)."""
    return sum(c.wall_s or 0.0 for c in run.notebook_run().cells)


def recommend(
    a: RunRecord,
    b: RunRecord | None = None,
    *,
    gpus: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Which backend this notebook should use, from the measured per-cell figures of a CPU and a GPU run,
    or, when no GPU run exists, from the GPU forecast of a CPU run recorded with program data.

    Measured (``basis: "measured"``): ``cpu_s`` and ``gpu_s`` add each run's measured cell times;
    ``mixed_s`` is the GPU run with every JAX cell that ran faster on the CPU taken at its CPU time (those
    cells pinned to the CPU).

    Returns ``{"recommendation": "cpu" | "gpu" | "mixed" | None, "reason": str, "basis": "measured" |
    "forecast", "estimates": {"cpu_s", "gpu_s", "mixed_s" (None when nothing is worth pinning)}, "pinned":
    [{"cell", "line", "first_line", "functions", "cpu_s", "gpu_s", "saving_s"}], "faster_on_accelerator":
    [...], "accelerator": "gpu", "same_host": bool, "caveats": [str], "runs": {...}}``. The accelerator key
    is the platform name (``gpu`` for CUDA/ROCm, ``tpu``). Two runs on one backend give ``recommendation``
    None with a reason, unless they are CPU runs and one holds program data: then the forecast decides.

    Forecast (``basis: "forecast"``; ``b`` omitted, or two CPU runs): see :func:`recommend_forecast`.
    """
    compare_module.check_profile(a, "A")
    if b is None:
        return recommend_forecast(a, gpus=gpus)
    compare_module.check_profile(b, "B")
    pa, pb = compare_module.platform_of(a)["platform"], compare_module.platform_of(b)["platform"]
    result: dict[str, Any] = {
        "runs": {"a": {"run_id": a.run_id, "platform": pa}, "b": {"run_id": b.run_id, "platform": pb}},
        "recommendation": None,
        "basis": "measured",
        "estimates": None,
        "pinned": [],
        "caveats": [],
    }
    if pa == pb:
        with_programs = [r for r in (a, b) if r.notebook_run().program_data is not None]
        if pa == "cpu" and with_programs:
            return recommend_forecast(with_programs[0], gpus=gpus)
        result["reason"] = f"both runs used the {pa} backend: nothing to choose between"
        return result
    if "cpu" not in (pa, pb):
        result["reason"] = f"neither run used the CPU ({pa} vs {pb}): no mixed estimate"
        ta, tb = (r.notebook_run().totals.wall_s for r in (a, b))
        if ta is not None and tb is not None:
            result["recommendation"] = pa if ta <= tb else pb
            result["estimates"] = {f"{pa}_s": ta, f"{pb}_s": tb}
        return result
    cpu, acc = (a, b) if pa == "cpu" else (b, a)
    result.update(_measured_choice(cpu, acc, pb if pa == "cpu" else pa))
    return result


_s = units.seconds


# ---- backend recommendation from a forecast ---------------------------------------------------------

_CHOICE = {"mixed": "mixed", "slower": "cpu", "similar": "cpu", "faster": "gpu"}


def recommend_forecast(
    record: RunRecord,
    *,
    gpus: str | Sequence[str] | None = None,
    devices_file: str | Path | None = None,
    made: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The backend choice for a notebook that has no GPU run: from the GPU forecast of a CPU run recorded
    with program data (``nbscope profile --forecast``), for ``gpus`` (else those named when it was
    recorded, else the T4); the choice is made for the first GPU, each GPU's figures are in ``forecast``.

    The same keys as :func:`recommend`, with ``basis: "forecast"``, a reason that says it is a forecast,
    ``estimates`` as ranges (``cpu_s`` measured; ``gpu_low_s`` / ``gpu_high_s`` with everything on the GPU;
    ``mixed_low_s`` / ``mixed_high_s`` with the functions the forecast keeps on the CPU), ``pinned`` per
    such function (its cells, the code change), and ``forecast``: per GPU key its verdict and totals.
    A run without program data, or one that ran on a GPU, is refused with one line; a run with no JAX
    gets ``recommendation`` None and says why. ``made``: this run's forecast, already made for these GPUs
    (a diagnosis made it), used instead of making it again.
    """
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.risks import gpus_of, require_forecast
    from nbscope.analyse.forecastable import uses_jax

    compare_module.check_profile(record, "the run")
    platform = compare_module.platform_of(record)["platform"]
    label = compare_module.label(record, "the run")
    require_forecast(record, platform, label)
    result: dict[str, Any] = {
        "runs": {"cpu": {"run_id": record.run_id, "total_s": round(_total_s(record), 4)}},
        "recommendation": None, "basis": "forecast", "estimates": None, "pinned": [], "faster_on_accelerator": [],
        "accelerator": "gpu", "caveats": [], "forecast": {},
    }
    if not uses_jax(record):
        result["reason"] = ("forecast: the notebook runs no JAX, so NumPy, Numba and Python run on the CPU whatever "
                            "GPU the machine has: nothing to choose between")
        return result
    keys = gpus_of(record, gpus)
    if made is not None and [d["key"] for d in made.get("devices") or []] == list(keys):
        forecast_result: Mapping[str, Any] = made
    else:
        forecast_result = forecast(record, keys, devices_file=devices_file)
    for device in forecast_result["devices"]:
        notebook = forecast_result["notebook"][device["key"]]
        result["forecast"][device["key"]] = {
            "name": device["name"], "verdict": notebook["verdict"], "all_on_gpu": notebook["all_on_gpu"],
            "cpu_s": notebook["cpu_s"], "low_s": notebook["low_s"], "high_s": notebook["high_s"],
            "keep_on_cpu": [e["function"] for e in notebook["keep_on_cpu"]], "plan": notebook["plan"],
        }
    device = forecast_result["devices"][0]
    key, name = device["key"], device["name"]
    notebook = forecast_result["notebook"][key]
    choice = _CHOICE.get(notebook["verdict"], "cpu")
    estimates: dict[str, Any] = {"cpu_s": round(notebook["cpu_s"], 4), "gpu_low_s": round(notebook["low_s"], 4),
                                 "gpu_high_s": None if notebook["high_s"] is None else round(notebook["high_s"], 4)}
    plan = notebook["plan"]
    if plan:
        estimates["mixed_low_s"] = round(plan["low_s"], 4)
        estimates["mixed_high_s"] = None if plan["high_s"] is None else round(plan["high_s"], 4)
    pinned, gains = _forecast_pinned_and_gains(notebook, {c["index"]: c for c in forecast_result["cells"]})
    reason = _forecast_reason(record, name, choice, notebook)
    figures = device["figures"]
    loop = figures["loop_iteration_us"]
    result.update(
        recommendation=choice, reason=reason, estimates=estimates, pinned=pinned, faster_on_accelerator=gains,
        device=key,
        caveats=[
            "a forecast from a CPU run, not a measurement: loops at the device table's per-iteration cost "
            f"({name}: {loop['low']:g}–{loop['high']:g} µs per iteration, {loop['basis']}), work on a roofline of its "
            "peaks, host work carried over as measured on this CPU, XLA:GPU compile derived from this CPU's; "
            "see docs/forecast.md, and measure with a GPU run (nbscope compare CPU_RUN GPU_RUN) when one exists",
        ] + [f"cell {f['index'] + 1}: {f['reason']}" for f in forecast_result.get("not_forecast") or []],
    )
    return result


_range = units.seconds_range


def _measured_choice(cpu: RunRecord, acc: RunRecord, acc_name: str) -> dict[str, Any]:
    """The choice from a CPU run and an accelerator run: each cell at its measured time, the JAX cells that ran
    faster on the CPU pinned there."""
    sources = sources_of(cpu, acc)  # the accelerator run's code where both carry a cell
    from nbscope.analyse.diagnose._source import analyse

    acc_cells, cpu_cells = acc.notebook_run().cells, cpu.notebook_run().cells
    index_of = {c.source_hash: c.index for c in acc_cells}
    code = analyse({index_of[h]: s for h, s in sources.items() if h in index_of})
    pairs = pair_cells(acc_cells, cpu_cells, sources=sources)
    cpu_total = sum(c.wall_s or 0.0 for c in cpu_cells)
    acc_total = sum(c.wall_s or 0.0 for c in acc_cells)
    pinned, faster_on_acc, saved = _pin_cells(pairs, code, acc_name)
    mixed = acc_total - saved
    estimates = {"cpu_s": round(cpu_total, 4), f"{acc_name}_s": round(acc_total, 4), "mixed_s": round(mixed, 4) if pinned else None}
    best_single = "cpu" if cpu_total <= acc_total else acc_name
    best_single_s = min(cpu_total, acc_total)
    if pinned and mixed < best_single_s * (1 - MIXED_MIN_GAIN):
        choice = "mixed"
    else:
        choice = best_single
    reason = _measured_reason(choice, pinned, acc_name, cpu_total, acc_total, mixed)
    caveats = [
        "estimates add measured cell times (kernel start excluded); pinning moves a function's inputs between "
        "devices, which these runs did not measure",
    ]
    cpu_host, acc_host = cpu.machine().cpu, acc.machine().cpu
    cpu_model, acc_model = cpu_host.model, acc_host.model
    same_host = cpu_model == acc_model and cpu_host.logical_cores == acc_host.logical_cores
    if not same_host:
        caveats.append(f"the runs come from different hosts ({cpu_model} vs {acc_model}): CPU-pinned figures are "
                       "those of the CPU run's host")
    return dict(
        recommendation=choice,
        reason=reason,
        estimates=estimates,
        pinned=pinned,
        faster_on_accelerator=sorted(faster_on_acc, key=lambda p: -p["saving_s"])[:5],
        accelerator=acc_name,
        same_host=same_host,
        caveats=caveats,
        runs={"cpu": {"run_id": cpu.run_id, "total_s": round(cpu_total, 4)},
              acc_name: {"run_id": acc.run_id, "total_s": round(acc_total, 4)}},
    )


def _pin_cells(pairs: Sequence[CellPair[Cell]], code: NotebookCode,
               acc_name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """The paired cells (accelerator run, CPU run) worth pinning to the CPU (JAX work, and enough time
    saved), those faster on the accelerator, and the seconds pinning saves."""
    pinned, faster_on_acc, saved = [], [], 0.0
    for pair in pairs:
        if pair.a is None or pair.b is None:
            continue
        wa, wc = pair.a.wall_s, pair.b.wall_s
        if wa is None or wc is None:
            continue
        calls = code.calls_by_cell.get(pair.a.index, set())
        functions = _jax_work(pair.a, calls, code.jitted) | _jax_work(pair.b, calls, code.jitted)
        entry = {
            "cell": pair.a.index,
            "line": pair.a.line,
            "first_line": pair.a.first_line,
            "functions": sorted(functions),
            "cpu_s": round(wc, 4),
            f"{acc_name}_s": round(wa, 4),
        }
        gain = wa - wc
        # Only cells with JAX work can be pinned; a NumPy cell runs on the host CPU either way.
        if functions and gain >= PIN_MIN_GAIN_S and (wc <= 0 or wa / wc >= PIN_MIN_RATIO):
            entry["saving_s"] = round(gain, 4)
            pinned.append(entry)
            saved += gain
        elif wc - wa >= PIN_MIN_GAIN_S:
            entry["saving_s"] = round(wc - wa, 4)
            faster_on_acc.append(entry)
    return pinned, faster_on_acc, saved


def _measured_reason(choice: str, pinned: list[dict[str, Any]], acc_name: str, cpu_total: float, acc_total: float,
                     mixed: float) -> str:
    pinned_names = sorted({n for p in pinned for n in p["functions"]})
    if choice == "mixed":
        return (
            f"{acc_name.upper()} with {', '.join(pinned_names) or 'the listed cells'} pinned to the CPU: "
            f"{_s(mixed)} vs {_s(cpu_total)} on CPU and {_s(acc_total)} on {acc_name.upper()}"
        )
    if choice == "cpu":
        worst = max(pinned, key=lambda p: p["saving_s"], default=None)
        return f"CPU {_s(cpu_total)} vs {acc_name.upper()} {_s(acc_total)}" + (
            f"; the {acc_name.upper()} loses most in cell {worst['cell'] + 1} ({', '.join(worst['functions'])}: "
            f"{_s(worst[f'{acc_name}_s'])} vs {_s(worst['cpu_s'])})" if worst else ""
        )
    return f"{acc_name.upper()} {_s(acc_total)} vs CPU {_s(cpu_total)}"


def _forecast_pinned_and_gains(notebook: Mapping[str, Any],
                               cells: Mapping[int, Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The functions the forecast keeps on the CPU (with the code change), and the largest GPU gains."""
    pinned = []
    for entry in notebook["keep_on_cpu"]:
        first = cells.get(entry["cells"][0]) if entry["cells"] else None
        pinned.append({
            "cell": entry["cells"][0] if entry["cells"] else None, "cells": entry["cells"],
            "line": (first or {}).get("line"), "first_line": (first or {}).get("first_line"),
            "functions": [entry["function"]], "cpu_s": round(entry["cpu_s"], 4),
            "gpu_low_s": round(entry["gpu_low_s"], 4),
            "gpu_high_s": None if entry["gpu_high_s"] is None else round(entry["gpu_high_s"], 4),
            "saving_s": round(entry["slower_by_s"], 4), "change": entry["change"]["text"],
            "example": entry["change"].get("example"),
        })
    gains = [{"functions": [e["function"]], "cells": e["cells"], "cell": e["cells"][0] if e["cells"] else None,
              "cpu_s": round(e["cpu_s"], 4), "gpu_low_s": round(e["gpu_low_s"], 4),
              "gpu_high_s": None if e["gpu_high_s"] is None else round(e["gpu_high_s"], 4),
              "saving_s": round(e["faster_by_s"], 4)} for e in notebook["gains"][:5]]
    return pinned, gains


def _forecast_reason(record: RunRecord, name: str, choice: str, notebook: Mapping[str, Any]) -> str:
    plan = notebook["plan"]
    gpu_range = _range(notebook["low_s"], notebook["high_s"])
    kept = ", ".join(e["function"] for e in notebook["keep_on_cpu"])
    where = f"CPU run {record.run_id}" if record.run_id is not None else "the CPU run"
    head = f"forecast for the {name} from {where} (no GPU run)"
    if choice == "mixed":
        return (f"{head}: GPU with {kept} kept on the CPU, {_range(plan['low_s'], plan['high_s'])}, vs "
                  f"{_s(notebook['cpu_s'])} measured on the CPU and {gpu_range} with everything on the GPU")
    if choice == "gpu":
        return f"{head}: {gpu_range} on the GPU vs {_s(notebook['cpu_s'])} measured on the CPU"
    why = "slower" if notebook["verdict"] == "slower" else "no faster"
    reason = f"{head}: {why} on the GPU, {gpu_range} vs {_s(notebook['cpu_s'])} measured on the CPU"
    return reason + (f"; on a GPU, keep {kept} on the CPU" if kept else "")
