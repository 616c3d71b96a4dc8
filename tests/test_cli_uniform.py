"""One CLI to learn once: every command takes runs in one grammar, options mean one thing, exit codes say
what was found, tables keep every figure at 80 columns, and a notebook has one name from any folder.

Through the command line (``run_cli``) with real profile records (``tests/files/records``: real CPU runs and their
synthetic GPU twins) and, where a name must come from a real run, a real kernel.
"""

from __future__ import annotations

import copy
import json
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from conftest import assert_one_line_error
from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.cli import build_command
from nbscope.record.cells import aliases_for, notebook_file, pair_cells, project_root, same_notebook, target_name
from nbscope.record.run import RunRecord, check_label
from nbscope.record.store import Store, resolve_run
from nbscope.schema.build import totals
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell

FILES = Path(__file__).resolve().parent / "files"
RECORDS = FILES / "records"
NARROW = {"COLUMNS": "80"}


def load(name: str) -> dict[str, Any]:
    return json.loads((RECORDS / f"{name}.json").read_text())


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def stored(tmp_path: Path, run_cli: Any) -> dict[str, Any]:
    """A store with three real profile records: run 1 (CPU, labelled main-cpu), run 2 (its GPU twin,
    labelled main-gpu) and run 3 (another notebook, the newest); each also as a file."""
    db = tmp_path / "store.db"
    cpu = load("cpu_latency_loop") | {"label": "main-cpu"}
    gpu = load("synthetic_t4_latency_loop") | {"label": "main-gpu", "started_at": "2026-11-30T08:00:00.000Z"}
    other = load("cpu_unrolled_loop") | {"started_at": "2026-12-01T08:00:00.000Z"}
    files = [write(tmp_path / f"{name}.json", doc) for name, doc in (("cpu", cpu), ("gpu", gpu), ("other", other))]
    done = run_cli("import", *files, "--db", db)
    assert done.returncode == 0, done.stderr
    return {"db": db, "files": files, "cpu": cpu, "gpu": gpu, "other": other}


def commands() -> dict[str, click.Command]:
    command = build_command()
    assert isinstance(command, click.Group)
    return dict(command.commands)


# ---- help and options ------------------------------------------------------------------------------------


def test_each_command_is_registered_by_the_module_that_command_modules_names() -> None:
    """``nbscope CMD`` imports only COMMAND_MODULES[CMD]: that module must register CMD, and every command
    the help lists must be in the map."""
    from nbscope.cli import COMMAND_GROUPS, COMMAND_MODULES, app

    registered = commands()
    assert set(COMMAND_MODULES) == set(registered)
    assert {name for names in COMMAND_GROUPS.values() for name in names} == set(registered)
    for info in app.registered_commands:
        name = info.name or info.callback.__name__  # type: ignore[union-attr]
        assert info.callback.__module__ == f"nbscope.cli.{COMMAND_MODULES[name]}", name  # type: ignore[union-attr]
    assert set(build_command("diagnose").commands) >= {"diagnose"}  # type: ignore[attr-defined]


