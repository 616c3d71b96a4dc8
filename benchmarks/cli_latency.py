"""How long the read-only commands take on a store of 36,000 runs, against `nbscope --version` and against
the same commands on a store of 50 runs.

    python benchmarks/cli_latency.py [-n 3] [--record RUN.json] [--notebooks 50] [--runs-each 720] [--json]
                                     [--keep FOLDER | --stores FOLDER]

The runs are copies of the record of one real profile: by default ``tests/files/forecast_matmul.md``
profiled here once with ``--forecast t4`` (so that ``forecast`` has program data); ``--record`` takes an
exported run instead. Each copy gets its own notebook name, start time and label (50 lectures × 720 runs:
a year of nightly CPU and GPU builds, labelled ``nightly-cpu`` and ``nightly-gpu``); the measured figures
stay those of the real run. The big store is filled in bulk (``Store.add_many``), the small one (5 of the
lectures × 10 runs) the same way, each in a temporary folder that also holds the lectures, so that commands
that read a notebook find it.

Then, interleaved so that machine load hits every command alike, each command runs ``-n`` times on each
store in a fresh process, and the best time counts. It prints each command's time at both sizes, its time
at 36,000 runs as a ratio to ``nbscope --version`` (target at most 2.0) and as a ratio to its time at 50
runs (target at most 1.2): in wall time, and in CPU time (user + system), which a busy machine disturbs
less. ``--keep FOLDER`` leaves the stores there; ``--stores FOLDER`` measures them again without a build.

The commands run as installed: their bytecode is kept (in a temporary ``PYTHONPYCACHEPREFIX``), as pip
byte-compiles a package it installs. ``--from-source`` measures an editable checkout under
``PYTHONDONTWRITEBYTECODE`` instead, where every start compiles every nbscope module it imports (~0.1 s of
a report's 0.35 s here), which weighs on the commands that import more than ``--version`` does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nbscope.record import run as record_module
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "tests" / "files" / "forecast_matmul.md"
LABELS = ("nightly-cpu", "nightly-gpu")
RATIO_TO_VERSION = 2.0
RATIO_TO_SMALL = 1.2
BATCH = 2000


def lecture(number: int, suffix: str = ".md") -> str:
    return f"lectures/lecture_{number:02d}{suffix}"


def source_of(template: dict) -> Path:
    """The notebook the template run profiled (each lecture is a copy), else forecast_matmul.md."""
    target = Path(str(template.get("target") or ""))
    for path in (target, ROOT / target):
        if path.is_file():
            return path
    return NOTEBOOK


def profiled_template(folder: Path) -> dict:
    """The record of one real profile with program data (the lecture copied into ``folder`` first)."""
    path = folder / "template.md"
    shutil.copyfile(NOTEBOOK, path)
    out = folder / "template.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope",
            "profile",
            str(path),
            "--forecast",
            "t4",
            "--no-diagnose",
            "--json",
            "--db",
            str(folder / "template.db"),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    if done.returncode != 0:
        sys.exit(f"profiling {NOTEBOOK} failed ({done.returncode}): {done.stderr.strip()}")
    record = Store(folder / "template.db").latest()
    assert record is not None
    record_module.dump(record, out)
    return json.loads(out.read_text())


def copies(template: dict, notebooks: int, runs_each: int, suffix: str) -> Iterator[RunRecord]:
    """``runs_each`` runs of each of ``notebooks`` lectures, oldest first, two a day (CPU, then GPU)."""
    start = dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.UTC)
    text = json.dumps(template)  # parsed again for each copy: faster than a deep copy
    for n in range(runs_each):
        day, build = divmod(n, len(LABELS))
        for number in range(notebooks):
            document = json.loads(text)
            began = start + dt.timedelta(days=day, hours=build, seconds=number * 20)
            took = dt.timedelta(seconds=float(document["measurements"]["totals"].get("wall_s") or 1.0))
            document["started_at"] = began.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            document["ended_at"] = (began + took).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            document["target"] = lecture(number, suffix)
            document["label"] = LABELS[build]
            yield RunRecord.from_dict(document, source="template")


def build_store(folder: Path, template: dict, notebooks: int, runs_each: int) -> tuple[Path, float]:
    """A store of ``notebooks × runs_each`` runs in ``folder``, with the lectures beside it; its build time."""
    started = time.perf_counter()
    (folder / "lectures").mkdir(parents=True)
    source = source_of(template)
    for number in range(notebooks):
        shutil.copyfile(source, folder / lecture(number, source.suffix))
    store = Store(folder / "nbscope.db")
    batch: list[RunRecord] = []
    for record in copies(template, notebooks, runs_each, source.suffix):
        batch.append(record)
        if len(batch) >= BATCH:
            store.add_many(batch)
            batch = []
    if batch:
        store.add_many(batch)
    assert store.count() == notebooks * runs_each
    return store.path, time.perf_counter() - started


def commands(folder: Path, suffix: str) -> dict[str, list[str]]:
    nb = lecture(0, suffix)
    return {
        "--version": ["--version"],
        "runs --limit 20": ["runs", "--limit", "20"],
        "show latest": ["show", "latest"],
        f"history {nb}": ["history", nb],
        f"history {nb} --limit 10": ["history", nb, "--limit", "10"],
        "diagnose latest": ["diagnose", "latest"],
        "compare A B": ["compare", f"nightly-cpu:{nb}", f"nightly-gpu:{nb}"],
        "gate": ["gate"],
        "forecast latest": ["forecast", "latest"],
        "report latest": ["report", "latest", "-o", str(folder / "report.html")],
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


PYCACHE: Path | None = None  # where the measured processes keep bytecode (None: compile from source each time)


def timed(args: list[str], folder: Path, db: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system, steadier on a busy machine) of one command in a fresh process."""
    env = {**os.environ, "NBSCOPE_DB": str(db)}
    if PYCACHE is not None:
        # As installed: pip byte-compiles a package when it installs it; an editable checkout has no bytecode,
        # and with PYTHONDONTWRITEBYTECODE (set on these machines) every start compiles every module again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nbscope", *args], capture_output=True, text=True, cwd=folder, env=env)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):  # gate exits 1 when it fails its candidate
        sys.exit(f"nbscope {' '.join(args)} failed ({done.returncode}) in {folder}: {done.stderr.strip()}")
    return took, _children_cpu() - cpu


