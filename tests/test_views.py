"""What a newcomer meets (issue T): findings that do not depend on the cache, every view read one way at 80
columns on a terminal and piped, hints that point to a command that shows what they promise, and help in the
order of use.

Real runs: the bundled example lecture profiled twice with ``--jax-cache warm`` (the first run starts the cache
cold, the second reads it), and ``gate_sleep.ipynb`` profiled with two values of ``--env`` (its second cell
sleeps 0.1 s, then 0.4 s). Every view is run in a real pseudo-terminal and through a pipe, both 80 columns wide.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from conftest import run_in_process
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.report import report_data
from nbscope.cli import COMMAND_GROUPS, build_command
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "tests" / "files"
WIDTH = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
SLOW_ENV = "NBSCOPE_GATE_SLOW"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NBSCOPE_DB", "NBSCOPE_LABEL")}
    env.update(extra)
    return env


def piped(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``nbscope ARGS`` with its output into a file, not a terminal, and no $COLUMNS (unless ``env`` sets it):
    what a CI log or ``| less`` gets. Run in this process (``run_in_process``: no interpreter to start for each
    of the views); the pseudo-terminal side (``on_terminal``) is a real process."""
    return run_in_process(args, env={**dict.fromkeys(("COLUMNS", "LINES", "NBSCOPE_LABEL")), **env}, cwd=cwd)


def on_terminal(args: list[str], cwd: Path, timeout: float = 300) -> str:
    """``nbscope ARGS`` in a real 80-column pseudo-terminal (no $COLUMNS: the width comes from the terminal),
    its output with the colour codes taken out."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, WIDTH, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", *args],
        cwd=cwd,
        env=_env(TERM="xterm-256color"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=timeout)
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > WIDTH]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Four real runs in one store: the example lecture with ``--jax-cache warm`` twice (runs 1, 2), and
    gate_sleep.ipynb with ``--env NBSCOPE_GATE_SLOW=0.1`` then ``=0.4`` (runs 3, 4)."""
    folder = tmp_path_factory.mktemp("views")
    shutil.copy(REPO / "examples" / "ledger_tour.md", folder / "ledger_tour.md")
    shutil.copy(FILES / "gate_sleep.ipynb", folder / "gate_sleep.ipynb")
    db = folder / "store" / "nbscope.db"
    printed = {}
    for number, args in enumerate(
        [
            ["ledger_tour.md", "--jax-cache", "warm", "--jax-platform", "cpu"],
            ["ledger_tour.md", "--jax-cache", "warm", "--jax-platform", "cpu"],
            ["gate_sleep.ipynb", "--env", f"{SLOW_ENV}=0.1"],
            ["gate_sleep.ipynb", "--env", f"{SLOW_ENV}=0.4"],
        ],
        start=1,
    ):
        done = piped(["profile", *args, "--db", str(db)], folder)
        assert done.returncode == 0, done.stderr
        printed[number] = done.stdout
    return {"folder": folder, "db": db, "profile_output": printed}


def _run(project: dict[str, Any], *args: str) -> str:
    done = piped([*args, "--db", str(project["db"])], project["folder"])
    assert done.returncode == 0, done.stderr
    return done.stdout


def _record(project: dict[str, Any], run_id: int) -> RunRecord:
    record = Store(project["db"]).get(run_id)
    assert record is not None
    return record


# ---- findings that do not depend on the cache ------------------------------------------------------------


def test_a_warm_cache_does_not_hide_a_retrace(project: dict[str, Any]) -> None:
    warm = _record(project, 2)
    assert warm.measurements["totals"]["cache_state"] == "warm"
    [churn] = [f for f in diagnose(warm) if f.rule == "retrace-churn"]
    # `energy` is traced for 4 shapes in both runs; in the warm one every backend compile came from the cache.
    assert churn.evidence["function"] == "energy" and churn.evidence["traces"] == 4
    assert churn.evidence["cache_hits"] == 4 and "persistent cache saved only the backend" in churn.summary
    cold = [f for f in diagnose(_record(project, 1)) if f.rule == "retrace-churn"]
    assert cold and cold[0].evidence["traces"] == 4 and "compiled 4 times" in cold[0].summary
    # The profile that recorded the warm run ends with it, not with "no findings".
    assert "Retrace churn" in project["profile_output"][2] and "no findings" not in project["profile_output"][2]


LOW = {
    "cold-cache": {"min_backend_s": 1e-4, "min_share": 0.0},
    "compile-bound": {"min_compile_s": 1e-4, "min_share": 0.3},
}


