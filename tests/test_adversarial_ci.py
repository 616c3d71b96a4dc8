"""Trust in CI, second pass (issue V): the gate, exit codes, recovery and the cases that still failed.

For each failure class: the input, the exit code, the message and what is kept on disk. Most cases need no
kernel (synthetic records in a real store, real CLI processes where a pipe or a signal matters); the audit
stopped by a signal runs two tiny notebooks at once, the one case here that starts kernels.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from conftest import assert_one_line_error, cli_env
from nbscope.analyse.gate import gate
from nbscope.collect._cells import merge_described
from nbscope.collect.notebook import read
from nbscope.record.live import LiveWriter
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.render.gate import gate_markdown
from test_adversarial import read_only
from test_gate import make_cell, make_record

ROOT = Path(__file__).resolve().parents[1]
FILES = Path(__file__).resolve().parent / "files"


def nbscope_shell(command: str, *, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash with ``nbscope`` meaning this checkout's ``python -m nbscope``; the stop
    signals at their defaults (the test runner may ignore some)."""
    env = cli_env({"NBSCOPE": f"{sys.executable} -m nbscope"})

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)

    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def two_runs(
    db: Path,
    *,
    base_walls: list[float],
    cand_walls: list[float],
    extra: dict[str, float] | None = None,
    removed: dict[str, float] | None = None,
) -> tuple[int, int]:
    """A baseline and a candidate of one notebook in ``db``: the paired cells ``s0, s1, ...`` with those walls,
    ``extra`` cells only in the candidate and ``removed`` cells only in the baseline (source → wall)."""
    base = [make_cell(i, wall, source=f"s{i}") for i, wall in enumerate(base_walls)]
    cand = [make_cell(i, wall, source=f"s{i}") for i, wall in enumerate(cand_walls)]
    base += [make_cell(len(base) + i, wall, source=src) for i, (src, wall) in enumerate((removed or {}).items())]
    cand += [make_cell(len(cand) + i, wall, source=src) for i, (src, wall) in enumerate((extra or {}).items())]
    store = Store(db)
    return (
        store.save(make_record(base, started="2026-01-01T00:00:00.000Z")),
        store.save(make_record(cand, started="2026-01-02T00:00:00.000Z")),
    )


# ==== the gate counts unpaired cells ================================================================


def test_a_new_slow_cell_fails_the_gate_and_the_totals_say_what_they_cover(tmp_path: Path, run_cli: Any) -> None:
    """A notebook 10x slower through a new 2 s cell: every paired cell is unchanged, yet the gate fails on
    the whole notebook, and each total says what it covers (terminal, markdown and JSON alike)."""
    db = tmp_path / "s.db"
    base, cand = two_runs(db, base_walls=[0.1, 0.127], cand_walls=[0.1, 0.125], extra={"new": 2.0})
    done = run_cli("gate", "--baseline", base, "--candidate", cand, "--db", db, "--json")
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["total"]["label"] == "total of 2 paired cells" and result["total"]["verdict"] != "regression"
    whole = result["whole_notebook"]
    assert whole["verdict"] == "regression" and whole["cand_s"] == pytest.approx(2.225)
    assert "1 new cell 2.00 s" in whole["label"] and any("whole notebook" in r for r in result["reasons"])
    [new] = [c for c in result["cells"] if c["verdict"] == "new"]
    assert new["cand_s"] == 2.0 and "not in the baseline" in new["note"]

    summary = tmp_path / "summary.md"
    done = run_cli("gate", "--baseline", base, "--candidate", cand, "--db", db, "--summary", summary)
    assert done.returncode == 1
    text = summary.read_text()
    assert "**Total (2 paired cells)**: 227 ms → 225 ms" in text and "**Whole notebook**: 227 ms → 2.23 s" in text
    assert "❌ regression" in text
    assert "whole" in done.stdout and "total: the 2 paired cells only" in done.stdout
    assert Store(db).verdicts([cand])[cand]["passed"] is False  # kept: it is never the next automatic baseline


def test_a_removed_slow_cell_is_listed_and_counted_but_passes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    base, cand = two_runs(db, base_walls=[0.1, 0.127], cand_walls=[0.1, 0.125], removed={"gone": 2.0})
    store = Store(db)
    result = gate(store.get(base), store.get(cand))
    assert result.passed and result.whole is not None and result.whole.verdict == "faster"
    assert [c.verdict for c in result.unpaired] == ["removed"] and result.unpaired[0].base_s == 2.0
    assert "1 removed cell 2.00 s" in gate_markdown(result)


