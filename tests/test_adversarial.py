"""nbscope tried as a new user and as an adversarial tester would (issue Q): for every failure class, the bad
input, the exit code, the one-line message, and what is (and is not) kept on disk. Real kernels on tiny
notebooks.

1. **Exit codes CI can use, preflight, a ledger never lost** (``profile``, ``trace``): 1 when a cell failed
   (``--allow-errors`` exits 0), 2 for a bad option or store (refused before a kernel starts: nothing run,
   nothing stored, no live file) and for a run the store refused after it ran (its ledger printed first,
   then the live file and the import command), 128 + the signal when stopped. A closed output pipe is the
   reader having had enough: exit 0, quietly. Stops, repeats, a cell that ignores the interrupt, a
   notebook that tampers with the probe's modules.
2. **Files and secrets**: nothing of the user's is destroyed (symlinks, FIFOs, ``-o -``, a user's
   ``FILE.tmp``, ``--jax-cache cold``, ``import``), live files belong to one store, no ``--env`` value is
   printed, stored or exported, and a portable export carries no machine-local path. One profile of
   ``tests/files/gate_tiny.ipynb`` given ``--env HF_TOKEN=...`` serves the export tests; live files come
   from real runs (a profile whose live file the caller names, in a process of its own that then ends, as
   a killed run's would).
3. **The gate, compare and reading notebooks**: the gate crying wolf on an unchanged notebook profiled
   twice (a busy machine's noise, not the code); contradictory notes on what the noise rests on;
   ``compare`` calling noise a speed-up; imported records with negative times passing the gate
   ("✅ faster ×-26.38"); malformed notebooks giving a traceback or naming only an exception class; two
   folders' notebooks of one name merged in the store. No test asserts absolute seconds near a threshold:
   the synthetic records sit far from the floors, and the real-kernel case asserts only that an unchanged
   notebook passes.

Issue 35 (trust in CI, second pass): one test per failure class, each asserting the input, the exit code, the
one-line message and what is (and is not) on disk afterwards, in the files named:

- ``trace`` hanging on output (a 10 MB line, a backtracking pattern): ``test_adversarial_processes.py``
  ``test_a_10_mb_line_...``, ``test_a_megabyte_build_log_line_...``, ``test_trace_of_a_failing_build_printing_10_mb_lines_...``.
- Daemonised helpers (double fork, ``setsid``, ``nohup``, a cleared environment; cgroup and fallback):
  ``test_adversarial_processes.py`` ``test_trace_ends_with_the_command_...``, ``test_command_timeout_ends_...``,
  ``test_profile_ends_daemonised_helpers_...`` (no cgroup), ``test_profile_in_a_cgroup_...``, ``test_trace_in_a_cgroup_...``.
- ``-o`` (any option that writes) naming the store or an input: ``test_adversarial_inputs.py``
  ``test_o_naming_the_store_...``, ``test_o_naming_an_input_...``, ``test_every_output_option_refuses_...``.
- Credentials: ``test_adversarial_inputs.py`` ``test_credentials_are_redacted_...``, ``test_redact_hides_...``,
  ``test_env_hashes_are_keyed_...``; here ``test_an_env_secret_is_never_printed_stored_or_exported``.
- The gate and unpaired cells, ``--confirm``: ``test_adversarial_ci.py`` ``test_a_new_slow_cell_fails_...``,
  ``test_a_removed_slow_cell_...``, ``test_a_new_cell_that_slows_a_long_notebook_...``; ``test_gate.py``
  ``test_confirm_reruns_a_regressed_notebook_...``.
- Exit codes (closed pipes, ``--summary`` targets, usage errors, the traced command's status):
  ``test_adversarial_ci.py`` ``test_a_closed_output_pipe_...``, ``test_a_summary_that_cannot_be_written_...``,
  ``test_a_usage_error_is_one_line_in_every_command``, ``test_the_actions_step_summary_...``;
  ``test_adversarial_processes.py`` ``test_trace_exits_with_the_traced_commands_own_status``,
  ``test_the_action_reports_the_builds_own_exit_status``.
- Recovery keeps what was measured: ``test_adversarial_ci.py`` ``test_a_complete_live_file_...``,
  ``test_an_unfinished_live_file_...``, ``test_sigint_during_a_parallel_audit_...``, ``test_a_publish_stopped_midway_...``.
- Crafted input (devices, FIFOs, sizes, nesting, loops, dates, huge numbers, a name that is not UTF-8, signals):
  ``test_adversarial_inputs.py`` ``test_import_refuses_crafted_input_...``, ``test_a_cyclic_loop_...``,
  ``test_a_run_dated_in_the_future_...``, ``test_a_signal_during_import_...``, ``test_a_notebook_whose_name_is_not_utf8_...``.
- Escape sequences: ``test_adversarial_inputs.py`` ``test_escape_sequences_of_a_record_...``,
  ``test_escape_sequences_of_a_notebook_...``, ``test_for_terminal_removes_...``.
- The eight cases still failing before: ``test_adversarial_ci.py`` (read-only folder, full disk, MyST without code
  cells, ``--jax-platform bogus`` and ``--min-cell nan``, no totals, ``compare --markdown``, cleared callbacks,
  ``forecast --append-to``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import assert_one_line_error, run_in_process
from nbscope.analyse.compare import compare
from nbscope.analyse.gate import GateOptions, gate
from nbscope.api.profile import CACHE_MARKER, jax_cache_env, owns_folder
from nbscope.collect.platforms import machine_lacks
from nbscope.record.live import live_folder, read_live
from nbscope.record.run import RunRecord, loads
from nbscope.record.store import Store, files_folder

FILES = Path(__file__).resolve().parent / "files"


# ==== 1. exit codes, preflight, stops =============================================================

RECORDS = FILES / "records"


# ---- helpers -------------------------------------------------------------------------------------------


def nbscope(
    *args: str | os.PathLike[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    stdout: Any = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    """``python -m nbscope ARGS`` with the stop signals at their defaults (the test runner may ignore some)."""
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | (env or {})

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    return subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=merged,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def cli(
    *args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``nbscope ARGS`` in this process (conftest's ``run_in_process``): for the cases that need no process of
    their own. ``nbscope`` starts one, for what only a real process shows (exit codes of the console script,
    closed pipes, FIFOs, device files, a temporary folder set by ``TMPDIR``, a live file left by a run whose
    process has ended)."""
    return run_in_process(args, env=env, cwd=cwd)


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
        store.save(
            RunRecord(
                kind="profile",
                target=f"nb{number}.ipynb",
                fingerprint={"digest": "d"},
                measurements={"cells": [], "totals": {}, "pad": "x" * 6000, "n": number},
            )
        )
    return path


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a file or a folder) read-only for the block. Root writes through permissions: the file is
    made immutable (``chattr +i``) instead, and the test is skipped where that is not allowed."""
    if os.geteuid() == 0:
        if (
            shutil.which("chattr") is None
            or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode
        ):
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
    allowed = nbscope(
        "profile", FILES / "error.ipynb", "--db", db, "--no-diagnose", "--allow-errors", "--json", cwd=tmp_path
    )
    assert allowed.returncode == 0 and allowed.stderr == "", allowed.stderr
    assert [c["status"] for c in loads(allowed.stdout).measurements["cells"]] == ["ok", "error", "ok", "ok"]
    assert [r["status"] for r in Store(db).runs()] == ["ok", "ok"]  # both stored: the figures stand
    assert live_files(db) == []


def test_on_error_stop_and_a_dead_kernel_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    stopped = cli(
        "profile", FILES / "error.ipynb", "--on-error", "stop", "--db", db, "--json", "--no-diagnose", cwd=tmp_path
    )
    assert stopped.returncode == 1 and "nbscope: failed: cell 2 of" in stopped.stderr, stopped.stderr
    assert [c["status"] for c in loads(stopped.stdout).measurements["cells"]] == ["ok", "error", "not-run", "not-run"]
    died = cli("profile", FILES / "kernel_dies.ipynb", "--db", db, "--no-diagnose", cwd=tmp_path)
    assert died.returncode == 1 and "(kernel-died DeadKernelError)" in died.stderr, died.stderr
    assert [r["status"] for r in Store(db).runs()] == ["partial", "partial"]
    assert live_files(db) == []
    # diagnose says which cell died and that the rest never ran, in text, markdown and JSON.
    said = cli("diagnose", "latest", "--db", db, cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    assert "cell 3 died (DeadKernelError" in said.stdout
    assert "2 cells did not run: the rules judged only what ran" in said.stdout
    assert "no rule fired on the cells that ran" in said.stdout
    markdown = cli("diagnose", "latest", "--db", db, "--markdown", cwd=tmp_path)
    assert "- cell 3 died (DeadKernelError" in markdown.stdout
    document = json.loads(cli("diagnose", "latest", "--db", db, "--json", cwd=tmp_path).stdout)
    assert [(c["index"], c["status"]) for c in document["failed_cells"]] == [(2, "kernel-died")]
    assert document["cells_not_run"] == 2
    stopped_run = cli("diagnose", "1", "--db", db, cwd=tmp_path)
    assert "cell 2 raised (" in stopped_run.stdout, stopped_run.stdout


def test_an_expected_error_exits_0(tmp_path: Path) -> None:
    done = cli("profile", FILES / "raises_exception.ipynb", "--db", tmp_path / "s.db", "--no-diagnose", cwd=tmp_path)
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
        profiled = nbscope(
            "profile", FILES / "error.ipynb", "--db", tmp_path / "p.db", "--no-diagnose", cwd=tmp_path, stdout=write_end
        )
        assert profiled.returncode == 1 and "Traceback" not in profiled.stderr, profiled.stderr
        assert profiled.stderr.startswith("nbscope: failed: cell 2 of")
        differ = nbscope(
            "info",
            "--diff",
            RECORDS / "cpu_x64.json",
            RECORDS / "synthetic_t4_x64.json",
            cwd=tmp_path,
            stdout=write_end,
        )
        assert differ.returncode == 1 and "Traceback" not in differ.stderr, differ.stderr
    finally:
        os.close(write_end)
    assert snapshot(db) == before  # reading never writes to the store
    assert len(Store(tmp_path / "p.db").runs()) == 1


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
        pytest.param(
            ["--jax-platform", "cuda"], ["--jax-platform cuda: this machine has no NVIDIA GPU"], marks=_lacking("cuda")
        ),
        pytest.param(
            ["--backends", "cpu,cuda"], ["--backends cuda: this machine has no NVIDIA GPU"], marks=_lacking("cuda")
        ),
        pytest.param(["--backends", "cpu,tpu"], ["--backends tpu: this machine has no TPU"], marks=_lacking("tpu")),
    ],
    ids=[
        "kernel",
        "jax-cache-dev-null",
        "jax-cache-file",
        "keep-traces-dev-null",
        "keep-traces-under-a-file",
        "db-under-a-file",
        "jax-platform-cuda",
        "backends-cuda",
        "backends-tpu",
    ],
)
def test_a_bad_option_is_refused_before_anything_runs(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    (tmp_path / "afile").write_text("the user's own file\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    db = tmp_path / "db" / "nbscope.db"
    started = time.monotonic()
    done = cli(
        "profile", FILES / "error.ipynb", *(["--db", str(db)] if "--db" not in args else []), *args, cwd=tmp_path
    )
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert_one_line_error(done, *fragments)
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
    [
        (_truncated, ["is not a usable nbscope database"]),
        (_newer, ["store of version 99", "upgrade nbscope"]),
        (_not_sqlite, ["is not an SQLite database; refusing to touch it"]),
    ],
    ids=["truncated", "newer-version", "not-sqlite"],
)
def test_a_bad_store_is_refused_before_anything_runs_and_left_as_it_was(
    tmp_path: Path, make: Callable[[Path], Path], fragments: list[str]
) -> None:
    (tmp_path / "store").mkdir()
    db = make(tmp_path / "store" / "nbscope.db")
    before = snapshot(db)
    done = cli("profile", FILES / "empty.ipynb", "--db", db, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert_one_line_error(done, *fragments)
    assert snapshot(db) == before and live_files(db) == []
    # trace refuses it before the command runs: the command never starts
    traced = cli("trace", "--db", db, "--", sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path)
    assert traced.returncode == 2
    assert_one_line_error(traced, *fragments)
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
        done = cli("profile", FILES / "empty.ipynb", "--db", db, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert_one_line_error(done, "read-only")
    assert snapshot(db) == before and live_files(db) == []
    assert Store(db).count() == 3


def test_a_kernel_that_will_not_start_stores_nothing_and_leaves_no_live_file(tmp_path: Path) -> None:
    spec = tmp_path / "jupyter" / "kernels" / "broken"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(tmp_path / "no-such-python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "broken",
                "language": "python",
            }
        )
    )
    db = tmp_path / "db" / "nbscope.db"
    done = cli(
        "profile",
        FILES / "error.ipynb",
        "--kernel",
        "broken",
        "--db",
        db,
        cwd=tmp_path,
        env={"JUPYTER_PATH": str(tmp_path / "jupyter")},
    )
    assert done.returncode == 2
    assert_one_line_error(done, "could not start kernel 'broken'")
    assert not db.exists() and live_files(db) == []  # no 0-cell junk run, no live file


def test_a_kernel_that_dies_while_starting_once_gets_one_more_start(tmp_path: Path) -> None:
    """Bad input: a kernel that exits before replying to kernel_info on its first start (as one did twice in
    about 2,000 starts on a busy CI machine). The run starts it once more, says so, and measures every cell."""
    spec = tmp_path / "jupyter" / "kernels" / "flaky"
    spec.mkdir(parents=True)
    marker = tmp_path / "started-once"
    code = (
        f"import os, sys\nif not os.path.exists({str(marker)!r}):\n    open({str(marker)!r}, 'w').close()\n"
        "    sys.exit(1)\nfrom ipykernel import kernelapp\nkernelapp.launch_new_instance()"
    )
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-c", code, "-f", "{connection_file}"],
                "display_name": "flaky",
                "language": "python",
            }
        )
    )
    db = tmp_path / "db" / "nbscope.db"
    done = cli(
        "profile",
        FILES / "kernel_dies.ipynb",
        "--kernel",
        "flaky",
        "--db",
        db,
        "--json",
        "--no-diagnose",
        cwd=tmp_path,
        env={"JUPYTER_PATH": str(tmp_path / "jupyter")},
    )
    assert marker.exists()
    record = loads(done.stdout)
    assert record.measurements["runner"]["kernel_restarts"] == 1
    assert [c["status"] for c in record.measurements["cells"]][:2] == ["ok", "ok"]  # it ran, in the second kernel


def test_a_kernel_that_never_replies_on_its_first_start_gets_one_more_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel alive but silent past the start-up time on its first start (as when parallel starts race for
    one port): one more start, said in the record, and the cells run in it."""
    from nbscope.collect import notebook as notebook_module
    from nbscope.collect.runner import ExecutionOptions, execute

    spec = tmp_path / "jupyter" / "kernels" / "silent"
    spec.mkdir(parents=True)
    marker = tmp_path / "started-once"
    code = (
        f"import os, time\nif not os.path.exists({str(marker)!r}):\n    open({str(marker)!r}, 'w').close()\n"
        "    time.sleep(600)\nfrom ipykernel import kernelapp\nkernelapp.launch_new_instance()"
    )
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-c", code, "-f", "{connection_file}"],
                "display_name": "silent",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    done = execute(
        notebook_module.read(FILES / "kernel_dies.ipynb"), ExecutionOptions(kernel_name="silent", startup_timeout=5)
    )
    assert marker.exists()
    assert done.runner["kernel_restarts"] == 1
    assert [c["status"] for c in done.cells][:2] == ["ok", "ok"]  # it ran, in the second kernel


