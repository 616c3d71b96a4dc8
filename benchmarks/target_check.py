"""The TPU forecast with each program compiled for the chip here (``forecast --device tpu-v5e`` with nbscope's target
environment) against the TPU's own run of each lecture, and the factor from this machine's compile to the chip's.

Per lecture (a CPU run with program data whose kernel kept each program's module, and the same lecture's run on
the lent TPU v5e, both under tests/files/device/), it prints the notebook's forecast range and its high/low, the
verdict against what the chip measured, each cell that compiled for a second or more on the chip with its forecast
compile beside the chip's, the cells of a second or more within 1.5× of their ranges, and the cells forecast to
fail against those that raised there. Then, over every such cell, the chip's XLA compile over this machine's
compile CPU time of the cell's programs: what ``target_compile_factor`` in the device table is fitted from.

    python3 benchmarks/target_check.py [--save]     # --save: write each lecture's compiles as its fixture

The compiles' results are read from tests/files/device/target/compiled_<lecture>.json where they exist (CI has no
libtpu), else made here in the target environment (``--save`` keeps them there).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from nbscope.analyse.forecast import forecast
from nbscope.analyse.forecast.measured import against_measured
from nbscope.collect.target_compile import TargetCompiles
from nbscope.record.run import RunRecord, loads
from nbscope.schema.codec import encode
from nbscope.schema.status import CUT_SHORT

FILES = Path(__file__).resolve().parents[1] / "tests" / "files" / "device"
TARGET, TPU = FILES / "target", FILES / "tpu_v5e"
# lecture: (its CPU run with the kernel's modules, its run on the chip)
LECTURES = {
    "jax_intro": (TARGET / "cpu_host_jax_intro.json", TPU / "tpu_jax_intro.json"),
    "numpy_vs_numba_vs_jax": (TARGET / "cpu_host_numpy_vs_numba_vs_jax.json", TPU / "tpu_numpy_vs_numba_vs_jax.json"),
    "opt_savings_2": (TARGET / "cpu_host_opt_savings_2.json", TPU / "tpu_opt_savings_2.json"),
    "hopenhayn": (TARGET / "cpu_host_hopenhayn.json", TPU / "tpu_hopenhayn.json"),
    "mle": (TARGET / "cpu_host_mle.json", TPU / "tpu_mle.json"),
}


def compiled(name: str, cpu: RunRecord, save: bool) -> TargetCompiles:
    path = TARGET / f"compiled_{name}.json"
    if path.is_file() and not save:
        return TargetCompiles.from_document(path.read_text())
    from nbscope.api.forecast import compiled_for_target

    result = compiled_for_target(cpu, budget_s=3600)
    if save:
        compiled = {key: encode(value) for key, value in sorted(result.compiled.items())}
        document = {"topology": result.topology, "versions": result.versions, "compiled": compiled}
        path.write_text(json.dumps({**document, "guessed": result.guessed}, indent=1) + "\n")
    return result


def check(name: str, save: bool, ratios: list[float]) -> None:
    cpu_path, tpu_path = LECTURES[name]
    cpu, tpu = loads(cpu_path.read_text()), loads(tpu_path.read_text())
    target = compiled(name, cpu, save)
    result = forecast(cpu, "tpu-v5e", target=target)
    notebook = result.notebook["tpu-v5e"]
    comparison = against_measured(result, tpu, "tpu-v5e")
    chip = {c.index: c for c in tpu.notebook_run().cells}
    measured = sum(c.notebook_wall_s or 0.0 for c in chip.values())
    at_least = "at least " if any(c.status in CUT_SHORT for c in chip.values()) else ""
    spread = "∞" if notebook.high_s is None or notebook.low_s <= 0 else f"{notebook.high_s / notebook.low_s:.2f}"
    high = "∞" if notebook.high_s is None else f"{notebook.high_s:.0f}"
    print(
        f"{name}: CPU {notebook.cpu_s:.1f} s; forecast {notebook.low_s:.0f}–{high} s (high/low {spread}), "
        f"{notebook.verdict}; TPU measured {at_least}{measured:.1f} s"
    )
    programs = cpu.notebook_run().program_data
    by_cell: dict[int, float] = {}
    for key, program in (programs.programs if programs is not None else {}).items():
        done = target.compiled.get(key)
        if done is not None and program.first_cell is not None:
            seconds = done.compile_cpu_s if done.compile_cpu_s is not None else (done.compile_s or 0.0)
            by_cell[program.first_cell] = by_cell.get(program.first_cell, 0.0) + seconds
    forecasts = {c.index: c.gpu["tpu-v5e"] for c in result.cells}
    within = total = 0
    for index, cell in sorted(chip.items()):
        if cell.jax is None or cell.jax.compile_s < 1 or index not in forecasts:
            continue
        term = next((t for t in forecasts[index].terms if t.kind == "compile"), None)
        low, high = (term.low_s, term.high_s) if term is not None else (0.0, 0.0)
        ok = high is not None and low / 1.5 <= cell.jax.compile_s <= high * 1.5
        within, total = within + ok, total + 1
        here = by_cell.get(index)
        if here:
            ratios.append(cell.jax.backend_s / here)
        print(
            f"    cell {index + 1}: compile on the chip {cell.jax.compile_s:.2f} s, forecast {low:.2f}–"
            f"{'∞' if high is None else f'{high:.2f}'} s{'' if ok else '  (not within 1.5×)'}"
            + (f"; XLA compile here {here:.2f} s of CPU, on the chip {cell.jax.backend_s:.2f} s" if here else "")
        )
    timed = [r for r in comparison.cells if r.measured_s is not None and r.measured_s >= 1 and not r.cut_short]
    near = [
        r
        for r in timed
        if r.forecast_low_s / 1.5 <= (r.measured_s or 0)
        and (r.forecast_high_s is None or (r.measured_s or 0) <= r.forecast_high_s * 1.5)
    ]
    raised = sorted(i + 1 for i, c in chip.items() if c.error is not None and c.error.name != "NameError")
    print(
        f"  compile within 1.5×: {within}/{total}; cells ≥ 1 s within 1.5× of their range: {len(near)}/{len(timed)}; "
        f"forecast to fail: {[i + 1 for i in notebook.failing]}, raised on the chip: {raised}"
    )
    for row in timed:
        if row not in near:
            high = "∞" if row.forecast_high_s is None else f"{row.forecast_high_s:.2f}"
            print(
                f"    cell {row.index + 1}: forecast {row.forecast_low_s:.2f}–{high} s, measured {row.measured_s:.2f} s"
            )
    for cell in result.cells:
        for failing in cell.gpu["tpu-v5e"].fails:
            print(f"    cell {cell.index + 1} forecast to fail: {failing.reason[:110]}")


def main(save: bool) -> None:
    ratios: list[float] = []
    for name in LECTURES:
        if LECTURES[name][0].is_file() and LECTURES[name][1].is_file():
            check(name, save, ratios)
    if ratios:
        ratios.sort()
        print(
            f"the chip's XLA compile over this machine's, per cell of a second or more ({len(ratios)} cells): "
            f"min {ratios[0]:.2f}, median {statistics.median(ratios):.2f}, max {ratios[-1]:.2f}"
        )


if __name__ == "__main__":
    main("--save" in sys.argv[1:])
