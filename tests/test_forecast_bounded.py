"""Collection for ``--forecast`` stays bounded on a cell that runs a small jitted function 1,000,000
times: the profiler session is cut once it has grown the kernel by its budget, and what ran after is
extrapolated from the traced part, labelled so.

Both runs are made here, one after the other, so the time comparison is within one machine's state. Its
bound (2×) only catches the unbounded collection coming back: before the bound, the same cell grew the
kernel by gigabytes and took several times as long. The issue's 5 % is a benchmark's, not a timed test's:
``benchmarks/forecast_overhead.py`` measured the million-call cell alone at 1.014× (90 %: 1.005–1.025, 40
pairs at the same moment) on a quiet machine, against 1.000× for its control, and 1.07× on a slower one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from diag_support import profile_with_programs
from nbscope.analyse.forecast import forecast
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record.run import RunRecord

FILES = Path(__file__).resolve().parent / "files"
MEMORY_BOUND = 200e6


def _second_cell_without_and_with(name: str) -> tuple[dict, dict]:
    """The notebook's second cell profiled without program data and with it, one run after the other; both of
    its cells ran clean in both."""
    cells = {}
    for programs in (False, True):
        record = profile(
            FILES / name, ProfileOptions(programs=programs, jax_platform="cpu"), fingerprint={"digest": "test"}
        )
        cells[programs] = record.measurements["cells"]
    assert [c["status"] for c in cells[True]] == [c["status"] for c in cells[False]] == ["ok", "ok"]
    return cells[False][1], cells[True][1]


def _growth(cell: dict) -> int:
    """The kernel's peak in the cell over its memory as the cell started."""
    return cell["rss"]["peak_bytes"] - cell["rss"]["before_bytes"]


@pytest.mark.slow
def test_a_million_small_calls_stay_within_memory_and_time_bounds() -> None:
    pytest.importorskip("jax")
    runs, records = {}, {}
    for programs in (False, True):
        records[programs] = profile(
            FILES / "forecast_million.md",
            ProfileOptions(programs=programs, jax_platform="cpu"),
            fingerprint={"digest": "test"},
        )
        runs[programs] = records[programs].measurements["cells"][1]
    off, on = runs[False], runs[True]

    def growth(cell: dict) -> int:
        return cell["rss"]["peak_bytes"] - cell["rss"]["before_bytes"]

    assert growth(on) - growth(off) <= MEMORY_BOUND
    assert on["wall_s"] <= off["wall_s"] * 2.0
    data = on["programs"]
    assert data["window"]["cut"] is True and data["window"]["scale"] > 1
    (execution,) = [e for e in data["executions"] if e["program"].startswith("jit_step")]
    # Every call is counted by the probe (issue AC), the trace's cut whatever: it saw ~1,000 of them.
    assert execution["count_basis"] == "counted" and execution["count"] == 1_000_000
    assert execution["traced_count"] < execution["count"]
    outcome = forecast(records[True], "t4").to_dict()["cells"][1]["gpu"]["t4"]
    (dispatch,) = [t for t in outcome["terms"] if t["kind"] == "dispatch"]
    assert dispatch["calls"] == execution["count"]


def test_a_cut_trace_is_extrapolated_over_the_time_the_cell_ran_at_the_later_calls_rate() -> None:
    from nbscope.collect.program import CellResult, Executed, _extrapolate
    from nbscope.schema.programs import CallRate

    def scaled(
        window: dict, cell_wait: float | None, rate: dict | None, compile_s: float | None = None
    ) -> tuple[int, float]:
        execution = Executed(program="jit_step#1", count=100, count_basis="trace", cpu_s=0.5)
        late = (
            CallRate(calls=rate["calls"], late_calls=None, late_s=None, late_per_s=rate["late_per_s"]) if rate else None
        )
        result = CellResult(executions=[execution], call_rate=late)
        _extrapolate(result, {"cut": True, "traced_s": 1.0, **window}, 10.0, cell_wait, compile_s)
        assert result.window is not None
        return execution.count, result.window["scale"]

    assert scaled({}, None, None) == (1000, 10.0)  # the traced rate over the whole cell
    # 2 s of the cell and 0.5 s of its window waited for a CPU: 8 s ran at the rate of 0.5 s.
    assert scaled({"wait_s": 0.5}, 2.0, None) == (1600, 16.0)
    # The later half of the traced calls ran 200 a second: 100 seen, then 200 × 9 s more.
    assert scaled({}, None, {"calls": 100, "late_per_s": 200.0}) == (1900, 19.0)
    # 0.9 s of the window was JAX compiling (read at the cut), and all of the cell's 0.9 s: no call ran
    # then, so the 0.1 s of calls stand for 9.1 s of them; a record without the window's compile is as before.
    assert scaled({"compile_s": 0.9}, None, None, compile_s=0.9) == (9100, pytest.approx(91.0))
    assert scaled({}, None, None, compile_s=0.9) == (1000, 10.0)
    # A wait falls on compiling and calling alike: each side keeps its share of time not waited (a window's
    # 0.45 s of wait taken whole from its 0.5 s of calls would make the scale 170).
    assert scaled({"compile_s": 0.5, "wait_s": 0.45}, 1.0, None, compile_s=0.5)[1] == pytest.approx(
        9.5 * 0.9 / (0.5 * 0.55)
    )


