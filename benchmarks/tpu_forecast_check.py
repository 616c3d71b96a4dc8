"""The TPU forecast (tpu-v5e) of each lecture's CPU run against the TPU's own run of it, from the device fixtures
(tests/files/device/tpu_v5e, recorded on the lent TPU v5e): per lecture the CPU time, the forecast range and
verdict, what the TPU measured, the cells forecast to fail against those that raised there, and how many cells of a
second or more on the TPU lie in their forecast range or within 1.5× of it.

    python3 benchmarks/tpu_forecast_check.py [cpu_host_|cpu_]

``cpu_host_`` (default): CPU runs on the TPU machine's own host; ``cpu_``: on a 2-core CI-class machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nbscope.analyse.forecast import forecast
from nbscope.analyse.forecast.measured import against_measured
from nbscope.record.run import loads
from nbscope.schema.status import CUT_SHORT

DEVICE = Path(__file__).resolve().parents[1] / "tests" / "files" / "device" / "tpu_v5e"
LECTURES = ("numpy_vs_numba_vs_jax", "jax_intro", "kesten_processes", "job_search", "markov_asset", "autodiff")
# Recorded after the TPU compile classes were fitted: the check on lectures the figures were not set from.
LATER = ("inventory_dynamics", "aiyagari_jax", "opt_savings_1")
# Lectures whose CPU run was made on a 2-core CI-class machine only (cpu_<name>.json), not on the TPU's host.
ELSEWHERE = ("lecture_jax_intro",)


def main(prefix: str) -> None:
    for name in (*LECTURES, *ELSEWHERE, *LATER):
        # a lecture without a CPU run on the TPU's host has one on a CI-class CPU
        made = next((p for p in (prefix, "cpu_") if (DEVICE / f"{p}{name}.json").is_file()), None)
        if made is None:
            continue
        cpu = loads((DEVICE / f"{made}{name}.json").read_text())
        tpu = loads((DEVICE / f"tpu_{name}.json").read_text())
        result = forecast(cpu, "tpu-v5e")
        notebook = result.notebook["tpu-v5e"]
        comparison = against_measured(result, tpu, "tpu-v5e")
        cells = {c.index: c for c in tpu.notebook_run().cells}
        measured = sum(c.notebook_wall_s or 0.0 for c in cells.values())
        # a run cut short (a timeout, a stop) measured a lower bound of the notebook's time
        at_least = "at least " if any(c.status in CUT_SHORT for c in cells.values()) else ""
        raised = [
            i + 1 for i, c in cells.items() if c.error is not None and "LuDecomposition" in (c.error.message or "")
        ]
        timed = [r for r in comparison.cells if r.measured_s is not None and r.measured_s >= 1 and cells[r.index].ran]
        long = [r for r in timed if not r.cut_short]  # a cell cut short measured only a lower bound
        cut = f" ({len(timed) - len(long)} cut short, not judged)" if len(timed) > len(long) else ""
        near = [
            r
            for r in long
            if r.forecast_low_s / 1.5 <= (r.measured_s or 0)
            and (r.forecast_high_s is None or (r.measured_s or 0) <= r.forecast_high_s * 1.5)
        ]
        high = "∞" if notebook.high_s is None else f"{notebook.high_s:.0f}"
        print(
            f"{name}: CPU {notebook.cpu_s:.1f} s, forecast {notebook.low_s:.0f}–{high} s ({notebook.verdict}); "
            f"TPU measured {at_least}{measured:.1f} s; forecast to fail: {[i + 1 for i in notebook.failing]}, raised: {raised}; "
            f"cells ≥ 1 s in range or within 1.5×: {len(near)}/{len(long)}{cut}"
        )
        for row in long:
            if row not in near:
                high = "∞" if row.forecast_high_s is None else f"{row.forecast_high_s:.2f}"
                print(
                    f"    cell {row.index + 1}: forecast {row.forecast_low_s:.2f}–{high} s, measured {row.measured_s:.2f} s"
                )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu_host_")
