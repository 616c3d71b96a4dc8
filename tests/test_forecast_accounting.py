"""The forecast accounts each cell's time to what spent it (real CPU run of tests/files/forecast_cut.md).

The record is real: cell 2 makes 200,000 small jitted calls and the probe cut its trace after ~1,000 of
them (the collector extrapolated the counts over the cell); cell 3 is plain Python. Edits below touch only
what each test names (a cut window's fields, a sampled CPU time), on a copy.
"""

from __future__ import annotations

from typing import Any

import pytest

from diag_support import edited, load_record
from nbscope.analyse.forecast import forecast
from nbscope.analyse.recommend import recommend
from nbscope.record.run import RunRecord

LOOP, PLAIN = 1, 2  # code-cell indices: the cell of many jitted calls, the cell without JAX


def _cells(record: RunRecord) -> dict[int, dict[str, Any]]:
    return {c["index"]: c for c in record.measurements["cells"]}


def test_time_after_the_cut_is_the_jitted_calls_not_host_work() -> None:
    record = load_record("cpu_forecast_cut")
    window = _cells(record)[LOOP]["programs"]["window"]
    assert window["cut"] is True and window["traced_s"] < window["cell_s"] / 4  # the record is what it says
    result = forecast(record, "t4")
    cell = result.cell(LOOP)
    assert cell is not None
    # Host work is what the traced window showed besides the calls, at most its length; the rest of the
    # cell, after the cut, is JAX time: the extrapolated calls, each forecast with its GPU terms.
    assert cell.cpu.host_s <= window["traced_s"]
    assert cell.cpu.jax_s >= cell.cpu.wall_s - window["traced_s"] - cell.cpu.compile_s
    outcome = cell.gpu["t4"]
    host = [t for t in outcome.terms if t.kind == "host"]
    assert sum(t.high_s or 0.0 for t in host) <= window["traced_s"]
    (run,) = cell.programs
    assert run.function == "step" and run.count_basis == "extrapolated" and run.count > 10 * window["traced_s"]
    dispatch = next(t for t in outcome.terms if t.kind == "dispatch" and t.function == "step")
    assert dispatch.calls == run.count


def test_time_after_a_cut_without_a_measured_call_rate_is_unknown_jax_time_not_host_work() -> None:
    """The same cell with its window's call rate dropped (a window of too few calls to measure one): what ran
    after the cut is not known to be the calls, so it is JAX time the trace did not attribute, GPU time
    unknown, and the notebook's open range names the cell."""
    record = edited(load_record("cpu_forecast_cut"))
    loop = _cells(record)[LOOP]
    window = loop["programs"]["window"]
    loop["programs"]["call_rate"] = None
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(LOOP)
    assert cell is not None
    assert cell.cpu.host_s <= window["traced_s"]
    outcome = cell.gpu["t4"]
    (after,) = [t for t in outcome.terms if t.kind == "unattributed"]
    assert after.high_s is None and "after the trace's cut" in after.words
    programs_s = sum(p.cpu_s or 0.0 for p in cell.programs)
    # Everything after the window that the extrapolated programs do not account for.
    assert after.low_s == 0.0 and after.figures.cpu_s >= cell.cpu.wall_s - window["traced_s"] - programs_s
    assert after.figures.cpu_s + programs_s + cell.cpu.host_s <= cell.cpu.wall_s - cell.cpu.compile_s + 1e-9
    assert outcome.verdict == "uncertain" and result.notebook["t4"].unbounded == (LOOP,)


def test_a_cut_cell_without_jax_is_unchanged_and_the_notebook_stays_bounded() -> None:
    record = edited(load_record("cpu_forecast_cut"))
    plain = _cells(record)[PLAIN]
    assert not plain["programs"]["executions"] and "jax" not in plain["source"]
    # Only the window fields: its trace cut after a tenth of the cell, as a busy plain-Python cell can be.
    plain["programs"]["window"] = {
        "cut": True,
        "traced_s": plain["wall_s"] / 10,
        "cell_s": plain["wall_s"],
        "scale": 10.0,
    }
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(PLAIN)
    assert cell is not None
    outcome = cell.gpu["t4"]
    assert outcome.verdict == "unchanged"
    assert outcome.low_s == outcome.high_s == cell.cpu.host_s == cell.cpu.wall_s
    notebook = result.notebook["t4"]
    assert notebook.high_s is not None and notebook.unbounded == ()