# ---- never a lost ledger -------------------------------------------------------------------------------


def test_a_store_that_fails_after_the_run_gets_the_ledger_then_the_import_command(tmp_path: Path) -> None:
    db = full_store(tmp_path / "store" / "nbscope.db", runs=1)
    try:
        done = nbscope(
            "profile",
            FILES / "store_read_only_midrun.ipynb",
            "--db",
            db,
            cwd=tmp_path,
            env={"NBSCOPE_TEST_STORE": str(db)},
        )
    finally:
        writable_again(db)
    assert done.returncode == 2, done.stderr
    assert "a = 1" in done.stdout and "b = a + 1" in done.stdout  # the ledger is printed first
    assert "saved as run" not in done.stdout
    line = assert_one_line_error(done, "could not be stored in", "its cells are kept in")
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
    try:
        done = nbscope(
            "trace",
            "--db",
            db,
            "--no-diagnose",
            "--",
            "jupyter",
            "execute",
            "midrun.ipynb",
            cwd=tmp_path,
            env={"NBSCOPE_TEST_STORE": str(db)},
        )
    finally:
        writable_again(db)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "b = a + 1" in done.stdout and "saved as run" not in done.stdout  # the ledger first
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("nbscope: error: the traced runs could not be stored in ") and "Traceback" not in done.stderr
    command = line.split("`")[1]
    # The run files are in the store's live folder (record.live.save_or_keep, as every writer keeps its runs).
    assert command.startswith(f"nbscope import {live_folder(db)}") and command.endswith(f" --db {db}")
    assert Store(db).count() == 1
    imported = nbscope(*command.split()[1:], cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    [record] = Store(db).records(kind="trace")
    assert record.target == "midrun.ipynb" and [c["status"] for c in record.measurements["cells"]] == ["ok"] * 3


def test_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    db = tmp_path / "none" / "nbscope.db"
    for args in (["runs"], ["show", "1"], ["history", "x.ipynb"], ["runs", "--unfinished"]):
        done = cli(*args, "--db", db, cwd=tmp_path)
        assert done.returncode in (0, 2), (args, done.stderr)
        assert not db.exists() and not db.parent.exists(), args


# ---- figures true, or marked unknown -------------------------------------------------------------------


def test_a_cell_that_ignores_the_interrupt_after_its_timeout_stops_the_kernel_and_blames_no_other_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbscope.collect import runner

    # The cell ignores SIGINT for good: however long the runner waits for it to go idle, it never does (1 s, not
    # the 10 s a cell that takes a while to honour the interrupt is given).
    monkeypatch.setattr(runner, "INTERRUPT_WAIT_S", 1.0)
    db = tmp_path / "db" / "nbscope.db"
    started = time.monotonic()
    done = cli(
        "profile",
        FILES / "ignores_interrupt.ipynb",
        "--timeout",
        "3",
        "--db",
        db,
        "--json",
        "--no-diagnose",
        cwd=tmp_path,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    record = loads(done.stdout)
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "timeout", "not-run"]
    assert "ignored the interrupt for 1 s" in cells[1]["error"]["message"]
    assert cells[2]["wall_s"] is None  # never blamed for the wait
    assert record.measurements["runner"]["interrupt_ignored"] == 1
    assert took < 250  # the cell sleeps 300 s: the run did not wait for it
    assert Store(db).count() == 1 and live_files(db) == []


def profile_stopped_by_sigterm(tmp_path: Path, notebook: Path, *options: str, **env: str) -> tuple[Path, str]:
    """``nbscope profile NOTEBOOK OPTIONS`` in a process of its own, sent SIGTERM once the notebook has made the
    file named by ``NBSCOPE_TEST_STARTED``: the store, and what the process wrote on standard error (it exited
    143, as a shell reports a process SIGTERM ended)."""
    db, started = tmp_path / "db" / "nbscope.db", tmp_path / "started"
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | env | {"NBSCOPE_TEST_STARTED": str(started)}

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "profile", str(notebook), *options, "--db", str(db)],
        cwd=tmp_path,
        env=merged,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the notebook did not say it had started"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    return db, stderr