def build_or_find(base: Path, args: argparse.Namespace) -> tuple[dict[str, tuple[Path, Path]], dict[str, float], dict]:
    """The two stores (folder, database) with their build times, and the template record."""
    sizes = {"big": (base / "big", args.notebooks, args.runs_each), "small": (base / "small", 5, 10)}
    template_file = base / "template.json"
    if args.stores is not None:  # built before with --keep
        template = json.loads(template_file.read_text()) if args.record is None else json.loads(args.record.read_text())
        return {n: (f, f / "nbscope.db") for n, (f, _, _) in sizes.items()}, {}, template
    started = time.perf_counter()
    template = json.loads(args.record.read_text()) if args.record else profiled_template(base)
    template_file.write_text(json.dumps(template))  # for --stores
    built = {"template": time.perf_counter() - started}
    stores = {}
    for name, (folder, notebooks, runs_each) in sizes.items():
        path, built[name] = build_store(folder, template, notebooks, runs_each)
        stores[name] = (folder, path)
    return stores, built, template


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", "--repeats", type=int, default=5, help="runs of each command on each store (best counts)")
    parser.add_argument(
        "--record", type=Path, help="a run JSON file to copy (default: profile forecast_matmul.md once)"
    )
    parser.add_argument("--notebooks", type=int, default=50, help="lectures in the big store (default 50)")
    parser.add_argument(
        "--runs-each", type=int, default=720, help="runs of each lecture in the big store (default 720)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", type=Path, help="build the stores in this new folder and leave them there")
    parser.add_argument("--stores", type=Path, help="measure the stores --keep left in this folder (no build)")
    parser.add_argument(
        "--from-source",
        action="store_true",
        help="measure without bytecode: every start compiles nbscope's modules (an editable "
        "checkout with PYTHONDONTWRITEBYTECODE); default: as installed, bytecode kept",
    )
    args = parser.parse_args()
    global PYCACHE
    if args.keep is not None and args.keep.exists():
        sys.exit(f"--keep {args.keep}: exists already; give a new folder")

    with tempfile.TemporaryDirectory(prefix="nbscope-cli-latency-") as tmp:
        base = args.stores or args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        PYCACHE = None if args.from_source else Path(tmp) / "pycache"
        stores, built, template = build_or_find(base, args)
        suffix = source_of(template).suffix
        table = {name: commands(folder, suffix) for name, (folder, _) in stores.items()}
        has_programs = bool(template["measurements"].get("programs"))
        names = [c for c in table["big"] if has_programs or not c.startswith("forecast")]
        for name, (folder, db) in stores.items():  # once each, not counted: bytecode and file cache warm
            for command in names:
                timed(table[name][command], folder, db)
        best: dict[str, dict[str, tuple[float, float]]] = {name: {} for name in stores}
        for _ in range(args.repeats):
            for command in names:
                for name, (folder, db) in stores.items():  # interleaved: load hits both sizes alike
                    wall, cpu = timed(table[name][command], folder, db)
                    old_wall, old_cpu = best[name].get(command, (wall, cpu))
                    best[name][command] = (min(wall, old_wall), min(cpu, old_cpu))
        # --version does not read the store: its best time on either is the one yardstick.
        version = tuple(min(best[n]["--version"][i] for n in stores) for i in (0, 1))
        rows = []
        for command in names:
            (big, big_cpu), (small, small_cpu) = best["big"][command], best["small"][command]
            rows.append(
                {
                    "command": command,
                    "big_s": big,
                    "small_s": small,
                    "big_cpu_s": big_cpu,
                    "small_cpu_s": small_cpu,
                    "to_version": big / version[0],
                    "to_small": big / small,
                    "cpu_to_version": big_cpu / version[1],
                    "cpu_to_small": big_cpu / small_cpu,
                }
            )
        figures = {
            "runs": {"big": args.notebooks * args.runs_each, "small": 50},
            "store_mb": {name: round(db.stat().st_size / 1e6, 1) for name, (_, db) in stores.items()},
            "built_s": {name: round(took, 1) for name, took in built.items()},
            "repeats": args.repeats,
            "cpus": os.cpu_count(),
            "bytecode": "compiled from source at every start" if args.from_source else "kept, as installed",
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "commands": rows,
        }
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    big_runs, small_runs = (f"{figures['runs'][n]} runs" for n in ("big", "small"))
    made = (
        f"built in {figures['built_s']['big']} s (+ {figures['built_s']['template']} s for the template record)"
        if built
        else "built before"
    )
    print(
        f"stores: {big_runs} ({figures['store_mb']['big']} MB, {made}) and {small_runs}; best of {args.repeats}; "
        f"load average {figures['load_average']} on {figures['cpus']} CPUs; bytecode {figures['bytecode']}"
    )
    print(f"{'':<40} {'wall time':^46} | {'CPU time (user + system)':^46}")
    heads = (big_runs, small_runs, "÷ --version", "÷ " + small_runs)
    print(f"{'command':<40} " + " ".join(f"{h:>11}" for h in heads) + " | " + " ".join(f"{h:>11}" for h in heads))
    for row in rows:
        wall = f"{row['big_s']:>10.3f}s {row['small_s']:>10.3f}s {row['to_version']:>11.2f} {row['to_small']:>11.2f}"
        cpu = (
            f"{row['big_cpu_s']:>10.3f}s {row['small_cpu_s']:>10.3f}s {row['cpu_to_version']:>11.2f}"
            f" {row['cpu_to_small']:>11.2f}"
        )
        misses = [f"÷ --version > {RATIO_TO_VERSION}" for k in ("to_version",) if row[k] > RATIO_TO_VERSION]
        misses += [f"÷ {small_runs} > {RATIO_TO_SMALL}" for k in ("to_small",) if row[k] > RATIO_TO_SMALL]
        print(f"{row['command']:<40} {wall} | {cpu}" + (f"  (wall: {', '.join(misses)})" if misses else ""))
    print(f"targets: ÷ --version ≤ {RATIO_TO_VERSION} at {big_runs}; ÷ {small_runs} ≤ {RATIO_TO_SMALL}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
