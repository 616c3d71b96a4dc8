"""Whether `nbscope diagnose` grows linearly with a notebook's cell count: memory and time at 1,000 and 5,000 cells.

    python benchmarks/diagnose_scale.py [--small 1000] [--large 5000] [--json]

Profiles two generated notebooks of tiny cells (``x_i = i * 2`` and a loop over ``range(x_i)``, so that every
cell binds a name the loop-length analysis follows) into a temporary store, then diagnoses each run in a fresh
process and prints the peak memory Python allocated while diagnosing (tracemalloc) and the wall time, and the
ratio of the large run's to the small one's. Linear in the cell count: a ratio near large/small (5); quadratic: its
square (25). Before the fix the bindings kept a copy of every name per statement: 715 MB at 5,000 cells.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

MEASURE = """
import json, sys, time, tracemalloc
from nbscope.analyse.diagnose import diagnose
from nbscope.record.store import Store
record = Store(sys.argv[1]).get(int(sys.argv[2]))
tracemalloc.start()
start = time.perf_counter()
diagnose(record)
print(json.dumps({"seconds": time.perf_counter() - start, "peak_bytes": tracemalloc.get_traced_memory()[1]}))
"""


def notebook(folder: Path, cells: int) -> Path:
    path = folder / f"cells{cells}.ipynb"
    sources = [f"x{i} = {i % 50} * 2\nfor _ in range(x{i}):\n    pass" for i in range(cells)]
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), path)
    return path


def nbscope(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "nbscope", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"nbscope {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def measure(db: Path, run_id: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(db), str(run_id)], capture_output=True, text=True, env=os.environ.copy()
    )
    if done.returncode != 0:
        sys.exit(f"diagnose of run {run_id} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        db = folder / "runs.db"
        found = {}
        for run_id, cells in enumerate((args.small, args.large), start=1):
            nbscope("profile", str(notebook(folder, cells)), "--db", str(db), "--no-diagnose")
            found[cells] = measure(db, run_id)
    small, large = found[args.small], found[args.large]
    result = {
        "cells": [args.small, args.large],
        "peak_mb": [small["peak_bytes"] / 1e6, large["peak_bytes"] / 1e6],
        "seconds": [small["seconds"], large["seconds"]],
        "memory_ratio": large["peak_bytes"] / small["peak_bytes"],
        "time_ratio": large["seconds"] / small["seconds"],
        "linear_ratio": args.large / args.small,
    }
    if args.json:
        print(json.dumps(result))
        return
    for cells, figures in found.items():
        print(f"{cells:>6} cells: peak {figures['peak_bytes'] / 1e6:8.1f} MB, {figures['seconds']:6.2f} s")
    print(
        f"ratio {args.large}/{args.small}: memory ×{result['memory_ratio']:.1f}, time ×{result['time_ratio']:.1f} "
        f"(linear ×{result['linear_ratio']:g}, quadratic ×{result['linear_ratio'] ** 2:g})"
    )


if __name__ == "__main__":
    main()