def test_a_stop_in_a_later_repeat_keeps_the_finished_repeat(tmp_path: Path) -> None:
    # The notebook says it has started in its second repeat's sleeping cell.
    notebook = FILES / "sleeps_second_repeat.ipynb"
    db, stderr = profile_stopped_by_sigterm(
        tmp_path, notebook, "--repeat", "2", NBSCOPE_TEST_REPEAT_FLAG=str(tmp_path / "flag")
    )
    [summary] = Store(db).runs()
    assert f"saved partial run {summary['id']} (1 of 2 repeats finished)" in stderr
    record = Store(db).get(summary["id"])
    assert record.status == "partial" and record.measurements["repeats"] == 2
    assert [c["status"] for c in record.measurements["cells"]] == ["ok", "ok", "ok"]  # the finished repeat's
    assert all(c["wall_s"] is not None for c in record.measurements["cells"])
    assert live_files(db) == []


def test_a_stop_signal_keeps_what_the_running_cell_compiled(tmp_path: Path) -> None:
    # SIGTERM after cell 2 has compiled 20 programs (it compiles one at each step, without end): the cell is
    # recorded as interrupted with the probe's figures of it, its compiles and compile time, not its time alone.
    db, _ = profile_stopped_by_sigterm(tmp_path, FILES / "stopped_while_compiling.md", JAX_PLATFORMS="cpu")
    [summary] = Store(db).runs()
    cells = Store(db).get(summary["id"]).notebook_run().cells
    assert [c.status for c in cells] == ["ok", "interrupted", "not-run"]
    stopped = cells[1]
    assert stopped.interrupted_by == "SIGTERM" and stopped.error is not None and "SIGTERM" in stopped.error.message
    assert stopped.jax is not None and stopped.jax.compiles is not None and stopped.jax.compiles >= 20
    assert stopped.compile_s is not None and stopped.wall_s is not None and 0 < stopped.compile_s < stopped.wall_s
    assert live_files(db) == []


