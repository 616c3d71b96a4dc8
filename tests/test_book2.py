"""jupyter-book 2: its environment beside jupyter-book 1, traced builds of a three-page MyST book (offline, as
root), no process left behind after a failing or interrupted build, the book2 pathway, and the import of its
execution cache.

The real builds need jupyter-book 2: the fixture finds it (``nbscope book2-env``) or installs it in nbscope's
own environment from the package index, as ``.ci/run`` does, and skips with the reason only when that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from nbscope._errors import NbscopeError
from nbscope.api import jupyter_book2
from nbscope.api.trace import _put_cache_back, _set_cache_aside
from nbscope.collect import notebook as notebook_module
from nbscope.record.jupyter_cache import book2_cache_key, import_cache, read_book2_cache
from nbscope.record.store import Store

FoundT = TypeVar("FoundT", bound=jupyter_book2.FoundCommand)

FILES = Path(__file__).resolve().parent / "files"
BOOK = FILES / "book2"
CACHED_ENTRIES = FILES / "book2_execute"  # what a real jupyter-book 2.1 build of BOOK left in _build/execute
PAGES = ["arrays.md", "intro.md", "sleeps.md"]
FINGERPRINT = {"cpu": {"model": "test CPU"}, "os": {"system": "Linux"}}

BUILD_LOG = """\
🌎 Building Jupyter Book (via myst) site
💿 Executing notebook (intro.md) [no execution cache found]
🚀 Starting new Jupyter server
🪐 Jupyter server started
   http://localhost:41091/?token=e91f
💾 Adding cached notebook outputs (arrays.md)
⛔️ sleeps.md An exception occurred during code execution, halting further execution:
📖 Built intro.md in 3.41 s.
📖 Built sleeps.md in 640 ms.
📚 Built 3 pages for project in 5.79 s.
🔍 Querying template metadata from https://templates.example/templates/site/myst/book-theme
request to https://templates.example/templates/site/myst/book-theme failed, reason: getaddrinfo ENOTFOUND
"""


# ---- without jupyter-book 2 ---------------------------------------------------------------------------


def test_the_build_log_gives_pages_cache_hits_errors_and_server_start() -> None:
    timed = [(0.5 * number, line + "\n") for number, line in enumerate(BUILD_LOG.splitlines())]
    log = jupyter_book2.read_build_log(timed)
    assert log.is_jupyter_book2
    assert log.executed == ["intro.md"] and log.cached == ["arrays.md"] and log.halted == ["sleeps.md"]
    assert log.server_start_s == pytest.approx(0.5)  # the lines came 0.5 s apart
    assert log.page_built_s == {"intro.md": pytest.approx(3.41), "sleeps.md": pytest.approx(0.64)}
    assert log.theme_unreachable and not log.server_failed
    assert not jupyter_book2.read_build_log([(0.0, "Executed notebook in 2.1 seconds\n")]).is_jupyter_book2


def test_cache_keys_name_the_pages_of_a_real_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = _copy_book(tmp_path)
    cache = book / "_build" / "execute"
    shutil.copytree(CACHED_ENTRIES, cache)
    keys = {book2_cache_key(notebook_module.read(book / page)): page for page in PAGES}
    # nbscope's key for each page is the file name jupyter-book 2 gave that page's entry
    assert {entry.stem for entry in cache.glob("*.ipynb")} == set(keys)
    rows = read_book2_cache(cache)
    assert (
        [row["page"].name for row in rows]
        == [keys[row["hashkey"]] for row in rows]
        == ["intro.md", "arrays.md", "sleeps.md"]
    )
    assert all(0 < row["execution_seconds"] < 60 and row["created"].endswith("Z") for row in rows)
    # A changed page no longer owns its old entry: that entry keeps a name of its own.
    intro = book / "intro.md"
    intro.write_text(intro.read_text().replace("radius = 2.0", "radius = 3.0"))
    monkeypatch.chdir(book)
    store = Store(tmp_path / "db" / "nbscope.db")
    records, skipped = import_cache(book, store, fingerprint=dict(FINGERPRINT))
    assert skipped == 0 and len(records) == len(rows)
    targets = {r.target for r in records}
    assert "intro.md" not in targets and any(t.startswith("_build/execute/") for t in targets)
    assert all(r.kind == "jupyter-cache" and r.settings["tool"] == "jupyter-book 2" for r in records)
    again, skipped = import_cache(book / "_build", store, fingerprint=dict(FINGERPRINT))
    assert again == [] and skipped == len(rows)


def test_fresh_sets_the_cache_aside_and_puts_the_users_entries_back(tmp_path: Path) -> None:
    book = _copy_book(tmp_path)
    cache = book / "_build" / "execute"
    cache.mkdir(parents=True)
    (cache / "old.ipynb").write_text("the user's entry")
    (cache / "kept.ipynb").write_text("another of the user's")
    moved = _set_cache_aside(book, "0123456789abcdef")
    assert moved is not None and not cache.exists()
    cache.mkdir()  # the build writes a new cache: one entry under a key the user had, one new
    (cache / "old.ipynb").write_text("written by the traced build")
    (cache / "new.ipynb").write_text("new key")
    _put_cache_back(*moved)
    assert (cache / "old.ipynb").read_text() == "the user's entry"
    assert (cache / "kept.ipynb").exists() and (cache / "new.ipynb").exists()
    assert sorted(p.name for p in cache.parent.iterdir()) == ["execute"]
    # A set-aside folder left by a run killed outright is put back by the next one.
    left = cache.with_name("execute.nbscope-set-aside-deadbeef0000")
    left.mkdir()
    (left / "lost.ipynb").write_text("x")
    moved = _set_cache_aside(book, "fedcba9876543210")
    assert moved is not None and (moved[1] / "lost.ipynb").exists()
    _put_cache_back(*moved)
    assert {p.name for p in cache.iterdir()} == {"old.ipynb", "kept.ipynb", "new.ipynb", "lost.ipynb"}


def test_book2_env_says_how_to_install_when_it_is_missing(run_cli: Any, tmp_path: Path) -> None:
    if jupyter_book2.this_environment_version() and jupyter_book2.major(jupyter_book2.this_environment_version()) == 2:
        pytest.skip("this environment has jupyter-book 2 itself")
    if shutil.which("myst"):
        pytest.skip("mystmd is on PATH")
    done = run_cli("book2-env", env={"NBSCOPE_CACHE_DIR": str(tmp_path / "cache"), "NBSCOPE_JUPYTER_BOOK2": None})
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "nbscope book2-env --install" in done.stderr and str(tmp_path / "cache") in done.stderr
    done = run_cli("book2-env", "--json", env={"NBSCOPE_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 1 and json.loads(done.stdout)["command"] == []


# ---- real jupyter-book 2 builds ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def book2() -> jupyter_book2.JupyterBook2:
    """jupyter-book 2 as `pathways --via book2` finds it, installed into nbscope's environment if need be."""
    return found_or_installed(jupyter_book2.find, jupyter_book2.install, "jupyter-book 2")


