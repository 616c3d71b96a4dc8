"""Untrusted input, second pass: an output file never replaces what the command reads, crafted records are
refused in one line (size, device, nesting, loop parents, dates), credentials never reach a record or the
terminal, and escape sequences from a record or a notebook never reach the terminal."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, cli_env

FILES = Path(__file__).resolve().parent / "files"
RECORD = FILES / "records" / "cpu_unrolled_loop.json"


def _runs_in(db: Path) -> int:
    """The runs an SQLite store holds (fails when the file is no longer an SQLite store)."""
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def _record(tmp_path: Path, name: str, change: Any = None) -> Path:
    document = json.loads(RECORD.read_text())
    if change is not None:
        change(document)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def store(tmp_path: Path, run_cli: Any) -> Path:
    db = tmp_path / "s.db"
    assert run_cli("import", RECORD, "--db", db).returncode == 0
    return db


# --- -o never names the store or an input -------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("export", "1", "-o", "{db}"),
        ("report", "1", "-o", "{tmp}/x/../s.db"),  # another spelling
        ("export", "1", "-o", "{tmp}/hard.db"),  # a hard link to it
        ("report", "1", "-o", "{tmp}/linked/s.db"),  # through a linked folder
        ("export", "1", "-o", "{db}-journal"),  # SQLite's rollback journal: the next connection reads or deletes it
    ],
    ids=["export-store", "report-spelled-otherwise", "export-hard-link", "report-linked-folder", "export-journal"],
)
def test_o_naming_the_store_is_refused_and_the_store_kept(
    command: tuple[str, ...], store: Path, tmp_path: Path, run_cli: Any
) -> None:
    (tmp_path / "x").mkdir()
    os.link(store, tmp_path / "hard.db")
    (tmp_path / "linked").symlink_to(tmp_path)
    done = run_cli(*(part.format(db=store, tmp=tmp_path) for part in command), "--db", store)
    assert_one_line_error(done, "is the run store", "never writes over it")
    assert _runs_in(store) == 1 and store.read_bytes().startswith(b"SQLite format 3\x00")


def test_o_naming_an_input_is_refused_and_the_input_kept(tmp_path: Path, run_cli: Any) -> None:
    def as_audit(document: dict[str, Any]) -> None:
        document.update(kind="audit", measurements={"notebooks": []}, runs={})

    first, second = _record(tmp_path, "a.json", as_audit), _record(tmp_path, "b.json", as_audit)
    before = second.read_bytes()
    done = run_cli("merge", first, second, "--html", tmp_path / "." / "b.json", "--db", tmp_path / "m.db")
    assert_one_line_error(done, "--html", "b.json", "a run record it reads")
    assert second.read_bytes() == before


def test_a_file_given_the_inode_sqlite_freed_is_written_and_a_live_wal_link_refused(tmp_path: Path) -> None:
    """SQLite deletes and remakes its ``-shm``/``-wal`` files: the inode one had may go to a new file of the
    user's (CI refused a fresh ``-o`` file as "the same file as nbscope.db-shm"). A file SQLite still has is
    refused under another name (a hard link) all the same."""
    from nbscope._errors import NbscopeError
    from nbscope._files import check_target, forget_inputs
    from nbscope.record.store import Store

    forget_inputs()
    db = tmp_path / "nbscope.db"
    shm, wal = Path(f"{db}-shm"), Path(f"{db}-wal")
    shm.write_bytes(b"x")
    Store(db)
    os.rename(shm, tmp_path / "site.json")  # the file now at site.json has the inode the -shm had
    assert check_target(tmp_path / "site.json") == tmp_path / "site.json"
    wal.write_bytes(b"x")
    os.link(wal, tmp_path / "wal-link")
    with pytest.raises(NbscopeError, match="is the run store"):
        check_target(tmp_path / "wal-link")
    forget_inputs()


# Every option of every command that writes a file, each given the run store or a file the command reads.
EVERY_OUTPUT_OPTION = {
    "export -o": ("export", "1", "-o", "{db}"),
    "report -o": ("report", "1", "-o", "{db}"),
    "audit -o": ("audit", "{nb}", "-o", "{db}"),
    "audit -o notebook": ("audit", "{nb}", "-o", "{nb}"),
    "audit --html notebook": ("audit", "{nb}", "--html", "{tmp}/./nb.ipynb"),
    "merge -o": ("merge", "{audit}", "-o", "{db}"),
    "merge --html input": ("merge", "{audit}", "--html", "{audit}"),
    "gate --summary": ("gate", "--candidate", "2", "--baseline", "1", "--summary", "{db}"),
    "forecast --append-to": (
        "forecast",
        "--calibrate-from",
        "3",
        "--name",
        "mine",
        "--base",
        "l4",
        "--append-to",
        "{db}",
    ),
    "publish -o": ("publish", "{db}", "-o", "{db}"),
}


@pytest.mark.parametrize("command", EVERY_OUTPUT_OPTION.values(), ids=EVERY_OUTPUT_OPTION.keys())
def test_every_output_option_refuses_the_store_and_every_input(
    command: tuple[str, ...], store: Path, tmp_path: Path, run_cli: Any
) -> None:
    """The same one-line refusal (``_files.refuse_input``) for every option that writes, before anything is written:
    the store and the inputs are byte for byte as they were."""
    from nbscope.record.run import RunRecord
    from nbscope.record.store import Store

    later = _record(tmp_path, "later.json", lambda d: d.update(started_at="2026-12-01T07:42:31.229Z"))
    assert run_cli("import", later, "--db", store).returncode == 0  # run 2: the gate's candidate
    Store(store).save(
        RunRecord(
            kind="loops",
            target="builtin:logistic-map",
            fingerprint={"digest": "abc123def456"},
            measurements={
                "sweeps": [
                    {
                        "placement": "default",
                        "platform": "gpu",
                        "device_kind": "NVIDIA L40S",
                        "fit": {"us_per_iter": 6.0, "us_per_iter_top": 6.4},
                    }
                ]
            },
        )
    )
    notebook = tmp_path / "nb.ipynb"
    notebook.write_bytes((FILES / "gate_tiny.ipynb").read_bytes())
    audit = _record(tmp_path, "audit.json", lambda d: d.update(kind="audit", measurements={"notebooks": []}, runs={}))
    kept = {path: path.read_bytes() for path in (store, notebook, audit)}
    args = [part.format(db=store, nb=notebook, audit=audit, tmp=tmp_path) for part in command]
    done = run_cli(*args, *([] if command[0] == "publish" else ["--db", store]))
    option, target = args[-2], args[-1]
    assert_one_line_error(done, f"{option} ", "nbscope never writes over it")
    assert (
        "the run store" if target == str(store) else "it reads" if target == str(audit) else "it audits"
    ) in done.stderr
    assert {path: path.read_bytes() for path in kept} == kept


# --- import: bounded, regular files, sane documents -------------------------------------------------------


def _deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


def _sparse(tmp_path: Path) -> Path:
    path = tmp_path / "sparse.json"
    with open(path, "wb") as handle:
        handle.truncate(2**30)  # 1 GiB, no disk used
    return path


def _crafted_live_file(tmp_path: Path) -> Path:
    path = tmp_path / "crafted.jsonl"  # a header with a 5000-digit number, a line nested 100,000 deep
    path.write_text('{"type": "run", "format": "x", "n": ' + "9" * 5000 + "}\n" + "[" * 100_000 + "\n")
    return path


def _symlink(tmp_path: Path, device: str) -> Path:
    path = tmp_path / "zero.json"
    path.symlink_to(device)
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return path


def _digits(tmp_path: Path) -> Path:
    path = _record(tmp_path, "digits.json")
    path.write_text(path.read_text().replace('"wall_s": ', '"wall_s": ' + "9" * 5000 + ', "was": ', 1))
    return path


def _loops(*pairs: tuple[str, str | None]) -> Any:
    def change(document: dict[str, Any]) -> None:
        loops = [{"id": loop, "parent": parent, "trip_count": 3} for loop, parent in pairs]
        document["measurements"]["programs"] = {
            "version": 1,
            "programs": {"jit_f#1": {"key": "jit_f#1", "loops": loops}},
        }

    return change


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: Path("/dev/zero"), ("/dev/zero", "a device, not a regular file")),
        (_fifo, ("fifo.json", "a FIFO, not a regular file")),
        (_sparse, ("sparse.json", "1024 MiB", "read only up to 64 MiB")),
        (_deep, ("deep.json", "nested deeper than 100 levels")),
        (
            lambda tmp: _record(tmp, "cycle.json", _loops(("a", "c"), ("b", "a"), ("c", "b"))),
            ("cycle.json", "loops' parents form a cycle (a -> c -> b -> a)"),
        ),
        (lambda tmp: _record(tmp, "self.json", _loops(("a", "a"))), ("self.json", "cycle (a -> a)")),
        (
            lambda tmp: _record(tmp, "orphan.json", _loops(("a", None), ("b", "zz"))),
            ("orphan.json", "parent 'zz', which is no loop of its program"),
        ),
        (
            lambda tmp: _record(tmp, "nodate.json", lambda d: d.update(started_at="not-a-date")),
            ("nodate.json", "'started_at' is 'not-a-date', not an ISO 8601 time"),
        ),
        (
            lambda tmp: _record(tmp, "future.json", lambda d: d.update(started_at="3000-01-01T00:00:00.000Z")),
            ("future.json", "in the future of this machine's clock"),
        ),
        (
            lambda tmp: _record(tmp, "eons.json", lambda d: d["measurements"]["cells"][1].update(wall_s=10**29)),
            ("eons.json", "measurements.cells[1].wall_s is 1e+29, larger than any measurement"),
        ),
        (_digits, ("digits.json", "a number of thousands of digits")),
        (lambda tmp: Path("/dev/urandom"), ("/dev/urandom", "a device")),
        (lambda tmp: _symlink(tmp, "/dev/zero"), ("zero.json", "a device")),
        (_crafted_live_file, ("crafted.jsonl", "not an nbscope live file")),
    ],
    ids=[
        "device",
        "fifo",
        "sparse-1GiB",
        "nested-100k",
        "loop-cycle-3",
        "loop-own-parent",
        "loop-orphan",
        "unparseable-date",
        "future-date",
        "time-of-1e29-s",
        "5000-digit-number",
        "urandom",
        "link-to-a-device",
        "crafted-live-file",
    ],
)
def test_import_refuses_crafted_input_in_one_line_and_stores_nothing(
    make: Any, words: tuple[str, ...], tmp_path: Path, run_cli_process: Any
) -> None:
    db = tmp_path / "s.db"
    done = run_cli_process("import", make(tmp_path), "--db", db, timeout=60)  # a process: a FIFO must not hang it
    assert_one_line_error(done, *words)
    assert not db.exists() or _runs_in(db) == 0


@pytest.mark.parametrize(
    "command", [("forecast", "1"), ("diagnose", "1"), ("report", "1", "-o", "r.html")], ids=lambda c: c[0]
)
def test_a_cyclic_loop_that_got_into_a_store_earlier_is_one_line(
    command: tuple[str, ...], store: Path, tmp_path: Path, run_cli: Any
) -> None:
    cyclic = json.loads(_record(tmp_path, "c.json", _loops(("a", "b"), ("b", "a"))).read_text())
    with sqlite3.connect(store) as connection:  # as an older nbscope's import left it
        connection.execute("UPDATE documents SET document = ?", (json.dumps(cyclic),))
    done = run_cli(*command, "--db", store, cwd=tmp_path)
    assert_one_line_error(done, "run 1", "cycle (a -> b -> a)")
    assert not (tmp_path / "r.html").exists()


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: the SigCgt mask of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (signum - 1) & 1)


def test_a_run_dated_in_the_future_that_got_into_a_store_earlier_is_never_latest(
    store: Path, tmp_path: Path, run_cli: Any
) -> None:
    future = json.loads(
        _record(tmp_path, "f.json", lambda d: d.update(started_at="3000-01-01T00:00:00.000Z")).read_text()
    )
    with sqlite3.connect(store) as connection:  # as an older nbscope's import left it
        connection.execute(
            "INSERT INTO runs (started_at, kind, target, status, machine, digest, headline) "
            "SELECT ?, kind, target, status, machine, digest, headline FROM runs",
            (future["started_at"],),
        )
        connection.execute("INSERT INTO documents (run_id, document) VALUES (2, ?)", (json.dumps(future),))
    done = run_cli("show", "latest", "--json", "--db", store)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["started_at"] == json.loads(RECORD.read_text())["started_at"]
    assert done.stderr.count("\n") == 1 and "run 2" in done.stderr and "in the future" in done.stderr


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_import_exits_128_plus_it_with_one_line(signum: int, code: int, tmp_path: Path) -> None:
    def large(document: dict[str, Any]) -> None:  # valid, and slow enough to read that the signal lands in it
        document["settings"]["filler"] = [{f"k{i}": "x" * 40} for i in range(300_000)]

    path = _record(tmp_path, "large.json", large)
    db = tmp_path / "s.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "import", str(path), "--db", str(db)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while process.poll() is None and not _catches(process.pid, signal.SIGTERM):
        time.sleep(0.01)  # until nbscope handles the stop signals: then it is reading or validating the record
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    if process.returncode == 0:
        pytest.skip("the import finished before the signal on this machine")
    assert process.returncode == code, (stdout, stderr)
    assert stderr.splitlines() == [f"nbscope: stopped by {signal.Signals(signum).name}"]
    assert not db.exists() or _runs_in(db) in (0, 1)  # still a store (the run is added in one transaction)


# --- escape sequences never reach the terminal ------------------------------------------------------------

# Clear the screen, write the clipboard (OSC 52), a link elsewhere (OSC 8), the title, a C1 CSI, a carriage return.
ESCAPES = "\x1b[2J\x1b]52;c;SGk=\x07\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\\x1b]0;title\x07\x9b2J\r"
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\r", "SGk=")


def _escaped(document: dict[str, Any]) -> None:
    document["target"] = f"lec{ESCAPES}ture.md"
    document["label"] = f"main{ESCAPES}"
    cells = document["measurements"]["cells"]
    cells[0]["first_line"] = f"import jax  # {ESCAPES}"
    cells[1]["status"] = "error"
    cells[1]["error"] = {"name": f"ValueError{ESCAPES}", "message": f"boom{ESCAPES}"}


@pytest.fixture
def escaped_store(tmp_path: Path, run_cli: Any) -> Path:
    db = tmp_path / "e.db"
    done = run_cli("import", RECORD, _record(tmp_path, "escaped.json", _escaped), "--db", db)
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize(
    "command",
    [
        ("show", "2"),
        ("diagnose", "2"),
        ("compare", "1", "2", "--allow-different"),
        ("cells", "2"),
        ("runs",),
        ("gate", "--baseline", "1", "--candidate", "2"),
        ("history", f"lec{ESCAPES}ture.md"),
    ],
    ids=lambda c: c[0],
)
def test_escape_sequences_of_a_record_never_reach_the_terminal(
    command: tuple[str, ...], escaped_store: Path, run_cli: Any
) -> None:
    done = run_cli(*command, "--db", escaped_store, env={"COLUMNS": "200"})
    assert done.returncode in (0, 1), done.stderr  # gate's verdict may be 1
    shown = done.stdout + done.stderr
    assert "Traceback" not in shown
    assert "leclinkture.md" in shown or command[0] in ("cells", "compare", "gate"), shown  # the text around stays
    for sequence in FORBIDDEN:
        assert sequence not in shown, (sequence, shown)


@pytest.mark.slow
def test_escape_sequences_of_a_notebook_never_reach_the_terminal(tmp_path: Path, run_cli: Any) -> None:
    """A real profile of a notebook whose path, cell source and exception message hold escape sequences."""
    notebook = tmp_path / "lec\x1b]0;title\x07ture.md"
    notebook.write_bytes((FILES / "escape_sequences.md").read_bytes())
    db = tmp_path / "p.db"
    profiled = run_cli("profile", notebook, "--db", db, "--allow-errors", env={"COLUMNS": "200"})
    assert profiled.returncode == 0, profiled.stderr
    shown = profiled.stdout + profiled.stderr
    assert "lecture.md" in shown and "ValueError: link from http://REDACTED@host/simple" in shown, shown
    for later in (("show", "1"), ("diagnose", "1")):
        shown += run_cli(*later, "--db", db, env={"COLUMNS": "200"}).stdout
    for sequence in (*FORBIDDEN, "SECRET"):
        assert sequence not in shown, (sequence, shown)


# --- credentials never reach a record, an export, a report or the terminal ----------------------------------------

SECRETS = {
    "--extra-index-url http://tok:SECRET1@host/simple": "http://REDACTED@host/simple",
    "--index-url https://SECRET2@host/simple": "https://REDACTED@host/simple",
    "pkg @ git+https://SECRET3@github.com/owner/repo.git": "git+https://REDACTED@github.com/owner/repo.git",
    "https://host/simple?private_token=SECRET4": "?private_token=REDACTED",
    "https://host/x.whl?access_token=SECRET5&key=SECRET6": "?access_token=REDACTED&key=REDACTED",
}


def _with_credentials(document: dict[str, Any]) -> None:
    document["settings"]["requirements"] = list(SECRETS)
    document["fingerprint"].setdefault("env", {})["PIP_INDEX_URL"] = "https://u:SECRET7@host/simple"
    document["command"] = ["nbscope", "versions", "--with", "pkg@https://user:SECRET8@host/x.whl"]
    document["measurements"]["cells"][1]["status"] = "error"
    document["measurements"]["cells"][1]["error"] = {
        "name": "OSError",
        "message": "GET https://h/?password=SECRET9 with GITHUB_TOKEN=SECRET10, Authorization: Bearer SECRET11",
    }


def test_credentials_are_redacted_in_the_store_exports_reports_and_terminal(tmp_path: Path, run_cli: Any) -> None:
    db = tmp_path / "s.db"
    leaky = _record(tmp_path, "leaky.json", _with_credentials)  # as an nbscope before redaction exported it
    outputs = [run_cli("import", leaky, "--db", db)]
    outputs += [
        run_cli(*command, "--db", db)
        for command in (
            ("show", "1"),
            ("show", "1", "--json"),
            ("runs", "--json"),
            ("diagnose", "1"),
            ("export", "1", "-o", "plain.json"),
            ("export", "1", "--portable", "-o", "portable.json"),
            ("report", "1", "-o", "report.html"),
            ("report", str(leaky), "-o", "from-file.html"),
        )
    ]
    assert all(done.returncode == 0 for done in outputs), [done.stderr for done in outputs]
    written = [tmp_path / name for name in ("plain.json", "portable.json", "report.html", "from-file.html")]
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("s.db*"))
    everything = "".join(done.stdout + done.stderr for done in outputs) + "".join(p.read_text() for p in written)
    assert b"SECRET" not in stored
    assert "SECRET" not in everything, everything
    exported = (tmp_path / "plain.json").read_text()
    for shown in SECRETS.values():
        assert shown in exported, shown


# --- --env hashes are keyed per store ------------------------------------------------------------------------


def test_env_hashes_are_keyed_per_store_and_history_names_runs_hashed_elsewhere(tmp_path: Path, run_cli: Any) -> None:
    import hashlib

    weak = "1234"  # a value an unkeyed hash would give away to whoever tries candidates

    def with_env(started_at: str) -> Any:
        def change(document: dict[str, Any]) -> None:
            document["settings"]["env"] = {"HF_TOKEN": weak}
            document["started_at"] = started_at

        return change

    first = _record(tmp_path, "first.json", with_env("2026-11-30T07:00:00.000Z"))
    second = _record(tmp_path, "second.json", with_env("2026-11-30T08:00:00.000Z"))
    one, other = tmp_path / "one.db", tmp_path / "other.db"
    assert run_cli("import", first, second, "--db", one).returncode == 0
    assert run_cli("import", first, "--db", other).returncode == 0
    assert run_cli("export", "1", "-o", "from_one.json", "--db", one).returncode == 0

    def env_of(db: Path, run: str) -> str:
        done = run_cli("show", run, "--json", "--db", db)
        return str(json.loads(done.stdout)["settings"]["env"]["HF_TOKEN"])

    in_one = env_of(one, "1")
    assert in_one == env_of(one, "2")  # equal values compare equal within a store
    assert in_one.startswith("hidden-hmac-") and in_one != env_of(other, "1")  # another store, another key
    exported = (tmp_path / "from_one.json").read_text()
    assert weak not in exported.replace(in_one, "")
    assert hashlib.sha256(weak.encode()).hexdigest()[:12] not in exported  # no unkeyed hash to try candidates on

    assert run_cli("import", tmp_path / "from_one.json", "--db", other).returncode == 0
    done = run_cli("history", "tests/files/diag_unrolled_loop.ipynb", "--db", other, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "run(s) 2 hid their --env values with another store's key" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("a\x1b[2Jb", "ab"),
        ("a\x1b[1;31mred\x1b[0mb", "aredb"),
        ("a\x1b]52;c;SGk=\x07b", "ab"),
        ("a\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),  # DCS (sixel)
        ("a\x1b_APC payload\x1b\\b", "ab"),
        ("a\x9d0;title\x9cb", "ab"),
        ("a\x9b2Jb", "ab"),
        ("a\x1bcb", "ab"),
        ("a\rb\x08c\x00d", "abcd"),
        ("a\u202eb", "ab"),
        ("line 1\n\tline 2", "line 1\n\tline 2"),
        ("cut short \x1b]0;no end", "cut short "),
        ("a\u200eb\u200fc\u061cd\u2066e\u2069f", "abcdef"),  # bidi marks and isolates
        ("a\u2028b\u2029c", "abc"),  # line and paragraph separators
        ("a\x1b[?1049hb\x9b?25lc", "abc"),  # private CSI (alternate screen, hidden cursor), 7- and 8-bit
        ("ok \u200d emoji", "ok \u200d emoji"),  # a zero-width joiner is text
    ],
)
def test_for_terminal_removes_every_kind_of_sequence_and_keeps_newline_and_tab(raw: str, shown: str) -> None:
    from nbscope.render._clean import for_terminal

    assert for_terminal(raw) == shown


@pytest.mark.parametrize(
    "raw, shown",
    [
        (
            "--index-url https://__token__:pypi-AgEI@upload.pypi.org/legacy/",
            "--index-url https://REDACTED@upload.pypi.org/legacy/",
        ),
        ("git+ssh://git@github.com/o/r.git", "git+ssh://REDACTED@github.com/o/r.git"),
        ("https://s3/x?X-Amz-Signature=abc&X-Amz-Date=1", "https://s3/x?X-Amz-Signature=REDACTED&X-Amz-Date=1"),
        ("https://h/api?api_key=abc#frag", "https://h/api?api_key=REDACTED#frag"),
        ("mail me at a@b.org, see https://h/p?page=2", "mail me at a@b.org, see https://h/p?page=2"),
        ("https://user:p@ss@host/simple", "https://REDACTED@host/simple"),  # a password holding '@'
        ("https://host?next=a@b", "https://host?next=a@b"),  # an '@' in a query is no user information
        ("https://h/cb#access_token=abc&state=1", "https://h/cb#access_token=REDACTED&state=1"),
        (
            "https://a.blob.core.windows.net/c?sv=2020&sig=abc%3D",
            "https://a.blob.core.windows.net/c?sv=2020&sig=REDACTED",
        ),
        ('curl -H "Authorization: Bearer abc" https://x', 'curl -H "Authorization: Bearer REDACTED" https://x'),
        ("Proxy-Authorization: Basic dXNlcjpwYXNz", "Proxy-Authorization: Basic REDACTED"),
        ("PRIVATE-TOKEN: abc", "PRIVATE-TOKEN: REDACTED"),
        ('export GITHUB_TOKEN="abc"; make', 'export GITHUB_TOKEN="REDACTED"; make'),
        ("twine upload --password abc dist/*", "twine upload --password REDACTED dist/*"),
        ("pushed with ghp_" + "a" * 36 + " today", "pushed with REDACTED today"),
        ("hf_" + "b" * 34, "REDACTED"),
        (
            '{"line": "Authorization: token abc\\nnext"}',
            '{"line": "Authorization: token REDACTED\\nnext"}',
        ),  # JSON kept
        ("max_tokens: 100, tokens: 5, key=3, design=2", "max_tokens: 100, tokens: 5, key=3, design=2"),
    ],
)
def test_redact_hides_url_credentials_and_leaves_other_text(raw: str, shown: str) -> None:
    from nbscope._redact import redact

    assert redact(raw) == shown


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_notebook_whose_name_is_not_utf8_is_refused_before_it_runs(tmp_path: Path, run_cli: Any) -> None:
    """Such a name ran, then crashed storing the run (a UnicodeEncodeError traceback); now one line before a kernel."""
    name = os.fsdecode(b"lec\xff\xfeture.ipynb")
    (tmp_path / name).write_bytes((FILES / "gate_tiny.ipynb").read_bytes())
    done = run_cli("profile", tmp_path / name, "--db", tmp_path / "s.db")
    assert_one_line_error(done, "lec\\xff\\xfeture.ipynb", "not valid UTF-8")
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "s.db.d").exists()