def test_a_command_started_alone_registers_only_its_own_module() -> None:
    """In a fresh process, ``nbscope show`` imports the runs module and no other command's."""
    code = (
        "import json, sys\nfrom nbscope.cli import main\ntry:\n    main(['show', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('nbscope.cli._'))), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "nbscope.cli._runs" in loaded
    assert not {"nbscope.cli._audit", "nbscope.cli._diagnose", "nbscope.cli._profile"} & loaded, loaded


def test_no_help_shows_a_default_of_none() -> None:
    """Every registered command (those added later too): ``--help`` never says ``[default: None]``."""
    runner = CliRunner()
    group = build_command()
    registered = commands()
    assert {"show", "compare", "gate", "cells", "lectures"} <= set(registered)
    for name in registered:
        done = runner.invoke(group, [name, "--help"], env={"COLUMNS": "200"}, prog_name="nbscope")
        assert done.exit_code == 0, (name, done.output)
        assert "Usage:" in done.output, name
        assert "default: None" not in done.output, (name, done.output)


def test_two_output_formats_are_refused_by_every_command(run_cli: Any) -> None:
    both = [n for n, c in commands().items() if {"--json", "--markdown"} <= {o for p in c.params for o in p.opts}]
    assert {"profile", "compare", "diagnose", "history", "gate", "cells", "lectures"} <= set(both)
    for name in both:
        assert_one_line_error(run_cli(name, "--json", "--markdown"), "--json and --markdown", "choose one")


def test_options_mean_one_thing() -> None:
    """--limit counts rows, --all shows every row, --timeout is per cell, -o writes the command's file."""
    for name, command in commands().items():
        opts = {o: p for p in command.params for o in p.opts}
        assert "--top" not in opts, name
        if "--timeout" in opts and not opts["--timeout"].hidden:
            assert "per-cell" in (opts["--timeout"].help or "").lower(), name
        if "--all" in opts:
            assert opts["--all"].is_flag and "every" in (opts["--all"].help or "").lower(), name
        if "-o" in opts:
            assert "--output" in opts["-o"].opts, name
    assert "--volatile" in {o for p in commands()["info"].params for o in p.opts}


def test_trace_timeout_points_to_the_whole_command_limit(run_cli: Any) -> None:
    assert_one_line_error(run_cli("trace", "--timeout", "5", "--", "true"), "--command-timeout")


# ---- run references ----------------------------------------------------------------------------------------


def test_the_grammar(stored: dict[str, Any], tmp_path: Path) -> None:
    store = Store(stored["db"])
    assert resolve_run("1", store).run_id == 1
    assert resolve_run("latest", store).run_id == 3
    assert resolve_run("latest:tests/files/diag_latency_loop.ipynb", store).run_id == 2
    assert resolve_run(f"latest:{FILES / 'diag_latency_loop.ipynb'}", store).run_id == 2  # a path from anywhere
    assert resolve_run("main-cpu", store).run_id == 1
    assert resolve_run("main-gpu:tests/files/diag_latency_loop.ipynb", store).run_id == 2
    assert resolve_run(str(stored["files"][0]), store).run_id == 1  # a file of a stored run keeps its id
    with pytest.raises(NbscopeError, match="no bench run in"):
        resolve_run("latest", store, kinds=("bench",))
    with pytest.raises(NbscopeError, match="labelled 'main-tpu'"):
        resolve_run("main-tpu", store)
    with pytest.raises(NbscopeError, match="no run of nowhere.md in"):
        resolve_run("latest:nowhere.md", store)
    with pytest.raises(NbscopeError, match="gone.json: no such file"):
        resolve_run("gone.json", store)
    with pytest.raises(NbscopeError, match="not a run reference"):
        resolve_run("two words", store)
    missing = Store(tmp_path / "missing.db", read_only=True)
    with pytest.raises(NbscopeError, match="no run store at"):
        resolve_run("latest", missing)
    assert not missing.path.exists()


@pytest.mark.parametrize("reference", ["id", "latest", "label", "file"])
def test_every_run_taking_command_takes_every_reference(
    stored: dict[str, Any], run_cli: Any, tmp_path: Path, reference: str
) -> None:
    """show, export, compare, diagnose, forecast, gate, report, cells and lectures, with each kind of reference
    to run 1 (the CPU run) and run 2 (its GPU twin)."""
    db = stored["db"]
    cpu, gpu = {
        "id": ("1", "2"),
        "latest": ("latest", "latest:tests/files/diag_latency_loop.ipynb"),
        "label": ("main-cpu", "main-gpu"),
        "file": (str(stored["files"][0]), str(stored["files"][1])),
    }[reference]
    cwd = Path(__file__).resolve().parents[1]  # the repository: notebook names are found from here too
    expected_cpu = 3 if reference == "latest" else 1  # latest: the newest run of the store, another notebook

    shown = run_cli("show", cpu, "--db", db, "--json", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["target"] == (stored["other"] if reference == "latest" else stored["cpu"])["target"]

    (tmp_path / "out").mkdir(exist_ok=True)  # -o writes in an existing folder only
    exported = run_cli("export", gpu, "-o", tmp_path / "out" / "gpu.json", "--db", db, cwd=cwd)
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "out" / "gpu.json").read_text())["started_at"] == stored["gpu"]["started_at"]

    diagnosed = run_cli("diagnose", gpu, "--db", db, "--json", cwd=cwd)
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert json.loads(diagnosed.stdout)["run_id"] == 2

    forecast = run_cli("forecast", gpu, "--db", db, cwd=cwd)  # found, then refused: a GPU's times are no CPU's
    assert_one_line_error(forecast, "run 2 ran on the GPU")

    report = run_cli("report", cpu, gpu, "--db", db, "-o", tmp_path / "r.html", cwd=cwd)
    assert report.returncode == 0, report.stderr

    lectures = run_cli("lectures", cpu, gpu, "--db", db, "--json", cwd=cwd)
    assert lectures.returncode == 0, lectures.stderr
    cells = run_cli("cells", cpu, gpu, "--db", db, "--json", cwd=cwd)
    assert cells.returncode == 0, cells.stderr
    assert {r["run_id"] for r in json.loads(cells.stdout)["rows"]} == {expected_cpu, 2}

    if reference == "latest":
        return  # the newest run is another notebook: compare and gate refuse it (tested below)
    compared = run_cli("compare", cpu, gpu, "--db", db, "--json", cwd=cwd)
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    assert (document["a"]["run_id"], document["b"]["run_id"]) == (1, 2)
    gated = run_cli("gate", "--baseline", cpu, "--candidate", gpu, "--db", db, "--json", cwd=cwd)
    # both found (runs 1 and 2), then refused: a CPU run against its GPU twin judges the device, not the code
    assert_one_line_error(gated, "the baseline ran on the CPU and the candidate on the GPU", "nbscope compare 1 2")


