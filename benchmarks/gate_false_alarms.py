"""How often does ``nbscope gate`` fail between runs of an UNCHANGED notebook on this machine, and does it
still catch a real slowdown?

Profiles a small numerical notebook (a NumPy import, ~0.4 s of matmuls on BLAS threads, ~0.5 s of a Python
loop, a sort, and a JAX import + jit when JAX is installed) ``--runs`` times with ``--repeat 1`` in real kernels, then
``--slow-runs`` times with the Python-loop cell made 3× slower; in two modes: ``idle`` (nothing added; on a
shared machine other work still runs) and ``loaded`` (a busy loop on one core for the whole mode). It then
gates every pair of unchanged runs (earlier run = baseline), without and with run-to-run noise from
history (``nbscope gate --history 10``: the runs before the candidate), and prints the false-alarm rate:
the share of pairs the gate fails although nothing changed. The detection rate is the share of gates of a
slowed run against an unchanged run that fail naming the slowed cell. Every verdict comes from the real
cell timings of these runs; only the gate's own function is called on them.

Measured on a shared 2-core machine at load 8–14 (other agents' work: "idle" was not idle), 14 + 4 runs a
mode, 91 unchanged pairs and 56 slowed pairs each: 0 % false alarms and 100 % detection, without and with
history, idle and loaded. The same gate on walls alone (older records without the wait for a CPU, where
the matmul cell's wall moved 0.4–7.4 s between unchanged runs) had 18–29 % false alarms without history.

    python benchmarks/gate_false_alarms.py         # 16 + 4 runs per mode: ~3 min on an idle 2-core machine, 15+ at load 10
    python benchmarks/gate_false_alarms.py --modes idle --db runs/   # keep the runs in runs/idle.db
    python benchmarks/gate_false_alarms.py --from-db runs/ --modes idle --json   # analyse kept runs again
    python benchmarks/gate_false_alarms.py --notebook tests/files/gate_sleep.ipynb \
        --slow-env NBSCOPE_GATE_SLOW=0.3 --slow-cell 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
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
from nbscope.schema.codec import decode
from nbscope.schema.machine import Machine

THRESHOLDS = ("5%", "10%", "20%", "50%")
SCALE_VARIABLE = "NBSCOPE_BENCH_SCALE"
SLOW_CELL = 3  # the cell the scale multiplies (0-based among code cells): ~0.5 s of Python on one thread


def write_notebook(folder: Path, *, with_jax: bool) -> Path:
    cells = [
        "import os\nimport time\n\nimport numpy as np\n\nscale = float(os.environ.get('" + SCALE_VARIABLE + "', '1'))",
        "rng = np.random.default_rng(0)\na = rng.standard_normal((500, 500))\nb = a.T.copy()",
        "for _ in range(160):\n    c = a @ b",
        "s = 0.0\nfor i in range(int(5_000_000 * scale)):\n    s += i ** 0.5",
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


def run_profiles(
    notebook: Path,
    count: int,
    repeat: int,
    store: Store,
    live: Path,
    scale: float = 1.0,
    extra_env: dict[str, str] | None = None,
) -> list[RunRecord]:
    records = []
    for number in range(count):
        started = time.perf_counter()
        # A fingerprint per run: it records the load average at the run's start.
        env = {SCALE_VARIABLE: str(scale), **(extra_env or {})}
        record = profile(
            notebook,
            ProfileOptions(repeat=repeat, env=env),
            store=store,
            live_path=live / f"r{repeat}-{scale}-{number}.jsonl",
        )
        if record.status != "ok":
            raise SystemExit(f"profile run failed ({record.status}); see run {record.run_id} in {store.path}")
        print(
            f"  repeat {repeat} scale {scale:g} run {number + 1}/{count}: total "
            f"{record.measurements['totals']['wall_s']:.3f} s (took {time.perf_counter() - started:.1f} s, "
            f"load {load(record)})",
            file=sys.stderr,
            flush=True,
        )
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
        rows.append(
            {
                "cell": cells[0]["index"] + 1,
                "source": cells[0]["first_line"][:40],
                "median_s": statistics.median(walls),
                "cv": statistics.stdev(walls) / mean if len(walls) > 1 and mean > 0 else 0.0,
            }
        )
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
        "threshold": threshold,
        "history": use_history,
        "pairs": len(chosen),
        "failed_pairs": failed,
        "false_alarm_rate": failed / len(chosen) if chosen else None,
        "pairs_with_3_earlier": seasoned_pairs,
        "failed_with_3_earlier": seasoned_failed,
        "rate_with_3_earlier": seasoned_failed / seasoned_pairs if seasoned_pairs else None,
        "cell_alarms": cell_alarms,
        "total_alarms": total_alarms,
        "alarmed_cells": dict(sorted(alarmed_cells.items())),
    }


def detection(
    baselines: list[RunRecord], slow: list[RunRecord], threshold: str, *, use_history: bool, cell: int = SLOW_CELL
) -> dict[str, Any]:
    """Gate each run with one cell made slower against each unchanged run; count the gates that fail
    naming that cell. With history: the unchanged runs before it (as ``--history 10`` would see)."""
    options = GateOptions(max_slowdown=parse_slowdown(threshold))
    history = baselines[-HISTORY:] if use_history else None
    results = [gate(base, run, options, history=history) for run in slow for base in baselines]
    named = sum(any(c.failing and c.index == cell for c in r.cells) for r in results)
    return {
        "threshold": threshold,
        "history": use_history,
        "pairs": len(results),
        "failed": sum(not r.passed for r in results),
        "named_scaled_cell": named,
        "detection_rate": named / len(results) if results else None,
    }


def from_store(path: Path) -> tuple[list[RunRecord], list[RunRecord], dict[str, Any]]:
    """Runs of an earlier benchmark kept with --db: the unchanged runs and the 3×-slower ones, oldest first."""
    store = Store(path)
    unchanged: list[RunRecord] = []
    slow: list[RunRecord] = []
    for row in sorted(store.runs(kind="profile", limit=100_000), key=lambda r: (r["started_at"], r["id"])):
        record = store.get(row["id"])
        scale = float((record.settings.get("env") or {}).get(SCALE_VARIABLE, "1"))
        (unchanged if scale == 1.0 else slow).append(record)
    if not unchanged:
        raise SystemExit(f"no benchmark runs in {path}")
    return unchanged, slow, unchanged[0].fingerprint


def busy_loop() -> subprocess.Popen[bytes]:
    """A pure-Python busy loop: keeps one core busy while the notebook runs (the "loaded" mode)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def measure_mode(
    mode: str,
    args: argparse.Namespace,
    notebook: Path,
    folder: Path,
    base_env: dict[str, str],
    slow_env: dict[str, str],
) -> tuple[list[RunRecord], list[RunRecord]]:
    """Profile the unchanged runs, then the slowed ones, in one mode ("idle" or "loaded")."""
    db_folder = args.db or folder
    db_folder.mkdir(parents=True, exist_ok=True)
    store = Store(db_folder / f"{mode}.db")
    loop = busy_loop() if mode == "loaded" else None
    try:
        print(f"[{mode}] profiling {args.runs} unchanged runs with --repeat {args.repeat} ...", file=sys.stderr)
        unchanged = run_profiles(notebook, args.runs, args.repeat, store, folder, extra_env=base_env)
        slow: list[RunRecord] = []
        if args.slow_runs and (args.notebook is None or args.slow_env):
            print(f"[{mode}] profiling {args.slow_runs} runs with the cell made slower ...", file=sys.stderr)
            slow = run_profiles(
                notebook, args.slow_runs, args.repeat, store, folder, scale=3.0, extra_env={**base_env, **slow_env}
            )
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    return unchanged, slow