@pytest.mark.slow
def test_memory_grown_on_another_thread_stays_within_the_kernel_wide_budget() -> None:
    """A sampler-like worker thread makes 150,000 small jitted calls while the cell's own thread only waits:
    the rules that watch the cell's thread never fire (before the kernel-wide bound, the same cell grew the
    kernel by ~1 GB more with --forecast than without). The kernel's own memory is watched too: the session
    is cut, the record says why, and the cell's peak stays within 200 MB of its peak without --forecast."""
    pytest.importorskip("jax")
    cells = {}
    for programs in (False, True):
        record = profile(
            FILES / "forecast_thread_memory.md",
            ProfileOptions(programs=programs, jax_platform="cpu"),
            fingerprint={"digest": "test"},
        )
        cells[programs] = record.measurements["cells"]
    assert [c["status"] for c in cells[True]] == [c["status"] for c in cells[False]] == ["ok", "ok"]

    def growth(cell: dict) -> int:
        return cell["rss"]["peak_bytes"] - cell["rss"]["before_bytes"]

    for off, on in zip(cells[False], cells[True], strict=True):
        assert growth(on) - growth(off) <= MEMORY_BOUND, (on["index"], growth(on), growth(off))
    window = cells[True][1]["programs"]["window"]
    assert window["cut"] is True and window["reason"] == "memory budget"
    assert window["kernel_grown_bytes"] > 0 and window["scale"] > 1
    (execution,) = [e for e in cells[True][1]["programs"]["executions"] if e["program"].startswith("jit_step")]
    assert execution["count_basis"] == "counted" and execution["traced_count"] < 150_000
    assert execution["count"] >= 150_000  # every call of the worker's, counted on its own thread


def _many_compiles_cell() -> tuple[RunRecord, dict[str, Any]]:
    """forecast_many_compiles.md profiled with program data: the record, and its cell of 100 eager compiles,
    whose trace was cut and whose 100 executions were each counted once all the same."""
    pytest.importorskip("jax")
    record = profile_with_programs("forecast_many_compiles.md")
    cell = record.measurements["cells"][1]
    assert cell["status"] == "ok"
    assert cell["programs"]["window"]["cut"] is True, cell["programs"]["window"]
    executions = cell["programs"]["executions"]
    assert len(executions) == 100
    assert all(e["count"] == 1 and e["count_basis"] == "counted" for e in executions), executions
    return record, cell


@pytest.mark.slow
def test_a_cell_compiling_more_often_than_its_trace_restarts_is_cut_and_still_counts_every_execution() -> None:
    """The trace is stopped for each compile and restarted after it, and each restart leaves freed heap resident
    (1,200 eager compiles peaked 200-470 MB above the cell without program data). After MAX_PARTS restarts the
    cell's trace is cut ("parts"); every one of its 100 programs is still counted, and its forecast bounded."""
    from nbscope.collect.probe._nbscope_program import MAX_PARTS

    record, cell = _many_compiles_cell()
    window = cell["programs"]["window"]
    assert window["reason"] == "parts" and window["traced_s"] < cell["wall_s"] and MAX_PARTS < 100, window
    outcome = forecast(record, "t4").to_dict()["cells"][1]["gpu"]["t4"]
    assert outcome["high_s"] is not None and outcome["low_s"] <= outcome["high_s"], outcome