def test_a_new_cell_that_slows_a_long_notebook_within_the_allowance_passes() -> None:
    """The whole notebook is judged as the total is: 2 s more on 100 s is within a 10 % gate."""
    base = make_record([make_cell(i, 10.0, source=f"s{i}") for i in range(10)])
    cand = make_record(
        [*(make_cell(i, 10.0, source=f"s{i}") for i in range(10)), make_cell(10, 2.0, source="new")],
        started="2026-01-02T00:00:00.000Z",
    )
    result = gate(base, cand)
    assert result.passed and result.whole is not None and result.whole.verdict != "regression"


# ==== exit codes: closed pipes, --summary targets, the Action's step summary =========================


@pytest.fixture(scope="module")
def piped_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs with 3000 cells each (output far larger than a pipe holds): 1 the baseline, 2 a candidate that
    passes, 3 one with a cell 6x slower; and 2000 small runs, so that ``runs`` lists many rows."""
    db = tmp_path_factory.mktemp("piped") / "s.db"
    store = Store(db)
    cells = 3000
    walls = [0.5] * cells
    store.save(
        make_record([make_cell(i, w, source=f"s{i}") for i, w in enumerate(walls)], started="2026-01-01T00:00:00.000Z")
    )
    store.save(
        make_record([make_cell(i, w, source=f"s{i}") for i, w in enumerate(walls)], started="2026-01-02T00:00:00.000Z")
    )
    slower = [3.0 if i == 3 else w for i, w in enumerate(walls)]
    store.save(
        make_record([make_cell(i, w, source=f"s{i}") for i, w in enumerate(slower)], started="2026-01-03T00:00:00.000Z")
    )
    store.add_many(
        [
            make_record([make_cell(0, 0.1)], target=f"nb{n}.ipynb", started="2026-01-04T00:00:00.000Z")
            for n in range(2000)
        ]
    )
    return db


@pytest.mark.parametrize(
    "command, code",
    [
        ("gate --baseline 1 --candidate 2 --all", 0),  # passing: the reader had enough, the verdict is 0
        ("gate --baseline 1 --candidate 2 --all --json", 0),
        ("gate --baseline 1 --candidate 3 --all", 1),  # failing: a closed pipe never turns 1 into 0
        ("gate --baseline 1 --candidate 3 --all --markdown", 1),
        ("runs --limit 5000", 0),
        ("show 1", 0),
        ("diagnose 1", 0),  # no --fail-on: diagnose never exits 1
    ],
)
def test_a_closed_output_pipe_keeps_the_verdicts_exit_code(
    piped_store: Path, tmp_path: Path, command: str, code: int
) -> None:
    done = nbscope_shell(
        f'$NBSCOPE {command} --db "{piped_store}" | head -1 > /dev/null; echo "exit=${{PIPESTATUS[0]}}" >&2',
        cwd=tmp_path,
    )
    assert f"exit={code}" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr[-2000:]
    if command.startswith("gate"):  # the verdict was stored although its printing was cut short
        candidate = int(command.split("--candidate ")[1].split()[0])
        assert Store(piped_store).verdicts([candidate])[candidate]["passed"] is (code == 0)


@pytest.mark.parametrize(
    "target", ["/proc/nbscope-summary", "missing/folder/summary.md", "folder", "/dev/full", "fifo"]
)
def test_a_summary_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path, run_cli_process: Any, target: str) -> None:
    db = tmp_path / "s.db"
    base, cand = two_runs(db, base_walls=[0.5], cand_walls=[0.5])
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")  # opening it to append would wait for a reader for ever
    before = Store(db).verdicts()
    done = run_cli_process("gate", "--baseline", base, "--candidate", cand, "--db", db, "--summary", target)
    assert_one_line_error(done, "--summary")
    assert done.stdout == "" and not (tmp_path / "missing").exists()
    if target != "/dev/full":  # refused before the gate ran: no verdict stored (/dev/full fails only on writing)
        assert Store(db).verdicts() == before


def _gate_step() -> str:
    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    [step] = [s for s in action["runs"]["steps"] if s.get("id") == "gate"]
    return str(step["run"])


def test_the_actions_step_summary_shows_a_usage_errors_message_not_its_box(tmp_path: Path) -> None:
    """A bad option in ``gate-options`` reaches the step summary as the error's words."""
    db = tmp_path / "s.db"
    base, cand = two_runs(db, base_walls=[0.5], cand_walls=[0.5])
    art = tmp_path / "art"
    art.mkdir()
    (art / "run-ids.txt").write_text(f"{cand}\tnb.ipynb\n")
    outputs, step_summary = tmp_path / "outputs", tmp_path / "step-summary.md"
    env = cli_env(
        {
            "NBSCOPE_PYTHON": sys.executable,
            "NBSCOPE_BASELINE": str(db.with_name("none.json")),
            "NBSCOPE_MAX_SLOWDOWN": "10%",
            "NBSCOPE_GATE_OPTIONS": "--min-cel 0.5",
            "NBSCOPE_ARTIFACTS": str(art),
            "NBSCOPE_STORE": str(db),
            "NBSCOPE_TRACE_CODE": "0",
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_STEP_SUMMARY": str(step_summary),
        }
    )
    # A baseline run file for nb.ipynb, so that the gate is called (and meets the bad option).
    Store(db).get(base).to_dict()
    baseline = tmp_path / "base.json"
    baseline.write_text(Store(db).get(base).to_json())
    env["NBSCOPE_BASELINE"] = str(baseline)
    done = subprocess.run(
        ["bash", "-e", "-c", _gate_step()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    summary = step_summary.read_text()
    assert "No such option: --min-cel" in summary, summary
    assert "╰" not in summary and "│" not in summary
    assert "exit-code=2" in outputs.read_text()


@pytest.mark.parametrize(
    "args, words",
    [
        (["gate", "--min-cel", "0.5"], ["No such option: --min-cel", "nbscope gate -h"]),
        (["profile"], ["Missing argument 'PATH'", "nbscope profile -h"]),
        (["runs", "--limit", "x"], ["'--limit'", "'x' is not a valid integer"]),
        (["show", "1", "2"], ["unexpected extra argument (2)"]),
        (["export", "1", "-o"], ["'-o' requires an argument"]),
        (["compare", "1", "2", "--json", "--markdown"], ["--json", "--markdown"]),
        (["bogus"], ["No such command 'bogus'", "nbscope -h"]),
    ],
)
def test_a_usage_error_is_one_line_in_every_command(
    tmp_path: Path, run_cli_process: Any, args: list[str], words: list[str]
) -> None:
    """click's usage, hint and box become the one line every other error is (README: exit 2, one line);
    nothing is stored."""
    done = run_cli_process(args[0], "--db", tmp_path / "s.db", *args[1:])
    assert_one_line_error(done, *words)
    assert done.stdout == "" and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["gate", "--min-cell", "nan"], ["--min-cell", "nan"]),
        (["gate", "--floor", "inf"], ["--floor"]),
        (["gate", "--mad-k", "-1"], ["--mad-k"]),
        (["gate", "--max-slowdown", "abc"], ["--max-slowdown", "abc"]),
        (["gate", "--alpha", "nan"], ["--alpha"]),
        (["profile", str(FILES / "gate_tiny.ipynb"), "--jax-platform", "bogus"], ["--jax-platform bogus"]),
        (["profile", str(FILES / "gate_tiny.ipynb"), "--timeout", "nan"], ["--timeout", "nan"]),
        (["profile", str(FILES / "gate_tiny.ipynb"), "--repeat", "-1"], ["--repeat"]),
        (["audit", str(FILES / "gate_tiny.ipynb"), "--timeout", "nan"], ["--timeout"]),
        (["bench", "--repeat", "-1"], ["--repeat"]),  # ignored without --pathway, yet refused
    ],
)
def test_bad_numbers_and_platforms_are_refused_before_anything_runs(
    tmp_path: Path, run_cli: Any, args: list[str], words: list[str]
) -> None:
    db = tmp_path / "s.db"
    base, cand = two_runs(db, base_walls=[0.5], cand_walls=[0.5])
    if args[0] == "gate":
        args = [*args, "--baseline", str(base), "--candidate", str(cand)]
    before = db.read_bytes()
    done = run_cli(*args, "--db", db)
    assert_one_line_error(done, *words)
    assert (
        db.read_bytes() == before
        and not (tmp_path / "s.db.d" / "live").is_dir()
        or not list((tmp_path / "s.db.d" / "live").glob("*.jsonl"))
    )


