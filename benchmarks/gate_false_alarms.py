"""How often does ``nbscope gate`` fail between runs of an UNCHANGED notebook on this machine?

Profiles a small numerical notebook (NumPy matmuls, a Python loop, a sort, and a JAX import + jit when JAX
is installed) ``--runs`` times with ``--repeat 1`` and ``--runs`` times with ``--repeat R``, all in real
kernels, then gates every pair of runs (earlier run = baseline) at several ``--max-slowdown`` thresholds,
without and with run-to-run noise from history (``nbscope gate --history 10``: the runs before the
candidate), and prints the false-alarm rate: the share of pairs the gate fails although nothing changed
(also among pairs whose candidate has at least 3 earlier runs, where history can act). As a check of
power it also profiles one run per mode with the matmul cell made 3× slower (or, with ``--notebook``,
with ``--slow-env``) and gates it against every unchanged run (the detection rate).

    python benchmarks/gate_false_alarms.py                 # 10 + 10 runs, repeat 3 (2–6 min on 2 cores)
    python benchmarks/gate_false_alarms.py --env OPENBLAS_NUM_THREADS=1 --db runs.db
    python benchmarks/gate_false_alarms.py --notebook tests/files/gate_sleep.ipynb \
        --slow-env NBSCOPE_GATE_SLOW=0.3 --slow-cell 2
    python benchmarks/gate_false_alarms.py --from-db runs.db --json   # analyse kept runs again
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat

from nbscope.analyse.gate import GateOptions, gate, parse_slowdown
from nbscope.api.profile import ProfileOptions, profile
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

THRESHOLDS = ("5%", "10%", "20%", "50%")
SCALE_VARIABLE = "NBSCOPE_BENCH_SCALE"
MATMUL_CELL = 2  # the cell the scale multiplies (0-based among code cells)


def write_notebook(folder: Path, *, with_jax: bool) -> Path:
    cells = [
        "import os\nimport time\n\nimport numpy as np\n\nscale = float(os.environ.get('" + SCALE_VARIABLE + "', '1'))",
        "rng = np.random.default_rng(0)\na = rng.standard_normal((500, 500))\nb = a.T.copy()",
        "for _ in range(int(12 * scale)):\n    c = a @ b",
        "s = 0.0\nfor i in range(400_000):\n    s += i ** 0.5",
        "x = np.sort(rng.standard_normal(1_500_000))",
        "y = float(c[0, 0] + s + x[0])",
    ]
    if with_jax:
        cells += [
            "import jax\nimport jax.numpy as jnp",
            "f = jax.jit(lambda m: (m @ m).sum())\nf(jnp.ones((300, 300))).block_until_ready()",
        ]
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_markdown_cell("# gate false-alarm benchmark")]
    notebook.cells += [nbformat.v4.new_code_cell(source) for source in cells]
    path = folder / "gate_bench.ipynb"
    nbformat.write(notebook, path)
    return path


def run_profiles(notebook: Path, count: int, repeat: int, store: Store, live: Path,
                 scale: float = 1.0, extra_env: dict[str, str] | None = None) -> list[RunRecord]:
    records = []
    for number in range(count):
        started = time.perf_counter()
        # A fingerprint per run: it records the load average at the run's start.
        env = {SCALE_VARIABLE: str(scale), **(extra_env or {})}
        record = profile(notebook, ProfileOptions(repeat=repeat, env=env), store=store,
                         live_path=live / f"r{repeat}-{scale}-{number}.jsonl")
        if record.status != "ok":
            raise SystemExit(f"profile run failed ({record.status}); see run {record.run_id} in {store.path}")
        print(f"  repeat {repeat} scale {scale:g} run {number + 1}/{count}: total "
              f"{record.measurements['totals']['wall_s']:.3f} s (took {time.perf_counter() - started:.1f} s, "
              f"load {load(record)})",
              file=sys.stderr, flush=True)
        records.append(record)
    return records


def load(record: RunRecord) -> float:
    return float(record.fingerprint["cpu"]["load_average"][0])


def cell_noise(records: list[RunRecord]) -> list[dict[str, Any]]:
    """Per cell across runs: median wall and the coefficient of variation (stdev / mean)."""
    rows = []
    for cells in zip(*(r.measurements["cells"] for r in records), strict=True):
        walls = [c["wall_s"] for c in cells if isinstance(c.get("wall_s"), (int, float))]
        mean = statistics.fmean(walls)
        rows.append({
            "cell": cells[0]["index"] + 1, "source": cells[0]["first_line"][:40],
            "median_s": statistics.median(walls),
            "cv": statistics.stdev(walls) / mean if len(walls) > 1 and mean > 0 else 0.0,
        })
    return rows


HISTORY = 10  # as `nbscope gate --history 10` (the default)


def earlier(records: list[RunRecord], position: int) -> list[RunRecord]:
    """What the gate's --history sees for the run at ``position``: up to HISTORY runs before it."""
    return records[max(0, position - HISTORY) : position]


