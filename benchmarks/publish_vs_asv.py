"""``nbscope publish`` against ``asv publish`` on the same number of results, full and incremental.

The store: 120 lectures × 2 runners (CPU, GPU) × 365 daily builds = 87,600 runs, made from the real CPU records
under tests/files/records/ (``nbscope profile`` of three diagnosis notebooks on this project's CI machine): each
run is one of them as recorded, its target renamed to the lecture, its start moved to the build's day, its wall,
compile and run figures scaled by a per-lecture level, a per-build noise of ±3 % and, for one lecture in ten, a
step of 1.4× from build 200 on (for the change points); the GPU runner's copies ask for ``--jax-platform cuda``.
The asv side: a results folder of the same 87,600 results (365 commits of a throw-away git repository × 2
machines × 120 benchmarks, each a time with the same figures), published by ``asv publish``.

Timed once: the first ``publish`` of the store, which makes and keeps each run's summary and each row's change
points (store version 8). Then in rounds, from the store as that publish left it: ``publish`` into an empty folder
(full), then again after one new build of one lecture on one runner
(incremental, the case the issue names), again with nothing new (the floor: start-up, scan, manifest), and after a whole new build of every lecture on both runners; ``asv
publish`` once (asv has no incremental publish). asv is a dependency of this benchmark only (``pip install asv``).

    python benchmarks/publish_vs_asv.py [--folder /tmp/publish-bench] [--lectures 120 --builds 365] [--repeat 3]

Each round times, side by side: ``publish`` full, ``publish`` after one lecture's new build, ``publish`` with
nothing new, ``asv publish``, and ``publish`` after a whole new build; the store is put back as built before each round.
Beside them, the interpreter's own start-up (``python -c pass``, this environment's ``site`` and ``.pth`` files
included), the floor under any command. Each ``publish`` is timed twice: as the command (``python -m nbscope publish``: the interpreter's and the command
line's start-up included) and as the API call (``nbscope.api.publish.publish`` in a process that imported nbscope
first: the publish's own work), each into its own site folder. A new build's runs are stored as ``nbscope profile``
stores them: each with its summary made when it is saved (``save_run``); the time that takes, which
``profile`` now pays per run, is printed too.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "tests" / "files" / "records").glob("cpu_*.json"))
RUNNERS = ("cpu", "gpu")
START = datetime(2025, 12, 1, 6, 0, tzinfo=UTC)


def _scaled(document: dict[str, Any], factor: float) -> None:
    measurements = document["measurements"]
    for figures in (measurements.get("totals") or {}, *(measurements.get("cells") or ())):
        for name in ("wall_s", "compile_s", "run_s", "code_s"):
            if isinstance(figures.get(name), (int, float)) and not isinstance(figures.get(name), bool):
                figures[name] = figures[name] * factor


def run_document(
    base: dict[str, Any], lecture: int, runner: str, build: int, rng: random.Random, *, builds: int
) -> dict[str, Any]:
    document = copy.deepcopy(base)
    document["target"] = f"lectures/lecture_{lecture:03d}.md"
    document["measurements"]["notebook"]["path"] = document["target"]
    day = START + timedelta(days=build, minutes=lecture)
    document["started_at"] = day.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    document["ended_at"] = (day + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    level = 1.0 + (lecture % 7) * 0.5 if runner == "cpu" else 0.4 + (lecture % 5) * 0.2
    step = 1.4 if lecture % 10 == 3 and build >= builds * 200 // 365 else 1.0
    _scaled(document, level * step * (1 + rng.uniform(-0.03, 0.03)))
    if runner == "gpu":
        document["settings"] = {**document.get("settings", {}), "jax_platform": "cuda"}
    return document


def build_store(path: Path, lectures: int, builds: int) -> int:
    """The store of ``lectures`` × 2 runners × ``builds`` runs (see the module's docstring); the run count. A
    store that holds the first builds already (a build stopped midway) gets the rest."""
    from nbscope.record.run import RunRecord
    from nbscope.record.store import Store

    bases = [json.loads(p.read_text()) for p in RECORDS]
    store = Store(path)
    done = store.count() // (lectures * len(RUNNERS)) if path.exists() else 0
    rng = random.Random(37 + done)
    count = done * lectures * len(RUNNERS)
    for build in range(done, builds):
        batch = [
            RunRecord.from_dict(run_document(bases[lecture % len(bases)], lecture, runner, build, rng, builds=builds))
            for lecture in range(lectures)
            for runner in RUNNERS
        ]
        store.add_many(batch)
        count += len(batch)
    return count


def add_build(path: Path, lectures: range, runners: tuple[str, ...], build: int, builds: int) -> float | None:
    """A new build's runs stored as ``nbscope profile`` stores a run: saved, then its summary made and kept; the
    CPU time the summaries took per run (None: this nbscope makes them only when it publishes)."""
    from nbscope.api import publish
    from nbscope.record.run import RunRecord
    from nbscope.record.store import Store

    bases = [json.loads(p.read_text()) for p in RECORDS]
    rng = random.Random(build)
    store = Store(path)
    records = [
        RunRecord.from_dict(run_document(bases[i % len(bases)], i, r, build, rng, builds=builds))
        for i in lectures
        for r in runners
    ]
    if not all(added for _, added in store.add_many(records)):
        # The same runs stored already (a round stopped before the store was put back): the publish after them
        # would time "nothing new" under the name of a new build.
        sys.exit(f"{path}: build {build}'s runs are stored already; run again without --keep-store")
    try:
        from nbscope.api._saving import save_run as keep
    except ImportError:  # an nbscope of before ``save_run``: its publish module kept the summary, or none did
        keep = getattr(publish, "keep_run_summary", None)
    if keep is None:
        return None
    started = time.process_time()
    for record in records:
        keep(store, record)
    return (time.process_time() - started) / len(records)


def asv_results(folder: Path, lectures: int, builds: int) -> None:
    """An asv project with ``builds`` commits and the same number of results as the store."""
    repo = folder / "repo"
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    # One fast-import stream instead of 365 `git commit` processes.
    stream = []
    for build in range(builds):
        when = int((START + timedelta(days=build)).timestamp())
        stream.append(
            f"commit refs/heads/main\nmark :{build + 1}\ncommitter b <b@b> {when} +0000\ndata 2\nc\n"
            + (f"from :{build}\n" if build else "")
            + "\n"
        )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input="".join(stream).encode(), check=True, env=env)
    hashes = subprocess.run(
        ["git", "rev-list", "--reverse", "main"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    (folder / "asv.conf.json").write_text(
        json.dumps(
            {
                "version": 1,
                "project": "book",
                "project_url": "https://example.org",
                "repo": str(repo),
                "branches": ["main"],
                "environment_type": "existing",
                "results_dir": "results",
                "html_dir": "html",
                "benchmark_dir": "benchmarks",
            }
        )
    )
    names = [f"lectures.lecture_{i:03d}" for i in range(lectures)]
    results = folder / "results"
    results.mkdir()
    (results / "benchmarks.json").write_text(
        json.dumps(
            {
                **{
                    name: {
                        "code": "",
                        "name": name,
                        "param_names": [],
                        "params": [],
                        "timeout": 60,
                        "type": "time",
                        "unit": "seconds",
                        "version": "1",
                        "number": 0,
                        "repeat": 0,
                        "min_run_count": 2,
                        "warmup_time": -1,
                        "rounds": 2,
                        "sample_time": 0.01,
                    }
                    for name in names
                },
                "version": 2,
            }
        )
    )
    rng = random.Random(37)
    for runner in RUNNERS:
        machine = results / f"{runner}-runner"
        machine.mkdir()
        info = {
            "arch": "x86_64",
            "cpu": runner,
            "machine": f"{runner}-runner",
            "num_cpu": "2",
            "os": "Linux",
            "ram": "24GB",
            "version": 1,
        }
        (machine / "machine.json").write_text(json.dumps(info))
        for build, commit in enumerate(hashes):
            values = {}
            for i, name in enumerate(names):
                level = 1.0 + (i % 7) * 0.5 if runner == "cpu" else 0.4 + (i % 5) * 0.2
                step = 1.4 if i % 10 == 3 and build >= builds * 200 // 365 else 1.0
                values[name] = [[level * step * (1 + rng.uniform(-0.03, 0.03))], [], "1", 1, 1.0]
            document = {
                "commit_hash": commit,
                "env_name": "existing-py",
                "date": int((START + timedelta(days=build)).timestamp() * 1000),
                "params": {**info, "python": "3.11"},
                "python": "3.11",
                "requirements": {},
                "env_vars": {},
                "result_columns": ["result", "params", "version", "started_at", "duration"],
                "results": values,
                "durations": {},
                "version": 2,
            }
            (machine / f"{commit[:8]}-existing-py.json").write_text(json.dumps(document))


CPU_TIMES: dict[str, float] = {}


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None, *, name: str = "") -> float:
    """The command's wall time; its CPU time (user + system, its children's too) goes to CPU_TIMES[name]. On a
    machine shared with other work the wall time moves with the load; the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_TIMES[name] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