# ==== recovery keeps what was measured ==============================================================


def _three_cells(folder: Path) -> Path:
    path = folder / "three.ipynb"
    nbformat.write(
        new_notebook(
            cells=[new_code_cell("x = 1"), new_code_cell("y = x + 1"), new_code_cell("z = y")],
            metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        ),
        path,
    )
    return path


def _complete_live_file(path: Path, notebook: Path, walls: list[float]) -> None:
    """A live file as a profile writes it, every cell finished, of a process that died before storing it
    (the header names a process that has ended)."""
    nb = read(notebook)
    cells = [c.describe() for c in nb.code_cells]
    record = RunRecord(
        kind="profile",
        target=notebook.name,
        fingerprint={"digest": "d1"},
        settings={"repeat": 1},
        command=["nbscope", "profile", str(notebook)],
        started_at="2026-01-01T00:00:00.000Z",
    )
    scratch = path.with_suffix(".header")
    LiveWriter(scratch).header(record, nb.describe(), cells, None)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    header = json.loads(scratch.read_text()) | {"pid": int(ended.stdout), "process_started": None}
    scratch.unlink()
    writer = LiveWriter(path)
    writer.write(header)
    writer.execution(0, "off")
    for cell, wall in zip(cells, walls, strict=True):
        writer.write(merge_described(cell, None, status="ok", wall_s=wall, code_s=wall, execution_count=1))