def false_alarms(records: list[RunRecord], threshold: str, pairs: str, *, use_history: bool) -> dict[str, Any]:
    """Gate unchanged pairs (earlier run = baseline); a failure is a false alarm."""
    options = GateOptions(max_slowdown=parse_slowdown(threshold))
    indices = range(len(records))
    chosen = list(itertools.combinations(indices, 2)) if pairs == "all" else list(itertools.pairwise(indices))
    failed, cell_alarms, total_alarms = 0, 0, 0
    seasoned_pairs, seasoned_failed = 0, 0  # pairs whose candidate has >= 3 earlier runs
    alarmed_cells: dict[int, int] = {}
    for i, j in chosen:
        history = earlier(records, j) if use_history else None
        result = gate(records[i], records[j], options, history=history)
        failed += not result.passed
        if j >= 3:
            seasoned_pairs += 1
            seasoned_failed += not result.passed
        total_alarms += result.total.failing
        for c in result.cells:
            if c.failing:
                cell_alarms += 1
                alarmed_cells[(c.index or 0) + 1] = alarmed_cells.get((c.index or 0) + 1, 0) + 1
    return {
        "threshold": threshold, "history": use_history, "pairs": len(chosen), "failed_pairs": failed,
        "false_alarm_rate": failed / len(chosen) if chosen else None,
        "pairs_with_3_earlier": seasoned_pairs, "failed_with_3_earlier": seasoned_failed,
        "rate_with_3_earlier": seasoned_failed / seasoned_pairs if seasoned_pairs else None,
        "cell_alarms": cell_alarms, "total_alarms": total_alarms,
        "alarmed_cells": dict(sorted(alarmed_cells.items())),
    }


def detection(baselines: list[RunRecord], slow: RunRecord, threshold: str, *, use_history: bool,
              cell: int = MATMUL_CELL) -> dict[str, Any]:
    """Gate the run with one cell made slower against each unchanged run; count the gates naming it."""
    options = GateOptions(max_slowdown=parse_slowdown(threshold))
    history = baselines[-HISTORY:] if use_history else None
    results = [gate(base, slow, options, history=history) for base in baselines]
    named = sum(any(c.failing and c.index == cell for c in r.cells) for r in results)
    return {"threshold": threshold, "history": use_history, "pairs": len(results),
            "failed": sum(not r.passed for r in results), "named_scaled_cell": named}