def test_labels_are_recorded_stored_and_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBSCOPE_LABEL", "nightly")
    record = RunRecord(kind="bench", target="suite:quick", fingerprint={"digest": "d"}).finish()
    assert record.label == "nightly" and record.to_dict()["label"] == "nightly"
    store = Store(tmp_path / "s.db")
    store.save(record)
    assert store.runs(label="nightly")[0]["label"] == "nightly"
    monkeypatch.delenv("NBSCOPE_LABEL")
    unlabelled = RunRecord(kind="bench", target="suite:quick", fingerprint={"digest": "d"})
    assert unlabelled.label is None and "label" not in unlabelled.to_dict()  # documents as before labels
    for bad in ("12", "latest", "a:b", "two words", ""):
        if bad:
            with pytest.raises(NbscopeError, match="cannot name runs"):
                check_label(bad)
    # A version-2 store (no label column) gets one from its documents: tests/test_store.py, with a real one.


def test_a_bad_label_is_refused_before_anything_runs(run_cli: Any, tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("profile", FILES / "empty.ipynb", "--label", "a b", "--db", tmp_path / "s.db"), "cannot name runs"
    )
    assert not (tmp_path / "s.db").exists()


# ---- exit codes and read-only commands ----------------------------------------------------------------------


def test_reading_a_missing_store_is_an_error_and_creates_nothing(run_cli: Any, tmp_path: Path) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (
        ("runs",),
        ("show", "1"),
        ("history", "x.md"),
        ("gate",),
        ("compare", "1", "2"),
        ("diagnose", "latest"),
        ("cells", "main"),
        ("export", "1", "-o", "x.json"),
    ):
        assert_one_line_error(run_cli(*args, "--db", "missing.db"), "no run store at missing.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_info_diff_exits_1_when_fingerprints_differ(run_cli: Any, tmp_path: Path) -> None:
    mine = json.loads(run_cli("info", "--json").stdout)
    other = copy.deepcopy(mine)
    other["versions"]["python"] = "2.7.18"
    a, b = write(tmp_path / "a.json", mine), write(tmp_path / "b.json", other)
    differ = run_cli("info", "--diff", a, b)
    assert differ.returncode == 1, differ.stderr
    assert "versions.python" in differ.stdout
    assert run_cli("info", "--diff", a, a).returncode == 0


def test_diagnose_fail_on(stored: dict[str, Any], run_cli: Any) -> None:
    findings = json.loads(run_cli("diagnose", "1", "--db", stored["db"], "--json").stdout)["findings"]
    severities = {f["severity"] for f in findings}
    assert severities, "the fixture has findings"
    for level, worse in (("high", {"high"}), ("medium", {"high", "medium"})):
        done = run_cli("diagnose", "1", "--db", stored["db"], "--fail-on", level)
        assert done.returncode == (1 if severities & worse else 0), (level, severities, done.stderr)
    assert_one_line_error(run_cli("diagnose", "1", "--db", stored["db"], "--fail-on", "low"), "--fail-on")


def test_findings_number_cells_as_the_text_does(stored: dict[str, Any], run_cli: Any) -> None:
    findings = json.loads(run_cli("diagnose", "1", "--db", stored["db"], "--json").stdout)["findings"]
    text = run_cli("diagnose", "1", "--db", stored["db"], env={"COLUMNS": "200"}).stdout
    located = [f for f in findings if f["index"] is not None]
    assert located
    for finding in located:
        assert "cell_index" not in finding
        assert finding["cell"] == finding["index"] + 1
        assert f"cell {finding['cell']}" in text


# ---- tables ------------------------------------------------------------------------------------------------


def stressed() -> dict[str, Any]:
    """A real record made hard to lay out: a long first line, long-running cells, many flags."""
    document = load("cpu_latency_loop")
    cells = document["measurements"]["cells"]
    cells[1]["first_line"] = cells[1]["code_line"] = "result = " + " + ".join(f"term_{i}(x)" for i in range(30))
    cells[2]["wall_s"], cells[2]["run_s"], cells[2]["compile_s"] = 1508.3, 1400.04, 108.26
    cells[3]["status"], cells[3]["error"] = "error", {"name": "FloatingPointError", "message": "overflow"}
    cells[3]["alarms"] = ["Very slow compile"]
    cells[3]["numba"] = {"compiles": 4, "compile_s": 0.2}
    cells[0]["first_line"] = "# set up: the comment line a table should not show"
    cells[0]["code_line"] = "import jax"
    document["measurements"]["totals"] = totals(cells, document["measurements"]["runner"], "off")
    return document


@pytest.mark.parametrize("name", ["cpu_latency_loop", "synthetic_t4_x64", "cpu_unrolled_loop", "stressed"])
def test_show_at_80_columns_keeps_every_figure(name: str, run_cli: Any, tmp_path: Path) -> None:
    document = stressed() if name == "stressed" else load(name)
    path = write(tmp_path / "run.json", document)
    done = run_cli("show", path, env=NARROW)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for cell in document["measurements"]["cells"]:
        row = next((line for line in lines if re.match(rf"^\s*{cell['index'] + 1}\s", line)), None)
        assert row is not None, (cell["index"], done.stdout)
        figures = [units.seconds(cell["wall_s"]), units.seconds(cell["run_s"])]
        figures += [units.seconds(cell["compile_s"])] if cell.get("compile_s") else []
        for figure in figures:
            assert f" {figure}" in row, (figure, row)
    t = document["measurements"]["totals"]
    for figure in (units.seconds(t["wall_s"]), units.seconds(t["compile_s"]), units.seconds(t["run_s"])):
        assert figure in done.stdout
    if name == "stressed":
        assert "25 min 8 s" in done.stdout and "import jax" in done.stdout and "set up" not in done.stdout


def test_runs_at_80_columns(stored: dict[str, Any], run_cli: Any) -> None:
    done = run_cli("runs", "--db", stored["db"], env=NARROW)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert re.search(r"^\s*2\s.*\bgpu\b", done.stdout, re.MULTILINE) and re.search(
        r"^\s*1\s.*\bcpu\b", done.stdout, re.MULTILINE
    )
    assert "wall_s" not in done.stdout and "4.29 s" in done.stdout
    assert "main-cpu" in done.stdout
    labelled = json.loads(run_cli("runs", "--db", stored["db"], "--label", "main-gpu", "--json").stdout)
    assert [(r["id"], r["backend"], r["label"]) for r in labelled] == [(2, "gpu", "main-gpu")]


def test_units() -> None:
    assert [units.seconds(v) for v in (1.51, 59.99, 75.3, 1508, 3661, 0.0123, -2.5)] == [
        "1.51 s",
        "59.99 s",
        "1 min 15 s",
        "25 min 8 s",
        "1 h 1 min",
        "12.3 ms",
        "-2.50 s",
    ]


# ---- compare -----------------------------------------------------------------------------------------------


def test_compare_pairs_a_shared_cell_hash_and_refuses_two_notebooks(
    stored: dict[str, Any], run_cli: Any, tmp_path: Path
) -> None:
    db = stored["db"]
    same = json.loads(run_cli("compare", "1", "2", "--db", db, "--json").stdout)
    assert same["same_notebook"] and same["pairing"]["all_paired"]
    assert all(r["match"] == "hash" for r in same["cells"])  # the duplicated cell too
    # Another notebook that shares two of run 1's cells, in another order.
    other = copy.deepcopy(stored["cpu"]) | {"target": "elsewhere/another.ipynb", "label": None}
    cells = other["measurements"]["cells"]
    other["measurements"]["cells"] = [
        dict(cells[4], index=0),
        {**cells[1], "index": 1, "source_hash": "f" * 16},
        dict(cells[0], index=2),
    ]
    other["measurements"]["notebook"]["content_hash"] = "0" * 16
    other["measurements"]["totals"] |= {"cells": 3, "cells_run": 3, "cells_ok": 3, "cells_failed": 0}  # as listed
    for count in ("compiles", "user_compiles", "eager_compiles", "library_compiles"):
        other["measurements"]["totals"][count] = sum(
            (c.get("jax") or {}).get(count, 0) for c in other["measurements"]["cells"]
        )
    path = write(tmp_path / "another.json", other)
    refused = run_cli("compare", "1", path, "--db", db)
    assert_one_line_error(refused, "different notebooks", "--allow-different")
    allowed = run_cli("compare", "1", path, "--db", db, "--allow-different", "--json")
    assert allowed.returncode == 0, allowed.stderr
    document = json.loads(allowed.stdout)
    assert document["same_notebook"] is False
    shared = {c["source_hash"] for c in cells} & {c["source_hash"] for c in other["measurements"]["cells"]}
    paired = {r["source_hash"] for r in document["cells"] if r["a"] and r["b"] and r["match"] in ("hash", "moved")}
    assert shared and shared <= paired
    markdown = run_cli("compare", "1", path, "--db", db, "--allow-different", "--markdown").stdout
    title = markdown.splitlines()[0]
    assert (
        "different notebooks" in title and "tests/files/diag_latency_loop.ipynb" in title and "another.ipynb" in title
    )
    text = run_cli("compare", "1", path, "--db", db, "--allow-different", env=NARROW).stdout
    assert "different notebooks" in text and max(len(line) for line in text.splitlines()) <= 80


def test_cells_with_one_source_hash_always_pair() -> None:
    """Whatever the order, every source in both runs pairs as often as it occurs in both."""
    rng = random.Random(18)
    lines = {h: f"x = {h} * 2" for h in "abcdefg"}
    for _ in range(3000):
        a = [
            decode(Cell, {"source_hash": h, "first_line": lines[h]})
            for h in rng.choices("abcdefg", k=rng.randint(0, 9))
        ]
        b = [
            decode(Cell, {"source_hash": h, "first_line": lines[h]})
            for h in rng.choices("abcdefg", k=rng.randint(0, 9))
        ]
        same = Counter(p.a.source_hash for p in pair_cells(a, b) if p.a and p.b and p.a.source_hash == p.b.source_hash)
        count_a, count_b = Counter(c.source_hash for c in a), Counter(c.source_hash for c in b)
        assert all(same[h] == min(count_a[h], count_b[h]) for h in count_a), (a, b)


# ---- a notebook's name ---------------------------------------------------------------------------------------


def test_a_notebook_has_one_name_from_every_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "lectures").mkdir()
    (repo / "lectures" / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    notebook = repo / "lectures" / "intro.md"
    notebook.write_text("# Intro\n")
    for cwd in (tmp_path, repo, repo / "lectures"):
        monkeypatch.chdir(cwd)
        assert target_name(notebook) == "lectures/intro.md"
        assert project_root(notebook) == repo
    monkeypatch.chdir(repo / "lectures")
    assert target_name("intro.md") == "lectures/intro.md"
    # Runs named before project roots (relative to where nbscope ran, or absolute) are found too.
    aliases = aliases_for("intro.md", notebook_file("intro.md"))
    assert aliases[0] == "lectures/intro.md"
    assert {"intro.md", "lectures/intro.md", notebook.as_posix()} <= set(aliases)
    monkeypatch.chdir(tmp_path)
    assert aliases_for("lectures/intro.md", notebook_file("lectures/intro.md")) == [
        "lectures/intro.md"
    ]  # not a file from here: as written
    # Outside git, a book's root; outside both, the working directory's project root (where the store is),
    # else the absolute path: two loose folders' notebooks of one name are never one name.
    book = tmp_path / "book"
    (book / "part").mkdir(parents=True)
    (book / "myst.yml").write_text("version: 1\n")
    assert target_name(book / "part" / "a.md") == "part/a.md"
    assert target_name(tmp_path / "loose" / "b.ipynb") == "loose/b.ipynb"
    assert target_name(tmp_path / "other" / "b.ipynb") == "other/b.ipynb"
    monkeypatch.chdir(book)
    assert target_name(tmp_path / "loose" / "b.ipynb") == (tmp_path / "loose" / "b.ipynb").resolve().as_posix()


def test_same_notebook() -> None:
    def run(target: str, content: str | None = None) -> RunRecord:
        return RunRecord(
            kind="profile", target=target, fingerprint={}, measurements={"notebook": {"content_hash": content}}
        )

    def cells(target: str, *hashes: str) -> RunRecord:
        return RunRecord(
            kind="profile",
            target=target,
            fingerprint={},
            measurements={"cells": [{"index": i, "source_hash": h} for i, h in enumerate(hashes)]},
        )

    assert same_notebook(run("lectures/a.md"), run("lectures/a.md"))
    # A name from before project roots is the same notebook when the cells are mostly the same.
    assert same_notebook(cells("a.md", "imp", "f", "g"), cells("lectures/a.md", "imp", "f", "g2"))
    assert same_notebook(cells("/home/me/book/lectures/a.md", "f"), cells("lectures/a.md", "f"))
    assert not same_notebook(cells("a.md", "imp", "f", "g"), cells("lectures/a.md", "imp", "x", "y"))
    assert not same_notebook(run("a.md"), run("lectures/a.md"))  # no cells to tell: never merged
    assert same_notebook(run("old/a.md", "1234"), run("new/b.md", "1234"))  # renamed, same content
    assert not same_notebook(run("lectures/a.md"), run("lectures/b.md"))
    assert not same_notebook(run("x/a.md"), run("y/a.md"))


@pytest.mark.slow
def test_history_and_gate_find_a_lecture_from_another_folder(run_cli: Any, tmp_path: Path) -> None:
    """Profiled from its own folder, found by its absolute path from another folder."""
    lecture = tmp_path / "lecture"
    lecture.mkdir()
    shutil.copy(FILES / "gate_tiny.ipynb", lecture / "tiny.ipynb")
    (tmp_path / "elsewhere").mkdir()
    db = tmp_path / "db" / "nbscope.db"
    for _ in range(2):
        done = run_cli("profile", "tiny.ipynb", "--db", db, "--json", "--label", "main-cpu", cwd=lecture, timeout=300)
        assert done.returncode == 0, done.stderr
    absolute = str(lecture / "tiny.ipynb")
    history = run_cli("history", absolute, "--db", db, "--json", cwd=tmp_path / "elsewhere")
    assert history.returncode == 0, history.stderr
    (series,) = json.loads(history.stdout)["series"]
    assert series["runs"] == 2
    gate = run_cli(
        "gate", "--target", absolute, "--db", db, "--json", "--max-slowdown", "500%", cwd=tmp_path / "elsewhere"
    )
    assert gate.returncode in (0, 1), gate.stderr
    assert json.loads(gate.stdout)["candidate"]["run_id"] == 2
    shown = run_cli("show", f"main-cpu:{absolute}", "--db", db, "--json", cwd=tmp_path / "elsewhere")
    assert shown.returncode == 0 and json.loads(shown.stdout)["label"] == "main-cpu"
    # Each cell's cache state is the run's (JAX's own "cache on" means only that the feature is enabled).
    record = json.loads(shown.stdout)
    states = {(c.get("jax") or {}).get("cache_state") for c in record["measurements"]["cells"]} - {None}
    assert states <= {record["measurements"]["totals"]["cache_state"]} == {"off"}


def test_every_cell_carries_the_runs_cache_state() -> None:
    cells = [
        {"wall_s": 1.0, "jax": {"cache_state": "on", "cache_hits": 0}},
        {"wall_s": 1.0, "jax": None},
        {"wall_s": 1.0, "jax": {"cache_state": None, "cache_hits": 2}},
    ]
    result = totals(cells, {}, "cold")
    assert result["cache_state"] == "warm"  # a cold cache that hit
    assert cells[0]["jax"] == {"cache_state": "warm", "cache_feature": "on", "cache_hits": 0}
    assert cells[2]["jax"]["cache_state"] == "warm" and "cache_feature" not in cells[2]["jax"]


# ---- book-level views --------------------------------------------------------------------------------------


def test_cells_of_a_book_an_audit_and_a_label(stored: dict[str, Any], run_cli: Any, tmp_path: Path) -> None:
    db, repo = stored["db"], Path(__file__).resolve().parents[1]
    # A folder of notebooks: the newest stored profile of each (run 2 for the latency loop, run 3 for the other).
    book = json.loads(run_cli("cells", FILES, "--db", db, "--json", "--all", cwd=tmp_path).stdout)
    cells = stored["gpu"]["measurements"]["cells"] + stored["other"]["measurements"]["cells"]
    assert book["notebooks"] == 2 and book["cells"] == len(cells)
    assert [r["wall_s"] for r in book["rows"]] == sorted((c["wall_s"] for c in cells), reverse=True)
    assert {r["run_id"] for r in book["rows"]} == {2, 3}
    assert "diag_x64.ipynb" in " ".join(book["sets"][0]["missing"])  # in the folder, never profiled here
    top = book["rows"][0]
    assert top["cell"] == top["index"] + 1 and abs(sum(r["share"] for r in book["rows"]) - 1) < 1e-9
    # An audit file as `audit -o` writes it: its notebooks, each with its profile embedded.
    audit = {
        "format": "nbscope-run",
        "schema_version": 1,
        "tool_version": "0.1.0",
        "command": ["nbscope", "audit"],
        "started_at": "2026-12-02T00:00:00.000Z",
        "ended_at": "2026-12-02T00:01:00.000Z",
        "status": "ok",
        "kind": "audit",
        "target": "tests/files",
        "settings": {"backends": ["cpu"]},
        "fingerprint": stored["cpu"]["fingerprint"],
        "measurements": {
            "notebooks": [
                {"path": "diag_latency_loop.ipynb", "backend": "cpu", "run_id": 41, "status": "ok"},
                {"path": "diag_x64.ipynb", "backend": "cpu", "run_id": None, "status": "error"},
            ],
            "lectures": [],
            "totals": {"notebooks": 2},
        },
        "runs": {"41": stored["cpu"]},
    }
    path = write(tmp_path / "audit.json", audit)
    from_audit = json.loads(run_cli("cells", path, "--db", db, "--json", "-n", "3").stdout)
    assert len(from_audit["rows"]) == 3 and {r["target"] for r in from_audit["rows"]} == {stored["cpu"]["target"]}
    assert from_audit["sets"][0]["missing"] == ["diag_x64.ipynb (cpu): error"]
    text = run_cli("cells", path, "main-gpu", "--db", db, env=NARROW, cwd=repo)
    assert text.returncode == 0, text.stderr
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
    for row in json.loads(run_cli("cells", path, "main-gpu", "--db", db, "--json").stdout)["rows"]:
        assert units.seconds(row["wall_s"]) in text.stdout


def test_lectures_side_by_side(stored: dict[str, Any], run_cli: Any) -> None:
    db = stored["db"]
    data = json.loads(run_cli("lectures", "main-cpu", "main-gpu", "--db", db, "--json").stdout)
    (row,) = data["rows"]
    assert row["target"] == stored["cpu"]["target"] and data["paired"] == 1
    assert (row["a"]["run_id"], row["a"]["backend"], row["b"]["run_id"], row["b"]["backend"]) == (1, "cpu", 2, "gpu")
    wall_a, wall_b = (
        stored["cpu"]["measurements"]["totals"]["wall_s"],
        stored["gpu"]["measurements"]["totals"]["wall_s"],
    )
    assert row["winner"] == ("A" if wall_a < wall_b else "B")
    text = run_cli("lectures", "main-cpu", "main-gpu", "--db", db, env=NARROW).stdout
    assert units.seconds(wall_a) in text and units.seconds(wall_b) in text and row["text"] in text
    markdown = run_cli("lectures", "main-cpu", "main-gpu", "--db", db, "--markdown").stdout
    assert markdown.startswith("### nbscope lectures: A = main-cpu vs B = main-gpu")
    # Two sets with different notebooks: each alone on its side.
    apart = json.loads(run_cli("lectures", "1", "3", "--db", db, "--json").stdout)
    assert [r["text"] for r in apart["rows"]] == ["only in A", "only in B"] and apart["paired"] == 0


def test_a_required_argument_left_out_is_a_usage_error_in_every_command(run_cli: Any) -> None:
    """Click 8.3+ with typer < 0.19 would pass None for it (and `diagnose` gave a traceback): pyproject pins
    click below 8.3, and every command with a required argument says it is missing, exit 2."""
    from nbscope.cli import build_command

    group = build_command()
    needing = [
        name
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        if any(p.required and p.param_type_name == "argument" for p in command.params)
    ]
    assert {"diagnose", "show", "profile", "export"} <= set(needing)
    for name in needing:
        assert_one_line_error(run_cli(name), "Missing argument", f"nbscope {name} -h")