@pytest.mark.slow
def test_a_cells_trace_is_cut_once_its_stops_and_restarts_have_cost_it_their_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a TPU v5e each stop of the profiler session cost 0.42-0.49 s, so 64 parts made a 6 s cell take 48 s: the
    cell's trace is cut once its splits have cost MAX_SPLIT_S ("split time"), here set below one split's cost so
    that the second compile cuts it; every execution is still counted."""
    monkeypatch.setenv("NBSCOPE_PROBE_MAX_SPLIT_S", "1e-9")
    _, cell = _many_compiles_cell()
    assert cell["programs"]["window"]["reason"] == "split time", cell["programs"]["window"]


def test_a_call_still_running_at_the_cut_is_one_call_not_as_many_as_the_time_says() -> None:
    """The trace was cut 4 s into a cell of 10 s that made one call of a 10,000,000-step scan: its window
    saw 4,000,000 of the steps, so that one execution was still running, and it stays one call (its CPU time
    is the whole cell's); before, the time's scale made it "≈2 calls, likely more" and doubled its GPU loop."""
    from nbscope.collect.program import CellResult, Executed, LoopSeen, _extrapolate

    def extrapolated(iterations: int, trips: dict | None) -> Executed:
        execution = Executed(
            program="jit_qm#1",
            count=1,
            count_basis="trace",
            cpu_s=3.6,
            loops={"while.1": LoopSeen(iterations=iterations)},
        )
        _extrapolate(CellResult(executions=[execution]), {"cut": True, "traced_s": 4.0}, 10.0, None, 0.0, trips)
        return execution

    trips = {"jit_qm#1": {"while.1": 10_000_000}}
    running = extrapolated(4_000_000, trips)
    assert running.count == 1 and running.traced_fraction == 0.4
    assert running.cpu_s == pytest.approx(9.0)
    assert extrapolated(10_000_000, trips).count == round(2.5)  # a whole call seen: calls went on after it
    assert extrapolated(4_000_000, None).count == round(2.5)  # no static trip count: nothing to tell by


@pytest.mark.slow
def test_a_scan_recording_events_every_iteration_is_cut_before_its_stop_outgrows_the_bound(monkeypatch) -> None:
    """A scan whose body calls LAPACK records events every iteration (~90 MB a second here): left to run,
    its session grew the process by ~880 MB in 40 calls and stopping it peaked at ~4.4 GB (several times
    what the events hold). With a small budget passed in, the session is cut, the record says so, and
    the cell's growth stays within a bound set relative to the same cell without --forecast."""
    pytest.importorskip("jax")
    budget = 4 * 2**20
    monkeypatch.setenv("NBSCOPE_PROBE_MEMORY_BUDGET", str(budget))
    off, on = _second_cell_without_and_with("forecast_scan_events.md")
    window = on["programs"]["window"]
    assert window["cut"] is True and window["scale"] > 1, window
    # The bound itself, not half of it: in the whole suite on 2 busy cores the guard's polls come late (26 MB
    # counted against the 4 MiB budget, the stop then +167 MB over the cell without --forecast).
    assert _growth(on) - _growth(off) <= MEMORY_BOUND, (_growth(on), _growth(off), window)


@pytest.mark.slow
def test_an_eager_scans_events_are_counted_before_the_next_operation_compiles() -> None:
    """An eager scan runs on XLA's threads while JAX compiles the operations after it: its events came while a
    compile was on the stack, where the guard leaves growth out, so the cut came only once they held ~70 MB
    (the Kalman likelihood: +170 to +239 MB at the stop). While the session records, the probe lets what was
    dispatched finish before the next program is lowered (timed as ``collection.dispatch_wait_s``, no part of
    the cell's compile), so the guard counts the events as they come, at the default budget; the session part
    that starts as the scan's compile ends looks at its first events and is cut there (``events flood``)."""
    pytest.importorskip("jax")
    off, on = _second_cell_without_and_with("forecast_eager_scan.md")
    assert on["collection"]["dispatch_wait_s"] > 0, on["collection"]
    assert "dispatch_wait_s" not in on["collection"] or on["collection_s"] == pytest.approx(
        sum(
            v
            for k, v in on["collection"].items()
            if k not in ("cut_stop_s", "lowering_jax_s", "dispatch_wait_s", "in_flight_wait_s", "compile_read_s")
        )
    )
    window = on["programs"]["window"]
    assert window["cut"] is True and window["reason"] in ("memory budget", "events flood"), window
    assert _growth(on) - _growth(off) <= MEMORY_BOUND, (_growth(on), _growth(off), window)


@pytest.mark.slow
def test_a_program_running_on_from_an_earlier_cell_is_waited_for_before_the_session_starts() -> None:
    """JAX returns before its program ends: a loop the first cell dispatched runs on into the second, whose
    session, started meanwhile, recorded its events faster than a poll could cut them (QuantEcon's ar1_bayes
    after ``mcmc.run``: +150 to +230 MB). The probe lets it finish before the session starts; the wait is the
    cell's time (the cell waits for it anyway) and is recorded as ``in_flight_wait_s``."""
    pytest.importorskip("jax")
    off, on = _second_cell_without_and_with("forecast_in_flight.md")
    waited = on["collection"]["in_flight_wait_s"]
    # The loop ran on: it is sized to about 6 s of steps, as a busy machine may take seconds between the cells.
    assert waited > 0.1, on["collection"]
    assert on["wall_s"] >= waited and on["code_s"] >= waited  # the wait is the cell's own time
    assert "window" not in on["programs"] and "trace_error" not in on["programs"], on["programs"]
    assert _growth(on) - _growth(off) <= MEMORY_BOUND, (_growth(on), _growth(off))
