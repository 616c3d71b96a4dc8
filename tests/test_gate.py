"""``nbscope gate``: statistics, pairing, verdicts on synthetic records, and the acceptance runs on real
kernels (a cell made 3× slower fails the gate and is named; an unchanged notebook passes)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse._stats import mann_whitney_greater
from nbscope.analyse.gate import GateOptions, gate, parse_slowdown
from nbscope.api.gate import history_runs, latest_baseline
from nbscope.record.cells import pair_cells
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.render.gate import gate_markdown, print_gate
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell

FILES = Path(__file__).resolve().parent / "files"
NOTEBOOK = FILES / "gate_sleep.ipynb"


def make_cell(
    index: int, wall: float, samples: list[float] | None = None, *, source: str | None = None, status: str = "ok"
) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "index": index,
        "cell_index": index + 1,
        "source_hash": source or f"hash{index:012d}",
        "line": None,
        "first_line": f"work({index})",
        "status": status,
        "error": None,
        "wall_s": wall,
        "compile_s": 0.0,
        "run_s": wall,
    }
    if status == "error":
        cell["error"] = {"name": "ValueError", "message": "boom"}
    if samples is not None:
        cell["samples"] = {"wall_s": samples, "compile_s": [0.0] * len(samples)}
    return cell


def make_record(
    cells: list[dict[str, Any]],
    *,
    digest: str = "d1",
    started: str = "2026-01-01T00:00:00.000Z",
    kind: str = "profile",
    target: str = "nb.ipynb",
    repeats: int = 1,
) -> RunRecord:
    return RunRecord(
        kind=kind,
        target=target,
        fingerprint={"digest": digest, "cpu": {"model": "Test CPU", "logical_cores": 2}},
        measurements={
            "totals": {"wall_s": sum(c["wall_s"] for c in cells), "cells": len(cells)},
            "cells": cells,
            "repeats": repeats,
        },
        settings={"repeat": repeats},
        command=["test"],
        started_at=started,
    )


# --- statistics ------------------------------------------------------------------------------------------


def test_mann_whitney_exact_small_cases() -> None:
    # Complete separation of 3 vs 3: one arrangement of C(6, 3) = 20.
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(1 / 20)
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1.0)
    assert mann_whitney_greater([7, 8, 9, 10, 11], [1, 2, 3, 4, 5]) == pytest.approx(1 / 252)
    with pytest.raises(ValueError):
        mann_whitney_greater([], [1.0])


def test_mann_whitney_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for trial in range(60):
        n, m = rng.randint(2, 8), rng.randint(2, 8)
        digits = 1 if trial % 2 else 6  # every other trial has ties
        x = [round(rng.gauss(1.2, 0.3), digits) for _ in range(n)]
        y = [round(rng.gauss(1.0, 0.3), digits) for _ in range(m)]
        if len(set(x + y)) == 1:
            continue
        expected = stats.mannwhitneyu(x, y, alternative="greater", method="auto").pvalue
        assert mann_whitney_greater(x, y) == pytest.approx(expected, abs=1e-9), (x, y)


@pytest.mark.parametrize(("text", "value"), [("10%", 0.10), ("0.25", 0.25), ("1.5x", 0.5), (" 0% ", 0.0)])
def test_parse_slowdown(text: str, value: float) -> None:
    assert parse_slowdown(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["fast", "-5%", "0.5x", "nan"])
def test_parse_slowdown_rejects(text: str) -> None:
    with pytest.raises(NbscopeError):
        parse_slowdown(text)


# --- pairing ---------------------------------------------------------------------------------------------


def test_pairing_by_source_hash_with_edits_inserts_and_duplicates() -> None:
    base = [
        make_cell(0, 1, source="a"),
        make_cell(1, 1, source="b"),
        make_cell(2, 1, source="c"),
        make_cell(3, 1, source="a"),
    ]
    cand = [
        make_cell(0, 1, source="a"),
        make_cell(1, 1, source="B"),
        make_cell(2, 1, source="new1"),
        make_cell(3, 1, source="new2"),
        make_cell(4, 1, source="c"),
        make_cell(5, 1, source="a"),
    ]
    pairs = pair_cells([decode(Cell, c) for c in base], [decode(Cell, c) for c in cand])
    described = [(p.a and p.a.source_hash, p.b and p.b.source_hash, p.source_changed) for p in pairs]
    assert ("a", "a", False) in described
    assert ("c", "c", False) in described
    assert described.count(("a", "a", False)) == 2  # the repeated source pairs with its own repeat
    assert all(b is None or c is None or changed or b == c for b, c, changed in described)
    unpaired_new = [c for b, c, _ in described if b is None]
    assert set(unpaired_new) <= {"B", "new1", "new2"}
    assert len(pairs) >= len(cand)


def test_edited_cell_at_same_place_pairs_by_position() -> None:
    base = [make_cell(0, 0.5, source="a"), make_cell(1, 0.5, source="b"), make_cell(2, 0.5, source="c")]
    cand = [make_cell(0, 0.5, source="a"), make_cell(1, 2.0, source="b2"), make_cell(2, 0.5, source="c")]
    result = gate(make_record(base), make_record(cand))
    edited = result.cells[1]
    assert edited.source_changed and edited.verdict == "regression" and "source changed" in edited.note


# --- verdicts on synthetic records -----------------------------------------------------------------------


def test_single_samples_regression_named_and_tiny_cells_ignored() -> None:
    base = make_record([make_cell(0, 0.010), make_cell(1, 0.50), make_cell(2, 0.30)])
    cand = make_record(
        [make_cell(0, 0.040), make_cell(1, 1.50), make_cell(2, 0.325)], started="2026-01-02T00:00:00.000Z"
    )
    result = gate(base, cand, GateOptions(max_slowdown=0.10))
    verdicts = [c.verdict for c in result.cells]
    # 10 → 40 ms is 4× but tiny; 0.30 → 0.325 s is within a single sample's noise
    assert verdicts == ["below-floor", "regression", "below-floor"]
    assert [c.floor_basis for c in result.cells] == ["model", "model", "model"]
    assert not result.passed and result.exit_code == 1
    assert any("cell 2" in reason and "work(1)" in reason for reason in result.reasons)
    assert "no significance test" in result.noise_note and "kind and size" in result.noise_note
    quiet = gate(base, cand, GateOptions(max_slowdown=0.10, noise_model=False))  # a quiet machine's thresholds
    assert [c.verdict for c in quiet.cells] == ["below-floor", "regression", "unchanged"]


def test_samples_decide_significance() -> None:
    noisy_base = [0.50, 0.80, 0.55, 0.75, 0.60]
    noisy_cand = [0.62, 0.85, 0.58, 0.90, 0.66]  # median ×1.1+, but overlapping samples
    base = make_record([make_cell(0, 0.60, noisy_base)], repeats=5)
    cand = make_record([make_cell(0, 0.66, noisy_cand)], repeats=5, started="2026-01-02T00:00:00.000Z")
    result = gate(base, cand, GateOptions(max_slowdown=0.05, mad_k=0.0, noise_model=False))
    assert result.cells[0].test == "mann-whitney"
    assert result.cells[0].verdict == "not-significant" and result.passed

    clean = make_record([make_cell(0, 0.60, [0.59, 0.60, 0.61])], repeats=3)
    slow = make_record([make_cell(0, 1.80, [1.79, 1.80, 1.82])], repeats=3, started="2026-01-02T00:00:00.000Z")
    result = gate(clean, slow)
    assert result.cells[0].verdict == "regression"
    assert result.cells[0].p_value == pytest.approx(0.05)
    assert result.total.test == "mann-whitney" and result.total.verdict == "regression"


def test_mad_noise_floor() -> None:
    base = make_record([make_cell(0, 1.0, [0.7, 1.0, 1.3])], repeats=3)
    cand = make_record([make_cell(0, 1.5, [1.4, 1.5, 1.6])], repeats=3, started="2026-01-02T00:00:00.000Z")
    result = gate(base, cand, GateOptions(mad_k=3.0, noise_model=False))  # floor 3 × MAD 0.3 = 0.9 s > 0.5 s
    assert result.cells[0].floor_s == pytest.approx(0.9)
    assert result.cells[0].verdict == "below-floor"


def test_failed_cell_fails_the_gate_unless_ignored() -> None:
    base = make_record([make_cell(0, 0.2), make_cell(1, 0.2)])
    cand = make_record([make_cell(0, 0.2), make_cell(1, 0.01, status="error")], started="2026-01-02T00:00:00.000Z")
    result = gate(base, cand)
    assert result.cells[1].verdict == "failed" and "ValueError" in result.cells[1].note
    assert not result.passed
    assert gate(base, cand, GateOptions(check_status=False)).passed
    both = make_record([make_cell(0, 0.2), make_cell(1, 0.01, status="error")])
    again = gate(both, make_record([make_cell(0, 0.2), make_cell(1, 0.01, status="error")]))
    assert again.cells[1].verdict == "unchanged" and "error in both" in again.cells[1].note and again.passed


def test_faster_and_small_new_cells_do_not_fail() -> None:
    base = make_record([make_cell(0, 2.0, source="a")])
    cand = make_record(
        [make_cell(0, 0.5, source="a"), make_cell(1, 0.5, source="z")], started="2026-01-02T00:00:00.000Z"
    )
    result = gate(base, cand)
    assert [c.verdict for c in result.cells] == ["faster", "new"]
    assert result.passed and result.total.verdict == "faster"
    # The new cell is counted in the whole notebook's total, which is faster too (2 s → 1 s).
    assert result.whole is not None and result.whole.verdict == "faster"


def test_totals_only_for_jupyter_cache_runs() -> None:
    def run(seconds: float) -> RunRecord:
        return RunRecord(
            kind="jupyter-cache",
            target="book/a.md",
            fingerprint={"digest": "d"},
            measurements={"totals": {"wall_s": seconds}},
            command=[],
        )

    result = gate(run(10.0), run(40.0))
    assert result.cells == [] and result.total.verdict == "regression"
    assert gate(run(10.0), run(10.5)).passed
    # Walls alone (no wait for a CPU recorded): +40 % is within a shared machine's noise, unless told otherwise.
    assert gate(run(10.0), run(14.0)).passed
    assert gate(run(10.0), run(14.0), GateOptions(noise_model=False)).total.verdict == "regression"


def test_bad_input() -> None:
    bench = RunRecord(
        kind="bench", target="suite", fingerprint={"digest": "d"}, measurements={"totals": {}}, command=[]
    )
    profile_run = make_record([make_cell(0, 1.0)])
    with pytest.raises(NbscopeError, match="bench"):
        gate(bench, profile_run)
    profile_run.run_id = 4
    with pytest.raises(NbscopeError, match="same run"):
        gate(profile_run, profile_run)
    with pytest.raises(NbscopeError):
        gate(profile_run, make_record([make_cell(0, 1.0)]), GateOptions(alpha=2.0))


def test_warnings_for_other_environment_and_target() -> None:
    result = gate(
        make_record([make_cell(0, 1.0)], digest="aaa"),
        make_record([make_cell(0, 1.0)], digest="bbb", target="other.ipynb"),
    )
    assert any("different environments" in w for w in result.warnings)
    assert any("different targets" in w for w in result.warnings)


def test_history_sets_the_run_to_run_noise_floor() -> None:
    base = make_record([make_cell(0, 1.0), make_cell(1, 0.5)])
    cand = make_record([make_cell(0, 1.5), make_cell(1, 1.5)], started="2026-01-09T00:00:00.000Z")
    quiet = GateOptions(noise_model=False)  # thresholds of a quiet machine: only the history widens them
    assert [c.verdict for c in gate(base, cand, quiet).cells] == ["regression", "regression"]
    history = [
        make_record([make_cell(0, wall), make_cell(1, 0.5)], started=f"2026-01-0{day}T00:00:00.000Z")
        for day, wall in zip(range(2, 7), (0.6, 1.0, 1.4, 0.8, 1.2), strict=True)
    ]
    result = gate(base, cand, quiet, history=history)
    first, second = result.cells
    assert first.history_mad_s == pytest.approx(0.2) and first.history_runs == 5
    # 3 σ of a difference of two runs, σ = 1.4826 × MAD: +0.5 s is within the noise
    assert first.floor_s == pytest.approx(3 * 1.4826 * 2**0.5 * 0.2) and first.verdict == "below-floor"
    assert first.floor_basis == "history"
    assert second.history_mad_s == 0.0 and second.verdict == "regression"  # a steady cell made 3× slower
    assert result.history_runs == 5 and result.to_dict()["history_runs"] == 5
    assert result.noise_note.startswith("noise: run-to-run noise of 5 earlier comparable runs (3 σ of a difference)")
    few = gate(base, cand, quiet, history=history[:2])
    assert few.cells[0].verdict == "regression" and few.cells[0].floor_basis == "none"
    # One note says what the verdict rests on; no second, contradictory one.
    assert "2 earlier comparable runs here, 3 needed" in gate(base, cand, history=history[:2]).noise_note
    assert not any("noise" in w for w in few.warnings)


def test_history_runs_from_the_store(tmp_db: Path) -> None:

    store = Store(tmp_db)
    ids = [store.save(make_record([make_cell(0, 1.0)], started=f"2026-01-0{day}T00:00:00.000Z")) for day in range(1, 7)]
    store.save(make_record([make_cell(0, 1.0)], digest="other", started="2026-01-02T12:00:00.000Z"))
    candidate = store.get(ids[4])
    assert [r.run_id for r in history_runs(store, candidate, 3)] == [ids[3], ids[2], ids[1]]
    assert history_runs(store, candidate, 0) == []


def test_busy_machine_warning() -> None:
    base = make_record([make_cell(0, 1.0)])
    cand = make_record([make_cell(0, 1.0)], started="2026-01-02T00:00:00.000Z")
    cand.fingerprint["cpu"]["load_average"] = [7.5, 6.0, 5.0]
    base.fingerprint["cpu"]["load_average"] = [0.4, 0.5, 0.5]
    result = gate(base, cand)
    assert [w for w in result.warnings if "busy" in w] == [
        "the machine was busy when the candidate run started (load average 7.5 on 2 cores): its timings may be "
        "inflated and false alarms are likely"
    ]
    assert result.candidate.load_average == 7.5


def test_latest_baseline_same_target_digest_kind(tmp_db: Path) -> None:
    store = Store(tmp_db)
    ids = {}
    for name, digest, target, started in [
        ("old", "d1", "nb.ipynb", "2026-01-01T00:00:00.000Z"),
        ("other-digest", "d2", "nb.ipynb", "2026-01-02T00:00:00.000Z"),
        ("other-target", "d1", "x.ipynb", "2026-01-02T00:00:00.000Z"),
        ("prev", "d1", "nb.ipynb", "2026-01-03T00:00:00.000Z"),
        ("cand", "d1", "nb.ipynb", "2026-01-04T00:00:00.000Z"),
        ("later", "d1", "nb.ipynb", "2026-01-05T00:00:00.000Z"),
    ]:
        ids[name] = store.save(make_record([make_cell(0, 1.0)], digest=digest, target=target, started=started))
    candidate = store.get(ids["cand"])
    assert latest_baseline(store, candidate).run_id == ids["prev"]
    with pytest.raises(NbscopeError, match="no earlier"):
        latest_baseline(store, store.get(ids["old"]))


def test_markdown_escapes_and_names_cells() -> None:
    base = make_record([make_cell(0, 0.5)])
    slow_cell = make_cell(0, 2.0)
    slow_cell["first_line"] = "x = a | b  # <script>`tick`"
    result = gate(base, make_record([slow_cell], started="2026-01-02T00:00:00.000Z"))
    text = gate_markdown(result)
    assert text.startswith("### ❌ nbscope gate failed")
    assert "\\|" in text and "<script>" not in text.replace("`x = a \\| b  # <script>'tick'`", "")
    assert "| 1 |" in text
    print_gate(result)  # renders without markup errors


# --- real kernels ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three profiles of gate_sleep.ipynb with --repeat 4: baseline, unchanged, cell 2 made 3× slower.

    Four samples a side let the test reach p < 0.05 with one overlapping sample (a shared machine can
    stretch a 0.1 s sleep now and then); three would need complete separation (p = 0.05 exactly)."""
    from nbscope.api.profile import ProfileOptions, profile

    folder = tmp_path_factory.mktemp("gate")
    store = Store(folder / "nbscope.db")
    runs = {}
    for name, seconds in (("base", "0.1"), ("same", "0.1"), ("slow", "0.3")):
        record = profile(
            NOTEBOOK,
            ProfileOptions(repeat=4, env={"NBSCOPE_GATE_SLOW": seconds}),
            store=store,
            live_path=folder / f"{name}.jsonl",
        )
        assert record.status == "ok", record.measurements.get("cells")
        runs[name] = record.run_id
    return {"db": store.path, **runs}


