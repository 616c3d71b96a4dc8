"""The foundation commands through the command line (`run_cli`): version, help, info, runs, show, export, import, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error
from nbscope._version import __version__
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

CORE_COMMANDS = ("info", "runs", "show", "export", "import")
WIDE = {"COLUMNS": "200"}


def saved_run(db: Path, target: str = "lecture.md", wall: float = 1.25) -> RunRecord:
    record = RunRecord(
        kind="profile",
        target=target,
        fingerprint={
            "fingerprint_version": 1,
            "cpu": {"model": "Test CPU", "logical_cores": 2},
            "digest": "abcdef012345",
        },
        measurements={"totals": {"wall_s": wall, "compile_s": 0.5, "cells": 2}, "cells": []},
        settings={"kernel": "python3"},
        command=["nbscope", "profile", target],
    ).finish()
    Store(db).save(record)
    return record


# --- version and help -------------------------------------------------------------------------------


def test_version(run_cli: Any) -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nbscope {__version__}\n"


@pytest.mark.parametrize("command", ["info", "runs", "profile"])
def test_version_after_a_command(run_cli: Any, command: str) -> None:
    result = run_cli(command, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nbscope {__version__}\n"


def test_version_after_double_dash_is_not_taken(run_cli: Any) -> None:
    result = run_cli("show", "--", "--version", env=WIDE)
    assert result.stdout != f"nbscope {__version__}\n"
    assert result.returncode != 0


def test_help_lists_the_core_commands(run_cli: Any) -> None:
    result = run_cli("--help", env=WIDE)
    assert result.returncode == 0, result.stderr
    for command in CORE_COMMANDS:
        assert command in result.stdout, command
    bare = run_cli(env=WIDE)  # no arguments: help, not a traceback
    assert "Usage:" in bare.stdout + bare.stderr and "Traceback" not in bare.stderr


@pytest.mark.parametrize("command", CORE_COMMANDS)
def test_help_on_every_core_command(run_cli: Any, command: str) -> None:
    result = run_cli(command, "--help", env=WIDE)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout and f"nbscope {command}" in result.stdout
    short = run_cli(command, "-h", env=WIDE)
    assert short.returncode == 0 and short.stdout == result.stdout


# --- info -------------------------------------------------------------------------------------------


def test_info_json_parses(run_cli: Any) -> None:
    result = run_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    fingerprint = json.loads(result.stdout)
    assert fingerprint["fingerprint_version"] == 1
    assert len(fingerprint["digest"]) == 12
    for section in ("host", "cpu", "memory", "blas", "numba_threading", "gpu", "versions", "environment", "ci"):
        assert section in fingerprint, section


def test_info_table(run_cli: Any) -> None:
    result = run_cli("info", env=WIDE)
    assert result.returncode == 0, result.stderr
    digest = json.loads(run_cli("info", "--json").stdout)["digest"]
    assert f"digest {digest}" in result.stdout
    for field in ("cpu.model", "cpu.logical_cores", "memory.total_bytes", "blas.threads", "versions.python"):
        assert field in result.stdout, field
    assert "blas.pools" not in result.stdout


def test_info_diff_errors_are_one_line(run_cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = tmp_path / "good.json"
    good.write_text(run_cli("info", "--json").stdout)
    assert_one_line_error(run_cli("info", "--diff", bad, good), "bad.json", "not a JSON fingerprint")
    assert_one_line_error(run_cli("info", "--diff", good, tmp_path / "missing.json"), "no such file")
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    assert_one_line_error(run_cli("info", "--diff", good, other), "neither a fingerprint nor a run record")


# --- runs, show, export, import ---------------------------------------------------------------------


def test_runs_on_an_empty_store(run_cli: Any, tmp_db: Path) -> None:
    Store(tmp_db).count()  # an empty store
    result = run_cli("runs", "--db", tmp_db, env=WIDE)
    assert result.returncode == 0, result.stderr
    assert "No runs stored yet." in result.stdout
    listed = run_cli("runs", "--db", tmp_db, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_runs_and_show(run_cli: Any, tmp_db: Path) -> None:
    first = saved_run(tmp_db, "one.md", 1.25)
    saved_run(tmp_db, "two.md", 3.5)
    listed = run_cli("runs", "--db", tmp_db, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["target"]) for r in rows] == [(2, "two.md"), (1, "one.md")]
    assert rows[1]["headline"] == {"wall_s": 1.25, "compile_s": 0.5, "cells": 2}
    table = run_cli("runs", "--db", tmp_db, env=WIDE)
    assert table.returncode == 0, table.stderr
    assert "one.md" in table.stdout and "two.md" in table.stdout and "abcdef012345" in table.stdout
    assert "1.25 s · compile 500 ms · 2 cells" in table.stdout
    filtered = json.loads(run_cli("runs", "--db", tmp_db, "--json", "--target", "one.md").stdout)
    assert [r["id"] for r in filtered] == [1]
    shown = run_cli("show", "1", "--db", tmp_db, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == first.to_dict()
    # NBSCOPE_DB names the store too.
    via_env = run_cli("show", "1", "--json", env={"NBSCOPE_DB": str(tmp_db)})
    assert via_env.returncode == 0 and json.loads(via_env.stdout) == first.to_dict()


def test_export_then_import_into_another_store(run_cli: Any, tmp_db: Path, tmp_path: Path) -> None:
    original = saved_run(tmp_db)
    exported = tmp_path / "out" / "run1.json"
    exported.parent.mkdir()  # -o writes in an existing folder only
    result = run_cli("export", "1", "-o", exported, "--db", tmp_db)
    assert result.returncode == 0, result.stderr
    assert f"run 1 written to {exported}" in result.stdout
    assert json.loads(exported.read_text()) == original.to_dict()
    other_db = tmp_path / "other" / "nbscope.db"
    saved_run(other_db, "already-there.md")
    imported = run_cli("import", exported, "--db", other_db)
    assert imported.returncode == 0, imported.stderr
    assert f"{exported}: imported as run 2" in imported.stdout
    again = Store(other_db).get(2)
    assert again.to_dict() == original.to_dict()
    shown = run_cli("show", exported, "--db", other_db, "--json")  # an exported file shows too
    assert shown.returncode == 0 and json.loads(shown.stdout) == original.to_dict()
    table = run_cli("show", "2", "--db", other_db, env=WIDE)
    assert table.returncode == 0, table.stderr
    assert "run 2" in table.stdout and "lecture.md" in table.stdout and "abcdef012345" in table.stdout


def test_import_of_a_profile_json_written_by_json_output(run_cli: Any, tmp_db: Path, tmp_path: Path) -> None:
    path = tmp_path / "from-json.json"
    path.write_text(saved_run(tmp_path / "elsewhere.db").to_json())
    result = run_cli("import", path, path, "--db", tmp_db)
    assert result.returncode == 0, result.stderr
    assert Store(tmp_db).count() == 1  # the same run twice is stored once
    assert result.stdout.splitlines()[1] == f"{path}: already in {tmp_db} as run 1; not imported again"


# --- acceptance errors: one line on stderr, exit 2, nothing touched ---------------------------------


def test_import_not_json(run_cli: Any, tmp_db: Path, tmp_path: Path) -> None:
    (tmp_path / "not-json.txt").write_text("this is a text file\nnot a run\n")
    result = run_cli("import", "not-json.txt", "--db", tmp_db)
    assert_one_line_error(result, "not-json.txt", "not valid JSON")
    assert not tmp_db.exists()


def test_import_not_json_with_the_default_store(run_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "not-json.txt").write_text("hello")
    assert_one_line_error(run_cli("import", "not-json.txt"), "not-json.txt")
    assert not (tmp_path / ".nbscope").exists()


def test_import_validates_every_file_before_writing_any(run_cli: Any, tmp_db: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(saved_run(tmp_path / "source.db").to_json())
    newer = json.loads(good.read_text())
    newer["schema_version"] = 99
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_one_line_error(run_cli("import", good, "newer.json", "--db", tmp_db), "schema version 99", "upgrade")
    assert_one_line_error(run_cli("import", good, "list.json", "--db", tmp_db), "not an nbscope run record")
    assert_one_line_error(run_cli("import", good, "missing.json", "--db", tmp_db), "no such file")
    assert not tmp_db.exists() or Store(tmp_db).count() == 0


def test_show_unknown_id(run_cli: Any, tmp_db: Path) -> None:
    saved_run(tmp_db)
    assert_one_line_error(run_cli("show", "999999", "--db", tmp_db), "no run with id 999999")


def test_show_unknown_id_with_the_default_store(run_cli: Any, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("show", "999999"), "no run store at .nbscope/nbscope.db")
    assert not (tmp_path / ".nbscope").exists()


def test_show_neither_id_nor_file(run_cli: Any, tmp_db: Path) -> None:
    saved_run(tmp_db)
    assert_one_line_error(run_cli("show", "nothing-here.json", "--db", tmp_db), "nothing-here.json: no such file")
    assert_one_line_error(run_cli("show", "no label here", "--db", tmp_db), "not a run reference")
    assert_one_line_error(run_cli("show", "nolabel", "--db", tmp_db), "no run", "labelled 'nolabel'")


def test_export_errors(run_cli: Any, tmp_db: Path, tmp_path: Path) -> None:
    saved_run(tmp_db)
    assert_one_line_error(run_cli("export", "7", "-o", tmp_path / "x.json", "--db", tmp_db), "no run with id 7")
    assert_one_line_error(run_cli("export", "1", "-o", tmp_path, "--db", tmp_db), "is a directory")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("runs", "--json"),
        ("show", "1"),
        ("show", "999999"),
        ("export", "1", "-o", "out.json"),
        ("import", "good.json"),
    ],
    ids=lambda a: "-".join(a),
)
def test_db_that_is_not_sqlite_is_refused_and_untouched(run_cli: Any, tmp_path: Path, args: tuple[str, ...]) -> None:
    notes = tmp_path / "notes.txt"
    content = b"These are my notes.\nNot a database.\n\x00\x01 binary tail"
    notes.write_bytes(content)
    (tmp_path / "good.json").write_text(saved_run(tmp_path / "source.db").to_json())
    before = sorted(p.name for p in tmp_path.iterdir())
    assert_one_line_error(run_cli(*args, "--db", "notes.txt"), "notes.txt", "not an SQLite database")
    assert notes.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no -wal, -shm or out.json


def test_db_from_the_environment_that_is_not_sqlite(run_cli: Any, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("notes\n")
    assert_one_line_error(run_cli("runs", env={"NBSCOPE_DB": str(notes)}), "notes.txt", "not an SQLite database")
    assert notes.read_text() == "notes\n"


def test_db_that_is_a_directory(run_cli: Any, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("runs", "--db", tmp_path), "is a directory")


# --- profile: one outcome, each step once -------------------------------------------------------------


@pytest.mark.slow
def test_profile_checks_the_notebook_and_forecasts_once(
    run_cli: Any, tmp_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbscope.analyse.forecast as forecast_module
    import nbscope.api.profile as profile_module

    calls = {"preflight": 0, "forecast": 0}

    def counted(name: str, function: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(profile_module, "preflight", counted("preflight", profile_module.preflight))
    monkeypatch.setattr(forecast_module, "forecast", counted("forecast", forecast_module.forecast))
    files = Path(__file__).resolve().parent / "files"
    result = run_cli(
        "profile",
        files / "forecast_matmul.md",
        "--db",
        tmp_db,
        "--forecast",
        "t4",
        "--jax-platform",
        "cpu",
        "--markdown",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "T4" in result.stdout and "nbscope diagnose" in result.stdout  # the forecast and the findings shown
    assert calls == {"preflight": 1, "forecast": 1}