def test_an_unknown_jax_cell_leaves_the_notebook_open_and_is_named() -> None:
    """A JAX cell whose cut trace saw no program (one long program on the cell's own thread): its GPU time is
    unknown, so the notebook has no upper bound, and the headline and the recommendation name that cell
    instead of calling the GPU "no faster"."""
    from nbscope.render.forecast import forecast_markdown

    record = edited(load_record("cpu_forecast_cut"))
    loop = _cells(record)[LOOP]
    loop["programs"]["executions"] = []
    loop["programs"]["cpu_busy_s"] = loop["programs"]["xla_busy_s"] = None
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    notebook = result.notebook["t4"]
    assert notebook.high_s is None and notebook.unbounded == (LOOP,)
    assert result.cell(PLAIN).gpu["t4"].verdict == "unchanged"  # type: ignore[union-attr]
    assert f"no upper bound: the GPU time of cell {LOOP + 1} is unknown" in forecast_markdown(result)
    advice = recommend(RunRecord.from_dict(record.to_dict()))
    assert "no faster" not in advice.reason and f"cell {LOOP + 1}" in advice.reason


def test_sampled_cpu_times_never_exceed_the_cell() -> None:
    """A sampled or extrapolated CPU time larger than the cell (a scale gone wrong) is brought within the
    cell's measured time, for every figure built on it: the program's CPU time, the function's, the plan."""
    record = edited(load_record("cpu_forecast_cut"))
    loop = _cells(record)[LOOP]
    (execution,) = loop["programs"]["executions"]
    execution["cpu_s"] = 9 * loop["wall_s"]
    loop["programs"]["cpu_busy_s"] = loop["programs"]["xla_busy_s"] = 9 * loop["wall_s"]
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    for cell in result.cells:
        assert sum(p.cpu_s or 0.0 for p in cell.programs) <= cell.cpu.wall_s - cell.cpu.compile_s + 1e-9
        assert cell.cpu.host_s >= 0
    notebook = result.notebook["t4"]
    for entry in (*notebook.gains, *notebook.keep_on_cpu):
        assert entry.cpu_s <= notebook.cpu_s


def test_the_forecast_reads_the_notebooks_own_time_not_nbscopes_collection() -> None:
    """A cell's ``collection_s`` (nbscope's session stop, HLO and lowering after the code, inside its wall)
    is no part of what the forecast carries over, compares or ranks: every figure reads the cell's
    ``notebook_wall_s``."""
    from nbscope.analyse.forecast.risks import loop_slowdowns

    record = edited(load_record("cpu_forecast_cut"))
    cells = _cells(record)
    for cell in cells.values():
        cell["collection_s"] = cell["wall_s"] / 3  # a third of each cell's wall was nbscope's own
    failed = cells[0]  # a cell that raised is not forecast, and says how long it ran
    failed["status"], failed["error"] = "error", {"name": "ValueError", "message": "boom"}
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    (not_forecast,) = result.not_forecast
    assert not_forecast.index == 0 and not_forecast.cpu_s == pytest.approx(failed["wall_s"] * 2 / 3)
    for index in (LOOP, PLAIN):
        cell = result.cell(index)
        assert cell is not None
        assert cell.cpu.wall_s == cell.gpu["t4"].cpu_s == pytest.approx(cells[index]["wall_s"] * 2 / 3)
    plain = result.cell(PLAIN).gpu["t4"]  # type: ignore[union-attr]
    assert plain.verdict == "unchanged" and plain.low_s == plain.high_s == pytest.approx(cells[PLAIN]["wall_s"] * 2 / 3)
    assert result.notebook["t4"].cpu_s == pytest.approx(
        sum(c["wall_s"] * 2 / 3 for c in cells.values() if c["status"] == "ok")
    )
    assert all(row.cpu_s == result.cell(row.index).cpu.wall_s for row in loop_slowdowns(result, "t4"))  # type: ignore[union-attr]


def test_jax_code_is_read_in_the_order_the_cells_ran() -> None:
    """A NumPy function rewritten in JAX under the same name by a later cell (QuantEcon's opt_savings_1 does
    this with its whole value function iteration) is not JAX where the NumPy one runs, so that cell, if its
    trace is cut, is "unchanged"; a function calling a name a later cell binds to JAX is JAX from then on;
    a binding that may not have run (in a loop, under ``if``) does not undo an earlier JAX one."""
    from nbscope.analyse.forecast.jax_code import cells_touching_jax

    sources = {
        0: "import numpy as np\nimport jax.numpy as jnp",
        1: "def solve(v):\n    return T(v)\n\ndef T(v):\n    return np.maximum(v, 0)",
        2: "v = solve(np.ones(3))",
        3: "def T(v):\n    return jnp.maximum(v, 0)",
        4: "w = solve(np.ones(3))",
        5: "for k in range(3):\n    if k:\n        T = abs\nT(1)",
        6: "x = T",
        7: "x = np.ones(2)\nx.sum()",
    }
    assert cells_touching_jax(sources) == {0, 3, 4, 5, 6}


