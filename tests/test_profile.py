"""``nbscope profile`` with real kernels: statuses, timeouts, dead kernels (and no kernel left behind),
wall vs nbclient timestamps, the persistent compile cache, the live side file, repeats, and the CLI."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbscope.api.profile import CACHE_MARKER, ProfileOptions, profile
from nbscope.collect import notebook as notebook_module
from nbscope.record.run import RunRecord, loads
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
MARKER = "NBSCOPE_TEST_KERNEL_MARKER"


# ---- helpers -------------------------------------------------------------------------------------------


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``MARKER=marker`` (kernels started for one test).

    Other people's kernels run on the same machine, so a test recognises its own kernels by a variable it
    passed to them (``--env`` / ``ProfileOptions.env``); kernels orphaned by a finished CLI are found too.
    """
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == marker and _alive(process):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def new_children(since: float) -> list[psutil.Process]:
    """Live descendants of this test process started after ``since``."""
    children = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.create_time() >= since - 0.5 and _alive(child):
                children.append(child)
        except psutil.NoSuchProcess:
            continue
    return children


@pytest.fixture
def kernel_marker() -> Iterator[str]:
    """A marker for this test's kernels; afterwards, none of them (and no child of ours) may be alive."""
    marker = uuid.uuid4().hex
    since = time.time()
    yield marker
    leftover = marked_processes(marker) + new_children(since)
    descriptions = [f"{p.pid}: {' '.join(p.cmdline())[:160]}" for p in leftover if _alive(p)]
    for process in leftover:  # clean up before failing, so one failure does not leak into others
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    assert not descriptions, f"processes left behind: {descriptions}"


def write_notebook(path: Path, sources: list[str]) -> Path:
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources], metadata={"kernelspec": KERNELSPEC}), path)
    return path


def store_in(tmp_path: Path) -> Store:
    return Store(tmp_path / "db" / "nbscope.db")


def only_record(store: Store) -> RunRecord:
    [summary] = store.runs()
    return store.get(summary["id"])


# ---- statuses --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., RunRecord]:
    """``profiled(name, **options)``: profile ``tests/files/<name>`` once per module and option set."""
    root = tmp_path_factory.mktemp("profile-runs")
    store = Store(root / "db" / "nbscope.db")
    done: dict[str, RunRecord] = {}

    def run(name: str, **options: Any) -> RunRecord:
        key = json.dumps([name, options], sort_keys=True)
        if key not in done:
            done[key] = profile(
                FILES / name, ProfileOptions(**options), store=store, live_path=root / f"{len(done)}.jsonl"
            )
        return done[key]

    return run


@pytest.mark.slow
def test_error_cell_and_on_error_continue(profiled: Callable[..., RunRecord]) -> None:
    record = profiled("error.ipynb")
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "error", "ok", "ok"]
    assert cells[1]["error"]["name"] == "ValueError" and cells[1]["error"]["message"] == "boom"
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4]  # later cells ran
    assert all(c["wall_s"] is not None and c["roundtrip_s"] is not None for c in cells)
    totals = record.measurements["totals"]
    assert (totals["cells"], totals["cells_run"], totals["cells_ok"], totals["cells_failed"]) == (4, 4, 3, 1)
    assert record.status == "ok"  # every cell ran: the run was not cut short


@pytest.mark.slow
def test_error_cell_and_on_error_stop(profiled: Callable[..., RunRecord]) -> None:
    record = profiled("error.ipynb", on_error="stop")
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "error", "not-run", "not-run"]
    assert cells[1]["error"]["name"] == "ValueError"
    assert all(c["wall_s"] is None and c["execution_count"] is None for c in cells[2:])
    assert record.status == "partial"
    assert record.settings["on_error"] == "stop"


@pytest.mark.slow
def test_raises_exception_tag_is_an_expected_error(profiled: Callable[..., RunRecord]) -> None:
    record = profiled("raises_exception.ipynb", on_error="stop")  # an expected error does not stop the run
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "expected-error", "ok"]
    assert cells[1]["error"]["name"] == "ZeroDivisionError"
    assert cells[1]["tags"] == ["raises-exception"]
    assert record.status == "ok"
    totals = record.measurements["totals"]
    assert totals["cells_ok"] == 3 and totals["cells_failed"] == 0


