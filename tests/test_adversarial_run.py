"""``profile`` and ``trace`` as CI and an adversarial tester use them: real kernels on tiny notebooks.

Each failure class gets its bad input, the exit code, the one-line message and what is (and is not) kept on
disk: store rows, live files. Exit codes: 1 when a cell failed (``--allow-errors`` exits 0), 2 for a bad option
or store (refused before a kernel starts: nothing run, nothing stored, no live file) and for a run the store
refused after it ran (its ledger printed first, then the live file and the import command), 128 + the signal
when stopped. A closed output pipe is the reader having had enough: exit 0, quietly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from nbscope.collect.platforms import machine_lacks
from nbscope.record.live import live_folder
from nbscope.record.run import RunRecord, loads
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
RECORDS = FILES / "records"


# ---- helpers -------------------------------------------------------------------------------------------


def nbscope(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
            stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """``python -m nbscope ARGS`` with the stop signals at their defaults (the test runner may ignore some)."""
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | (env or {})

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    return subprocess.run([sys.executable, "-m", "nbscope", *map(str, args)], cwd=cwd, env=merged, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, preexec_fn=default_signals)


def one_error_line(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single ``nbscope: error: ...`` line a refused command prints (no traceback), holding ``fragments``."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("nbscope: error: ") and "Traceback" not in done.stderr, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def live_files(db: Path) -> list[Path]:
    folder = live_folder(db)
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def snapshot(path: Path) -> tuple[bytes, int] | None:
    """A file's bytes and modification time: unchanged means nothing wrote to it."""
    return (path.read_bytes(), path.stat().st_mtime_ns) if path.exists() else None


def full_store(path: Path, runs: int = 3) -> Path:
    """A real store holding ``runs`` runs (padded, so that it spans several pages)."""
    store = Store(path)
    for number in range(runs):
        store.save(RunRecord(kind="profile", target=f"nb{number}.ipynb", fingerprint={"digest": "d"},
                             measurements={"cells": [], "totals": {}, "pad": "x" * 6000, "n": number}))
    return path


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a file or a folder) read-only for the block. Root writes through permissions: the file is
    made immutable (``chattr +i``) instead, and the test is skipped where that is not allowed."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: a read-only store cannot be made")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)


def writable_again(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=False)
    else:
        path.chmod(0o644)


# ---- exit codes CI can use -----------------------------------------------------------------------------


