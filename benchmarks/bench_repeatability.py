"""Do two consecutive quick suites agree within their reported spread?

Runs ``nbscope bench --size quick`` twice back to back (through the Python API, so each group still
runs in its own fresh process) and, for every figure that reports a spread (steady-state medians and
fitted per-iteration slopes), checks whether the two runs' intervals ``median ± spread·median``
overlap. The reported uncertainty is the spread raised to the machine's own drift during the run
(a fixed reference workload, see ``nbscope.collect.bench._stats.steadiness``); the share within the spread
alone is printed too. First calls, single samples without a spread, are listed separately.

Usage: python benchmarks/bench_repeatability.py [--size quick] [--dtype float32] [--only GROUPS] [--json OUT]
Exit status 0 when the share is at least --threshold (default 0.8), else 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from nbscope.api.bench import BUSY_CORES_WARN, run_bench
from nbscope.collect.bench import _stats
from nbscope.record.run import RunRecord
from nbscope.schema.codec import decode
from nbscope.schema.suite import GroupFigure


def figures_by_key(record: RunRecord) -> dict[str, dict[str, Any]]:
    return {
        figure["key"]: figure
        for group in record.measurements["groups"].values()
        for figure in group.get("figures") or []
    }


def busy_cores(record: RunRecord, group: str) -> float:
    return float(record.measurements["groups"].get(group, {}).get("background_cores") or 0.0)


def compare(a: RunRecord, b: RunRecord, quiet_below: float = BUSY_CORES_WARN) -> dict[str, Any]:
    figures_a, figures_b = figures_by_key(a), figures_by_key(b)
    rows, first_calls = [], []
    for key in figures_a.keys() & figures_b.keys():
        fa, fb = figures_a[key], figures_b[key]
        typed_a, typed_b = decode(GroupFigure, fa), decode(GroupFigure, fb)
        va, vb = typed_a.reported(), typed_b.reported()
        sa, sb = typed_a.reported(machine=False), typed_b.reported(machine=False)
        if va is not None and vb is not None and sa is not None and sb is not None:
            rows.append(
                {
                    "key": key,
                    "a": va[0],
                    "b": vb[0],
                    "spread_a": sa[1],
                    "spread_b": sb[1],
                    "uncertainty_a": va[1],
                    "uncertainty_b": vb[1],
                    "diff": abs(va[0] - vb[0]) / ((va[0] + vb[0]) / 2),
                    "agree": _stats.agree(va, vb),  # within the reported uncertainty (spread or machine drift)
                    "agree_spread": _stats.agree(sa, sb),  # within the samples' spread alone
                    # Both runs of this figure's group had the machine to themselves.
                    "quiet": max(busy_cores(a, fa["group"]), busy_cores(b, fb["group"])) <= quiet_below,
                }
            )
        if fa.get("first") and fb.get("first"):
            wa, wb = fa["first"]["wall_s"], fb["first"]["wall_s"]
            first_calls.append({"key": key, "a": wa, "b": wb, "diff": abs(wa - wb) / ((wa + wb) / 2)})
    rows.sort(key=lambda r: r["key"])
    agreeing = sum(r["agree"] for r in rows)
    agreeing_spread = sum(r["agree_spread"] for r in rows)
    quiet = [r for r in rows if r["quiet"]]
    return {
        "figures": len(rows),
        "agree": agreeing,
        "share": agreeing / len(rows) if rows else 0.0,
        "agree_spread": agreeing_spread,
        "share_spread": agreeing_spread / len(rows) if rows else 0.0,
        "machine_spread": [r.measurements.get("totals", {}).get("machine_spread") for r in (a, b)],
        "quiet_figures": len(quiet),
        "quiet_agree": sum(r["agree"] for r in quiet),
        "rows": rows,
        "first_calls": sorted(first_calls, key=lambda r: r["key"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="quick")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--only", default=None)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--json", dest="json_out", default=None, help="also write both records and the comparison")
    args = parser.parse_args(argv)

    runs, walls = [], []
    for index in (1, 2):
        start = time.perf_counter()
        runs.append(run_bench(only=[args.only] if args.only else None, dtype=args.dtype, size=args.size))
        walls.append(time.perf_counter() - start)
        groups = runs[-1].measurements["groups"]
        busy = ", ".join(f"{name} {g.get('background_cores') or 0:.2f}" for name, g in groups.items())
        print(
            f"run {index}: {walls[-1]:.1f} s, {runs[-1].measurements['totals']['figures']} figures; "
            f"cores used by other processes: {busy}",
            file=sys.stderr,
        )
    result = compare(*runs)

    print(
        f"{'figure':48} {'run 1':>11} {'run 2':>11} {'spr 1':>6} {'spr 2':>6} {'unc 1':>6} {'unc 2':>6} {'diff':>6}  agree"
    )
    for row in result["rows"]:
        print(
            f"{row['key']:48} {row['a']:11.4g} {row['b']:11.4g} {row['spread_a']:6.1%} {row['spread_b']:6.1%} "
            f"{row['uncertainty_a']:6.1%} {row['uncertainty_b']:6.1%} {row['diff']:6.1%}  "
            f"{'yes' if row['agree'] else 'NO'}{'' if row['agree_spread'] else ' (not within spread alone)'}"
            f"{'' if row['quiet'] else '  (machine busy)'}"
        )
    diffs = [r["diff"] for r in result["first_calls"]]
    if diffs:
        print(
            f"\nfirst calls (single samples, no spread): {len(diffs)}; median difference "
            f"{statistics.median(diffs):.1%}, within 25 %: {sum(d <= 0.25 for d in diffs)}/{len(diffs)}"
        )
    print(f"\nwall: {walls[0]:.1f} s and {walls[1]:.1f} s")
    machine = ", ".join("–" if m is None else f"±{m:.1%}" for m in result["machine_spread"])
    print(f"machine steadiness (reference workload, 10–90 %): {machine}")
    print(
        f"agree within their reported uncertainty: {result['agree']}/{result['figures']} figures = "
        f"{result['share']:.0%} (threshold {args.threshold:.0%})"
    )
    print(
        f"agree within the samples' spread (MAD / median) alone: {result['agree_spread']}/{result['figures']} = "
        f"{result['share_spread']:.0%}"
    )
    if result["quiet_figures"] != result["figures"]:
        print(
            f"of which from groups that had the machine to themselves in both runs (other processes < "
            f"{BUSY_CORES_WARN} cores): {result['quiet_agree']}/{result['quiet_figures']}"
        )
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump({"runs": [r.to_dict() for r in runs], "walls_s": walls, "comparison": result}, handle, indent=1)
    return 0 if result["share"] >= args.threshold else 1


if __name__ == "__main__":
    raise SystemExit(main())