@pytest.mark.parametrize("name", ["empty.ipynb", "markdown_only.ipynb"])
@pytest.mark.slow
def test_notebooks_without_code(profiled: Callable[..., RunRecord], name: str) -> None:
    record = profiled(name)
    assert record.status == "ok"
    assert record.measurements["cells"] == []
    totals = record.measurements["totals"]
    assert totals["cells"] == 0 and totals["wall_s"] == 0 and totals["compiles"] == 0
    assert record.measurements["notebook"]["code_cells"] == 0
    assert record.measurements["runner"]["kernel_start_s"] > 0  # a kernel did start (and stop)


# ---- cut short: timeout, dead kernel ------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_cell_is_recorded_and_the_run_saved(
    run_cli: Callable[..., Any], tmp_path: Path, kernel_marker: str
) -> None:
    db = tmp_path / "db" / "nbscope.db"
    result = run_cli(
        "profile", FILES / "timeout.ipynb", "--timeout", "2", "--json", "--db", db, "--env", f"{MARKER}={kernel_marker}"
    )
    assert result.returncode == 1, result.stderr  # a timed-out cell fails the run (--allow-errors: exit 0)
    assert "nbscope: failed: cell 3 of" in result.stderr and "(timeout CellTimeoutError)" in result.stderr
    printed = loads(result.stdout)
    cells = printed.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "ok", "timeout", "ok", "ok"]
    for cell in cells[:2]:
        assert cell["execution_count"] is not None and cell["error"] is None
        assert cell["wall_s"] is not None and cell["roundtrip_s"] is not None
    assert 2.0 <= cells[2]["wall_s"] < 30  # the cell sleeps 30 s: it was cut at 2 s
    assert cells[2]["error"]["name"] == "CellTimeoutError"
    # the kernel was interrupted and the next cells ran normally, with nbclient's timestamps intact
    for cell in cells[3:]:
        assert cell["execution_count"] is not None and cell["roundtrip_s"] is not None
    assert printed.status == "partial"
    stored = only_record(Store(db))
    assert stored.status == "partial" and stored.kind == "profile"
    assert [c["status"] for c in stored.measurements["cells"]] == ["ok", "ok", "timeout", "ok", "ok"]
    assert stored.settings["timeout"] == 2


@pytest.mark.slow
def test_a_cell_cut_by_its_timeout_keeps_what_it_compiled(tmp_path: Path, kernel_marker: str) -> None:
    # Cell 2 compiles a new shape at every step until --timeout stops it: its compiles, compile time and program
    # data are the probe's line for the interrupted cell, within its wall; cell 3 runs after it.
    options = ProfileOptions(timeout=6, programs=True, env={MARKER: kernel_marker, "JAX_PLATFORMS": "cpu"})
    record = profile(FILES / "timeout_while_compiling.md", options, store=store_in(tmp_path))
    cells = record.notebook_run().cells
    assert [c.status for c in cells] == ["ok", "timeout", "ok"]
    stopped = cells[1]
    assert stopped.error is not None and stopped.error.name == "CellTimeoutError"
    assert stopped.jax is not None and stopped.jax.compiles is not None and stopped.jax.compiles >= 2
    assert stopped.wall_s is not None and stopped.wall_s >= 6
    assert stopped.compile_s is not None and 0 < stopped.compile_s < stopped.wall_s
    assert stopped.programs is not None and stopped.programs.executions
    assert record.status == "partial"


@pytest.mark.parametrize("how", ["os._exit", "SIGKILL"])
@pytest.mark.slow
def test_kernel_death_is_recorded_at_the_cell_and_the_run_saved(tmp_path: Path, kernel_marker: str, how: str) -> None:
    notebook = FILES / "kernel_dies.ipynb"  # cell 3 of 5 calls os._exit(1)
    if how == "SIGKILL":
        sources = [c.source for c in notebook_module.read(notebook).code_cells]
        sources[2] = "import os\nimport signal\n\nos.kill(os.getpid(), signal.SIGKILL)"
        notebook = write_notebook(tmp_path / "killed.ipynb", sources)
    store = store_in(tmp_path)
    live = tmp_path / "live.jsonl"
    record = profile(notebook, ProfileOptions(env={MARKER: kernel_marker}), store=store, live_path=live)
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "ok", "kernel-died", "not-run", "not-run"]
    for cell in cells[:2]:
        assert cell["execution_count"] is not None and cell["wall_s"] is not None and cell["roundtrip_s"] is not None
    assert cells[2]["error"]["name"] == "DeadKernelError"
    assert cells[2]["wall_s"] is not None and cells[2]["wall_s"] > 0
    assert record.status == "partial"
    stored = only_record(store)
    assert stored.status == "partial"
    assert [c["status"] for c in stored.measurements["cells"]] == ["ok", "ok", "kernel-died", "not-run", "not-run"]
    # what was measured also streamed to the side file, one line per code cell (after its typed header lines)
    lines = [line for line in map(json.loads, live.read_text().splitlines()) if "type" not in line]
    assert [line["status"] for line in lines] == [c["status"] for c in cells]