def test_a_complete_live_file_is_stored_as_ok_and_becomes_the_baseline(tmp_path: Path, run_cli: Any) -> None:
    notebook = _three_cells(tmp_path)
    cells = len(read(notebook).code_cells)
    live = tmp_path / "complete.jsonl"
    _complete_live_file(live, notebook, [0.5] * cells)
    db = tmp_path / "s.db"
    done = run_cli("import", live, "--db", db)
    assert done.returncode == 0 and "(ok:" in done.stdout, done.stdout + done.stderr
    [record] = Store(db).records(kind="profile")
    assert record.status == "ok" and all(c["status"] == "ok" for c in record.measurements["cells"])
    assert live.exists()  # not one of the store's own live files: the user's, kept
    # A later run gates against it automatically (a partial run never would be the baseline).
    later = RunRecord.from_dict({**record.to_dict(), "started_at": "2026-01-02T00:00:00.000Z"})
    later.run_id = None
    later.measurements.pop("run_uuid", None)
    later.measurements["notebook"] = {**later.measurements.get("notebook", {}), "n": 2}
    later_id = Store(db).save(later)
    gated = run_cli("gate", "--candidate", later_id, "--db", db, "--json")
    assert gated.returncode == 0, gated.stderr
    assert json.loads(gated.stdout)["baseline"]["run_id"] == record.run_id


def test_an_unfinished_live_file_stays_partial(tmp_path: Path, run_cli: Any) -> None:
    notebook = _three_cells(tmp_path)
    cells = len(read(notebook).code_cells)
    live = tmp_path / "unfinished.jsonl"
    _complete_live_file(live, notebook, [0.5] * cells)
    lines = live.read_text().splitlines()
    live.write_text("\n".join(lines[:-1]) + "\n")  # the last cell never finished
    done = run_cli("import", live, "--db", tmp_path / "s.db")
    assert done.returncode == 0 and "(partial:" in done.stdout
    [record] = Store(tmp_path / "s.db").records(kind="profile")
    assert record.status == "partial" and record.measurements["cells"][-1]["status"] == "not-run"


def _sleeping_notebook(path: Path, started: Path) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("x = 1"),
            new_code_cell(f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('1')\ntime.sleep(120)"),
            new_code_cell("y = 2"),
        ],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    )
    nbformat.write(nb, path)


@pytest.mark.slow
def test_sigint_during_a_parallel_audit_keeps_each_running_notebooks_cells_and_its_interrupted_cell(
    tmp_path: Path,
) -> None:
    """Two notebooks at once (``-j 2``), stopped by SIGINT while both sleep in their second cell: each is stored
    with its first cell, the second ``interrupted`` by SIGINT with the time it ran, the third not run."""
    book = tmp_path / "book"
    book.mkdir()
    for name in ("a", "b"):
        _sleeping_notebook(book / f"{name}.ipynb", tmp_path / f"started-{name}")
    db = tmp_path / "s.db"

    def default_signals() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "audit", "a.ipynb", "b.ipynb", "-j", "2", "--db", str(db), "-q"],
        cwd=book,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 240
        while not all((tmp_path / f"started-{n}").exists() for n in "ab"):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
            time.sleep(0.2)
        time.sleep(0.5)  # both cells run for a while before the signal
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-2000:]
    profiles = Store(db).records(kind="profile")
    assert sorted(r.target for r in profiles) == ["a.ipynb", "b.ipynb"], stderr[-2000:]
    for record in profiles:
        cells = record.measurements["cells"]
        assert record.status == "partial" and [c["status"] for c in cells] == ["ok", "interrupted", "not-run"]
        assert cells[1]["interrupted_by"] == "SIGINT" and cells[1]["wall_s"] > 0.4
        assert record.measurements["totals"]["cells_run"] == 1
    assert "saved partial run" in stderr