@pytest.mark.slow
def test_gate_three_times_slower_cell_exits_1_and_names_it(
    gate_runs: dict[str, Any], run_cli: Any, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    done = run_cli(
        "gate",
        "--db",
        gate_runs["db"],
        "--baseline",
        gate_runs["base"],
        "--candidate",
        gate_runs["slow"],
        "--max-slowdown",
        "10%",
        "--summary",
        summary,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout and "cell 2" in done.stdout and "NBSCOPE_GATE_SLOW" in done.stdout
    text = summary.read_text()
    assert "❌ nbscope gate failed" in text and "- cell 2: `time.sleep" in text  # notebook code in a code span

    done = run_cli(
        "gate", "--db", gate_runs["db"], "--baseline", gate_runs["base"], "--candidate", gate_runs["slow"], "--json"
    )
    assert done.returncode == 1
    result = json.loads(done.stdout)
    failing = [c for c in result["cells"] if c["verdict"] == "regression"]
    assert [c["index"] for c in failing] == [1]
    assert failing[0]["ratio"] > 2 and failing[0]["p_value"] <= 0.05 and failing[0]["test"] == "mann-whitney"
    assert result["passed"] is False and any("cell 2" in r for r in result["reasons"])


@pytest.mark.slow
def test_the_typed_gate_of_fresh_profiles_is_what_gate_json_prints_and_leaves_out_the_wait(
    gate_runs: dict[str, Any], run_cli: Any
) -> None:
    store = Store(gate_runs["db"])
    base, cand = store.get(gate_runs["base"]), store.get(gate_runs["slow"])
    result = gate(base, cand, history=history_runs(store, cand, 10))
    done = run_cli(
        "gate", "--db", gate_runs["db"], "--baseline", gate_runs["base"], "--candidate", gate_runs["slow"], "--json"
    )
    assert done.returncode == result.exit_code == 1, done.stdout + done.stderr
    assert json.loads(done.stdout) == json.loads(json.dumps(result.to_dict(), indent=1, default=str))
    slow = next(c for c in result.cells if c.index == 1)
    assert slow.verdict == "regression" and len(slow.cand_samples) == 4
    sides = [record.notebook_run().cells[1] for record in (base, cand)]
    if all(side.sched is not None for side in sides):  # Linux: the probe reads each cell's wait for a CPU
        assert slow.judged == "unwaited"
        assert all(side.samples is not None and len(side.samples.wait_s) == 4 for side in sides)


@pytest.mark.slow
def test_gate_unchanged_notebook_exits_0(gate_runs: dict[str, Any], run_cli: Any) -> None:
    done = run_cli(
        "gate", "--db", gate_runs["db"], "--baseline", gate_runs["base"], "--candidate", gate_runs["same"], "--markdown"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✅ nbscope gate passed" in done.stdout


@pytest.mark.slow
def test_gate_latest_baseline_and_candidate(gate_runs: dict[str, Any], run_cli: Any) -> None:
    # The newest run is the slow one; its latest baseline is the unchanged run before it.
    done = run_cli("gate", "--db", gate_runs["db"], "--json")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["candidate"]["run_id"] == gate_runs["slow"]
    assert result["baseline"]["run_id"] == gate_runs["same"]


def test_gate_cli_bad_input(run_cli: Any, tmp_db: Path) -> None:
    done = run_cli("gate", "--db", tmp_db, "--max-slowdown", "lots")
    assert done.returncode == 2 and "error" in done.stderr and done.stderr.count("\n") == 1
    done = run_cli("gate", "--db", tmp_db)
    assert done.returncode == 2 and "no run" in done.stderr


# --- what the gate may not take for granted: missing figures, the automatic baseline -----------------------


@pytest.mark.parametrize("bad", [float("nan"), None, float("inf"), -26.0], ids=["nan", "missing", "inf", "negative"])
def test_missing_or_nan_figures_fail_never_unchanged(bad: float | None) -> None:
    base = make_record([make_cell(0, 1.0), make_cell(1, 1.0)])
    cand = make_record([make_cell(0, 1.0), make_cell(1, 1.0)], started="2026-01-02T00:00:00.000Z")
    cand.measurements["cells"][1]["wall_s"] = bad
    result = gate(base, cand)
    assert [c.verdict for c in result.cells] == ["below-floor", "failed"]
    assert "no wall time in the candidate" in result.cells[1].note and not result.passed
    assert result.reasons == [
        "cell 2: work(1): no wall time in the candidate (missing, negative or not a finite number)"
    ]
    # Per-notebook figures only (no cells): the total is what fails.
    totals_base = make_record([], kind="jupyter-cache")
    totals_cand = make_record([], kind="jupyter-cache", started="2026-01-02T00:00:00.000Z")
    totals_base.measurements["totals"]["wall_s"] = 5.0
    totals_cand.measurements["totals"]["wall_s"] = bad
    result = gate(totals_base, totals_cand)
    assert result.total.verdict == "failed" and result.exit_code == 1


def test_nan_in_an_imported_record_is_refused_and_an_unknown_figure_fails_the_gate(
    run_cli: Any, tmp_path: Path
) -> None:
    base = make_record([make_cell(0, 1.0)])
    cand = make_record([make_cell(0, 1.0)], started="2026-01-02T00:00:00.000Z")
    (tmp_path / "base.json").write_text(base.to_json())
    # A record written elsewhere with NaN (not JSON, though Python's json reads it): refused, the field named.
    text = cand.to_json().replace('"wall_s": 1.0', '"wall_s": NaN', 1)
    (tmp_path / "nan.json").write_text(text)
    done = run_cli("gate", "--baseline", "base.json", "--candidate", "nan.json", "--db", tmp_path / "s.db")
    assert done.returncode == 2 and "wall_s is NaN, not a finite number" in done.stderr, done.stderr
    # nbscope writes a figure it cannot give as a number as null (unknown): the gate fails that cell.
    cand.measurements["cells"][0]["wall_s"] = float("nan")
    (tmp_path / "cand.json").write_text(cand.to_json())
    assert "NaN" not in (tmp_path / "cand.json").read_text()
    done = run_cli("gate", "--baseline", "base.json", "--candidate", "cand.json", "--db", tmp_path / "s.db", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["cells"][0]["verdict"] == "failed" and result["passed"] is False


def baseline_store(db: Path) -> dict[str, int]:
    """Runs of nb.ipynb, one a day: only some may stand as a baseline for the candidate of day 9."""
    store = Store(db)
    ids = {}
    for day, name, status, repeats in [
        (1, "first", "ok", 1),
        (2, "passed", "ok", 1),
        (3, "unjudged", "ok", 1),
        (4, "partial", "partial", 1),
        (5, "repeated", "ok", 4),  # other settings: medians of 4 runs
        (6, "failed", "ok", 1),
        (9, "cand", "ok", 1),
    ]:
        record = make_record([make_cell(0, 1.0)], started=f"2026-01-0{day}T00:00:00.000Z", repeats=repeats)
        record.status = status
        ids[name] = store.save(record)
    store.record_verdict(ids["passed"], baseline_id=ids["first"], passed=True, reasons=[])
    store.record_verdict(ids["failed"], baseline_id=ids["passed"], passed=True, reasons=[])
    store.record_verdict(
        ids["failed"], baseline_id=ids["passed"], passed=False, reasons=["cell 1: slower"]
    )  # latest counts
    return ids


def test_automatic_baseline_is_the_last_run_that_passed(tmp_db: Path) -> None:

    ids = baseline_store(tmp_db)
    store = Store(tmp_db)
    candidate = store.get(ids["cand"])
    notes: list[str] = []
    assert latest_baseline(store, candidate, notes).run_id == ids["passed"]
    assert notes == [
        f"baseline run {ids['passed']} is the last run that passed the gate; newer runs passed over: "
        f"run {ids['unjudged']} (not judged by the gate); run {ids['failed']} (failed the gate); "
        f"run {ids['repeated']} (other settings); run {ids['partial']} (status partial)"
    ]
    assert [r.run_id for r in history_runs(store, candidate, 10)] == [ids["unjudged"], ids["passed"], ids["first"]]


def test_automatic_baseline_before_any_run_passed_is_the_newest_comparable(tmp_db: Path) -> None:
    store = Store(tmp_db)
    first = store.save(make_record([make_cell(0, 1.0)], started="2026-01-01T00:00:00.000Z"))
    second = store.save(make_record([make_cell(0, 1.0)], started="2026-01-02T00:00:00.000Z"))
    third = store.save(make_record([make_cell(0, 1.0)], started="2026-01-03T00:00:00.000Z"))
    notes: list[str] = []
    assert latest_baseline(store, store.get(third), notes).run_id == second and notes == []
    store.record_verdict(second, baseline_id=first, passed=False, reasons=["cell 1: slower"])
    assert latest_baseline(store, store.get(third), notes).run_id == first
    assert notes == [
        f"baseline run {first} is the newest comparable run; newer runs passed over: run {second} (failed the gate)"
    ]


def test_no_baseline_says_what_was_left_out(tmp_db: Path) -> None:
    store = Store(tmp_db)
    partial = make_record([make_cell(0, 1.0)], started="2026-01-01T00:00:00.000Z")
    partial.status = "partial"
    partial_id = store.save(partial)
    repeated_id = store.save(make_record([make_cell(0, 1.0)], started="2026-01-02T00:00:00.000Z", repeats=3))
    cand = store.get(store.save(make_record([make_cell(0, 1.0)], started="2026-01-03T00:00:00.000Z")))
    with pytest.raises(NbscopeError) as excinfo:
        latest_baseline(store, cand)
    message = str(excinfo.value)
    assert "\n" not in message and "same settings (default settings)" in message and "--baseline" in message
    assert f"run {repeated_id}: other settings" in message and f"run {partial_id}: status partial" in message


def test_different_settings_are_named() -> None:
    result = gate(
        make_record([make_cell(0, 1.0)], repeats=1),
        make_record([make_cell(0, 1.0)], started="2026-01-02T00:00:00.000Z", repeats=4),
    )
    assert any(w.startswith("different measurement settings (default settings vs repeat 4)") for w in result.warnings)
    assert result.candidate.settings["repeat"] == 4


def test_the_command_records_its_verdict_and_skips_a_failed_run_next_time(tmp_db: Path, run_cli: Any) -> None:
    store = Store(tmp_db)
    base = store.save(make_record([make_cell(0, 1.0)], started="2026-01-01T00:00:00.000Z"))
    slow = store.save(make_record([make_cell(0, 3.0)], started="2026-01-02T00:00:00.000Z"))
    done = run_cli("gate", "--db", tmp_db, "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["baseline"]["run_id"] == base
    assert store.verdicts()[slow]["passed"] is False and store.verdicts()[slow]["baseline_id"] == base
    rerun = store.save(make_record([make_cell(0, 1.0)], started="2026-01-03T00:00:00.000Z"))
    done = run_cli("gate", "--db", tmp_db, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["candidate"]["run_id"] == rerun and result["baseline"]["run_id"] == base
    assert f"run {slow} (failed the gate)" in " ".join(result["warnings"])
    assert store.verdicts()[rerun]["passed"] is True


@pytest.mark.slow
def test_a_regressed_candidate_then_an_unchanged_rerun_is_judged_against_the_last_passing_run(
    tmp_path: Path, run_cli: Any
) -> None:
    """Real kernels: cell 2 sleeps 0.1 s, or 2 s in the regressed run. The thresholds (×4 slowdown, 0.5 s
    floor) are far from both effects: a 20× slower cell fails at any machine speed, a 0.1 s cell never
    moves by 0.5 s. Judged against the regressed run, the rerun would be 'faster'; against the last
    passing run it is unchanged."""
    from nbscope.api.profile import ProfileOptions, profile

    store = Store(tmp_path / "nbscope.db")
    loose = ("--max-slowdown", "300%", "--floor", "0.5", "--json", "--db", store.path)

    def profiled(seconds: str) -> int:
        record = profile(
            NOTEBOOK,
            ProfileOptions(env={"NBSCOPE_GATE_SLOW": seconds}),
            store=store,
            live_path=tmp_path / f"live-{seconds}-{store.count()}.jsonl",
        )
        assert record.status == "ok" and record.run_id is not None, record.measurements.get("cells")
        return record.run_id

    def gated() -> tuple[int, dict[str, Any]]:
        done = run_cli("gate", *loose)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    first = profiled("0.1")
    passing = profiled("0.1")
    code, result = gated()
    assert code == 0 and result["baseline"]["run_id"] == first and result["candidate"]["run_id"] == passing
    regressed = profiled("2")
    code, result = gated()
    assert code == 1 and result["baseline"]["run_id"] == passing
    assert [c["index"] for c in result["cells"] if c["verdict"] == "regression"] == [1]
    rerun = profiled("0.1")
    code, result = gated()
    assert code == 0, result
    assert result["candidate"]["run_id"] == rerun and result["baseline"]["run_id"] == passing
    slow_cell = next(c for c in result["cells"] if c["index"] == 1)
    assert slow_cell["verdict"] in ("unchanged", "below-floor")
    assert f"run {regressed} (failed the gate)" in " ".join(result["warnings"])


@pytest.mark.slow
def test_confirm_reruns_a_regressed_notebook_and_fails_only_when_the_rerun_regresses_too(
    tmp_path: Path, run_cli: Any
) -> None:
    """``gate --confirm`` (false alarms p → p²): a notebook slow on its first run only (a marker file it writes) is
    rerun and passes; one slow on every run fails, confirmed. Each rerun is a stored run; the report says which."""
    notebook = tmp_path / "flaky_slow.ipynb"
    notebook.write_bytes((FILES / "flaky_slow.ipynb").read_bytes())
    db = tmp_path / "s.db"

    def profiled() -> None:
        assert run_cli("profile", notebook, "--db", db, "--no-diagnose").returncode == 0

    (tmp_path / "warmed").touch()
    profiled()  # run 1, the baseline: warm, fast
    (tmp_path / "warmed").unlink()
    profiled()  # run 2: slow once
    gated = run_cli("gate", "--db", db, "--confirm", "--history", "0", "--json")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    result = json.loads(gated.stdout)
    assert result["confirmation"] == {
        "first_run_id": 2,
        "first_reasons": result["confirmation"]["first_reasons"],
        "rerun_id": 3,
        "confirmed": False,
    }
    assert result["confirmation"]["first_reasons"] and result["candidate"]["run_id"] == 3
    assert result["warnings"][0].startswith("not confirmed: run 2 regressed")
    assert len(Store(db).records(kind="profile")) == 3

    (tmp_path / "slow-always").touch()
    profiled()  # run 4: slow on every run
    summary = tmp_path / "summary.md"
    gated = run_cli("gate", "--db", db, "--confirm", "--history", "0", "--summary", summary)
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "confirmed: run 4 regressed, and so did run 5" in gated.stdout
    assert "failed (regression confirmed by a rerun)" in summary.read_text()
    verdicts = Store(db).verdicts([2, 3, 4, 5])
    assert [verdicts[run]["passed"] for run in (2, 3, 4, 5)] == [False, True, False, False]

    notebook.write_text(notebook.read_text().replace("Slow on a first run only", "Slow on a first run"))
    gated = run_cli("gate", "--db", db, "--candidate", "5", "--baseline", "3", "--confirm", "--history", "0")
    assert gated.returncode == 1 and "flaky_slow.ipynb changed since run 5" in gated.stdout  # not rerun
    assert len(Store(db).records(kind="profile")) == 5