def analyse_mode(unchanged: list[RunRecord], slow: list[RunRecord], args: argparse.Namespace) -> dict[str, Any]:
    thresholds = sorted({DEFAULT_THRESHOLD, *THRESHOLDS}, key=parse_slowdown)
    return {
        "runs": len(unchanged),
        "slow_runs": len(slow),
        "run_loads": [round(load(r), 2) for r in unchanged + slow],
        "noise": cell_noise(unchanged),
        "false_alarms": [
            false_alarms(unchanged, t, args.pairs, use_history=h) for h in (False, True) for t in thresholds
        ],
        "detection": [
            detection(unchanged, slow, t, use_history=h, cell=args.slow_cell - 1)
            for h in (False, True)
            for t in thresholds
        ]
        if slow
        else [],
    }


DEFAULT_THRESHOLD = "10%"  # the gate's default --max-slowdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=16, help="unchanged runs per mode (default 16)")
    parser.add_argument("--slow-runs", type=int, default=4, help="runs with one cell 3× slower per mode (default 4)")
    parser.add_argument("--repeat", type=int, default=1, help="repeats per run (default 1, as the issue asks)")
    parser.add_argument(
        "--modes",
        default="idle,loaded",
        help="comma-separated: idle (nothing added) and/or loaded (a busy loop on one core)",
    )
    parser.add_argument("--pairs", choices=("all", "consecutive"), default="all")
    parser.add_argument("--notebook", type=Path, help="notebook to use instead of the generated one")
    parser.add_argument("--no-jax", action="store_true", help="leave the JAX cells out of the generated notebook")
    parser.add_argument(
        "--slow-env",
        metavar="KEY=VALUE",
        help="with --notebook: environment that makes one cell slower, for the detection check",
    )
    parser.add_argument(
        "--slow-cell",
        type=int,
        default=SLOW_CELL + 1,
        help="the cell (1-based) --slow-env slows (default: the generated notebook's Python loop, 4)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for every run's kernel, e.g. OPENBLAS_NUM_THREADS=1; repeatable",
    )
    parser.add_argument("--db", type=Path, help="keep the runs in this folder (MODE.db; default: a temporary one)")
    parser.add_argument("--from-db", type=Path, help="analyse the runs kept by an earlier --db FOLDER instead")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.runs < 2 or args.repeat < 1 or not modes or set(modes) - {"idle", "loaded"}:
        parser.error("--runs must be at least 2, --repeat at least 1, --modes idle and/or loaded")

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
    runs: dict[str, tuple[list[RunRecord], list[RunRecord]]] = {}
    if args.from_db:
        for mode in modes:
            unchanged, slow, fingerprint = from_store(args.from_db / f"{mode}.db")
            runs[mode] = (unchanged, slow)
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
            fingerprint = fp.collect()  # for the summary line; each run collects its own
            for mode in modes:
                runs[mode] = measure_mode(mode, args, notebook, folder, base_env, slow_env)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    results: dict[str, Any] = {
        "machine": decode(Machine, fingerprint).summary,
        "digest": fingerprint.get("digest"),
        "notebook": str(
            args.from_db
            or args.notebook
            or "generated (numpy import, matmuls, python loop, sort" + (", jax)" if with_jax else ")")
        ),
        "repeat": args.repeat,
        "pairs": args.pairs,
        "env": base_env,
        "profiling_s": round(elapsed, 1),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "gate_defaults": {
            "max_slowdown": DEFAULT_THRESHOLD,
            "alpha": GateOptions().alpha,
            "min_cell_s": GateOptions().min_cell_s,
            "abs_floor_s": GateOptions().abs_floor_s,
            "mad_k": GateOptions().mad_k,
            "history": HISTORY,
        },
        "modes": {mode: analyse_mode(*records, args) for mode, records in runs.items()},
    }
    if args.json:
        print(json.dumps(results, indent=1, default=str))
        return 0
    print(
        f"machine {results['machine']} · digest {results['digest']} · env {base_env or '-'} · --repeat {args.repeat}"
        f" · {args.pairs} pairs (earlier run = baseline) · profiling took {elapsed:.0f} s · load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"\nAt the default threshold (--max-slowdown {DEFAULT_THRESHOLD}), --repeat {args.repeat}:")
    print(f"{'mode':>7} {'history':>8} {'false alarms':>22} {'detection of 3× slower cell':>30}")
    for mode, data in results["modes"].items():
        for with_history in (False, True):
            alarm = next(
                r for r in data["false_alarms"] if r["threshold"] == DEFAULT_THRESHOLD and r["history"] == with_history
            )
            found = next(
                (r for r in data["detection"] if r["threshold"] == DEFAULT_THRESHOLD and r["history"] == with_history),
                None,
            )
            caught = (
                "–"
                if found is None
                else (f"{found['detection_rate']:.1%} ({found['named_scaled_cell']}/{found['pairs']})")
            )
            print(
                f"{mode:>7} {'yes' if with_history else 'no':>8} "
                f"{alarm['false_alarm_rate']:>9.1%} ({alarm['failed_pairs']:>3}/{alarm['pairs']:<3}) {caught:>30}"
            )
    for mode, data in results["modes"].items():
        print(f"\n== {mode}: {data['runs']} unchanged runs, {data['slow_runs']} with a cell 3× slower ==")
        print("load average at each run's start: " + ", ".join(f"{v:.1f}" for v in data["run_loads"]))
        print(
            "cell noise across unchanged runs (median, CV): "
            + ", ".join(f"#{n['cell']} {n['median_s'] * 1e3:.0f} ms ±{n['cv']:.0%}" for n in data["noise"])
        )
        print(
            f"{'history':>8} {'max slowdown':>12} {'pairs':>6} {'failed':>7} {'false alarms':>13} "
            f"{'(≥3 earlier)':>13} {'cell alarms':>12}  cells alarmed"
        )
        for row in data["false_alarms"]:
            seasoned = "–" if row["rate_with_3_earlier"] is None else f"{row['rate_with_3_earlier']:.1%}"
            print(
                f"{'yes' if row['history'] else 'no':>8} {row['threshold']:>12} {row['pairs']:>6} "
                f"{row['failed_pairs']:>7} {row['false_alarm_rate']:>13.1%} {seasoned:>13} "
                f"{row['cell_alarms']:>12}  {row['alarmed_cells'] or '-'}"
            )
        if data["detection"]:
            what = (
                f"cell {args.slow_cell} slowed by {args.slow_env}"
                if args.slow_env
                else "the Python-loop cell made 3× slower"
            )
            print(f"detection of {what} (each slowed run gated against each unchanged run):")
            for row in data["detection"]:
                print(
                    f"{'yes' if row['history'] else 'no':>8} {row['threshold']:>12} {row['pairs']:>6} "
                    f"failed {row['failed']:>3}, named the cell {row['named_scaled_cell']:>3}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