def test_the_probe_keeps_its_own_clocks_whatever_the_notebook_does_to_its_modules(tmp_path: Path) -> None:
    done = cli(
        "profile", FILES / "probe_tampering.ipynb", "--db", tmp_path / "s.db", "--json", "--no-diagnose", cwd=tmp_path
    )
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


# ==== 2. files and secrets ========================================================================
TINY = FILES / "gate_tiny.ipynb"
SECRET = "hf_Adversarial0Secret1Value2"  # what --env HF_TOKEN= is given; must appear nowhere
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def env_without_db() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}


@pytest.fixture(scope="module")
def secret_profile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A store with one real profile of gate_tiny.ipynb, given a secret with --env; its output kept."""
    folder = tmp_path_factory.mktemp("secret_profile")
    db = folder / "store" / "runs.db"
    done = cli("profile", TINY, "--db", db, "--env", f"HF_TOKEN={SECRET}", "--env", "JAX_PLATFORMS=cpu", cwd=folder)
    assert done.returncode == 0, done.stderr
    return {"folder": folder, "db": db, "profile": done}


# ---- writing files: -o, export, report ------------------------------------------------------------------------


def test_export_refuses_a_symlink_target_and_leaves_link_and_file_as_they_were(
    secret_profile: dict, tmp_path: Path
) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("the user's file")
    link = tmp_path / "link.json"
    link.symlink_to(kept)
    line = assert_one_line_error(
        cli("export", "1", "-o", link, "--db", secret_profile["db"], cwd=tmp_path), "symbolic link"
    )
    assert str(link) in line
    assert link.is_symlink() and os.readlink(link) == str(kept)
    assert kept.read_text() == "the user's file"


def test_export_refuses_a_fifo_without_opening_it(secret_profile: dict, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert_one_line_error(
        nbscope("export", "1", "-o", fifo, "--db", secret_profile["db"], cwd=tmp_path, timeout=60), "FIFO"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_to_dev_stdout_and_dash_writes_standard_output_and_makes_no_file(
    secret_profile: dict, tmp_path: Path
) -> None:
    was_link = os.path.islink("/dev/stdout")
    for target in ("/dev/stdout", "-"):
        done = nbscope("export", "1", "-o", target, "--db", secret_profile["db"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)  # the record alone: the confirmation went to stderr
        assert document["format"] == "nbscope-run" and document["target"].endswith("gate_tiny.ipynb")
        assert "written to standard output" in done.stderr
    assert not (tmp_path / "-").exists() and list(tmp_path.iterdir()) == []
    assert os.path.islink("/dev/stdout") == was_link  # /dev/stdout is still what it was


def test_a_users_file_tmp_beside_the_target_is_never_touched(secret_profile: dict, tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    target.write_text("old export")
    mine = tmp_path / "run.json.tmp"
    mine.write_text("the user's own temporary file")
    done = cli("export", "1", "-o", target, "--db", secret_profile["db"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(target.read_text())["format"] == "nbscope-run"
    assert mine.read_text() == "the user's own temporary file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.json.tmp"]  # no temporary left


def test_a_parent_that_is_a_file_or_missing_is_one_line_and_nothing_is_made(
    secret_profile: dict, tmp_path: Path
) -> None:
    blocker = tmp_path / "notes"
    blocker.write_text("a file, not a folder")
    assert_one_line_error(
        cli("export", "1", "-o", blocker / "run.json", "--db", secret_profile["db"], cwd=tmp_path), str(blocker)
    )
    assert blocker.read_text() == "a file, not a folder"
    missing = tmp_path / "new" / "deeper" / "run.json"
    assert_one_line_error(
        cli("export", "1", "-o", missing, "--db", secret_profile["db"], cwd=tmp_path),
        f"the folder {missing.parent} does not exist",
    )
    assert not (tmp_path / "new").exists()
    assert_one_line_error(
        cli("report", "1", "-o", missing.with_suffix(".html"), "--db", secret_profile["db"], cwd=tmp_path),
        "does not exist",
    )
    assert not (tmp_path / "new").exists()
    missing.parent.mkdir(parents=True)
    assert cli("export", "1", "-o", missing, "--db", secret_profile["db"], cwd=tmp_path).returncode == 0
    assert json.loads(missing.read_text())["format"] == "nbscope-run"


def test_report_to_standard_output_and_a_refused_link(secret_profile: dict, tmp_path: Path) -> None:
    done = cli("report", "1", "--db", secret_profile["db"], "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists()
    (tmp_path / "real.html").write_text("mine")
    (tmp_path / "r.html").symlink_to(tmp_path / "real.html")
    assert_one_line_error(
        cli("report", "1", "--db", secret_profile["db"], "-o", tmp_path / "r.html", cwd=tmp_path), "symbolic link"
    )
    assert (tmp_path / "real.html").read_text() == "mine"


def test_the_safe_writer_keeps_a_replaced_files_permissions(tmp_path: Path) -> None:
    from nbscope._files import write_text

    target = tmp_path / "shared.json"
    target.write_text("old")
    target.chmod(0o640)
    write_text(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


# ---- --jax-cache cold --------------------------------------------------------------------------------------


def test_jax_cache_cold_removes_only_what_jax_wrote(tmp_path: Path) -> None:
    notebook = tmp_path / "jit.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell(
                    "import jax, jax.numpy as jnp\ny = jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()"
                )
            ],
            metadata={"kernelspec": KERNELSPEC},
        ),
        notebook,
    )
    db = tmp_path / "db" / "nbscope.db"
    warm = cli("profile", notebook, "--db", db, "--jax-cache", "warm", "--json", cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    cache = files_folder(db) / "jax-cache"
    assert owns_folder(cache)
    written = sorted(p.name for p in cache.iterdir() if p.name != CACHE_MARKER)
    assert written and all(name.endswith("-cache") for name in written), written  # what jax 0.10 writes
    (cache / "my_notes.txt").write_text("mine")
    (cache / "mydir").mkdir()
    (cache / "mydir" / "keep.txt").write_text("also mine")
    cold = cli("profile", notebook, "--db", db, "--jax-cache", "cold", "--json", cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert json.loads(cold.stdout)["measurements"]["totals"]["cache_state"] == "cold"
    assert (cache / "my_notes.txt").read_text() == "mine"
    assert (cache / "mydir" / "keep.txt").read_text() == "also mine"
    # Emptied again directly: JAX's entries go, the marker and the user's files stay.
    assert jax_cache_env("cold", cache)[1] == "cold"
    assert sorted(p.name for p in cache.iterdir()) == sorted([CACHE_MARKER, "my_notes.txt", "mydir"])
    assert not (db.parent / "jax-cache").exists() and not (db.parent / "live").exists()  # nothing loose


# ---- live files: import, two stores, double import -------------------------------------------------------------


def _live_run(tmp_path: Path, live: Path, env: dict[str, str] | None = None) -> None:
    """A real profile whose live file stays (the caller names it), in a process that then ends."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom nbscope.api.profile import ProfileOptions, profile\n"
        f"profile(sys.argv[1], ProfileOptions(env={env or {}!r}), live_path=Path(sys.argv[2]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(TINY), str(live)],
        cwd=tmp_path,
        env=env_without_db(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert live.is_file()


def test_import_keeps_a_foreign_file_removes_its_own_and_stores_a_live_run_once(tmp_path: Path) -> None:
    elsewhere = tmp_path / "downloads" / "run.jsonl"
    elsewhere.parent.mkdir()
    _live_run(tmp_path, elsewhere, env={"HF_TOKEN": SECRET})
    assert SECRET not in elsewhere.read_text()  # the live file has the hash, never the value
    db = tmp_path / "project" / "a.db"
    first = cli("import", elsewhere, "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "imported as run 1" in first.stdout and "the file is kept" in first.stdout
    assert elsewhere.is_file()  # given from elsewhere: the user's file, kept
    again = cli("import", elsewhere, "--db", db, cwd=tmp_path)
    assert again.returncode == 0 and "already in" in again.stdout and "not imported again" in again.stdout
    # A copy in the store's own live folder: the same run (its uuid), stored once; that copy is removed.
    own = live_folder(db) / "copy.jsonl"
    own.parent.mkdir(parents=True)
    shutil.copy(elsewhere, own)
    third = cli("import", own, "--db", db, cwd=tmp_path)
    assert third.returncode == 0 and "already in" in third.stdout and "the live file is removed" in third.stdout
    assert not own.exists() and elsewhere.is_file()
    assert Store(db).count() == 1


def test_two_stores_in_one_folder_keep_their_live_files_apart(tmp_path: Path) -> None:
    folder = tmp_path / "stores"
    a, b = folder / "a.db", folder / "b.db"
    assert live_folder(a) != live_folder(b) and live_folder(a).parent == files_folder(a)
    live = live_folder(a) / "killed.jsonl"
    live.parent.mkdir(parents=True)
    _live_run(tmp_path, live)
    assert read_live(live).header.uuid
    listed = cli("runs", "--unfinished", "--db", a, cwd=tmp_path)
    assert listed.returncode == 0 and str(live) in listed.stdout
    assert f"nbscope import {live} --db {a}" in listed.stdout  # the hint names the store it belongs to
    other = cli("runs", "--unfinished", "--db", b, cwd=tmp_path)
    assert other.returncode == 0 and other.stdout.strip() == "No unfinished runs."
    # Importing a's live file into b stores it in b but leaves the file: it is not b's.
    into_b = cli("import", live, "--db", b, cwd=tmp_path)
    assert into_b.returncode == 0 and "the file is kept" in into_b.stdout and live.is_file()
    into_a = cli("import", live, "--db", a, cwd=tmp_path)
    assert into_a.returncode == 0 and "the live file is removed" in into_a.stdout and not live.exists()
    assert not (folder / "live").exists()


# ---- secrets ----------------------------------------------------------------------------------------------------


def test_an_env_secret_is_never_printed_stored_or_exported(secret_profile: dict, tmp_path: Path) -> None:
    db = Path(str(secret_profile["db"]))
    done = secret_profile["profile"]
    assert isinstance(done, subprocess.CompletedProcess)
    assert SECRET not in done.stdout + done.stderr
    for path in db.parent.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path  # the store, its WAL, its live folder
    record = Store(db).get(1)
    hidden = record.settings["env"]["HF_TOKEN"]
    assert hidden.startswith("hidden-hmac-") and record.settings["env"]["JAX_PLATFORMS"] == "cpu"
    assert any(arg.startswith("HF_TOKEN=hidden-hmac-") for arg in record.command)
    outputs = [
        cli("show", "1", "--db", db, cwd=tmp_path),
        cli("show", "1", "--json", "--db", db, cwd=tmp_path),
        cli("export", "1", "-o", "-", "--db", db, cwd=tmp_path),
        cli("export", "1", "-o", "-", "--portable", "--db", db, cwd=tmp_path),
        cli("report", "1", "-o", "-", "--db", db, cwd=tmp_path),
    ]
    for output in outputs:
        assert output.returncode == 0, output.stderr
        assert SECRET not in output.stdout + output.stderr


def test_compare_says_a_hidden_value_differs_without_showing_it(secret_profile: dict, tmp_path: Path) -> None:
    db = Path(str(secret_profile["db"]))
    other = "hf_AnotherSecretValue9"
    second = cli("profile", TINY, "--db", db, "--env", f"HF_TOKEN={other}", "--env", "JAX_PLATFORMS=cpu", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    for extra in ((), ("--markdown",)):
        done = cli("compare", "1", "2", "--db", db, *extra, cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr
        text = done.stdout + done.stderr
        assert "HF_TOKEN" in text and "hidden-hmac-" in text
        assert SECRET not in text and other not in text
    kept = cli("profile", TINY, "--db", db, "--env", "MY_SETTING=visible", "--env-store-values", "--json", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    document = json.loads(kept.stdout)
    assert document["settings"]["env"] == {"MY_SETTING": "visible"} and document["settings"]["env_values_stored"]


def test_a_portable_export_carries_no_machine_local_path(secret_profile: dict, tmp_path: Path) -> None:
    db = Path(str(secret_profile["db"]))
    done = cli("export", "1", "-o", tmp_path / "shared.json", "--portable", "--db", db, cwd=FILES.parent.parent)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "shared.json").read_text()
    document = json.loads(text)
    for local in (str(Path.home()), str(FILES.parent.parent), str(secret_profile["folder"]), sys.executable):
        assert local not in text, local
    assert document["command"][0] == "nbscope" and document["measurements"]["portable"] is True
    assert document["measurements"]["notebook"]["path"] == document["target"] == "tests/files/gate_tiny.ipynb"
    assert document["measurements"]["kernel"]["cwd"] == "tests/files"
    assert "/" not in document["measurements"]["kernel"]["executable"]
    assert document["fingerprint"]["digest"] == Store(db).get(1).digest
    imported = cli("import", tmp_path / "shared.json", "--db", tmp_path / "other.db", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr


def test_every_spelling_of_env_on_a_command_line_is_hidden() -> None:
    from nbscope.record.secrets import command_for_record, env_for_record

    argv = [
        "nbscope",
        "profile",
        "x.md",
        "--env",
        f"HF_TOKEN={SECRET}",
        f"--env=OPENAI_API_KEY={SECRET}",
        "--env",
        "JAX_PLATFORMS=cpu",
        "--env",
        f"JAX_AUTH_TOKEN={SECRET}",
    ]
    kept = command_for_record(argv)
    assert SECRET not in " ".join(kept) and "JAX_PLATFORMS=cpu" in kept
    assert kept[4].startswith("HF_TOKEN=hidden-hmac-") and kept[5].startswith("--env=OPENAI_API_KEY=hidden-hmac-")
    assert command_for_record([*argv, "--env-store-values"]) == [*argv, "--env-store-values"]
    assert env_for_record({"A": "x"}) == env_for_record({"A": "x"}) != env_for_record({"A": "y"})  # compare can tell


def test_a_portable_record_replaces_only_whole_folder_names() -> None:
    from nbscope.record.portable import portable

    document = {
        "target": "a.md",
        "command": ["/usr/bin/nbscope", "profile", "/home/me/proj/a.md", "--db=/srv/x.db"],
        "measurements": {
            "notebook": {"path": "/home/me/proj/a.md"},
            "kernel": {"cwd": "/elsewhere/run", "executable": "/opt/py/bin/python3"},
            "cells": [{"error": {"message": "see /home/me/proj/a.md and /home/melanie/b"}}],
        },
        "fingerprint": {},
    }
    shared = portable(document, root="/home/me/proj", home="/home/me")
    assert shared["command"] == ["nbscope", "profile", "a.md", "--db=…/x.db"]
    assert shared["measurements"]["notebook"]["path"] == "a.md"
    assert shared["measurements"]["kernel"] == {"cwd": "…/run", "executable": "python3"}
    assert shared["measurements"]["cells"][0]["error"]["message"] == "see a.md and /home/melanie/b"
    assert document["measurements"]["notebook"]["path"] == "/home/me/proj/a.md"  # the original is untouched


# ==== 3. the gate, compare, reading notebooks =====================================================
def cell(
    index: int, wall: float, *, wait: float | None = None, first_line: str | None = None, compile_s: float = 0.0
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "index": index,
        "cell_index": index + 1,
        "source_hash": f"hash{index:012d}",
        "line": None,
        "first_line": first_line or f"work({index})",
        "status": "ok",
        "error": None,
        "wall_s": wall,
        "compile_s": compile_s,
        "run_s": wall - compile_s,
    }
    if wait is not None:  # what the probe records: the cell's wait for a CPU, and its own time on one
        data["sched"] = {"wait_s": wait, "on_cpu_s": wall - wait, "cpu_s": wall - wait}
    return data


def record(
    cells: list[dict[str, Any]],
    *,
    started: str = "2026-01-01T00:00:00.000Z",
    target: str = "nb.ipynb",
    kind: str = "profile",
) -> RunRecord:
    return RunRecord(
        kind=kind,
        target=target,
        fingerprint={"digest": "d1", "cpu": {"model": "Test CPU", "logical_cores": 2}},
        measurements={
            "totals": {"wall_s": sum(c["wall_s"] for c in cells), "cells": len(cells)},
            "cells": cells,
            "repeats": 1,
        },
        settings={"repeat": 1},
        command=["test"],
        started_at=started,
    )


LATER = "2026-01-02T00:00:00.000Z"


# --- the gate crying wolf ----------------------------------------------------------------------------------


def test_the_reported_import_time_false_alarm_passes() -> None:
    """The issue's case: `import time` at 1.37 s → 2.06 s on an unchanged notebook, from machine load."""
    base = record([cell(0, 1.37, first_line="import time"), cell(1, 0.8)])
    cand = record([cell(0, 2.06, first_line="import time"), cell(1, 0.9)], started=LATER)
    result = gate(base, cand)
    assert result.passed and result.exit_code == 0, result.reasons
    assert result.cells[0].verdict == "below-floor" and result.cells[0].kind == "import"


def test_a_slowdown_that_was_waiting_for_a_cpu_passes_and_says_so() -> None:
    # The candidate's cell took 3× the wall, all of it waiting for a CPU: the machine, not the code.
    base = record([cell(0, 1.0, wait=0.05)])
    cand = record([cell(0, 3.0, wait=2.05)], started=LATER)
    result = gate(base, cand)
    assert result.passed and result.cells[0].judged == "unwaited"
    assert "waiting for a CPU" in result.cells[0].note
    # The same 3× with no wait is the code: it fails and is named.
    slow = record([cell(0, 3.0, wait=0.05)], started=LATER)
    failed = gate(base, slow)
    assert failed.exit_code == 1 and failed.cells[0].verdict == "regression"
    assert failed.reasons[0].startswith("cell 1: work(0) — 950 ms → 2.95 s less the wait for a CPU (×3.11")


@pytest.mark.slow
def test_an_unchanged_notebook_profiled_twice_passes_the_gate(run_cli: Any, tmp_path: Path) -> None:
    """Following the README: profile twice, then gate, with --repeat 1 and no history."""
    db = tmp_path / "runs.db"
    notebook = FILES / "gate_unchanged.ipynb"
    for _ in range(2):
        done = run_cli("profile", str(notebook), "--db", str(db), "--no-diagnose", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    done = run_cli("gate", "--db", str(db))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "❌" not in done.stdout
    # One note says what the verdict rests on, and nothing contradicts it.
    assert done.stdout.count("noise: ") == 1, done.stdout
    assert "1 earlier comparable run here, 3 needed" in " ".join(done.stdout.split())  # wrapped at 80 columns
    assert "run-to-run noise from" not in done.stdout and "not estimated" not in done.stdout
    done = run_cli("gate", "--db", str(db), "--json")
    data = json.loads(done.stdout)
    assert data["passed"] and data["noise_note"].startswith("noise: floors by each cell's kind and size")
    assert all(c["judged"] == "unwaited" for c in data["cells"]), "the probe records each cell's wait for a CPU"


# --- contradictory notes -----------------------------------------------------------------------------------


def test_one_note_on_the_noise_with_one_earlier_run() -> None:
    base = record([cell(0, 1.0, wait=0.0)])
    cand = record([cell(0, 1.02, wait=0.0)], started=LATER)
    result = gate(base, cand, history=[base])
    notes = [result.noise_note, *result.warnings]
    assert sum("noise" in note for note in notes) == 1, notes
    assert result.noise_note.startswith(
        "noise: floors by each cell's kind and size (1 earlier comparable run here, 3 needed for run-to-run noise)"
    )
    history = [
        record([cell(0, wall, wait=0.0)], started=f"2025-12-2{n}T00:00:00.000Z")
        for n, wall in enumerate((1.0, 1.05, 0.97))
    ]
    seasoned = gate(base, cand, history=history)
    notes = [seasoned.noise_note, *seasoned.warnings]
    assert sum("noise" in note for note in notes) == 1, notes
    assert seasoned.noise_note.startswith(
        "noise: the larger of each cell's floor by kind and size and the run-to-run noise of 3 earlier comparable runs"
    )


# --- compare calling noise a speed-up ----------------------------------------------------------------------


def test_compare_marks_differences_within_noise(run_cli: Any, tmp_path: Path) -> None:
    # Unchanged cells, walls 2× apart from waiting for a CPU (the issue: "2.0× faster" on unchanged cells).
    a = record([cell(0, 0.40, wait=0.20), cell(1, 1.0, wait=0.0)])
    b = record([cell(0, 0.20, wait=0.00), cell(1, 0.33, wait=0.0)], started=LATER)  # cell 2: really 3× faster
    rows = compare(a, b).to_dict()["cells"]
    assert rows[0]["text"] == "within noise" and rows[0]["within_noise"] and rows[0]["winner"] == "tie"
    assert rows[1]["text"] == "B 3.0× faster" and not rows[1]["within_noise"]
    store = Store(tmp_path / "s.db")
    ids = [store.save(a), store.save(b)]
    done = run_cli("compare", str(ids[0]), str(ids[1]), "--db", str(tmp_path / "s.db"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "within noise" in done.stdout and "B 2.0× faster" not in done.stdout


# --- negative times ----------------------------------------------------------------------------------------


def test_negative_times_never_pass_the_gate() -> None:
    base = record([cell(0, 1.0)])
    cand = record([cell(0, -26.38)], started=LATER)
    result = gate(base, cand)
    assert not result.passed and result.exit_code == 1
    assert result.cells[0].verdict == "failed" and "negative" in result.cells[0].note
    assert all(c.verdict != "faster" for c in [*result.cells, result.total])
    totals = record([], kind="jupyter-cache")
    totals.measurements["totals"]["wall_s"] = 5.0
    negative = record([], kind="jupyter-cache", started=LATER)
    negative.measurements["totals"]["wall_s"] = -26.38
    assert gate(totals, negative).total.verdict == "failed"
    # A negative wait for a CPU is not a figure either: the wall is judged.
    odd = record([cell(0, 1.0, wait=-5.0)], started=LATER)
    assert gate(base, odd, GateOptions()).cells[0].judged == "wall"


def test_negative_times_in_imported_records_fail_on_the_command_line(run_cli: Any, tmp_path: Path) -> None:
    base = record([cell(0, 1.0)])
    cand = record([cell(0, -26.38)], started=LATER)
    (tmp_path / "base.json").write_text(base.to_json())
    (tmp_path / "cand.json").write_text(cand.to_json())
    done = run_cli("gate", "--baseline", "base.json", "--candidate", "cand.json", "--db", tmp_path / "s.db")
    # Refused at load (exit 2) or failed by the gate (exit 1): never a pass, never "faster ×-26.38".
    assert done.returncode in (1, 2), done.stdout + done.stderr
    assert "faster" not in done.stdout and "×-" not in done.stdout and "Traceback" not in done.stderr


# --- malformed notebooks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, message",
    [
        ("source_number.ipynb", "cells[3].source: 42 is not a string or list of strings"),
        ("trailing_comma.ipynb", "line 3, column 43: not valid JSON"),
        ("tags_string.ipynb", 'cells[1].metadata.tags: "hide-input" is not a list of strings'),
    ],
)
def test_a_malformed_notebook_is_one_line_exit_2(run_cli: Any, tmp_path: Path, name: str, message: str) -> None:
    done = run_cli("profile", str(FILES / "odd" / name), "--db", str(tmp_path / "s.db"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr and "ValidationError" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "s.db").exists()


# --- notebooks of one file name in two folders ---------------------------------------------------------------


def _notebook(path: Path, *sources: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = new_notebook(cells=[new_code_cell(s) for s in sources])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)
    return path


def test_notebooks_of_one_name_in_two_folders_are_never_merged(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad input: ``a/intro.ipynb`` and ``b/intro.ipynb`` (different cells) in a folder with no git tree or
    book, and a run an older nbscope stored under the bare ``intro.ipynb``. Each notebook keeps its own name,
    history and baseline; the old run counts only for the notebook whose cells it measured."""
    _notebook(tmp_path / "a" / "intro.ipynb", "x = sum(range(1000))", "y = x * 2")
    _notebook(tmp_path / "b" / "intro.ipynb", "import math", "z = math.sqrt(2)", "w = z ** 2")
    db = tmp_path / "runs.db"
    for folder in ("a", "b"):
        done = run_cli("profile", f"{folder}/intro.ipynb", "--db", db)
        assert done.returncode == 0, done.stderr
    store = Store(db)
    assert sorted(store.targets()) == ["a/intro.ipynb", "b/intro.ipynb"]
    a_run = store.latest(target="a/intro.ipynb")
    assert a_run is not None
    legacy = RunRecord.from_dict(
        {**a_run.to_dict(), "run_id": None, "target": "intro.ipynb", "started_at": "2026-01-01T00:00:00.000Z"}
    )
    store.save(legacy)
    monkeypatch.chdir(tmp_path)
    assert store.names_of("a/intro.ipynb")[:1] == ["a/intro.ipynb"] and "intro.ipynb" in store.names_of("a/intro.ipynb")
    assert "intro.ipynb" not in store.names_of("b/intro.ipynb")

    def points(name: str) -> int:
        done = run_cli("history", name, "--db", db, "--json")
        assert done.returncode == 0, done.stderr
        return sum(len(s["points"]) for s in json.loads(done.stdout)["series"])

    assert points("b/intro.ipynb") == 1  # its own run only
    assert points("a/intro.ipynb") == 2  # its run and the old one of its cells
    # b's run has no earlier run of its own to gate against: never a's cells under the old name.
    gated = run_cli("gate", "--db", db, "--target", "b/intro.ipynb")
    assert_one_line_error(gated, "no earlier complete profile run of b/intro.ipynb")
    gated_a = run_cli("gate", "--db", db, "--target", "a/intro.ipynb", "--json")
    assert gated_a.returncode in (0, 1), gated_a.stderr
    assert json.loads(gated_a.stdout)["baseline"]["run_id"] == legacy.run_id