def found_or_installed(find: Callable[[], FoundT], install: Callable[[], object], what: str) -> FoundT:
    """The builder ``find()`` gives, installed by ``install()`` first if it is absent; the test skips, saying
    why, where it cannot be installed or run."""
    found = find()
    if not found.command:
        try:
            install()
        except NbscopeError as exc:
            pytest.skip(f"{what} cannot be installed here: {exc}")
        found = find()
    if not found.usable:
        pytest.skip(f"{what} cannot run here: {found.problem}")
    return found


def _copy_book(tmp_path: Path, *, offline_theme: bool = False) -> Path:
    book = tmp_path / "book"
    shutil.copytree(BOOK, book)
    if offline_theme:
        jupyter_book2.write_theme_stand_in(book)
    return book


def _trace(
    book: Path, found: jupyter_book2.JupyterBook2, db: Path, *extra: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`nbscope trace [extra] -- jupyter book build --execute` in ``book``, with jupyter-book 2 first on PATH."""
    env = dict(os.environ)
    env.pop("NBSCOPE_DB", None)
    env["PATH"] = os.pathsep.join([str(found.path_folder), env.get("PATH", "")])
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope",
            "trace",
            "--db",
            str(db),
            "--json",
            *extra,
            "--",
            "jupyter",
            "book",
            "build",
            "--execute",
        ],
        cwd=book,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _using(folder: Path) -> list[str]:
    """Processes whose command line names ``folder`` or that run inside it (a Jupyter server, kernels)."""
    found = []
    for process in psutil.process_iter():
        try:
            if str(folder) in " ".join(process.cmdline()) or process.cwd().startswith(str(folder)):
                found.append(" ".join(process.cmdline())[:150])
        except psutil.Error:
            continue
    return found


def _no_process_left(folder: Path, within_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := _using(folder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.slow
def test_trace_a_three_page_book(book2: jupyter_book2.JupyterBook2, tmp_path: Path) -> None:
    book = _copy_book(tmp_path, offline_theme=True)
    db = tmp_path / "db" / "nbscope.db"
    done = _trace(book, book2, db)
    assert done.returncode == 0, done.stderr[-3000:]
    records = {r["target"]: r for r in json.loads(done.stdout)}
    assert sorted(records) == PAGES
    for page, record in records.items():
        source = notebook_module.read(book / page)
        cells = record["measurements"]["cells"]
        assert [c["source_hash"] for c in cells] == [c.source_hash for c in source.code_cells]
        assert [c["line"] for c in cells] == [c.line for c in source.code_cells]
        assert all(c["status"] == "ok" and c["wall_s"] is not None for c in cells), (page, cells)
        assert record["status"] == "ok"
        # the kernel jupyter-book 2's server started ran this interpreter (the notebook's environment)
        assert Path(record["measurements"]["kernel"]["executable"]).resolve() == Path(sys.executable).resolve()
        assert record["measurements"]["runner"]["jupyter_book2"]["server_start_s"] > 0
    sleeps = records["sleeps.md"]["measurements"]["cells"]
    assert [c["line"] for c in sleeps] == [12, 16, 20]
    # the 0.2 s sleep, far from the other cells' few milliseconds
    assert sleeps[1]["wall_s"] >= 0.19 and sleeps[1]["wall_s"] > 2 * max(sleeps[0]["wall_s"], sleeps[2]["wall_s"])
    assert _no_process_left(book) == []

    # A second build takes every page from the execution cache: nothing runs, and nbscope says so.
    cache = book / "_build" / "execute"
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    assert len(before) == 3
    again = _trace(book, book2, db)
    assert again.returncode == 2 and again.stderr.count("\n") >= 1
    assert "execution cache" in again.stderr and "--fresh" in again.stderr
    # --fresh runs every page and leaves the cache as it was; --jupyter-book2 puts it first on PATH itself.
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    fresh = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope",
            "trace",
            "--db",
            str(db),
            "--json",
            "--fresh",
            "--jupyter-book2",
            "--",
            "jupyter",
            "book",
            "build",
            "--execute",
        ],
        cwd=book,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert sorted(r["target"] for r in json.loads(fresh.stdout)) == PAGES
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before
    assert [p.name for p in (book / "_build").iterdir() if "nbscope" in p.name] == []
    store = Store(db)
    assert store.count() == 6

    # The cache's per-page times become runs named by their pages.
    imported, _ = import_cache(book, store, fingerprint=dict(FINGERPRINT), root=book)
    assert sorted(r.target for r in imported) == PAGES
    assert _no_process_left(book) == []


@pytest.mark.slow
def test_a_failing_build_leaves_no_server_or_kernel(book2: jupyter_book2.JupyterBook2, tmp_path: Path) -> None:
    """A site theme that exists nowhere: the build executes every page, then fails fetching the theme (online
    or offline), and jupyter-book 2 leaves its Jupyter server running; nbscope stops it."""
    book = _copy_book(tmp_path)
    config = book / "myst.yml"
    config.write_text(config.read_text().replace("template: book-theme", "template: ./no-such-theme"))
    done = _trace(book, book2, tmp_path / "nbscope.db")
    assert done.returncode == 1, done.stderr[-3000:]
    assert sorted(r["target"] for r in json.loads(done.stdout)) == PAGES  # measured before it failed
    assert _no_process_left(book) == []


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["nbscope gets SIGTERM", "the build is killed"])
def test_stopping_the_build_midway_leaves_nothing_behind(
    book2: jupyter_book2.JupyterBook2, tmp_path: Path, stop: str
) -> None:
    book = _copy_book(tmp_path, offline_theme=True)
    page = book / "sleeps.md"
    started = tmp_path / "started"  # written by the last cell as it starts: the page's first three cells have run
    page.write_text(
        page.read_text() + f"\n```{{code-cell}} ipython3\nopen({str(started)!r}, 'w').close()\ntime.sleep(120)\n```\n"
    )
    db = tmp_path / "nbscope.db"
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env["PATH"] = os.pathsep.join([str(book2.path_folder), env.get("PATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "trace", "--db", str(db), "--", "jupyter", "book", "build", "--execute"],
        cwd=book,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # One kernel per page, in order: the third one runs sleeps.md, whose last cell sleeps for 120 s.
        seen: set[int] = set()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(seen) < 3:
            assert process.poll() is None, process.communicate()
            seen |= _book_kernels(book)
            time.sleep(0.2)
        assert len(seen) == 3, f"kernels seen: {len(seen)}"
        while time.monotonic() < deadline and not started.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        assert started.exists(), "the last cell of sleeps.md never started"
        if stop == "nbscope gets SIGTERM":
            process.send_signal(signal.SIGTERM)
        else:
            (build,) = [
                p
                for p in psutil.process_iter(["cmdline"])
                if "jupyter-book.cjs" in " ".join(p.info["cmdline"] or []) and _cwd(p) == str(book)
            ]
            build.kill()  # the Jupyter server and the kernel it started stay behind: nbscope stops them
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    signum = signal.SIGTERM if stop == "nbscope gets SIGTERM" else signal.SIGKILL
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert _no_process_left(book) == []
    runs = {r.target: r for r in Store(db).records(kind="trace")}
    assert runs["sleeps.md"].status == "partial"
    statuses = [c["status"] for c in runs["sleeps.md"].measurements["cells"]]
    # Stopped by a signal, nbscope records the running cell as interrupted (with the time it ran and the signal);
    # a build that died took its kernel along.
    assert statuses == ["ok", "ok", "ok", "interrupted" if stop == "nbscope gets SIGTERM" else "kernel-died"]
    if stop == "nbscope gets SIGTERM":
        cell = runs["sleeps.md"].measurements["cells"][3]
        assert cell["interrupted_by"] == "SIGTERM" and cell["wall_s"] > 0


def _cwd(process: psutil.Process) -> str | None:
    try:
        return process.cwd()
    except psutil.Error:
        return None


def _book_kernels(book: Path) -> set[int]:
    kernels = set()
    for process in psutil.process_iter():
        try:
            if "ipykernel" in " ".join(process.cmdline()) and process.cwd() == str(book):
                kernels.add(process.pid)
        except psutil.Error:
            continue
    return kernels


@pytest.fixture
def isolated_tmp(tmp_folder: Path) -> Iterator[Path]:
    yield tmp_folder
    assert _no_process_left(tmp_folder) == []


@pytest.mark.slow
def test_the_book2_pathway_pairs_cells_and_keeps_its_fixed_costs_apart(
    book2: jupyter_book2.JupyterBook2, isolated_tmp: Path
) -> None:
    from nbscope.api.pathways import run_pathways

    record = run_pathways(FILES / "pathways_small.md", ("kernel", "book2"), fingerprint={"digest": "x"})
    m = record.measurements
    entry = m["pathways"]["book2"]
    assert entry["status"] == "ok", entry
    assert m["totals"]["cells_paired"] == m["totals"]["cells"] == len(m["cells"])
    statuses = [row["by_pathway"]["book2"]["status"] for row in m["cells"]]
    assert statuses == ["ok", "ok", "ok", "ok", "expected-error", "skipped"]
    sleep = m["cells"][1]["by_pathway"]["book2"]["wall_s"]
    assert sleep >= 0.39  # time.sleep(0.4)
    overheads = entry["overheads"]
    assert 0 < overheads["server_start_s"] < overheads["book_outside_execution_s"] < overheads["book_build_s"]
    assert overheads["book_executed_s"] >= sleep and overheads["execution_outside_cells_s"] >= 0
    assert entry["runner"]["executed_from"] == "execution cache duration_ms"
    assert sorted(p.name for p in isolated_tmp.iterdir() if p.name.startswith("nbscope-")) == []


@pytest.mark.slow
def test_bench_workloads_through_the_book2_pathway(book2: jupyter_book2.JupyterBook2, isolated_tmp: Path) -> None:
    from nbscope.api.pathways import run_bench_pathways

    # What `nbscope bench --pathway book2 --only python --size quick` calls.
    record = run_bench_pathways(via=["book2"], only=["python"], dtype="float32", size="quick", jax_platform=None)
    m = record.measurements
    assert m["pathways"]["book2"]["status"] == "ok", m["pathways"]["book2"]
    assert m["totals"]["cells_paired"] == m["totals"]["cells"] == 2
    assert m["figures"] and all(f["by_pathway"]["book2"]["median_s"] > 0 for f in m["figures"])
