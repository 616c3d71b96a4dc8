"""Processes and output that used to hang ``trace`` or outlive a run.

Each failure class gets one test: the input, the exit code, the message, and what is kept on disk.

- A megabyte-long output line (a base64 blob, a progress bar), on stdout or stderr, with or without a last
  newline: read and parsed in time linear in its length.
- Helpers a notebook daemonises (``Popen(start_new_session=True)``, a double fork with ``setsid``,
  ``nohup ... &``, one with an empty environment): ``trace`` ends with the command instead of waiting for
  the pipe they hold, the run is complete (not ``partial``), and none of them is left, under ``trace`` and
  under ``profile`` (its normal end and SIGTERM). ``--command-timeout`` ends a command whose daemon holds
  the pipe.
- The traced command's own exit status is trace's: 3 gives 3, a signal 128 + the signal.

The notebook tests/files/daemonised_helpers.ipynb writes each helper's pid to a file in
``$NBSCOPE_TEST_PIDS``; the tests check those pids. Limits are minutes; each run takes seconds, where the
same inputs hung (or ran past five minutes) before.
"""

from __future__ import annotations

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

import psutil
import pytest

from nbscope._processes import own_cgroup
from nbscope.api import jupyter_book2
from nbscope.api.trace import MAX_LINE_BYTES, _run_command
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
DAEMONS = FILES / "daemonised_helpers.ipynb"
DETACHED = FILES / "detached_helper.ipynb"
# The fallback where no cgroup can be made: the process tree, the run's token and the pipe or log it holds.
NO_CGROUP = {"NBSCOPE_CGROUP": "off"}
TINY = FILES / "gate_tiny.ipynb"
HELPERS = ("popen-new-session", "double-fork", "nohup", "cleared-environment")
MARKER = "NBSCOPE_TEST_PROCESS_MARKER"
TEN_MB = 10_000_000
# Minutes, on a machine where each run takes seconds: what they guard against is a hang.
LIMIT_S = 240

needs_jupyter = pytest.mark.skipif(shutil.which("jupyter") is None, reason="jupyter is not installed")