# ---- timing --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_wall_agrees_with_nbclient_busy_to_idle(tmp_path: Path) -> None:
    """Median gap under 5 ms and at least 90 % of cells within 5 ms, on 30 trivial cells."""
    path = write_notebook(tmp_path / "trivial.ipynb", [f"x{i} = {i} * 2" for i in range(30)])
    record = profile(path, ProfileOptions(), store=store_in(tmp_path), live_path=tmp_path / "live.jsonl")
    cells = record.measurements["cells"]
    assert len(cells) == 30 and all(c["status"] == "ok" for c in cells)
    assert all(c["roundtrip_s"] is not None and c["wall_s"] is not None for c in cells)
    gaps = [abs(c["wall_s"] - c["roundtrip_s"]) for c in cells]
    detail = f"gaps in ms {[round(g * 1000, 2) for g in gaps]}, load average {os.getloadavg()[0]:.1f}"
    assert statistics.median(gaps) < 0.005, detail
    assert sum(gap < 0.005 for gap in gaps) >= 0.9 * len(gaps), detail
    # the kernel-side code time sits inside the request's wall time
    assert all(c["code_s"] <= c["wall_s"] for c in cells)


@pytest.mark.slow
def test_compile_and_run_split_in_a_jax_cell(tmp_path: Path) -> None:
    path = write_notebook(
        tmp_path / "split.ipynb",
        [
            "import jax\nimport numpy as np",
            "@jax.jit\ndef mul(x):\n    return x @ x\n\nx = np.ones((300, 300), dtype=np.float32)",
            "import time\nmul(x).block_until_ready()\ntime.sleep(0.3)",
        ],
    )
    record = profile(path, ProfileOptions(), store=store_in(tmp_path), live_path=tmp_path / "live.jsonl")
    cell = record.measurements["cells"][2]
    assert cell["jax"]["compiles"] == 1
    assert cell["compile_s"] > 0 and cell["run_s"] >= 0.3
    assert cell["compile_s"] + cell["run_s"] == pytest.approx(cell["code_s"])
    assert cell["compile_share"] == pytest.approx(cell["compile_s"] / cell["wall_s"])


# ---- persistent compile cache ------------------------------------------------------------------------


