"""No measured data lost, nothing deleted that nbscope did not create.

Real signals go to real ``python -m nbscope`` processes while a cell runs: the partial run must be in
the store, the exit code 128 + the signal, and no kernel (nor a process a cell started) left running.
A run killed outright (SIGKILL) leaves its live file, which ``runs --unfinished`` lists and ``import``
stores. ``--jax-cache cold`` never empties a folder that nbscope did not make.

The notebook (tests/files/signal_sleeps.ipynb) runs a quick cell, then a cell that starts a child
process, writes the file named by ``NBSCOPE_TEST_STARTED`` and sleeps: the tests wait for that file,
never for a fixed time.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbscope.api.profile import CACHE_MARKER, ProfileOptions, default_cache_root, jax_cache_env, owns_folder
from nbscope.collect.runner import ExecutionOptions, execute
from nbscope.record.cells import target_name
from nbscope.record.live import live_folder
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
NOTEBOOK = FILES / "signal_sleeps.ipynb"
MARKER = "NBSCOPE_TEST_SIGNAL_MARKER"
STARTED = "NBSCOPE_TEST_STARTED"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
STOP_SIGNALS = tuple(EXIT_CODES)
# Generous limits for a loaded machine; a passing run takes a few seconds of them.
START_LIMIT_S = 300
STOP_LIMIT_S = 120


# ---- helpers -------------------------------------------------------------------------------------------


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked(marker: str) -> list[psutil.Process]:
    """Live processes that inherited ``MARKER=marker``: nbscope, its kernels and what their cells started."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == marker and _alive(process):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A marker for this test's processes; any left at the end are killed (the test has failed then)."""
    value = uuid.uuid4().hex
    yield value
    for process in marked(value):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def default_stop_signals() -> None:
    """In the child, before nbscope starts: SIGINT, SIGTERM and SIGHUP do what they do by default. A test
    runner under ``nohup``, or started as a background job, ignores SIGHUP or SIGINT, and a child inherits
    that; nbscope rightly keeps a signal ignored that it was started ignoring, so the test sets them itself."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def start_nbscope(
    args: list[str], *, cwd: Path, marker: str, started: Path, ignored: tuple[int, ...] = ()
) -> subprocess.Popen[str]:
    """``python -m nbscope ARGS`` with the stop signals at their defaults, except those ``ignored``."""
    env = dict(os.environ)
    env.pop("NBSCOPE_DB", None)
    env.update({MARKER: marker, STARTED: str(started)})

    def dispositions() -> None:
        default_stop_signals()
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "nbscope", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=dispositions,
    )


def wait_until_cell_runs(process: subprocess.Popen[str], started: Path) -> None:
    """Until the sleeping cell has started (so the cell before it finished); fails if nbscope ended."""
    deadline = time.monotonic() + START_LIMIT_S
    while not started.exists():
        if process.poll() is not None:
            _, stderr = process.communicate()
            pytest.fail(f"nbscope ended (exit {process.returncode}) before the cell ran: {stderr[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the sleeping cell did not start within {START_LIMIT_S} s")
        time.sleep(0.1)


def stop(process: subprocess.Popen[str], signum: int) -> str:
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=STOP_LIMIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"nbscope did not stop within {STOP_LIMIT_S} s of {signal.Signals(signum).name}")
    return stderr


def assert_nothing_left(marker: str, *pids: int) -> None:
    """No process of this test runs on: kernels, the processes their cells started, the traced command."""
    leftover = marked(marker) + [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(leftover, timeout=10)  # kills are sent; zombies count as gone
    alive = [p for p in alive if _alive(p)]
    assert not alive, [f"{p.pid}: {' '.join(p.cmdline())[:160]}" for p in alive]


def assert_stopped_run(record: RunRecord, signum: int | None = None) -> None:
    """The quick cell is kept with its figures; the cell that was running is ``interrupted``, with the time it
    ran and the signal (``signum``; a run recovered from its live file never heard it: ``not-run``); the one
    after it did not run."""
    assert record.status == "partial"
    cells = record.measurements["cells"]
    assert cells[0]["wall_s"] is not None and cells[0]["execution_count"] == 1
    assert record.measurements["totals"]["cells_run"] == 1
    if signum is None:
        assert [c["status"] for c in cells] == ["ok", "not-run", "not-run"]
        return
    assert [c["status"] for c in cells] == ["ok", "interrupted", "not-run"]
    name = signal.Signals(signum).name
    assert cells[1]["interrupted_by"] == name and name in cells[1]["error"]["message"]
    assert cells[1]["wall_s"] > 0  # it ran until the signal came (the test waited for it to start)
    assert cells[2]["wall_s"] is None


# ---- profile -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.slow
def test_a_signal_during_profile_saves_the_partial_run_and_stops_the_kernel(
    tmp_path: Path, marker: str, signum: int
) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(["profile", str(NOTEBOOK), "--db", str(db)], cwd=tmp_path, marker=marker, started=started)
    wait_until_cell_runs(process, started)
    child = int(started.read_text())
    stderr = stop(process, signum)

    assert process.returncode == EXIT_CODES[signum], stderr
    assert "Traceback" not in stderr
    [summary] = Store(db).runs()
    record = Store(db).get(summary["id"])
    assert_stopped_run(record, signum)
    assert f"nbscope: stopped by {signal.Signals(signum).name}; saved partial run {summary['id']}" in stderr
    kernel_pid = record.measurements["kernel"]["pid"]
    assert_nothing_left(marker, kernel_pid, child)
    assert not list(live_folder(db).glob("*.jsonl"))  # stored, so its live file is gone


# ---- trace -- jupyter-book build ----------------------------------------------------------------------


@functools.cache  # asked in the test, not at collection: `jupyter-book --version` takes seconds
def _jupyter_book_1() -> bool:
    if shutil.which("jupyter-book") is None:
        return False
    version = subprocess.run(["jupyter-book", "--version"], capture_output=True, text=True).stdout
    return "Jupyter Book      : 1." in version or version.strip().startswith("1.")


def make_book(root: Path) -> Path:
    root.mkdir()
    (root / "_config.yml").write_text(
        "title: nbscope signal test\nauthor: nbscope\nonly_build_toc_files: true\n"
        "execute:\n  execute_notebooks: force\n  timeout: 600\n"
    )
    (root / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    shutil.copy(NOTEBOOK, root / "page.ipynb")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_traced_book_build_saves_its_partial_run_and_stops_its_kernels(
    tmp_path: Path, marker: str, signum: int
) -> None:
    if not _jupyter_book_1():
        pytest.skip("jupyter-book 1 is not installed")
    book = make_book(tmp_path / "book")
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(
        ["trace", "--db", str(db), "--", "jupyter-book", "build", "--all", str(book)],
        cwd=book,
        marker=marker,
        started=started,
    )
    wait_until_cell_runs(process, started)
    child = int(started.read_text())
    # The book's kernel runs in a session of its own, outside the build's process group.
    kernels = [p for p in marked(marker) if "ipykernel" in " ".join(p.cmdline())]
    assert kernels and all(os.getsid(k.pid) != os.getsid(process.pid) for k in kernels)
    stderr = stop(process, signum)

    assert process.returncode == EXIT_CODES[signum], stderr[-3000:]
    [record] = Store(db).records(kind="trace")
    assert record.target == "page.ipynb"
    assert_stopped_run(record, signum)
    assert record.measurements["runner"]["interrupted"] == signal.Signals(signum).name
    assert f"saved partial run {record.run_id} (page.ipynb)" in stderr
    assert_nothing_left(marker, record.measurements["kernel"]["pid"], child, *(k.pid for k in kernels))


# ---- pathways and audit ------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_during_pathways_keeps_the_pathway_it_cut_short(tmp_path: Path, marker: str) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(
        ["pathways", str(NOTEBOOK), "--via", "script,kernel", "--db", str(db)],
        cwd=tmp_path,
        marker=marker,
        started=started,
    )
    wait_until_cell_runs(process, started)  # in the script pathway, which runs first
    child = int(started.read_text())
    stderr = stop(process, signal.SIGTERM)

    assert process.returncode == 143, stderr[-3000:]
    [record] = Store(db).records(kind="pathways")
    assert record.status == "partial" and record.measurements["totals"]["interrupted"] is True
    script, kernel = (record.measurements["pathways"][name] for name in ("script", "kernel"))
    assert script["status"] == "partial" and kernel["status"] == "not-run"
    assert [row["by_pathway"]["script"]["status"] for row in record.measurements["cells"]] == [
        "ok",
        "not-run",
        "not-run",
    ]
    assert f"saved partial run {record.run_id}" in stderr
    assert_nothing_left(marker, child)


@pytest.mark.slow
def test_sigterm_during_audit_saves_the_running_notebook_and_the_audit(tmp_path: Path, marker: str) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(
        ["audit", str(NOTEBOOK), "--db", str(db), "-q"], cwd=tmp_path, marker=marker, started=started
    )
    wait_until_cell_runs(process, started)
    child = int(started.read_text())
    stderr = stop(process, signal.SIGTERM)

    assert process.returncode == 143, stderr[-3000:]
    [audit] = Store(db).records(kind="audit")
    [profile] = Store(db).records(kind="profile")
    assert audit.status == "partial"
    [entry] = audit.measurements["notebooks"]
    assert entry["status"] == "not-run" and entry["run_id"] == profile.run_id  # a partial wall is not compared
    # Recovered from the worker's live file; the cell it was running is interrupted by the audit's signal, with
    # the time from the file's last write (the cell before it ended) to the signal.
    assert_stopped_run(profile, signal.SIGTERM)
    assert profile.measurements["audit"]["interrupted"] is True
    assert f"saved partial run {profile.run_id}" in stderr and f"partial audit run {audit.run_id}" in stderr
    assert not list(live_folder(db).glob("*.jsonl"))
    assert_nothing_left(marker, profile.measurements["kernel"]["pid"], child)


# ---- killed outright: the live file is recoverable ----------------------------------------------------


@pytest.mark.slow
def test_a_killed_profile_leaves_a_live_file_that_runs_lists_and_import_stores(tmp_path: Path, marker: str) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(["profile", str(NOTEBOOK), "--db", str(db)], cwd=tmp_path, marker=marker, started=started)
    wait_until_cell_runs(process, started)
    process.kill()  # SIGKILL: nothing can be saved by the process itself
    process.communicate(timeout=STOP_LIMIT_S)
    for leftover in marked(marker):  # what a SIGKILL leaves running is not what this test is about
        leftover.kill()
    assert not Store(db).runs()
    [live] = live_folder(db).glob("*.jsonl")

    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    nbscope = [sys.executable, "-m", "nbscope"]
    listed = subprocess.run([*nbscope, "runs", "--db", str(db)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "1 unfinished run(s)" in listed.stdout, listed.stdout + listed.stderr
    unfinished = subprocess.run(
        [*nbscope, "runs", "--db", str(db), "--unfinished", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    [item] = json.loads(unfinished.stdout)
    assert item["path"] == str(live) and item["state"] == "unfinished"
    assert (item["kind"], item["target"], item["cells_measured"], item["code_cells"]) == (
        "profile",
        target_name(NOTEBOOK),
        1,
        3,
    )

    imported = subprocess.run(
        [*nbscope, "import", str(live), "--db", str(db)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert imported.returncode == 0, imported.stderr
    assert "imported as run 1 (partial: 1 of 3 cells ran)" in imported.stdout
    record = Store(db).get(1)
    assert_stopped_run(record)
    assert record.target == target_name(NOTEBOOK) and record.measurements["recovered_from"] == str(live)
    assert isinstance(record.measurements["kernel"]["pid"], int)  # the probe's kernel header was kept too
    assert not live.exists()  # in the store now: nothing piles up
    again = subprocess.run(
        [*nbscope, "runs", "--db", str(db), "--unfinished"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert again.stdout.strip() == "No unfinished runs."


@pytest.mark.slow
def test_a_stored_run_leaves_no_live_file_and_a_named_one_stays(tmp_path: Path) -> None:
    from nbscope.api.profile import profile

    path = tmp_path / "quick.ipynb"
    nbformat.write(
        new_notebook(cells=[new_code_cell("a = 1"), new_code_cell("b = a + 1")], metadata={"kernelspec": KERNELSPEC}),
        path,
    )
    store = Store(tmp_path / "db" / "nbscope.db")
    record = profile(path, ProfileOptions(), store=store)
    assert record.measurements["live_file"] is None
    assert not list(live_folder(store.path).glob("*.jsonl"))
    named = tmp_path / "mine.jsonl"
    record = profile(path, ProfileOptions(), store=store, live_path=named)
    lines = [json.loads(line) for line in named.read_text().splitlines()]
    assert [line.get("type") for line in lines] == ["run", "execution", "kernel", None, None]
    assert record.measurements["live_file"] == str(named)


# ---- a runner whose cleanup fails still returns its cells ---------------------------------------------


@pytest.mark.slow
def test_a_failing_kernel_shutdown_still_returns_the_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    from nbclient import NotebookClient

    from nbscope.collect import notebook as notebook_module

    real_cleanup = NotebookClient._cleanup_kernel

    def cleanup_then_fail(self: Any) -> None:
        real_cleanup(self)  # the kernel really is shut down; then the clean-up reports a failure
        raise RuntimeError("shutdown failed")

    monkeypatch.setattr(NotebookClient, "_cleanup_kernel", cleanup_then_fail)
    path = tmp_path / "two.ipynb"
    nbformat.write(
        new_notebook(cells=[new_code_cell("a = 1"), new_code_cell("b = a + 1")], metadata={"kernelspec": KERNELSPEC}),
        path,
    )
    execution = execute(notebook_module.read(path), ExecutionOptions(env={MARKER: marker}))
    assert [c["status"] for c in execution.cells] == ["ok", "ok"]
    assert execution.runner["shutdown_error"] == "RuntimeError: shutdown failed"
    assert_nothing_left(marker)


# ---- --jax-cache cold deletes only what nbscope made ------------------------------------------------


def test_jax_cache_cold_never_empties_a_folder_nbscope_did_not_make(tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    user_folder = default_cache_root(db)
    user_folder.mkdir(parents=True)
    (user_folder / "notes.txt").write_text("mine")
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    result = subprocess.run(
        [sys.executable, "-m", "nbscope", "profile", str(NOTEBOOK), "--db", str(db), "--jax-cache", "cold"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nbscope: error: --jax-cache cold: ") and CACHE_MARKER in lines[0]
    assert (user_folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in user_folder.iterdir()) == ["notes.txt"]
    assert not db.exists()  # refused before anything ran or was stored


def test_jax_cache_cold_empties_the_folder_it_made(tmp_path: Path) -> None:
    folder = tmp_path / "jax-cache"
    env, state = jax_cache_env("warm", folder)  # made by nbscope: it carries the marker
    assert state == "cold" and owns_folder(folder) and env["JAX_COMPILATION_CACHE_DIR"] == str(folder.resolve())
    (folder / f"jit_f-{'0' * 64}-cache").write_bytes(b"compiled")  # what JAX writes there
    (folder / "sub").mkdir()
    (folder / "sub" / "x").write_bytes(b"")  # the user's: stays (tests/test_adversarial.py)
    assert jax_cache_env("warm", folder)[1] == "warm"
    assert jax_cache_env("cold", folder)[1] == "cold"
    assert sorted(p.name for p in folder.iterdir()) == [CACHE_MARKER, "sub"]
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder holds nothing to lose: adopted
    assert jax_cache_env("cold", empty)[1] == "cold" and owns_folder(empty)


@pytest.mark.slow
def test_sigterm_during_try_keeps_the_trial_run_it_cut_short(tmp_path: Path, marker: str) -> None:
    """A trial stopped mid-run (a device's time running out) keeps its runs measured so far, linked to the run
    they test, with the cell it was stopped in; exit 143."""
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    db, started = tmp_path / ".nbscope" / "nbscope.db", tmp_path / "started"
    source = start_nbscope(
        ["profile", NOTEBOOK.name, "--timeout", "3", "--allow-errors", "--no-diagnose", "--db", str(db)],
        cwd=tmp_path,
        marker=marker,
        started=started,
    )
    source.communicate(timeout=START_LIMIT_S)
    started.unlink()
    process = start_nbscope(
        ["try", "1", "--cell", "1", "--remedy", "threads:2", "--repeats", "1", "--db", str(db)],
        cwd=tmp_path,
        marker=marker,
        started=started,
    )
    wait_until_cell_runs(process, started)
    child = int(started.read_text())
    stderr = stop(process, signal.SIGTERM)

    assert process.returncode == 143, stderr[-3000:]
    [trial] = Store(db).records(kind="trial")
    assert trial.status == "partial" and trial.settings["trial"]["of"] == 1
    assert [c["status"] for c in trial.measurements["cells"]] == ["ok", "interrupted", "not-run"]
    assert_nothing_left(marker, child)