def test_a_fix_never_asks_for_what_the_run_already_did(project: dict[str, Any]) -> None:
    first = _record(project, 1)  # --jax-cache warm, and the cache nbscope made was still empty
    assert first.settings["jax_cache"] == "warm" and first.measurements["totals"]["cache_state"] == "cold"
    findings = diagnose(first, thresholds=LOW)
    [cold] = [f for f in findings if f.rule == "cold-cache"]
    assert not cold.fix.startswith("Set JAX_COMPILATION_CACHE_DIR") and "--jax-cache warm" in cold.fix
    assert "--jax-cache warm" in cold.short_fix() and "set JAX_COMPILATION_CACHE_DIR" not in cold.short_fix()
    bound = [f for f in findings if f.rule == "compile-bound"]
    assert bound and all("set JAX_COMPILATION_CACHE_DIR" not in f.short_fix() for f in bound)
    # The same figures from a run that had no persistent cache: then setting one is the fix.
    document = first.to_dict()
    document["settings"]["jax_cache"] = "off"
    document["measurements"]["totals"]["cache_state"] = "off"
    plain = diagnose(RunRecord.from_dict(document), thresholds=LOW)
    [off] = [f for f in plain if f.rule == "cold-cache"]
    assert off.short_fix() == "set JAX_COMPILATION_CACHE_DIR to a folder kept between runs"
    assert any("JAX_COMPILATION_CACHE_DIR" in f.short_fix() for f in plain if f.rule == "compile-bound")


# ---- hints and counts ------------------------------------------------------------------------------------


def test_the_no_findings_hint_names_diagnose_only_when_it_lists_something(project: dict[str, Any]) -> None:
    for run_id in (3, 4):
        shown = " ".join(project["profile_output"][run_id].split())
        full = _run(project, "diagnose", str(run_id))
        if "no findings" not in shown:
            continue
        if "not evaluated:" in full:
            assert "could not be evaluated (`nbscope diagnose" in shown
        else:
            assert "no findings: no rule fired on this run" in shown and "nbscope diagnose" not in shown


def test_counts_agree_with_their_nouns(project: dict[str, Any]) -> None:
    for output in project["profile_output"].values():
        shown = " ".join(output.split())
        found = re.search(r"(\d+) finding(s?) \((?:the top \d+ )?below\); `[^`]+` shows (them|it) in full", shown)
        if "no findings" in shown:
            continue
        assert found, shown
        count, plural, pronoun = int(found[1]), found[2], found[3]
        assert (plural, pronoun) == (("", "it") if count == 1 else ("s", "them"))
    history = " ".join(_run(project, "history", "gate_sleep.ipynb").split())
    assert history.count("· 1 run ·") == 2 and "1 runs" not in history
    assert "1 runs" not in _run(project, "report", "3", "4", "-o", str(project["folder"] / "r.html"))


def test_forecast_without_a_run_names_every_reference(project: dict[str, Any]) -> None:
    done = piped(["forecast", "--db", str(project["db"])], project["folder"])
    assert done.returncode == 2 and "latest" in done.stderr and "LABEL" in done.stderr
    assert "Traceback" not in done.stderr
    help_text = " ".join(piped(["forecast", "--help"], project["folder"]).stdout.split())
    assert "needed unless --list or --calibrate-from" in help_text


# ---- every view at 80 columns, on a terminal and piped ---------------------------------------------------


VIEWS = [
    ["runs"],
    ["show", "1"],
    ["show", "4"],
    ["cells", "1", "2"],
    ["lectures", "1", "2"],
    ["history", "ledger_tour.md"],
    ["history", "gate_sleep.ipynb"],
    ["compare", "1", "2"],
    ["compare", "3", "4"],
    ["gate", "--baseline", "3", "--candidate", "4", "--all"],
    ["diagnose", "1"],
    ["diagnose", "2", "--verbose"],
]


@pytest.mark.parametrize("args", VIEWS, ids=[" ".join(v) for v in VIEWS])
def test_every_view_fits_80_columns_and_reads_the_same_piped(project: dict[str, Any], args: list[str]) -> None:
    command = [*args, "--db", str(project["db"])]
    done = piped(command, project["folder"])
    assert done.returncode in (0, 1), done.stderr  # the gate fails on purpose
    terminal = on_terminal(command, project["folder"])
    assert not too_wide(done.stdout), too_wide(done.stdout)
    assert not too_wide(terminal), too_wide(terminal)
    assert terminal.rstrip().splitlines() == done.stdout.rstrip().splitlines()
    told = piped(command, project["folder"], COLUMNS=str(WIDTH))  # $COLUMNS=80 says the same
    assert told.stdout == done.stdout


def test_the_gate_keeps_its_verdict_and_times_whole(project: dict[str, Any]) -> None:
    done = piped(["gate", "--baseline", "3", "--candidate", "4", "--db", str(project["db"])], project["folder"])
    assert done.returncode == 1, done.stdout  # cell 2 sleeps 0.4 s instead of 0.1 s
    assert "❌ regression" in done.stdout and "regress…" not in done.stdout
    assert not re.search(r"\d\.\d{3} s", done.stdout)  # times through the one formatter: "100 ms", never "0.100 s"
    assert "::" not in done.stdout
    # Each cell is one row: its source is cut with "…" rather than wrapped onto more lines.
    lines = done.stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─" * 10))
    end = next(i for i, line in enumerate(lines) if line.startswith("regression "))
    rows = [line for line in lines[rule + 1 : end] if line.strip()]
    assert rows and all(re.match(r"\s*\d+\s+\S", line) or line.split()[0] == "total" for line in rows), rows


