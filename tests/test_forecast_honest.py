"""Forecast accounting on small notebooks: trip counts the CPU run observed, cells that raised or
died, ranges that say whether they know, and ranges printed whole.

Assertions rest on counts, statuses and the device table, never on this machine's speed; the one
that needs a measured time (the straddling range) builds its device figures from the time measured in
the same run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import nbscope.analyse.forecast as analysis
from diag_support import profile_with_programs
from nbscope._units import seconds_range
from nbscope.analyse.forecast import forecast
from nbscope.analyse.forecast.devices import load_table

FILES = Path(__file__).resolve().parent / "files"
pytest.importorskip("jax")


def test_seconds_range_prints_both_ends_whole() -> None:
    assert seconds_range(80.2, 82.2) == "1 min 20 s–1 min 22 s"
    assert seconds_range(41.0, 164.0) == "41 s–2 min 44 s"
    assert seconds_range(0.0594, 7.59) == "59.4 ms–7.59 s"
    assert seconds_range(80.5, 82.5).count("min") == 2
    assert seconds_range(2.5, 3.5) == "2.50–3.50 s"
    assert seconds_range(3700, 7300) == "1 h 2 min–2 h 2 min"


@pytest.fixture(scope="module")
def honest() -> Any:
    # What is judged here is the forecast of complete traces: a budget far above what these cells' sessions hold
    # keeps a loaded or different machine from cutting one (a cut is tested in test_forecast_bounded.py).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NBSCOPE_PROBE_MEMORY_BUDGET", str(512 * 2**20))
        return profile_with_programs("forecast_honest.md")


def _cell(result: dict[str, Any], text: str) -> dict[str, Any]:
    return next(
        c
        for c in result["cells"]
        if text in (c.get("first_line") or "") or any(text == p.get("function") for p in c["programs"])
    )


def test_data_dependent_while_loop_reports_its_observed_trip_count(honest: Any) -> None:
    result = forecast(honest, "t4").to_dict()
    cell = _cell(result, "doubling")
    (loop,) = [t for t in cell["gpu"]["t4"]["terms"] if t["kind"] == "loop" and t["function"] == "doubling"]
    assert loop["trip_count_basis"] == "observed"
    assert loop["iterations"] == 20
    assert "20 iterations (observed)" in loop["words"]
    # The words give the parts: a step cost and the body's work.
    assert "step" in loop["words"] and "body work" in loop["words"]


def test_scalar_while_loop_is_observed_or_estimated_never_a_wild_bound(honest: Any) -> None:
    result = forecast(honest, "t4").to_dict()
    cell = _cell(result, "scalar_doubling")
    (loop,) = [t for t in cell["gpu"]["t4"]["terms"] if t["kind"] == "loop"]
    basis = loop["trip_count_basis"]
    assert basis in ("observed", "estimated", "unknown")
    if basis == "observed":
        assert loop["iterations"] == 20
    elif basis == "estimated":
        # From the loop's CPU time, so no assertion on its value: a busy machine stretches it.
        assert "estimated" in loop["words"] and "may be off by ×" in loop["bound"]
        assert loop["iterations_low"] < loop["iterations_high"]
    if loop["high_s"] is not None:
        assert loop["high_s"] <= 100 * loop["low_s"]  # never a bound that makes a range wider than 100×
    outcome = cell["gpu"]["t4"]
    if basis != "observed" and outcome["dominant"]["kind"] == "loop":
        assert outcome["verdict"] == "uncertain"
        assert "trip count" in outcome["uncertain"]["unknown"]


def test_cells_that_raise_or_die_are_not_forecast(honest: Any) -> None:
    result = forecast(honest, "t4").to_dict()
    failed = {f["status"]: f for f in result["not_forecast"]}
    assert set(failed) == {"error", "kernel-died"}
    assert failed["error"]["reason"].startswith("not forecast: the cell raised")
    assert "ValueError" in failed["error"]["reason"]
    assert failed["kernel-died"]["reason"].startswith("not forecast: the cell died")
    forecast_cells = {c["index"] for c in result["cells"]}
    assert not forecast_cells & {f["index"] for f in result["not_forecast"]}
    assert result["notebook"]["t4"]["not_forecast"] == sorted(f["index"] for f in result["not_forecast"])
    # None of them appears as host work carried over.
    for cell in result["cells"]:
        assert cell["gpu"]["t4"]["verdict"] != "not forecast"


def test_a_range_that_straddles_the_cpu_time_is_uncertain(honest: Any, tmp_path: Path) -> None:
    """A device whose per-synced-iteration cost puts the cell of 50 executions of the observed loop at
    0.85 to 2 times its measured time: the range straddles the CPU time, so the verdict is uncertain."""
    result = forecast(honest, "t4").to_dict()
    cell = _cell(result, "for _ in range(50)")
    cpu = cell["cpu"]["wall_s"]
    outcome = cell["gpu"]["t4"]
    (loop,) = [t for t in outcome["terms"] if t["kind"] == "loop"]
    iterations = loop["iterations"] * loop["calls"]
    assert iterations == 20 * 50
    other_low, other_high = outcome["low_s"] - loop["low_s"], outcome["high_s"] - loop["high_s"]
    assert other_low < cpu * 0.8, "the loop must be much of the cell for this test"
    t4 = load_table(environ={}).devices["t4"].figures
    # sync figure that makes the loop term (cpu/2 - other_low)…(2 cpu - other_high)
    fixed_low = loop["per_iteration_low_s"] - t4["sync_iteration_us"].low * 1e-6
    fixed_high = loop["per_iteration_high_s"] - t4["sync_iteration_us"].high * 1e-6
    low_us = ((cpu * 0.85 - other_low) / iterations - fixed_low) * 1e6
    high_us = ((cpu * 2 - other_high) / iterations - fixed_high) * 1e6
    lines = ["[devices.straddle]", 'name = "straddle test device"', 'match = ["straddle"]']
    for name, figure in t4.items():
        if name != "sync_iteration_us":
            lines.append(f"{name} = {{ low = {figure.low!r}, high = {figure.high!r} }}")
    lines.append(f"sync_iteration_us = {{ low = {low_us!r}, high = {high_us!r} }}")
    path = tmp_path / "devices.toml"
    path.write_text("\n".join(lines) + "\n")
    straddled = _cell(forecast(honest, "straddle", devices_file=path).to_dict(), "for _ in range(50)")["gpu"][
        "straddle"
    ]
    assert straddled["low_s"] == pytest.approx(cpu * 0.85, rel=1e-6)
    assert straddled["high_s"] == pytest.approx(cpu * 2, rel=1e-6)
    assert straddled["verdict"] == "uncertain"
    assert straddled["uncertain"]["straddles"] is True


def test_80_column_table_keeps_the_dominant_term_readable_and_lists_cells_not_forecast(honest: Any) -> None:
    from nbscope.render import forecast as view
    from nbscope.render.terminal import console

    result = forecast(honest, "t4")
    width = console.width
    console.width = 80
    try:
        with console.capture() as captured:
            view.print_forecast(result, top=15)
    finally:
        console.width = width
    text = captured.get()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "not forecast" in text and "the cell died" in text
    # Each dominant term goes under the table on lines of its own, not into a narrow column: it takes a
    # few lines at 80 columns, not one word a line.
    for cell in result.cells:
        outcome = cell.gpu["t4"]
        if outcome.verdict == "unchanged":
            continue
        words = view.dominant_words(outcome)
        assert f"  cell {cell.index + 1}: {words.split()[0]}" in text
        assert len(f"  cell {cell.index + 1}: {words}") <= 4 * 80, words
        # Whether a cell's range straddles its CPU time depends on this machine's timing: the uncertain
        # form of the same term (what is unknown, what settles it) must fit too, and not repeat the term.
        if outcome.dominant is not None:
            uncertain = analysis._uncertainty(outcome.dominant, outcome.cpu_s, outcome.cpu_s / 2, outcome.cpu_s * 2)
            assert uncertain is not None
            stretched = view.dominant_words(dataclasses.replace(outcome, verdict="uncertain", uncertain=uncertain))
            assert len(f"  cell {cell.index + 1}: {stretched}") <= 4 * 80, stretched
            assert stretched.count(outcome.dominant.words) == 1, stretched
    markdown = view.forecast_markdown(result)
    assert "| not forecast |" in markdown


def test_an_uncertain_cell_led_by_measured_host_work_names_the_term_whose_width_is_unknown(honest: Any) -> None:
    """Host work is carried over as measured, so it is not what is unknown: when a cell whose largest
    term is host work straddles its CPU time, what would settle it is behind the widest other term."""
    result = forecast(honest, "t4")
    outcome = next(
        cell.gpu["t4"]
        for cell in result.cells
        if cell.gpu["t4"].verdict != "unchanged"
        and any(t.kind != "host" and t.high_s is not None and t.high_s > t.low_s for t in cell.gpu["t4"].terms)
    )
    others = [t for t in outcome.terms if t.kind != "host"]
    widest = max(others, key=lambda t: float("inf") if t.high_s is None else t.high_s - t.low_s)
    cpu = outcome.cpu_s
    host = analysis.Term(kind="host", low_s=cpu * 10, high_s=cpu * 10, words="host work carried over as measured")
    uncertain = analysis._uncertainty(host, cpu, cpu / 2, cpu * 2, terms=[host, *others])
    assert uncertain is not None and uncertain.straddles
    assert "host" not in uncertain.unknown
    assert widest.kind in uncertain.unknown or (widest.name or "") in uncertain.unknown, uncertain.unknown
