"""What ``nbscope profile --forecast`` costs: the same notebook profiled with and without program data.

Runs are interleaved (off, on, on, off, off, on, ...) so that a machine getting busier or quieter over
the run weighs on both sides alike. Prints the two ratios that matter, measured side by side:

* **cells**: the sum over cells of the per-cell median wall time (what the ledger reports, the kernel's
  whole request, so it includes the probe's per-cell profiler session and HLO collection) with program
  data over the same sum without: how much collection distorts what is measured;
* **elapsed**: the median end-to-end time of ``profile()`` (kernel start to record), which adds what
  nbscope does outside the kernel (reading traces and HLO, XLA's cost analysis, importing JAX once).

    python benchmarks/forecast_overhead.py [NOTEBOOK] [--repeats N] [--json OUT]

Default notebook: the original investigation's lecture (``../shared/corpus/numpy_vs_numba_vs_jax.md``)
when present, else ``tests/files/forecast_scan.md``. Target (issue 14): cells ratio ≤ 1.05.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "numpy_vs_numba_vs_jax.md"
FALLBACK = ROOT / "tests" / "files" / "forecast_scan.md"


def _profile(path: Path, programs: bool) -> dict[str, Any]:
    from nbscope.api.profile import ProfileOptions, profile

    started = time.perf_counter()
    record = profile(path, ProfileOptions(programs=programs), fingerprint={"digest": "bench"})
    return {"record": record.to_dict(), "elapsed_s": time.perf_counter() - started}


def _median(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, default=CORPUS if CORPUS.exists() else FALLBACK)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind (default 3)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for index in range(args.repeats):
        order = (False, True) if index % 2 == 0 else (True, False)
        for programs in order:
            run = _profile(args.notebook, programs)
            runs[programs].append(run)
            print(f"run {index + 1}/{args.repeats} forecast={'on ' if programs else 'off'} "
                  f"{run['elapsed_s']:.1f} s ({run['record']['status']})", file=sys.stderr)

    def per_cell(programs: bool) -> list[float | None]:
        columns = [r["record"]["measurements"]["cells"] for r in runs[programs]]
        return [_median([cells[i].get("wall_s") for cells in columns]) for i in range(len(columns[0]))]

    off, on = per_cell(False), per_cell(True)
    print(f"{'cell':>4} {'line':>5} {'off (ms)':>10} {'on (ms)':>10} {'Δ (ms)':>9}  code")
    cells = runs[True][0]["record"]["measurements"]["cells"]
    for cell, a, b in zip(cells, off, on, strict=True):
        if a is None or b is None:
            continue
        print(f"{cell['index'] + 1:>4} {cell.get('line') or '':>5} {a * 1e3:>10.1f} {b * 1e3:>10.1f} "
              f"{(b - a) * 1e3:>+9.1f}  {cell.get('first_line', '')[:40]}")
    sum_off = sum(v for v in off if v is not None)
    sum_on = sum(v for v in on if v is not None)
    elapsed_off = _median([r["elapsed_s"] for r in runs[False]]) or 0.0
    elapsed_on = _median([r["elapsed_s"] for r in runs[True]]) or 0.0
    collect = [c.get("programs", {}).get("collect_s") or {} for r in runs[True] for c in r["record"]["measurements"]["cells"]]
    in_kernel = sum((c.get("trace_stop_s") or 0.0) + (c.get("programs_s") or 0.0) for c in collect) / len(runs[True])
    figures = {
        "notebook": str(args.notebook),
        "repeats": args.repeats,
        "cells_off_s": sum_off,
        "cells_on_s": sum_on,
        "cells_ratio": sum_on / sum_off if sum_off else None,
        "elapsed_off_s": elapsed_off,
        "elapsed_on_s": elapsed_on,
        "elapsed_ratio": elapsed_on / elapsed_off if elapsed_off else None,
        "in_kernel_collection_s": in_kernel,
    }
    print(f"cells (sum of per-cell medians): {sum_off:.2f} s without, {sum_on:.2f} s with program data: "
          f"ratio {figures['cells_ratio']:.3f} (target ≤ 1.05)")
    print(f"profile() end to end (median): {elapsed_off:.2f} s without, {elapsed_on:.2f} s with: "
          f"ratio {figures['elapsed_ratio']:.3f}")
    print(f"in-kernel collection (profiler stop + HLO sessions, per run): {in_kernel * 1e3:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