def test_one_table_style_and_readers_names(project: dict[str, Any]) -> None:
    compare = _run(project, "compare", "1", "2")
    assert not set("┏┃│┡╇") & set(compare)  # one style: a rule under the header, no boxes
    assert "cache at start" in compare and "derived.cache_state" not in compare
    assert "peak RSS" in compare and "peak rss" not in compare
    show = _run(project, "show", "1")
    assert "jax_cache=" not in show and "--jax-cache warm" in show
    assert "peak RSS None" not in show


def test_cells_and_lectures_say_which_run_each_row_is_from(project: dict[str, Any]) -> None:
    cells = _run(project, "cells", "1", "2")
    lines = cells.splitlines()
    assert "in 2 runs of 1 notebook" in " ".join(cells.split())
    assert any(line.split()[:2] == ["run", "notebook"] for line in lines)  # the header: a run column first
    rows = [line.split() for line in lines if re.match(r"\s*[12]\s+ledger_tour", line)]
    assert {row[0] for row in rows} == {"1", "2"} and len(rows) == 16
    # Shares are of each cell's own run: each run's shares add up to about 100 %, not 50 %.
    for run_id in ("1", "2"):
        total = sum(int(row[-1].rstrip("%")) for row in rows if row[0] == run_id)
        assert 90 <= total <= 110
    data = json.loads(_run(project, "cells", "1", "2", "--json"))
    assert {row["run_id"] for row in data["rows"]} == {1, 2} and data["share_of"] == "run"
    lectures = _run(project, "lectures", "1", "2")
    assert "1 vs 2" in lectures and "A = run 1" in lectures


def test_history_groups_are_labelled_by_what_separates_them(project: dict[str, Any]) -> None:
    lecture = _run(project, "history", "ledger_tour.md")
    # One series (both runs asked for --jax-cache warm); each run's cache state at its start is a column.
    heading = " ".join(lecture.split())
    assert "--jax-cache warm" in heading and not re.search(r"(?<!--jax-)cache warm", heading)
    rows = [line.split() for line in lecture.splitlines() if re.match(r"\s*[12]\s+20", line)]
    assert [row[-1] for row in rows] == ["cold", "warm"]
    sleeps = " ".join(_run(project, "history", "gate_sleep.ipynb").split())
    labels = re.findall(r"(profile · [^\n]*?--env NBSCOPE_GATE_SLOW #[0-9a-f]{6}) · 1 run", sleeps)
    assert len(labels) == 2 and labels[0] != labels[1]
    assert "0.4" not in " ".join(labels) and "0.1" not in " ".join(labels)  # a value is never shown


def test_the_report_of_two_envs_shows_distinct_series_and_the_differing_setting(project: dict[str, Any]) -> None:
    output = project["folder"] / "two-envs.html"
    _run(project, "report", "3", "4", "-o", str(output))
    page = output.read_text()
    assert "--env NBSCOPE_GATE_SLOW" in page and "1 setting differs between the profile runs" in page
    assert "the runs share one environment" not in page
    assert "wall_s" not in page.split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert "<td>environment</td>" not in page and "{}</td>" not in page
    store = Store(project["db"])
    data = report_data([_record(project, 3), _record(project, 4)], store=store)
    [(_, result)] = [(t, h) for t, h in data.histories if t == "gate_sleep.ipynb"]
    labels = [s.label for s in result.series]
    assert len(labels) == 2 and len(set(labels)) == 2 and all(SLOW_ENV in label for label in labels)
    for label in labels:
        assert label in page.replace("&#x27;", "'")  # the series counts above the chart name them
    [(name, values)] = data.setting_differences
    assert name == f"settings.env.{SLOW_ENV}" and all(re.fullmatch(r"#[0-9a-f]{6}", v) for v in values)


# ---- help --------------------------------------------------------------------------------------------------


def test_help_lists_the_commands_in_the_order_of_use() -> None:
    command = build_command()
    grouped = [name for names in COMMAND_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(command.commands)  # every command in one group, none twice
    text = CliRunner().invoke(command, ["--help"], prog_name="nbscope", env={"COLUMNS": "80"}).output
    positions = [text.index(f"│ {name} ") for name in grouped]
    assert positions == sorted(positions)
    panels = [text.index(f"╭─ {panel} ") for panel in COMMAND_GROUPS]
    assert panels == sorted(panels) and panels[0] < text.index("│ profile ")


def test_every_help_fits_80_columns() -> None:
    command = build_command()
    for name in [None, *command.commands]:
        args = [name, "--help"] if name else ["--help"]
        text = CliRunner().invoke(command, args, prog_name="nbscope", env={"COLUMNS": "80"}).output
        assert not too_wide(text), (name, too_wide(text))
        assert not [line for line in text.splitlines() if line.rstrip().endswith("… │")], name  # nothing cut short


def test_help_on_a_terminal_reads_as_piped(tmp_path: Path) -> None:
    terminal = on_terminal(["--help"], tmp_path)
    done = piped(["--help"], tmp_path)
    assert not too_wide(terminal) and terminal.rstrip().splitlines() == done.stdout.rstrip().splitlines()