# ==== the still-failing cases =========================================================================


immutable = read_only  # test_adversarial's: chattr +i for root, chmod otherwise


def test_a_store_in_a_read_only_folder_is_readable(tmp_path: Path, run_cli: Any) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "s.db"
    base, cand = two_runs(db, base_walls=[0.5, 0.5], cand_walls=[0.5, 0.5])
    listing = sorted(p.name for p in folder.iterdir())
    with immutable(folder):
        runs = run_cli("runs", "--db", db, "--json")
        shown = run_cli("show", str(cand), "--db", db)
        gated = run_cli("gate", "--baseline", base, "--candidate", cand, "--db", db, "--json")
    assert runs.returncode == 0 and len(json.loads(runs.stdout)) == 2, runs.stderr
    assert shown.returncode == 0 and "work(0)" in shown.stdout, shown.stderr
    assert gated.returncode == 0 and json.loads(gated.stdout)["passed"], gated.stderr
    assert any("is not stored" in w for w in json.loads(gated.stdout)["warnings"])
    assert sorted(p.name for p in folder.iterdir()) == listing


def test_a_full_disk_is_named_as_a_full_disk(tmp_path: Path, run_cli: Any) -> None:
    """A store on a filesystem with no space left: the error says the disk is full, not that the store is
    unusable, and the store stays as it was. (A small tmpfs: root only.)"""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        pytest.skip("a full filesystem needs a tmpfs mount (root)")
    try:
        db = mount / "s.db"
        two_runs(db, base_walls=[0.5], cand_walls=[0.5])
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'filler'}", "bs=4k"], capture_output=True)
        before = db.read_bytes()
        record = tmp_path / "run.json"
        record.write_text(make_record([make_cell(0, 0.7)], started="2026-01-05T00:00:00.000Z").to_json())
        done = run_cli("import", record, "--db", db)
        line = assert_one_line_error(done, "disk is full")
        assert "not a usable" not in line and db.read_bytes() == before
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_myst_file_without_code_cells_warns(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "---\njupytext:\n  text_representation:\n    format_name: myst\n---\n# A page\n\n```python\nx = 1\n```\n"
    )
    [warning] = read(page).warnings
    assert "no code cells" in warning and "```python" in warning and "line 8" in warning
    notebook = tmp_path / "text.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# text")]), notebook)
    assert [w for w in read(notebook).warnings if "no code cells" in w]
    assert not read(FILES / "gate_tiny.ipynb").warnings


def test_a_record_without_totals_says_unknown(tmp_path: Path, run_cli: Any) -> None:
    record = make_record([make_cell(0, 0.5)])
    document = record.to_dict()
    del document["measurements"]["totals"]
    path = tmp_path / "no-totals.json"
    path.write_text(json.dumps(document))
    db = tmp_path / "s.db"
    assert run_cli("import", path, "--db", db).returncode == 0
    shown = run_cli("show", "1", "--db", db)
    assert shown.returncode == 0 and "None" not in shown.stdout and "0 µs" not in shown.stdout
    assert "total unknown" in shown.stdout


def test_compare_markdown_shows_html_as_text(tmp_path: Path, run_cli: Any) -> None:
    db = tmp_path / "s.db"
    store = Store(db)
    for day, model in ((1, "<b>CPU</b>"), (2, "<img src=x onerror=alert(1)>")):
        cell = make_cell(0, 0.5)
        cell["first_line"] = "x = '<script>alert(1)</script>'"
        record = make_record([cell], started=f"2026-01-0{day}T00:00:00.000Z")
        record.fingerprint["cpu"]["model"] = model
        store.save(record)
    done = run_cli("compare", "1", "2", "--markdown", "--db", db)
    assert done.returncode == 0, done.stderr
    outside_code = "".join(part for number, part in enumerate(done.stdout.split("`")) if number % 2 == 0)
    assert "<" not in outside_code and ">" not in outside_code.replace("→", ""), done.stdout
    assert "&lt;img src=x onerror=alert(1)&gt;" in done.stdout