# ---- helpers -------------------------------------------------------------------------------------------


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start_nbscope(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """``python -m nbscope ARGS`` with the stop signals at their defaults (the test runner may ignore some)."""
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | env
    return subprocess.Popen(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=merged,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )


def nbscope(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    process = start_nbscope(*args, cwd=cwd, env=env)
    try:
        stdout, stderr = process.communicate(timeout=LIMIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked(marker: str) -> list[psutil.Process]:
    """Live processes that inherited ``MARKER=marker`` (a helper with an empty environment has not)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == marker and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def helpers(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """The folder the notebook's helpers write their pids to, and the environment naming it; any helper
    or marked process left at the end is killed (the test has failed then)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    marker = uuid.uuid4().hex
    yield pids, {"NBSCOPE_TEST_PIDS": str(pids), MARKER: marker}
    for path in pids.iterdir():
        try:
            os.kill(int(path.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    for process in marked(marker):
        try:
            process.kill()
        except psutil.Error:
            pass


def helper_pids(pids: Path) -> dict[str, int]:
    found = {path.name: int(path.read_text()) for path in pids.iterdir()}
    assert sorted(found) == sorted(HELPERS), found  # every helper started, so its absence below means something
    return found


def left_running(pids: Path, env: dict[str, str]) -> list[str]:
    deadline = time.monotonic() + 5  # a SIGKILL'd process may take a moment to become a zombie
    while True:
        left = [f"{name} {pid}" for name, pid in helper_pids(pids).items() if _alive(pid)]
        left += [f"{p.pid} {p.name()}" for p in marked(env[MARKER])]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# ---- long output lines ---------------------------------------------------------------------------------


def test_a_10_mb_line_is_read_in_bounded_time_and_kept_cut_with_a_last_line_without_newline(tmp_path: Path) -> None:
    script = (
        f"import sys; sys.stdout.write('a' * {TEN_MB} + '\\nshort\\n'); sys.stdout.flush(); "
        f"sys.stderr.write('b' * {TEN_MB})"
    )
    started = time.perf_counter()
    code, output, _, _ = _run_command([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), echo=False)
    assert time.perf_counter() - started < LIMIT_S
    assert code == 0
    lines = output.splitlines()
    assert len(lines) == 3
    cut = f"[nbscope: {TEN_MB - MAX_LINE_BYTES} more bytes of this line not kept]"
    assert lines[0] == "a" * MAX_LINE_BYTES + " " + cut and lines[1] == "short"
    assert lines[2] == "b" * MAX_LINE_BYTES + " " + cut  # on stderr, with no newline at the end


@pytest.mark.parametrize("shape", ["no spaces", "repeated markers", "marker then a blob"])
def test_a_megabyte_build_log_line_is_parsed_in_bounded_time(shape: str) -> None:
    size = 1_000_000
    line = {
        "no spaces": "x" * size,
        "repeated markers": ("Built " + "request to " + "Executing notebook (") * (size // 37),
        "marker then a blob": "request to " + "a/templates/" * (size // 12) + " An exception occurred",
    }[shape]
    page = "lecture.md An exception occurred during code execution, halting further execution"
    started = time.perf_counter()
    log = jupyter_book2.read_build_log([(0.0, line), (0.1, page)])
    assert time.perf_counter() - started < 30  # the backtracking patterns took hours on such lines
    assert log.halted == ["lecture.md"] and not log.theme_unreachable


@pytest.mark.slow
@needs_jupyter
def test_trace_of_a_failing_build_printing_10_mb_lines_stores_its_run_complete_and_exits_3(
    tmp_path: Path, helpers: Any
) -> None:
    _, env = helpers
    shutil.copy(TINY, tmp_path / "tiny.ipynb")
    blob = f"{sys.executable} -c \"import sys; sys.stdout.write('a' * {TEN_MB} + chr(10))\""
    tail = f"{sys.executable} -c \"import sys; sys.stderr.write('b' * {TEN_MB})\""
    command = f"{blob} && jupyter execute tiny.ipynb && {tail}; exit 3"  # a build that fails after its notebook ran
    done = nbscope("trace", "--db", tmp_path / "db", "--json", "--", "bash", "-c", command, cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stderr[-2000:]  # the build's own status
    [printed] = json.loads(done.stdout)
    assert printed["target"] == "tiny.ipynb" and printed["status"] == "ok"
    [stored] = Store(tmp_path / "db").records(kind="trace")
    assert stored.status == "ok" and [c["status"] for c in stored.measurements["cells"]] == ["ok"]
    assert stored.measurements["runner"]["returncode"] == 3
    assert done.stderr.count("a" * 1000) >= TEN_MB // 1000  # the echo shows the whole line
    assert not marked(env[MARKER])


# ---- daemonised helpers --------------------------------------------------------------------------------


@pytest.mark.slow
@needs_jupyter
def test_trace_ends_with_the_command_when_its_notebook_daemonised_helpers(tmp_path: Path, helpers: Any) -> None:
    pids, env = helpers
    shutil.copy(DAEMONS, tmp_path / "daemons.ipynb")
    done = nbscope(
        "trace",
        "--db",
        tmp_path / "db",
        "--json",
        "--",
        "jupyter",
        "execute",
        "daemons.ipynb",
        cwd=tmp_path,
        env=env | NO_CGROUP,
    )  # the command's cgroup: test_command_timeout_ends...
    assert done.returncode == 0, done.stderr[-2000:]
    [printed] = json.loads(done.stdout)
    assert printed["status"] == "ok"  # complete: no daemon holding the pipe made it partial
    [stored] = Store(tmp_path / "db").records(kind="trace")
    assert stored.status == "ok" and all(c["status"] == "ok" for c in stored.measurements["cells"])
    assert not left_running(pids, env)


def test_command_timeout_ends_a_command_whose_daemons_hold_its_output(tmp_path: Path, helpers: Any) -> None:
    pids, env = helpers
    script = tmp_path / "daemons.sh"
    # One helper per way of leaving the command's process group; each keeps the output pipe open.
    script.write_text(
        f"cd {pids}\n"
        f'{sys.executable} -c \'import subprocess, sys; p = subprocess.Popen(["sleep", "600"], '
        'start_new_session=True); open("popen-new-session", "w").write(str(p.pid))\'\n'
        f"{sys.executable} -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    pid = os.fork()\n"
        '    if pid == 0:\n        time.sleep(600)\n        os._exit(0)\n    open("double-fork", "w").write(str(pid))\n'
        "    os._exit(0)\nos.wait()'\n"
        "nohup sleep 600 & echo $! > nohup\n"
        "setsid env -i sleep 600 & echo $! > cleared-environment\n"
        "sleep 600\n"
    )
    started = time.perf_counter()
    done = nbscope(
        "trace", "--db", tmp_path / "db", "--command-timeout", "3", "--", "bash", str(script), cwd=tmp_path, env=env
    )
    assert time.perf_counter() - started < LIMIT_S
    assert done.returncode == 128 + signal.SIGKILL, done.stderr
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("nbscope: error: no IPython kernel") and "ran past its --command-timeout 3 s" in line
    assert not left_running(pids, env)


@pytest.mark.slow
def test_profile_ends_daemonised_helpers_at_its_end_and_on_sigterm(tmp_path: Path, helpers: Any) -> None:
    """Without a cgroup (the fallback): each helper is found by the token it inherited or the log it holds."""
    pids, env = helpers
    env |= NO_CGROUP
    db = tmp_path / "db"
    done = nbscope("profile", DAEMONS, "--db", db, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not left_running(pids, env)

    for path in pids.iterdir():
        path.unlink()
    started_file = tmp_path / "started"
    process = start_nbscope(
        "profile",
        DAEMONS,
        "--db",
        db,
        cwd=tmp_path,
        env=env | {"NBSCOPE_TEST_HOLD": "600", "NBSCOPE_TEST_STARTED": str(started_file)},
    )
    try:
        deadline = time.monotonic() + LIMIT_S
        while not started_file.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started_file.exists(), process.communicate()[1][-2000:]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=LIMIT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "partial run" in stderr
    first, partial = sorted(Store(db).records(), key=lambda r: r.run_id or 0)
    assert first.status == "ok" and partial.status == "partial"
    assert [c["status"] for c in partial.measurements["cells"]][-1] == "interrupted"
    assert not left_running(pids, env)


@pytest.mark.slow
@pytest.mark.skipif(own_cgroup() is None, reason="no writable cgroup v2 here; the fallback is tested above")
def test_profile_in_a_cgroup_ends_a_helper_that_left_the_kernels_tree_session_environment_and_files(
    tmp_path: Path, helpers: Any
) -> None:
    """The fallback would miss this helper (tests/files/detached_helper.ipynb); the kernel's cgroup does not."""
    pids, env = helpers
    process = start_nbscope(
        "profile", DETACHED, "--db", tmp_path / "db", "--json", "--no-diagnose", cwd=tmp_path, env=env
    )
    stdout, stderr = process.communicate(timeout=LIMIT_S)
    assert process.returncode == 0, stderr[-2000:]
    assert json.loads(stdout)["measurements"]["runner"]["processes_tracked_by"] == "cgroup"
    _assert_ended_and_cgroup_removed(int((pids / "detached").read_text()), process.pid)


def _assert_ended_and_cgroup_removed(pid: int, nbscope_pid: int) -> None:
    deadline = time.monotonic() + 5  # a SIGKILL'd process may take a moment to become a zombie
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    folder = own_cgroup()
    assert folder is not None and not list(folder.glob(f"nbscope-{nbscope_pid}-*"))


@pytest.mark.skipif(own_cgroup() is None, reason="no writable cgroup v2 here; the fallback is tested above")
def test_trace_in_a_cgroup_ends_a_helper_that_left_the_commands_tree_session_environment_and_files(
    tmp_path: Path,
) -> None:
    detach = (
        "import os, sys, time\nif os.fork():\n    os._exit(0)\nos.setsid()\n"
        "open(sys.argv[1] + '.part', 'w').write(str(os.getpid()))\n"
        "os.rename(sys.argv[1] + '.part', sys.argv[1])\ntime.sleep(600)\n"
    )
    pid_file = tmp_path / "detached"
    script = (
        f'env -i {sys.executable} -c "$0" {pid_file} </dev/null >/dev/null 2>&1; '
        f"while [ ! -e {pid_file} ]; do sleep 0.01; done; exit 0"
    )
    process = start_nbscope("trace", "--db", tmp_path / "db", "--", "bash", "-c", script, detach, cwd=tmp_path, env={})
    try:
        _, stderr = process.communicate(timeout=LIMIT_S)
        assert process.returncode == 2 and "no IPython kernel" in stderr, stderr  # it ran no notebook
        _assert_ended_and_cgroup_removed(int(pid_file.read_text()), process.pid)
    finally:
        if pid_file.exists() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


# ---- the traced command's exit status ------------------------------------------------------------------


@pytest.mark.parametrize(
    "script, code, says",
    [("exit 3", 3, "the command exited 3"), ("kill -TERM $$", 128 + signal.SIGTERM, "ended by signal 15")],
    ids=["exit-3", "sigterm"],
)
def test_trace_exits_with_the_traced_commands_own_status(tmp_path: Path, script: str, code: int, says: str) -> None:
    done = nbscope("trace", "--db", tmp_path / "db", "--", "bash", "-c", script, cwd=tmp_path, env={})
    assert done.returncode == code
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("nbscope: error: no IPython kernel") and says in line
    assert not (tmp_path / "db").exists() or not Store(tmp_path / "db").records()


@pytest.mark.parametrize(
    "build, code", [("exit 3", 3), ("kill -TERM $$", 128 + signal.SIGTERM)], ids=["exit-3", "sigterm"]
)
def test_the_action_reports_the_builds_own_exit_status(tmp_path: Path, build: str, code: int) -> None:
    from test_action import run_action

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    done = run_action(workspace, tmp_path / "art", build=build, install="false", python=sys.executable, baseline="none")
    assert done.exit_code == code, done.log
    assert f"nbscope: the build exited {code}; 0 notebook(s) profiled" in done.log
    assert f"the build exited {code};" in done.summary and "exited 2" not in done.summary + done.log
    assert (tmp_path / "art" / "build-exit-code.txt").read_text() == str(code)


@pytest.mark.skipif(own_cgroup() is None, reason="no writable cgroup v2 here; the fallback is tested above")
def test_the_empty_cgroup_of_an_nbscope_killed_outright_is_removed_by_the_next_run() -> None:
    from nbscope._processes import Cgroup

    parent = own_cgroup()
    assert parent is not None
    dead = subprocess.Popen(["true"])  # a pid that ran and ended, as a SIGKILL'd nbscope's
    dead.wait()
    stale, kept = parent / f"nbscope-{dead.pid}-0123abcd", parent / f"nbscope-{os.getpid()}-0123abcd"
    stale.mkdir()
    kept.mkdir()  # this process runs: its cgroup stays
    try:
        made = Cgroup.make()
        assert made is not None
        made.end()
        assert not stale.exists() and kept.exists() and not made.path.exists()
    finally:
        for folder in (stale, kept):
            if folder.exists():
                folder.rmdir()