def test_a_failing_cell_exits_1_and_allow_errors_exits_0_the_run_stored_either_way(tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    failed = nbscope("profile", FILES / "error.ipynb", "--db", db, "--no-diagnose", cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    [line] = failed.stderr.strip().splitlines()
    assert line.startswith("nbscope: failed: cell 2 of ") and "(error ValueError)" in line and "--allow-errors" in line
    assert "saved as run 1" in failed.stdout  # the ledger came first
    allowed = nbscope("profile", FILES / "error.ipynb", "--db", db, "--no-diagnose", "--allow-errors", "--json",
                      cwd=tmp_path)
    assert allowed.returncode == 0 and allowed.stderr == "", allowed.stderr
    assert [c["status"] for c in loads(allowed.stdout).measurements["cells"]] == ["ok", "error", "ok", "ok"]
    assert [r["status"] for r in Store(db).list()] == ["ok", "ok"]  # both stored: the figures stand
    assert live_files(db) == []


def test_on_error_stop_and_a_dead_kernel_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    stopped = nbscope("profile", FILES / "error.ipynb", "--on-error", "stop", "--db", db, "--json", "--no-diagnose",
                      cwd=tmp_path)
    assert stopped.returncode == 1 and "nbscope: failed: cell 2 of" in stopped.stderr, stopped.stderr
    assert [c["status"] for c in loads(stopped.stdout).measurements["cells"]] == ["ok", "error", "not-run", "not-run"]
    died = nbscope("profile", FILES / "kernel_dies.ipynb", "--db", db, "--no-diagnose", cwd=tmp_path)
    assert died.returncode == 1 and "(kernel-died DeadKernelError)" in died.stderr, died.stderr
    assert [r["status"] for r in Store(db).list()] == ["partial", "partial"]
    assert live_files(db) == []
    # diagnose says which cell died and that the rest never ran, in text, markdown and JSON.
    said = nbscope("diagnose", "latest", "--db", db, cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    assert "cell 3 died (DeadKernelError" in said.stdout
    assert "2 cells did not run: the rules judged only what ran" in said.stdout
    assert "no rule fired on the cells that ran" in said.stdout
    markdown = nbscope("diagnose", "latest", "--db", db, "--markdown", cwd=tmp_path)
    assert "- cell 3 died (DeadKernelError" in markdown.stdout
    document = json.loads(nbscope("diagnose", "latest", "--db", db, "--json", cwd=tmp_path).stdout)
    assert [(c["index"], c["status"]) for c in document["failed_cells"]] == [(2, "kernel-died")]
    assert document["cells_not_run"] == 2
    stopped_run = nbscope("diagnose", "1", "--db", db, cwd=tmp_path)
    assert "cell 2 raised (" in stopped_run.stdout, stopped_run.stdout


def test_an_expected_error_exits_0(tmp_path: Path) -> None:
    done = nbscope("profile", FILES / "raises_exception.ipynb", "--db", tmp_path / "s.db", "--no-diagnose",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("jupyter") is None, reason="jupyter is not installed")
def test_trace_exits_1_when_a_traced_cell_failed_and_the_command_passed(tmp_path: Path) -> None:
    shutil.copy(FILES / "error.ipynb", tmp_path / "error.ipynb")
    db = tmp_path / "db" / "nbscope.db"
    command = ["--", "jupyter", "execute", "--allow-errors", "error.ipynb"]  # the command itself exits 0
    failed = nbscope("trace", "--db", db, "--no-diagnose", *command, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "nbscope: failed: cell 2 of error.ipynb (error ValueError)" in failed.stderr
    allowed = nbscope("trace", "--db", db, "--no-diagnose", "--allow-errors", *command, cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert len(Store(db).records(kind="trace")) == 2  # stored either way: the figures stand


def test_a_closed_output_pipe_exits_0_quietly_and_profile_still_fails_a_broken_notebook(tmp_path: Path) -> None:
    db = full_store(tmp_path / "s.db", runs=40)
    before = snapshot(db)
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write nbscope makes meets a closed pipe (EPIPE), as under `| head -1` once head quit
    try:
        for args in (["runs", "--db", db], ["show", "1", "--db", db], ["runs", "--db", db, "--json"], ["--help"]):
            done = nbscope(*args, cwd=tmp_path, stdout=write_end)
            assert (done.returncode, done.stderr) == (0, ""), (args, done.returncode, done.stderr)
        # A command whose status is a verdict never turns a failure into 0: its verdict is still given.
        profiled = nbscope("profile", FILES / "error.ipynb", "--db", tmp_path / "p.db", "--no-diagnose", cwd=tmp_path,
                           stdout=write_end)
        assert profiled.returncode == 1 and "Traceback" not in profiled.stderr, profiled.stderr
        assert profiled.stderr.startswith("nbscope: failed: cell 2 of")
        differ = nbscope("info", "--diff", RECORDS / "cpu_x64.json", RECORDS / "synthetic_t4_x64.json", cwd=tmp_path,
                         stdout=write_end)
        assert differ.returncode == 1 and "Traceback" not in differ.stderr, differ.stderr
    finally:
        os.close(write_end)
    assert snapshot(db) == before  # reading never writes to the store
    assert len(Store(tmp_path / "p.db").list()) == 1


# ---- preflight: refused before a kernel starts ---------------------------------------------------------


def _lacking(backend: str) -> Any:
    return pytest.mark.skipif(machine_lacks(backend) is None, reason=f"this machine has a {backend} device")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--kernel", "nonexistent"], ["no Jupyter kernel named 'nonexistent'", "installed: "]),
        (["--jax-cache", "/dev/null"], ["--jax-cache /dev/null: exists and is not a folder"]),
        (["--jax-cache", "{tmp}/afile"], ["--jax-cache ", "afile: exists and is not a folder"]),
        (["--keep-traces", "/dev/null"], ["--keep-traces /dev/null: exists and is not a folder"]),
        (["--keep-traces", "{tmp}/afile/traces"], ["--keep-traces ", "afile is not a folder"]),
        (["--db", "{tmp}/afile/n.db"], ["--db ", "afile is not a folder"]),
        pytest.param(["--jax-platform", "cuda"], ["--jax-platform cuda: this machine has no NVIDIA GPU"],
                     marks=_lacking("cuda")),
        pytest.param(["--backends", "cpu,cuda"], ["--backends cuda: this machine has no NVIDIA GPU"],
                     marks=_lacking("cuda")),
        pytest.param(["--backends", "cpu,tpu"], ["--backends tpu: this machine has no TPU"], marks=_lacking("tpu")),
    ],
    ids=["kernel", "jax-cache-dev-null", "jax-cache-file", "keep-traces-dev-null", "keep-traces-under-a-file",
         "db-under-a-file", "jax-platform-cuda", "backends-cuda", "backends-tpu"],
)
def test_a_bad_option_is_refused_before_anything_runs(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    (tmp_path / "afile").write_text("the user's own file\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    db = tmp_path / "db" / "nbscope.db"
    started = time.monotonic()
    done = nbscope("profile", FILES / "error.ipynb", *(["--db", str(db)] if "--db" not in args else []), *args,
                   cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    one_error_line(done, *fragments)
    assert not db.exists() and not (tmp_path / "db").exists()  # nothing stored: the store was not even made
    assert not (tmp_path / ".nbscope").exists() and live_files(db) == []  # no live file
    assert (tmp_path / "afile").read_text() == "the user's own file\n"
    assert time.monotonic() - started < 60  # no kernel ran a notebook (its cells would still be far quicker)


def _truncated(path: Path) -> Path:
    full = full_store(path.with_name("full.db"), runs=10)
    path.write_bytes(full.read_bytes()[: 3 * 4096 + 100])
    full.unlink()
    return path


def _newer(path: Path) -> Path:
    full_store(path)
    with closing(sqlite3.connect(path)) as db:  # closed: its write is in the file, not left in the journal
        db.execute("UPDATE meta SET value = '99' WHERE key = 'store_version'")
        db.commit()
    return path


def _not_sqlite(path: Path) -> Path:
    path.write_text("my notes, not a database\n")
    return path


@pytest.mark.parametrize(
    "make, fragments",
    [(_truncated, ["is not a usable nbscope database"]), (_newer, ["store of version 99", "upgrade nbscope"]),
     (_not_sqlite, ["is not an SQLite database; refusing to touch it"])],
    ids=["truncated", "newer-version", "not-sqlite"],
)
def test_a_bad_store_is_refused_before_anything_runs_and_left_as_it_was(
    tmp_path: Path, make: Callable[[Path], Path], fragments: list[str]
) -> None:
    (tmp_path / "store").mkdir()
    db = make(tmp_path / "store" / "nbscope.db")
    before = snapshot(db)
    done = nbscope("profile", FILES / "empty.ipynb", "--db", db, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    one_error_line(done, *fragments)
    assert snapshot(db) == before and live_files(db) == []
    # trace refuses it before the command runs: the command never starts
    traced = nbscope("trace", "--db", db, "--", sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path)
    assert traced.returncode == 2
    one_error_line(traced, *fragments)
    assert not (tmp_path / "ran").exists() and snapshot(db) == before


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_store_is_refused_before_anything_runs(tmp_path: Path, store_dir: Path, what: str) -> None:
    db = full_store(store_dir / "nbscope.db")
    before = snapshot(db)
    with read_only(db if what == "file" else store_dir):
        done = nbscope("profile", FILES / "empty.ipynb", "--db", db, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    one_error_line(done, "read-only")
    assert snapshot(db) == before and live_files(db) == []
    assert Store(db).count() == 3


def test_a_kernel_that_will_not_start_stores_nothing_and_leaves_no_live_file(tmp_path: Path) -> None:
    spec = tmp_path / "jupyter" / "kernels" / "broken"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(tmp_path / "no-such-python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "broken", "language": "python",
    }))
    db = tmp_path / "db" / "nbscope.db"
    done = nbscope("profile", FILES / "error.ipynb", "--kernel", "broken", "--db", db, cwd=tmp_path,
                   env={"JUPYTER_PATH": str(tmp_path / "jupyter")})
    assert done.returncode == 2
    one_error_line(done, "could not start kernel 'broken'")
    assert not db.exists() and live_files(db) == []  # no 0-cell junk run, no live file


# ---- never a lost ledger -------------------------------------------------------------------------------


def test_a_store_that_fails_after_the_run_gets_the_ledger_then_the_import_command(tmp_path: Path) -> None:
    db = full_store(tmp_path / "store" / "nbscope.db", runs=1)
    try:
        done = nbscope("profile", FILES / "store_read_only_midrun.ipynb", "--db", db, cwd=tmp_path,
                       env={"NBSCOPE_TEST_STORE": str(db)})
    finally:
        writable_again(db)
    assert done.returncode == 2, done.stderr
    assert "a = 1" in done.stdout and "b = a + 1" in done.stdout  # the ledger is printed first
    assert "saved as run" not in done.stdout
    line = one_error_line(done, "could not be stored in", "its cells are kept in")
    [live] = live_files(db)
    command = f"nbscope import {live} --db {db}"
    assert f"`{command}`" in line
    assert Store(db).count() == 1  # the store holds what it held
    imported = nbscope(*command.split()[1:], cwd=tmp_path)  # the exact command, as printed
    assert imported.returncode == 0, imported.stderr
    assert Store(db).count() == 2 and live_files(db) == []
    [record] = [r for r in Store(db).records() if r.target.endswith("store_read_only_midrun.ipynb")]
    assert [c["status"] for c in record.measurements["cells"]] == ["ok", "ok", "ok"]


@pytest.mark.skipif(shutil.which("jupyter") is None, reason="jupyter is not installed")
def test_a_store_that_fails_after_a_traced_command_keeps_the_runs_in_files_to_import(tmp_path: Path) -> None:
    shutil.copy(FILES / "store_read_only_midrun.ipynb", tmp_path / "midrun.ipynb")
    db = full_store(tmp_path / "store" / "nbscope.db", runs=1)
    (tmp_path / "tmp").mkdir()  # where the run files go (the system's temporary folder, here the test's)
    try:
        done = nbscope("trace", "--db", db, "--no-diagnose", "--", "jupyter", "execute", "midrun.ipynb", cwd=tmp_path,
                       env={"NBSCOPE_TEST_STORE": str(db), "TMPDIR": str(tmp_path / "tmp")})
    finally:
        writable_again(db)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "b = a + 1" in done.stdout and "saved as run" not in done.stdout  # the ledger first
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("nbscope: error: the traced runs could not be stored in ") and "Traceback" not in done.stderr
    command = line.split("`")[1]
    assert command.startswith(f"nbscope import {tmp_path / 'tmp'}") and command.endswith(f" --db {db}")
    assert Store(db).count() == 1
    imported = nbscope(*command.split()[1:], cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    [record] = Store(db).records(kind="trace")
    assert record.target == "midrun.ipynb" and [c["status"] for c in record.measurements["cells"]] == ["ok"] * 3


def test_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    db = tmp_path / "none" / "nbscope.db"
    for args in (["runs"], ["show", "1"], ["history", "x.ipynb"], ["runs", "--unfinished"]):
        done = nbscope(*args, "--db", db, cwd=tmp_path)
        assert done.returncode in (0, 2), (args, done.stderr)
        assert not db.exists() and not db.parent.exists(), args


# ---- figures true, or marked unknown -------------------------------------------------------------------


def test_a_cell_that_ignores_the_interrupt_after_its_timeout_stops_the_kernel_and_blames_no_other_cell(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = time.monotonic()
    done = nbscope("profile", FILES / "ignores_interrupt.ipynb", "--timeout", "3", "--db", db, "--json",
                   "--no-diagnose", cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    record = loads(done.stdout)
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "timeout", "not-run"]
    assert "ignored the interrupt" in cells[1]["error"]["message"]
    assert cells[2]["wall_s"] is None  # never blamed for the wait
    assert record.measurements["runner"]["interrupt_ignored"] == 1
    assert took < 250  # the cell sleeps 300 s: the run did not wait for it
    assert Store(db).count() == 1 and live_files(db) == []


def test_a_stop_in_a_later_repeat_keeps_the_finished_repeat(tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env |= {"NBSCOPE_TEST_STARTED": str(started), "NBSCOPE_TEST_REPEAT_FLAG": str(tmp_path / "flag")}

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "profile", str(FILES / "sleeps_second_repeat.ipynb"), "--repeat", "2",
         "--db", str(db)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the second repeat's sleeping cell did not start"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    [summary] = Store(db).list()
    assert f"saved partial run {summary['id']} (1 of 2 repeats finished)" in stderr
    record = Store(db).get(summary["id"])
    assert record.status == "partial" and record.measurements["repeats"] == 2
    assert [c["status"] for c in record.measurements["cells"]] == ["ok", "ok", "ok"]  # the finished repeat's
    assert all(c["wall_s"] is not None for c in record.measurements["cells"])
    assert live_files(db) == []


def test_the_probe_keeps_its_own_clocks_whatever_the_notebook_does_to_its_modules(tmp_path: Path) -> None:
    done = nbscope("profile", FILES / "probe_tampering.ipynb", "--db", tmp_path / "s.db", "--json", "--no-diagnose",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    cells = loads(done.stdout).measurements["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 4
    assert all(c["execution_count"] == n for n, c in enumerate(cells, start=1))  # every cell's probe line came
    # Cells 1 and 3 sleep 0.3 s, cell 3 after time.perf_counter and time.time were replaced.
    for cell in (cells[0], cells[2]):
        assert 0.3 <= cell["code_s"] <= cell["wall_s"]
        assert cell["wall_s"] == pytest.approx(cell["roundtrip_s"], abs=0.1)  # nbclient's own clock agrees
    for cell in cells:
        assert cell["wall_s"] >= 0 and cell["code_s"] >= 0
    starts = [c["started_unix"] for c in cells]
    assert starts == sorted(starts) and starts[0] > 1e9  # the real time of day, not the notebook's 1.0