def test_a_device_entry_is_checked_before_the_users_file_is_touched(tmp_path: Path) -> None:
    from nbscope._errors import NbscopeError
    from nbscope.analyse.forecast.devices import check_device_text

    broken = tmp_path / "devices.toml"
    broken.write_text("[devices.mine\nname = 'x'\n")  # not TOML already
    with pytest.raises(NbscopeError, match="not valid TOML"):
        check_device_text(broken.read_text() + "\n[devices.new]\nname = 'y'\n", broken)
    with pytest.raises(NbscopeError, match="missing"):
        check_device_text("[devices.new]\nname = 'y'\n", broken)  # a new device without its figures
    assert broken.read_text() == "[devices.mine\nname = 'x'\n"


@pytest.mark.slow
def test_a_notebook_that_clears_the_cell_callbacks_is_warned_about_and_measured_after(
    tmp_path: Path, run_cli: Any
) -> None:
    """The cell that removes IPython's cell callbacks has no probe figures (a warning names it); the probe
    registers them again, so the cells after it are measured."""
    notebook = tmp_path / "cleared.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("x = 1"),
                new_code_cell(
                    "get_ipython().events.callbacks['pre_run_cell'].clear()\n"
                    "get_ipython().events.callbacks['post_run_cell'].clear()"
                ),
                new_code_cell("y = x + 1"),
                new_code_cell("z = y"),
            ],
            metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        ),
        notebook,
    )
    done = run_cli("profile", notebook, "--db", tmp_path / "s.db", "--json", "--no-diagnose")
    assert done.returncode == 0, done.stderr
    assert "nbscope: warning: cell 2: the notebook removed nbscope's cell callbacks" in done.stderr
    [record] = Store(tmp_path / "s.db").records(kind="profile")
    cells = record.measurements["cells"]
    assert cells[1].get("started_unix") is None  # no probe line for the cell that removed the callbacks
    assert all(cells[i].get("started_unix") is not None and cells[i]["code_s"] is not None for i in (0, 2, 3))


def test_forecast_append_to_never_leaves_the_users_device_file_broken(tmp_path: Path, run_cli: Any) -> None:
    """``--append-to``: the new entry and the file as it would be are checked before anything is written; a file
    that is not TOML, or already has that device, stays byte for byte as it was."""
    db = tmp_path / "s.db"
    loops = RunRecord(
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
    run_id = Store(db).save(loops)
    calibrate = [
        "forecast",
        "--calibrate-from",
        str(run_id),
        "--name",
        "mine",
        "--base",
        "l4",
        "--db",
        str(db),
        "--append-to",
    ]
    for text in ("[devices.other\nname = 'x'\n", "[devices.mine]\nlaunch_us = 2.5\n"):
        devices = tmp_path / "devices.toml"
        devices.write_text(text)
        done = run_cli(*calibrate, devices)
        assert_one_line_error(done, "nothing appended")
        assert devices.read_text() == text
    kept = "# my GPUs\n[devices.t4]\nlaunch_us = 2.5\n"
    devices.write_text(kept)
    done = run_cli(*calibrate, devices)
    assert done.returncode == 0, done.stderr
    assert devices.read_text().startswith(kept) and "[devices.mine]" in devices.read_text()
    listed = run_cli("forecast", "--list", "--devices", devices)
    assert listed.returncode == 0 and "mine" in listed.stdout


def test_a_publish_stopped_midway_leaves_a_folder_the_next_publish_takes_up(tmp_path: Path) -> None:
    """SIGTERM while pages are written: exit 143, one line; the folder is marked as publish's from before its first
    page, so the next publish completes it (it refused the folder as someone else's)."""
    from nbscope.record.run import loads

    text = (FILES / "records" / "cpu_unrolled_loop.json").read_text()
    store = Store(tmp_path / "s.db")
    for lecture in range(40):
        store.save(loads(text.replace("tests/files/diag_unrolled_loop.ipynb", f"lectures/l{lecture:02d}.md")))
    site = tmp_path / "site"
    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "publish", str(tmp_path / "s.db"), "-o", str(site)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    deadline = time.monotonic() + 120
    while not (site / "index.html").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    if process.returncode == 143:  # stopped while writing (else it had finished: nothing midway to check)
        assert stderr.strip().splitlines() == ["nbscope: stopped by SIGTERM"]
    again = subprocess.run(
        [sys.executable, "-m", "nbscope", "publish", str(tmp_path / "s.db"), "-o", str(site)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert len(list((site / "lectures").iterdir())) >= 40