def test_a_functions_own_parameters_and_locals_are_not_the_notebooks_jax_names() -> None:
    """The seed lecture's Numba ``qm`` has a local ``x`` while the notebook's ``x`` is a JAX array: calling qm is
    no JAX work (its cell, cut by a busy machine's trace, was forecast "uncertain" with all its time JAX).
    A function that reads the notebook's ``x`` (or assigns it through ``global``) does touch JAX."""
    from nbscope.analyse.forecast.jax_code import cells_touching_jax

    sources = {
        0: "import numpy as np\nimport numba\nimport jax.numpy as jnp\nimport quantecon as qe",
        1: "x = jnp.linspace(0, 1, 5)",
        2: "@numba.jit\ndef qm(x0, n, a=4.0):\n    x = np.empty(n + 1)\n    x[0] = x0\n    for t in range(n):\n"
        "        x[t + 1] = a * x[t] * (1 - x[t])\n    return x",
        3: "n = 10\nwith qe.Timer():\n    x = qm(0.1, n)",  # under ``with``: x may still be the JAX array
        4: "def f(y):\n    return x + y",
        5: "z = f(1)",
        6: "def g(v):\n    global x\n    x = v\n    return x",
        7: "square = lambda x: x * x\nsquare(2)",
    }
    assert cells_touching_jax(sources) == {0, 1, 4, 5, 6}


def test_time_after_the_cut_beyond_what_the_extrapolated_calls_took_stays_jax_time() -> None:
    """The window measured a call rate, but its calls, extrapolated, explain only part of what came after
    the cut (NumPyro's sampler after a window of its setup's small calls): the rest is JAX time the trace
    did not attribute, GPU time unknown, never dropped and never host work."""
    record = edited(load_record("cpu_forecast_cut"))
    loop = _cells(record)[LOOP]
    window, data = loop["programs"]["window"], loop["programs"]
    assert data["call_rate"] is not None
    factor = 10.0 / window["scale"]  # the calls went on ten times the window's, not 124 times
    window["scale"] = 10.0
    (execution,) = data["executions"]
    execution["count"], execution["cpu_s"] = execution["traced_count"] * 10, execution["cpu_s"] * factor
    data["cpu_busy_s"], data["xla_busy_s"] = data["cpu_busy_s"] * factor, data["xla_busy_s"] * factor
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(LOOP)
    assert cell is not None
    unexplained = cell.cpu.wall_s - cell.cpu.compile_s - 10.0 * window["traced_s"]
    assert unexplained > 0.5  # the check has time to place
    (after,) = [t for t in cell.gpu["t4"].terms if t.kind == "unattributed"]
    assert after.high_s is None and "after the trace's cut" in after.words
    assert after.figures.cpu_s >= unexplained - 1e-9
    assert cell.cpu.host_s <= window["traced_s"]
    assert result.notebook["t4"].unbounded == (LOOP,)


def test_time_waited_for_an_earlier_cells_programs_is_jax_time_in_a_jax_cell_and_nbscopes_in_a_plain_one() -> None:
    """As a cell starts, the probe waits for programs an earlier cell dispatched that still run (their events
    would flood its session) and records it as ``in_flight_wait_s``, within the cell's wall. In a cell whose code
    uses JAX that is JAX time no trace saw: unattributed, named as an earlier cell's programs, never host work.
    A cell whose code cannot use their results would have run beside them: the wait is nbscope's, left out."""
    record = edited(load_record("cpu_forecast_cut"))
    cells = _cells(record)
    before = forecast(load_record("cpu_forecast_cut"), "t4")
    waited = 1.0
    for index in (0, PLAIN):
        cells[index]["wall_s"] += waited
        cells[index]["collection"] = {"in_flight_wait_s": waited}
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    jax_cell, plain = result.cell(0), result.cell(PLAIN)
    was_jax, was_plain = before.cell(0), before.cell(PLAIN)
    assert jax_cell is not None and plain is not None and was_jax is not None and was_plain is not None
    assert jax_cell.cpu.wall_s == pytest.approx(was_jax.cpu.wall_s + waited)
    assert jax_cell.cpu.host_s <= was_jax.cpu.host_s + 1e-9  # none of the wait is host work
    (ran_on,) = [t for t in jax_cell.gpu["t4"].terms if t.kind == "unattributed"]
    assert ran_on.figures.cpu_s >= waited and "an earlier cell dispatched" in ran_on.words
    assert ran_on.high_s is None  # a second of an unknown program: its GPU time is not known
    assert plain.cpu.wall_s == pytest.approx(was_plain.cpu.wall_s)
    assert plain.gpu["t4"].verdict == "unchanged"