# The API call alone, timed inside a process that imported nbscope first: (wall, CPU) as JSON on its last line.
API_PUBLISH = """
import json, sys, time
from nbscope.api.publish import publish
from nbscope.render import site
wall, cpu = time.perf_counter(), time.process_time()
publish(sys.argv[1], sys.argv[2], site=site)
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""


def timed_both(
    command: list[str], store: Path, site: Path, api_site: Path, env: dict[str, str], *, name: str
) -> tuple[float, tuple[float, float]]:
    """The command's wall time (its CPU time to CPU_TIMES[name]), then the API call's (wall, CPU) on the store as
    the command found it: the summaries the command made and kept are taken out again, so that the API call makes
    them too."""
    kept = _kept_summaries(store)
    wall = timed([*command, str(store), "-o", str(site)], store.parent.parent, env, name=name)
    _put_back_summaries(store, kept)
    return wall, timed_api(store, api_site, env)


def _kept_summaries(store: Path) -> list[tuple[Any, ...]]:
    import sqlite3

    with closing(sqlite3.connect(store)) as db:
        return db.execute("SELECT * FROM run_summaries").fetchall()


def _put_back_summaries(store: Path, rows: list[tuple[Any, ...]]) -> None:
    import sqlite3

    with closing(sqlite3.connect(store)) as db, db:
        db.execute("DELETE FROM run_summaries")
        if rows:
            db.executemany(f"INSERT INTO run_summaries VALUES ({', '.join('?' * len(rows[0]))})", rows)


def timed_api(store: Path, site: Path, env: dict[str, str]) -> tuple[float, float]:
    """``nbscope.api.publish.publish`` of ``store`` into ``site``: its (wall, CPU) seconds, imports left out."""
    done = subprocess.run(
        [sys.executable, "-c", API_PUBLISH, str(store), str(site)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"the API publish failed ({done.returncode}): {done.stderr[-2000:]}")
    wall, cpu = json.loads(done.stdout.splitlines()[-1])
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/publish-bench"))
    parser.add_argument("--lectures", type=int, default=120)
    parser.add_argument("--builds", type=int, default=365)
    parser.add_argument("--repeat", type=int, default=3, help="Rounds of the four timings, side by side.")
    parser.add_argument("--keep-store", action="store_true", help="Reuse the folder's store and asv results if there.")
    args = parser.parse_args()
    folder: Path = args.folder
    store, asv = folder / "store" / "nbscope.db", folder / "asv"
    expected = args.lectures * len(RUNNERS) * args.builds
    if subprocess.run([sys.executable, "-c", "import asv"], capture_output=True).returncode != 0:
        sys.exit("asv is not importable: pip install asv (a dependency of this benchmark only)")
    if not args.keep_store:
        shutil.rmtree(folder, ignore_errors=True)
    if store.exists() and _count(store) > expected:
        sys.exit(f"{store} holds {_count(store)} runs, more than {expected}: run again without --keep-store")
    if not store.exists() or _count(store) < expected:
        started = time.perf_counter()
        runs = build_store(store, args.lectures, args.builds)
        print(
            f"store: {runs} runs from {len(RECORDS)} real records, {store.stat().st_size / 2**20:.0f} MiB, "
            f"built in {time.perf_counter() - started:.0f} s"
        )
    if not (asv / "asv.conf.json").exists():
        shutil.rmtree(asv, ignore_errors=True)
        asv_results(asv, args.lectures, args.builds)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # nbscope's byte code compiled once, as `pip install` does (asv's and typer's are, in site-packages): a
    # PYTHONDONTWRITEBYTECODE environment would otherwise time the compilation of every module at each command.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "nbscope")], env=env, check=True)
    nbscope = [sys.executable, "-m", "nbscope", "publish"]
    site = folder / "site"
    # The store as a book's store is once it was published: each run's summary and each row's change points kept
    # in it (store version 8). That first publish, which makes them, is timed once; the rounds start from its store.
    from nbscope.record.store import Store

    Store(store).version()  # a store of an earlier version migrated, as any command that writes to it would
    kept = _summaries_kept(store)
    shutil.rmtree(site, ignore_errors=True)
    first = timed([*nbscope, str(store), "-o", str(site)], folder, env, name="first")
    print(
        f"first publish of the store ({'summaries kept already' if kept else 'every summary made'}): "
        f"{first:.2f} s | {CPU_TIMES['first']:.2f} s CPU",
        flush=True,
    )
    pristine = folder / "pristine.db"
    shutil.copy(store, pristine)
    rounds: list[dict[str, tuple[float, float]]] = []
    api_site = folder / "site-api"
    try:
        _rounds(args, store, pristine, site, api_site, asv, nbscope, env, rounds)
    finally:  # also after a failure: the next --keep-store starts from the store as built
        shutil.copy(pristine, store)
    if len(rounds) > 1:
        median = {
            name: (statistics.median(r[name][0] for r in rounds), statistics.median(r[name][1] for r in rounds))
            for name in rounds[0]
        }
        _report("median", median)


def _rounds(
    args: argparse.Namespace,
    store: Path,
    pristine: Path,
    site: Path,
    api_site: Path,
    asv: Path,
    nbscope: list[str],
    env: dict[str, str],
    rounds: list[dict[str, tuple[float, float]]],
) -> None:
    for round_ in range(args.repeat):
        # Each round: the store as built, empty site folders; asv between nbscope's timings, so that a change
        # of the machine's load falls on both. Each publish as the command, then as the API call.
        shutil.copy(pristine, store)
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(api_site, ignore_errors=True)
        os.sync()  # the copy's gigabyte is written back before the timings, not during them
        figures: dict[str, float] = {}
        api: dict[str, tuple[float, float]] = {}
        # The interpreter alone, as the commands start it: the share of every command no publish can cut.
        starts = [
            (timed([sys.executable, "-c", "pass"], store.parent, env, name="python"), CPU_TIMES["python"])
            for _ in range(5)
        ]
        figures["python"] = statistics.median(wall for wall, _ in starts)
        CPU_TIMES["python"] = statistics.median(cpu for _, cpu in starts)
        figures["full"], api["full"] = timed_both(nbscope, store, site, api_site, env, name="full")
        per_run = add_build(store, range(1, 2), ("cpu",), args.builds, args.builds)
        os.sync()
        figures["one"], api["one"] = timed_both(nbscope, store, site, api_site, env, name="one")
        # Nothing new: the floor under any incremental publish (start-up, the scan, the manifest).
        figures["none"], api["none"] = timed_both(nbscope, store, site, api_site, env, name="none")
        shutil.rmtree(asv / "html", ignore_errors=True)
        figures["asv"] = timed(
            [sys.executable, "-m", "asv", "publish", "--config", str(asv / "asv.conf.json")], asv, name="asv"
        )
        whole_per_run = add_build(store, range(args.lectures), RUNNERS, args.builds + 1, args.builds)
        os.sync()
        figures["whole"], api["whole"] = timed_both(nbscope, store, site, api_site, env, name="whole")
        rounds.append(
            {
                **{name: (wall, CPU_TIMES[name]) for name, wall in figures.items()},
                **{f"api {name}": pair for name, pair in api.items()},
            }
        )
        if per_run is not None and whole_per_run is not None:
            rounds[-1]["save"] = (per_run, whole_per_run)
        _report(round_ + 1, rounds[-1])


def _summaries_kept(store: Path) -> int:
    import sqlite3

    with closing(sqlite3.connect(store)) as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_summaries'").fetchone() is None:
            return 0
        return int(db.execute("SELECT COUNT(*) FROM run_summaries").fetchone()[0])


def _count(store: Path) -> int:
    import sqlite3

    with closing(sqlite3.connect(store)) as db:
        return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def _report(round_: int | str, figures: dict[str, tuple[float, float]]) -> None:
    asv_s, asv_cpu = figures["asv"]
    python_s, python_cpu = figures["python"]
    print(f"round {round_}: load average {os.getloadavg()[0]:.1f} (wall | CPU time)")
    print(f"  asv publish (full)                                {asv_s:7.3f} s | {asv_cpu:7.3f} s")
    print(f"  the interpreter's start-up alone (python -c pass) {python_s:7.3f} s | {python_cpu:7.3f} s")
    for how, prefix in (("command: ", ""), ("API call:", "api ")):
        full, full_cpu = figures[f"{prefix}full"]
        one, one_cpu = figures[f"{prefix}one"]
        none, none_cpu = figures[f"{prefix}none"]
        whole, whole_cpu = figures[f"{prefix}whole"]
        print(
            f"  {how} nbscope publish (full)                 {full:7.3f} s | {full_cpu:7.3f} s   "
            f"{full / asv_s:.3f}× | {full_cpu / asv_cpu:.3f}× asv  (target ≤ 0.2×)"
        )
        print(
            f"  {how} after one lecture's build               {one:7.3f} s | {one_cpu:7.3f} s   "
            f"{one / full:.1%} | {one_cpu / full_cpu:.1%} of full  (target ≤ 5 %)"
        )
        if not prefix:  # what the command adds to the interpreter's start-up, against the same of a full one
            print(
                f"  {how}   less the interpreter's start-up       {one - python_s:7.3f} s | "
                f"{one_cpu - python_cpu:7.3f} s   {(one - python_s) / (full - python_s):.1%} | "
                f"{(one_cpu - python_cpu) / (full_cpu - python_cpu):.1%} of full less it"
            )
        print(
            f"  {how} nothing new                             {none:7.3f} s | {none_cpu:7.3f} s   "
            f"{none / full:.1%} | {none_cpu / full_cpu:.1%} of full"
        )
        print(
            f"  {how} after a whole-book build                {whole:7.3f} s | {whole_cpu:7.3f} s   "
            f"{whole / full:.1%} | {whole_cpu / full_cpu:.1%} of full"
        )
    if "save" in figures:
        one_run, each_of_whole = figures["save"]
        print(
            f"  each new run's summary made when it is saved: {one_run:.3f} s CPU (one build), "
            f"{each_of_whole:.3f} s CPU each (a whole build)"
        )
    else:
        print("  summaries made when a run is saved: not by this nbscope (publish makes them)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