def from_store(path: Path) -> tuple[dict[int, list[RunRecord]], dict[int, RunRecord], dict[str, Any]]:
    """Runs of an earlier benchmark kept with --db: unchanged runs per repeat, and the 3×-slower ones."""
    store = Store(path)
    modes: dict[int, list[RunRecord]] = {}
    slow: dict[int, RunRecord] = {}
    rows = sorted(store.list(kind="profile"), key=lambda r: (r["started_at"], r["id"]))
    for row in rows:
        record = store.get(row["id"])
        repeat = int(record.settings.get("repeat") or 1)
        scale = float((record.settings.get("env") or {}).get(SCALE_VARIABLE, "1"))
        if scale == 1.0:
            modes.setdefault(repeat, []).append(record)
        else:
            slow[repeat] = record
    if not modes:
        raise SystemExit(f"no benchmark runs in {path}")
    return modes, slow, next(iter(modes.values()))[0].fingerprint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="unchanged runs per mode (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats per run in the repeated mode (default 3)")
    parser.add_argument("--pairs", choices=("all", "consecutive"), default="all")
    parser.add_argument("--notebook", type=Path, help="notebook to use instead of the generated one")
    parser.add_argument("--no-jax", action="store_true", help="leave the JAX cells out of the generated notebook")
    parser.add_argument("--no-detection", action="store_true", help="skip the 3×-slower detection check")
    parser.add_argument("--slow-env", metavar="KEY=VALUE",
                        help="with --notebook: environment that makes one cell slower, for the detection check")
    parser.add_argument("--slow-cell", type=int, default=MATMUL_CELL + 1,
                        help="the cell (1-based) --slow-env slows (default: the generated notebook's matmul, 3)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for every run's kernel, e.g. OPENBLAS_NUM_THREADS=1; repeatable")
    parser.add_argument("--db", type=Path, help="keep the runs in this store (default: a temporary one)")
    parser.add_argument("--from-db", type=Path, help="analyse the runs kept by an earlier --db instead of profiling")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.runs < 2 or args.repeat < 1:
        parser.error("--runs must be at least 2 and --repeat at least 1")

    base_env: dict[str, str] = {}
    for pair in args.env:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error("--env expects KEY=VALUE")
        base_env[key] = value
    slow_env: dict[str, str] = {}
    if args.slow_env:
        key, sep, value = args.slow_env.partition("=")
        if not sep:
            parser.error("--slow-env expects KEY=VALUE")
        slow_env = {key: value}
    load_before = os.getloadavg()
    started = time.perf_counter()
    with_jax = False
    if args.from_db:
        modes, slow_runs, fingerprint = from_store(args.from_db)
    else:
        with tempfile.TemporaryDirectory(prefix="nbscope-gate-bench-") as temp:
            folder = Path(temp)
            with_jax = not args.no_jax
            if with_jax:
                try:
                    import jax  # noqa: F401
                except ImportError:
                    with_jax = False
            notebook = args.notebook or write_notebook(folder, with_jax=with_jax)
            store = Store(args.db or folder / "nbscope.db")
            fingerprint = fp.collect()  # for the summary line; each run collects its own
            modes, slow_runs = {}, {}
            for repeat in sorted({1, args.repeat}):
                print(f"profiling {args.runs} unchanged runs with --repeat {repeat} ...", file=sys.stderr)
                modes[repeat] = run_profiles(notebook, args.runs, repeat, store, folder, extra_env=base_env)
                if not args.no_detection and (args.notebook is None or args.slow_env):
                    slow_runs[repeat] = run_profiles(notebook, 1, repeat, store, folder, scale=3.0,
                                                     extra_env={**base_env, **slow_env})[0]
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    results: dict[str, Any] = {
        "machine": fp.summary(fingerprint), "digest": fingerprint.get("digest"),
        "notebook": str(args.from_db or args.notebook
                        or "generated (numpy matmul, python loop, sort" + (", jax)" if with_jax else ")")),
        "pairs": args.pairs, "env": base_env, "profiling_s": round(elapsed, 1),
        "load_average_before": load_before, "load_average_after": load_after,
        "gate_defaults": {"alpha": GateOptions().alpha, "min_cell_s": GateOptions().min_cell_s,
                          "abs_floor_s": GateOptions().abs_floor_s, "mad_k": GateOptions().mad_k,
                          "history": HISTORY},
        "modes": {},
    }
    for repeat, records in sorted(modes.items()):
        results["modes"][f"repeat {repeat}"] = {
            "runs": len(records),
            "run_loads": [round(load(r), 2) for r in records],
            "noise": cell_noise(records),
            "false_alarms": [false_alarms(records, t, args.pairs, use_history=h)
                             for h in (False, True) for t in THRESHOLDS],
            "detection": [detection(records, slow_runs[repeat], t, use_history=h, cell=args.slow_cell - 1)
                          for h in (False, True) for t in THRESHOLDS]
            if repeat in slow_runs else None,
        }
    if args.json:
        print(json.dumps(results, indent=1, default=str))
        return 0
    print(f"machine {results['machine']} · digest {results['digest']} · env {base_env or '-'} · {args.pairs} pairs "
          f"(earlier run = baseline) · profiling took {elapsed:.0f} s")
    for mode, data in results["modes"].items():
        print(f"\n== {mode}: {data['runs']} unchanged runs ==")
        print("load average at each run's start: " + ", ".join(f"{v:.1f}" for v in data["run_loads"]))
        print("cell noise across runs (median, CV): " + ", ".join(
            f"#{n['cell']} {n['median_s'] * 1e3:.0f} ms ±{n['cv']:.0%}" for n in data["noise"]))
        print(f"{'history':>8} {'max slowdown':>12} {'pairs':>6} {'failed':>7} {'false alarms':>13} "
              f"{'(≥3 earlier)':>13} {'cell alarms':>12}  cells alarmed")
        for row in data["false_alarms"]:
            seasoned = "–" if row["rate_with_3_earlier"] is None else f"{row['rate_with_3_earlier']:.1%}"
            print(f"{'yes' if row['history'] else 'no':>8} {row['threshold']:>12} {row['pairs']:>6} "
                  f"{row['failed_pairs']:>7} {row['false_alarm_rate']:>13.1%} {seasoned:>13} "
                  f"{row['cell_alarms']:>12}  {row['alarmed_cells'] or '-'}")
        if data["detection"]:
            what = f"cell {args.slow_cell} slowed by {args.slow_env}" if args.slow_env else "the matmul cell made 3× slower"
            print(f"detection of {what} (gated against each unchanged run):")
            for row in data["detection"]:
                print(f"{'yes' if row['history'] else 'no':>8} {row['threshold']:>12} {row['pairs']:>6} "
                      f"failed {row['failed']:>3}, named the cell {row['named_scaled_cell']:>3}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
