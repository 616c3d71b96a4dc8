"""Issue AG (adversarial pass 6), what is measured is kept and said as it is: a store another writer holds past
the wait (TS5, LS4), a trial stopped by a signal (TS3, TS4), temporary files (LS1, LS2, TS8), the gate's table
(N80), ``diagnose --try``'s options and evidence (DT3, DT4, DT9), the kernel transport (IP4, IP5), the trial's value
report (TV8–TV12) and a remedy that kills its kernel (TR11). Real kernels on tiny notebooks where a run is needed
(marked slow); no test waits out the store's 60 s: the wait is passed in (``store.WAIT_S``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_line_error, run_in_process
from nbscope.analyse.diagnose._base import Finding
from nbscope.analyse.trial import TrialResult, compare_values
from nbscope.record import store as store_module
from nbscope.record.store import Store
from nbscope.render.findings import finding_text
from nbscope.render.trial import trial_lines
from nbscope.schema.codec import decode
from test_adversarial import cell, record
from test_adversarial_gate_store import _notebook


def _nbscope(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m nbscope ARGS`` started in a session of its own, the stop signals at their defaults."""
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | (env or {})

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=merged,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,
    )


def _leftovers(tmp: Path) -> list[str]:
    """What nbscope left in a temporary folder: probe homes and kernel connection files."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("nbscope-probe-", "tmp", "kernel-")))


# ==== a store another writer holds past the wait (TS5, LS4) ========================================================


class _Holder:
    """Another writer: once ``marker`` exists (a cell wrote it, so the trial is running), it holds the store's
    write lock until released."""

    def __init__(self, db: Path, marker: Path | None = None) -> None:
        self.db, self.marker, self.taken, self.release = db, marker, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        if marker is None:
            assert self.taken.wait(30)

    def _hold(self) -> None:
        while self.marker is not None and not self.marker.exists():
            time.sleep(0.05)
        connection = sqlite3.connect(self.db, timeout=30, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN EXCLUSIVE")
        self.taken.set()
        self.release.wait(600)
        connection.execute("ROLLBACK")
        connection.close()

    def end(self) -> None:
        self.release.set()
        self.thread.join(30)


@pytest.mark.slow
def test_a_trial_on_a_store_held_past_the_wait_is_kept_in_files_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TS5: a traceback (``sqlite3.OperationalError: database is locked``), exit 1, the trial lost. Now: one line,
    exit 2, both sides kept (the remedy's judged) in files the printed command imports; then listed under the run."""
    _notebook(
        tmp_path / "q.ipynb", "x = 1", "import os\nif os.path.exists('ARM'):\n    open('LOCK', 'w').close()\ny = 2"
    )
    db = tmp_path / "q.db"
    assert run_in_process(["profile", "q.ipynb", "--db", db, "--no-diagnose"], cwd=tmp_path).returncode == 0
    (tmp_path / "ARM").touch()
    monkeypatch.setattr(store_module, "WAIT_S", 0.5)  # the store's 60 s, passed in
    holder = _Holder(db, tmp_path / "LOCK")
    try:
        done = run_in_process(
            ["try", "1", "--cell", "2", "--remedy", "threads:1", "--repeats", "1", "--db", db], cwd=tmp_path
        )
        assert holder.taken.is_set()
    finally:
        holder.end()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]  # after the trial's progress lines
    assert line.startswith("nbscope: error: the trial's runs could not be stored in ") and "database is locked" in line
    assert Store(db).count() == 1
    command = line.split("`")[1]
    assert command.startswith("nbscope import ") and command.endswith(f" --db {db}")
    files = [Path(f) for f in command.split()[2:-2]]
    assert len(files) == 2 and all(f.parent == db.parent / "q.db.d" / "live" for f in files)
    listed = run_in_process(
        ["runs", "--unfinished", "--db", db], cwd=tmp_path
    ).stdout  # found again, if the line is lost
    assert all(
        f"{f}: trial q.ipynb" in listed and f"measured, not stored; store it with: nbscope import {f}" in listed
        for f in files
    )
    imported = run_in_process(command.split()[1:], cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert not any(f.exists() for f in files)  # in the store now
    remedied = [r for r in Store(db).records(kind="trial") if "trial" in r.measurements]
    assert len(remedied) == 1 and remedied[0].measurements["trial"]["values"]  # judged: y compared
    assert "trial threads:1: cell 2 " in run_in_process(["show", "1", "--db", db], cwd=tmp_path).stdout


def test_a_gate_on_a_store_held_past_the_wait_says_its_verdict_is_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LS4: PASS, exit 0 after 61 s, stderr empty, the verdict silently not stored. Now a warning on the ``nbscope``
    logger (on stderr in a command: Python's last-resort handler; here pytest's capture holds it)."""
    db = tmp_path / "gl.db"
    store = Store(db)
    store.save(record([cell(0, 1.0), cell(1, 0.5)]))
    store.save(record([cell(0, 1.0), cell(1, 0.5)], started="2026-01-02T00:00:00.000Z"))
    monkeypatch.setattr(store_module, "WAIT_S", 0.5)
    holder = _Holder(db)
    try:
        done = run_in_process(["gate", "--baseline", "1", "--candidate", "2", "--db", db], cwd=tmp_path)
    finally:
        holder.end()
    assert done.returncode == 0 and "PASS" in done.stdout, done.stderr
    [said] = [r.getMessage() for r in caplog.records if r.name == "nbscope"]
    assert "the verdict on run 2 is not stored" in said and "database is locked" in said
    # Any other write past the wait: one line, not a traceback (an import keeps its file to import again).
    exported = tmp_path / "r.json"
    exported.write_text(record([cell(0, 2.0)], started="2026-01-03T00:00:00.000Z").to_json())
    holder = _Holder(db)
    try:
        done = run_in_process(["import", exported, "--db", db], cwd=tmp_path)
    finally:
        holder.end()
    assert_one_line_error(done, f"--db {db}: another process held it for over 0.5 s (database is locked)")
    assert Store(db).count() == 2 and exported.exists()
    assert Store(db).verdicts() == {}


# ==== a trial stopped by a signal (TS3, TS4) =======================================================================


@pytest.mark.slow
def test_a_stopped_trial_names_its_kept_runs_marks_them_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    """TS3: runs 2 and 3 stored ``ok``, not listed under run 1, not named. TS4: the kernel's connection file left."""
    _notebook(
        tmp_path / "slow.ipynb",
        "x = 1",
        "open('started.txt', 'a').write('.')\nimport time\ntime.sleep(3)\ny = 2",
        "z = 3",
    )
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    db = tmp_path / "sl.db"
    assert run_in_process(["profile", "slow.ipynb", "--db", db, "--no-diagnose"], cwd=tmp_path).returncode == 0
    (tmp_path / "started.txt").unlink()
    process = _nbscope(
        "try", "1", "--cell", "2", "--remedy", "threads:1", "--repeats", "3", "--db", db, cwd=tmp_path, env=env
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(_text(tmp_path / "started.txt")) < 3:  # the third run (as it is)
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines()[-1] == (
        "nbscope: stopped by SIGTERM; saved the stopped trial's partial run 2 and partial run 3"
    )
    store = Store(db)
    assert [store.get(i).status for i in (2, 3)] == ["partial", "partial"]
    shown = run_in_process(["show", "1", "--db", db], cwd=tmp_path).stdout
    assert "trial threads:1: cell 2 threads:1: not tested here: stopped: not judged" in shown
    assert _leftovers(tmp) == []


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


# ==== temporary files (LS1, LS2, TS8) ==============================================================================


@pytest.mark.slow
def test_a_stopped_parallel_audit_leaves_no_probe_home_or_connection_file(tmp_path: Path) -> None:
    """LS1: SIGTERM into ``audit . --workers 2``: the runs right, but two probe homes and two connection files (the
    kernels' keys) left in TMPDIR by the pool processes the audit killed."""
    book = tmp_path / "book"
    book.mkdir()
    for n in (1, 2):
        _notebook(book / f"n{n}.ipynb", "x = 1", f"open('../started-{n}', 'w').close()\nimport time\ntime.sleep(120)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = _nbscope("audit", ".", "--workers", "2", "--db", tmp_path / "a.db", cwd=book, env={"TMPDIR": str(tmp)})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not all((tmp_path / f"started-{n}").exists() for n in (1, 2)):
        time.sleep(0.1)
    assert len(_leftovers(tmp)) >= 4  # each kernel's probe home and connection file, while they run
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert _leftovers(tmp) == []


def test_a_file_size_limit_leaves_no_half_written_probe_home(tmp_path: Path) -> None:
    """LS2: ``ulimit -f 20``: the refusal was clear, but a half-written ``nbscope-probe-*`` folder stayed."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    _notebook(tmp_path / "nb.ipynb", "x = 1")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "nbscope", "profile", "nb.ipynb", "--db", str(tmp_path / "p.db"), "--no-diagnose"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=limited,
        env={**os.environ, "TMPDIR": str(tmp)},
        timeout=300,
    )
    assert_one_line_error(done, "file size limit")
    assert _leftovers(tmp) == []


def test_a_full_temporary_folder_is_named_and_left_as_it_was(tmp_path: Path) -> None:
    """TS8: TMPDIR full: ``the disk is full: nbscope stopped writing its output`` (stdout was on another disk), and
    a probe home (or the runs-listing folder) left there."""
    full = tmp_path / "full"
    full.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None
    if not mounted or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", full]).returncode:
        pytest.skip("a small tmpfs cannot be mounted here (root only)")
    try:
        (full / "fill").write_bytes(b"\0" * 1900 * 1024)
        _notebook(tmp_path / "nb.ipynb", "x = 1")
        done = subprocess.run(  # a process of its own: tempfile reads TMPDIR once a process
            [sys.executable, "-m", "nbscope", "profile", "nb.ipynb", "--db", "p.db", "--no-diagnose"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(full)},
            timeout=300,
        )
        assert_one_line_error(done, "the disk is full", str(full))  # the file it was writing there, or the folder
        assert sorted(p.name for p in full.iterdir()) == ["fill"]
    finally:
        subprocess.run(["umount", full], check=True)


# ==== the gate's table (N80) =======================================================================================


def test_the_gates_table_shows_the_figures_it_judged(tmp_path: Path) -> None:
    """N80: ``| 2.00 s | 1.80 s | +800 ms | ×1.80 | ❌ regression`` for a cell that went from 2.00 s to 1.80 s: the
    change was of the walls less the wait for a CPU (1.00 s → 1.80 s), the columns of the walls."""
    db = tmp_path / "n80.db"
    store = Store(db)
    store.save(record([cell(0, 0.5), cell(1, 2.0, wait=1.0)]))
    store.save(record([cell(0, 0.5), cell(1, 1.8, wait=0.0)], started="2026-01-02T00:00:00.000Z"))
    done = run_in_process(["gate", "--baseline", "1", "--candidate", "2", "--db", db, "--markdown"], cwd=tmp_path)
    [row] = [line for line in done.stdout.splitlines() if line.startswith("| 2 |")]
    assert "| 1.00 s | 1.80 s | +800 ms | ×1.80 |" in row and "wall 2.00 s → 1.80 s" in row, row


# ==== diagnose --try (DT3, DT4, DT9) ===============================================================================


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--try", "--repeats", "0"], ["--repeats must be from 1 to 50, not 0"]),
        (["--try", "--repeats", "51"], ["--repeats must be from 1 to 50, not 51"]),
        (["--repeats", "5"], ["--repeats applies to the trials of --try"]),
    ],
)
def test_diagnose_try_refuses_a_bad_repeats_in_one_line(tmp_path: Path, args: list[str], words: list[str]) -> None:
    """DT3/DT4: a finding reading ``not tried: --repeats must be from 1 to 50``, exit 0; ``--repeats`` alone taken."""
    db = tmp_path / "t.db"
    Store(db).save(record([cell(0, 1.0)]))
    assert_one_line_error(run_in_process(["diagnose", "1", *args, "--db", db], cwd=tmp_path), *words)


def test_diagnose_verbose_words_a_trial_and_prints_no_json() -> None:
    """DT9: ``measured: {"of_run": 1, "cell": 2, ...}`` printed as the trial's evidence."""
    measured = TrialResult(of_run=1, cell=2, label="cell 2", remedy="cache:warm").to_dict()
    finding = Finding(
        rule="compile-bound",
        title="compile-bound",
        severity="medium",
        confidence=0.8,
        summary="s",
        fix="f",
        cell_index=1,
        evidence={"measured": measured, "compile_s": 1.0},
        highlights=[("measured", "cache:warm: cell 2 1.0 s → 0.1 s (faster)")],
    )
    text = "\n".join(line for _, line in finding_text(finding, {}, 100, verbose=True))
    assert "cache:warm: cell 2 1.0 s → 0.1 s" in text and '"of_run"' not in text and "{" not in text


# ==== the kernel transport (IP4, IP5) ==============================================================================


@pytest.mark.parametrize("value", ["udp", "icp", "tcp;touch PWNED", pytest.param("i" * 5000, id="5000-i")])
def test_an_unknown_transport_is_refused_in_one_line(tmp_path: Path, value: str) -> None:
    """IP5: any value was silently the automatic choice (a typo ``icp`` on a sandbox that needs ipc: tcp)."""
    _notebook(tmp_path / "nb.ipynb", "x = 1")
    done = run_in_process(
        ["profile", "nb.ipynb", "--db", tmp_path / "p.db", "--no-diagnose"],
        cwd=tmp_path,
        env={"NBSCOPE_KERNEL_TRANSPORT": value},
    )
    assert_one_line_error(done, "NBSCOPE_KERNEL_TRANSPORT=", "use tcp, ipc or auto")
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "PWNED").exists()


def test_tcp_forced_where_no_loopback_works_is_one_line_at_once(tmp_path: Path) -> None:
    """IP4: ``unshare -n`` and ``NBSCOPE_KERNEL_TRANSPORT=tcp``: 243 s, then a message naming no transport."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode:
        pytest.skip("no network namespace can be made here (unshare -n)")
    _notebook(tmp_path / "nb.ipynb", "x = 1")
    started = time.monotonic()
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "nbscope", "profile", "nb.ipynb", "--db", "u.db", "--no-diagnose"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "NBSCOPE_KERNEL_TRANSPORT": "tcp"},
        timeout=300,
    )
    assert_one_line_error(done, "NBSCOPE_KERNEL_TRANSPORT=tcp", "127.0.0.1", "use ipc")
    assert time.monotonic() - started < 110  # refused before any kernel waited out its start-up time (120 s)


# ==== the trial's value report (TV8, TV9, TV10, TV12) ==============================================================


def test_the_value_report_says_what_differs_lists_every_value_and_warns_nothing() -> None:
    """TV8: 1e39 → inf under float32 read ``largest difference inf, relative 0``. TV9: 1e-50 against 0 (close)
    was in no line. TV10: NumPy's RuntimeWarnings on stderr."""
    as_is = {
        "q": ("a", np.array([1e39, 1.0])),
        "e": ("a", np.array([1e-50, 1.0])),
        "nanvs": ("a", np.array([np.nan, 1.0])),
        "k": ("a", np.arange(3)),
    }
    remedied = {
        "q": ("a", np.array([np.inf, 1.0], dtype=np.float32)),  # 1e39 in float32
        "e": ("a", np.array([0.0, 1.0], dtype=np.float32)),
        "nanvs": ("a", np.array([-103.28, 1.0], dtype=np.float32)),
        "k": ("a", np.arange(3, dtype=np.int32)),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        checks = {c.name: c for c in compare_values([as_is], [remedied])}
    assert checks["q"].verdict == "differs" and checks["q"].note.startswith("not finite on one side")
    assert checks["nanvs"].verdict == "differs" and "not finite on one side" in checks["nanvs"].phrase()
    assert checks["e"].verdict == "close" and checks["k"].verdict == "equal"
    result = TrialResult(of_run=1, cell=2, label="cell 2", remedy="x64:off", values=tuple(checks.values()))
    text = "\n".join(trial_lines(result))
    assert all(f"{name} " in text for name in checks), text  # every value compared is in the report
    assert "relative 0" not in text


def test_a_trial_of_two_repeats_is_not_described_as_one_run_each_way() -> None:
    """TV12: ``(within noise, one run each way: within its 318 ms noise floor)`` for ``--repeats 2``."""
    sides = {"cell_as_is_s": 1.0, "cell_remedy_s": 1.1, "cell_verdict": "within noise", "floor_s": 0.318}
    two = TrialResult(of_run=1, cell=2, label="cell 2", remedy="threads:1", repeats=2, **sides)
    one = TrialResult(of_run=1, cell=2, label="cell 2", remedy="threads:1", repeats=1, **sides)
    assert "2 runs each way" in two.sentence() and "one run" not in two.sentence()
    assert "one run each way" in one.sentence()


# ==== a remedy that kills its kernel (TR11) ========================================================================


@pytest.mark.slow
def test_an_unknown_xla_flag_gives_the_kernels_reason_and_no_notebook_verdict(tmp_path: Path) -> None:
    """TR11: ``failed … now kernel-died (DeadKernelError: …)``, the notebook ``within noise``, and ``results not
    compared (the cell binds no name)`` for a cell that binds ``r``."""
    _notebook(tmp_path / "jx.ipynb", "import jax.numpy as jnp", "r = jnp.ones(3).sum()", "s = 1")
    db = tmp_path / "t.db"
    assert run_in_process(["profile", "jx.ipynb", "--db", db, "--no-diagnose"], cwd=tmp_path).returncode == 0
    done = run_in_process(
        ["try", "1", "--cell", "2", "--remedy", "xla-flags:--xla_foo", "--repeats", "1", "--json", "--db", db],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "Unknown flag in XLA_FLAGS: --xla_foo" in result["cell_verdict"], result["cell_verdict"]
    assert result["total_verdict"].startswith("not comparable")
    assert "binds no name" not in decode(TrialResult, result).results_phrase()