@pytest.mark.slow
def test_jax_cache_cold_then_warm(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    cache_root = tmp_path / "jax-cache"
    notebook = FILES / "recompile_shapes.ipynb"
    cold = profile(
        notebook, ProfileOptions(jax_cache="cold", cache_root=cache_root), store=store, live_path=tmp_path / "a.jsonl"
    )
    warm = profile(
        notebook, ProfileOptions(jax_cache="warm", cache_root=cache_root), store=store, live_path=tmp_path / "b.jsonl"
    )
    assert any(p.name != CACHE_MARKER for p in cache_root.iterdir())  # the cold run filled the cache
    c, w = cold.measurements["totals"], warm.measurements["totals"]
    assert c["cache_state"] == "cold" and w["cache_state"] == "warm"
    assert c["cache_hits"] == 0 and c["cache_misses"] == 3 and c["compiles"] == 3
    assert w["cache_hits"] == 3 and w["cache_misses"] == 0
    assert w["compiles"] == 0  # every backend compile was a cache retrieval
    assert cold.settings["jax_cache"] == "cold" and warm.settings["jax_cache"] == "warm"
    warm_cell = warm.measurements["cells"][2]["jax"]
    assert warm_cell["backend_events"] == 3 and warm_cell["cache_hits"] == 3
    assert warm_cell["functions"][0]["cache_hits"] == 3
    saving = c["compile_s"] - w["compile_s"]  # measured, not JAX's compile_time_saved (whole seconds)
    # Three compiles against three retrievals from the cache. Tracing and lowering (repeated in the warm run)
    # can take longer in one run than in the other on a busy machine: compare the backend step alone.
    backend = [
        sum(cell["jax"]["backend_s"] for cell in run.measurements["cells"] if cell["jax"]) for run in (cold, warm)
    ]
    assert backend[0] > backend[1], backend
    # The warm run's record names its cold baseline and the saving, so the ledger can show it.
    assert w["cache_baseline_run"] == cold.run_id
    assert w["cache_saving_s"] == pytest.approx(saving)
    assert "cache_saving_s" not in c


# ---- side file, repeats ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_live_file_has_one_line_per_code_cell(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    notebook = FILES / "myst_lines.md"
    live = tmp_path / "live.jsonl"  # a side file the caller names stays (the default one goes once stored)
    record = profile(notebook, ProfileOptions(), store=store, live_path=live)
    assert Path(record.measurements["live_file"]) == live
    # a header (what ran, to recover the run from) and one per execution, then the cells
    lines = [line for line in map(json.loads, live.read_text().splitlines()) if "type" not in line]
    code_cells = notebook_module.read(notebook).code_cells
    assert len(lines) == len(code_cells) == 4
    assert [line["source_hash"] for line in lines] == [c.source_hash for c in code_cells]
    assert [line["line"] for line in lines] == [c.line for c in code_cells]
    assert [line["wall_s"] for line in lines] == [c["wall_s"] for c in record.measurements["cells"]]


@pytest.mark.slow
def test_repeat_gives_two_samples_per_cell(tmp_path: Path) -> None:
    path = write_notebook(tmp_path / "sleepy.ipynb", ["import time", "time.sleep(0.05)", "y = 2"])
    record = profile(path, ProfileOptions(repeat=2), store=store_in(tmp_path), live_path=tmp_path / "live.jsonl")
    m = record.measurements
    assert m["repeats"] == 2 and record.settings["repeat"] == 2
    assert len(m["repeat_runners"]) == 2
    for cell in m["cells"]:
        walls = cell["samples"]["wall_s"]
        assert len(walls) == 2 and len(cell["samples"]["compile_s"]) == 2
        assert cell["wall_s"] == pytest.approx(statistics.median(walls))
        assert cell["spread"] >= 0
    assert all(w >= 0.05 for w in m["cells"][1]["samples"]["wall_s"])
    assert [c["execution_count"] for c in m["cells"]] == [1, 2, 3]  # each repeat in a fresh kernel


# ---- CLI -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_json_is_a_run_record(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    db = tmp_path / "db" / "nbscope.db"
    result = run_cli("profile", FILES / "raises_exception.ipynb", "--json", "--db", db)
    assert result.returncode == 0, result.stderr
    record = loads(result.stdout)  # validates the envelope
    assert record.kind == "profile" and record.status == "ok"
    assert [c["status"] for c in record.measurements["cells"]] == ["ok", "expected-error", "ok"]
    assert record.measurements["notebook"]["format"] == "ipynb"
    assert Store(db).count() == 1


@pytest.mark.slow
def test_cli_markdown_is_a_table(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    result = run_cli("profile", FILES / "myst_lines.md", "--markdown", "--all", "--db", tmp_path / "db" / "n.db")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines.index("| Cell | Line | Source | Wall | Compile | Run | Compiles | Notes |")
    assert set(lines[header + 1].replace("|", "").replace(":", "")) == {"-"}
    rows = [line for line in lines[header + 2 :] if line.startswith("|")]
    assert len(rows) == 4
    cells = [[part.strip() for part in row.strip("|").split("|")] for row in rows]
    assert [row[0] for row in cells] == ["1", "2", "3", "4"]  # --all: notebook order
    assert [int(row[1]) for row in cells] == [c.line for c in notebook_module.read(FILES / "myst_lines.md").code_cells]
    assert cells[0][2] == "`a = 1`"
    assert "{" not in result.stdout.split("\n", 1)[0]  # not JSON


@pytest.mark.parametrize(
    "args",
    [
        ["missing.ipynb"],
        ["notes.txt"],
        [str(FILES / "error.ipynb"), "--on-error", "maybe"],
        [str(FILES / "error.ipynb"), "--env", "NOEQUALS"],
        [str(FILES / "error.ipynb"), "--repeat", "0"],
        [str(FILES / "error.ipynb"), "--timeout", "-1"],
    ],
    ids=["missing", "txt", "on-error", "env", "repeat", "timeout"],
)
def test_cli_bad_input_is_one_line_exit_2(run_cli: Callable[..., Any], tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a notebook\n")
    result = run_cli("profile", *args, "--db", tmp_path / "db" / "nbscope.db")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nbscope: error: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "db" / "nbscope.db").exists()  # nothing was run, nothing stored
