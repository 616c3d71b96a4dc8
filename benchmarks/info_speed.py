"""How long `nbscope info --json` takes as a fresh process, against a bare Python start as the floor.

    python benchmarks/info_speed.py [-n 10] [--budget 0.5] [--check] [--json]

Runs ``python -c pass`` and ``python -m nbscope info --json`` N times each in subprocesses, interleaved so
that machine load hits both alike, and prints for each the median and minimum wall time and the median CPU
time (user + system, steadier than wall time on a busy machine); then what nbscope adds over the floor, the
ratio of the two, and whether the median wall time of `info` is within the budget (0.5 s). With
``--check`` the exit status is 1 when it is not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of ``command``."""
    cpu_before = _children_cpu()
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr.decode(errors='replace')}")
    return elapsed, _children_cpu() - cpu_before


def stats(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = [wall for wall, _ in samples]
    cpus = [cpu for _, cpu in samples]
    return {"median_s": statistics.median(walls), "min_s": min(walls), "cpu_median_s": statistics.median(cpus)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument("--budget", type=float, default=0.5, help="budget for the median of info, seconds")
    parser.add_argument("--check", action="store_true", help="exit 1 when the median is over the budget")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    floor_cmd = [sys.executable, "-c", "pass"]
    info_cmd = [sys.executable, "-m", "nbscope", "info", "--json"]
    timed(info_cmd)  # warm the file cache and bytecode once; not counted
    floor_samples, info_samples = [], []
    for _ in range(args.runs):
        floor_samples.append(timed(floor_cmd))
        info_samples.append(timed(info_cmd))
    floor, info = stats(floor_samples), stats(info_samples)

    figures = {
        "runs": args.runs,
        "python_pass": floor,
        "nbscope_info_json": info,
        "added_median_s": info["median_s"] - floor["median_s"],
        "ratio_median": info["median_s"] / floor["median_s"],
        "ratio_min": info["min_s"] / floor["min_s"],
        "budget_s": args.budget,
        "within_budget": info["median_s"] <= args.budget,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"{args.runs} runs each, interleaved; {figures['cpus']} CPUs; load average {figures['load_average']}")
        print(f"{'command':<32} {'median':>9} {'min':>9} {'CPU median':>11}")
        for label, row in (("python -c pass (floor)", floor), ("python -m nbscope info --json", info)):
            print(f"{label:<32} {row['median_s']:>8.3f}s {row['min_s']:>8.3f}s {row['cpu_median_s']:>10.3f}s")
        print(f"{'nbscope adds (median)':<32} {figures['added_median_s']:>8.3f}s")
        print(f"{'ratio info / floor':<32} {figures['ratio_median']:>8.2f}x {figures['ratio_min']:>8.2f}x")
        verdict = "yes" if figures["within_budget"] else "NO"
        print(f"median wall of info <= {args.budget:g} s: {verdict} ({info['median_s']:.3f} s)")
    return 1 if args.check and not figures["within_budget"] else 0


if __name__ == "__main__":
    sys.exit(main())
