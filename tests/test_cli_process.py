"""What only a real process shows: ``python -m nbscope`` and the ``nbscope`` console script exit with the codes
the README gives; and ``run_cli`` (``nbscope.cli.main`` in the test's process, as most CLI tests run it) prints
exactly what a new process prints, so that those tests see what a user sees."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, cli_env
from nbscope._version import __version__
from nbscope.record import run as record_module
from nbscope.record.store import Store

RECORDS = Path(__file__).resolve().parent / "files" / "records"


def console_script() -> str | None:
    beside = Path(sys.executable).with_name("nbscope")
    return str(beside) if beside.is_file() else shutil.which("nbscope")


def test_python_m_nbscope_exit_codes(run_cli_process: Any, tmp_path: Path) -> None:
    version = run_cli_process("--version")
    assert (version.returncode, version.stdout) == (0, f"nbscope {__version__}\n"), version.stderr
    assert_one_line_error(run_cli_process("show", tmp_path / "missing.json"), "missing.json")
    unknown = run_cli_process("no-such-command")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr


@pytest.mark.skipif(console_script() is None, reason="the nbscope console script is not installed")
def test_the_console_script_exit_codes(tmp_path: Path) -> None:
    script = console_script()
    assert script is not None

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *map(str, args)], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120
        )

    version = run("--version")
    assert (version.returncode, version.stdout) == (0, f"nbscope {__version__}\n"), version.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("not a store")
    assert_one_line_error(run("runs", "--db", notes), "not an SQLite database")


def test_run_cli_prints_what_a_process_prints(run_cli: Any, run_cli_process: Any, tmp_path: Path) -> None:
    """Help, a table at the default width (no COLUMNS: 80 piped, as on an 80-column terminal) and at 80 columns, JSON and a
    one-line error: the same exit code, stdout and stderr, byte for byte, in this process and in a new one."""
    db = tmp_path / "store.db"
    Store(db).save(record_module.load(RECORDS / "cpu_latency_loop.json"))
    calls: list[tuple[tuple[str | Path, ...], dict[str, str | None]]] = [
        (("--help",), {"COLUMNS": "80"}),
        (("runs", "--db", db), {"COLUMNS": None}),
        (("show", "1", "--db", db), {"COLUMNS": "80"}),
        (("show", "1", "--db", db, "--json"), {}),
        (("show", "7", "--db", db), {}),
    ]
    for args, env in calls:
        here, there = run_cli(*args, env=env), run_cli_process(*args, env=env)
        assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there.stderr), args
