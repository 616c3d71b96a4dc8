"""Every JAX second attributed (issue AC): one test per defect the issue lists, each failing before it.

- calls are counted by the probe, never extrapolated from a cut trace's time (a real kernel);
- a ``while_loop``'s trip count is capped by its condition and never estimated from CPU time its inner loops spent;
- a cell run under ``%time``, ``%%time``, ``%timeit`` or ``%%capture`` runs its code's JAX;
- a cell in which nothing executed is unchanged, whatever its trace did;
- "keep on the CPU" compares a function's whole measured time, not the part a cut trace saw;
- a device's trace (a TPU's) makes one execution entry a program, whatever fingerprints its module names carry.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from diag_support import edited, load_record, profile_with_programs
from nbscope.analyse.forecast import forecast
from nbscope.analyse.forecast.devices import load_table
from nbscope.analyse.forecast.jax_code import cells_touching_jax
from nbscope.analyse.forecast.model import LoopOnCpu, program_terms
from nbscope.collect import hlo
from nbscope.record.run import RunRecord
from nbscope.schema.codec import encode

FILES = Path(__file__).parent / "files"
LOOP = 1  # cpu_forecast_cut's cell of 200,000 small jitted calls (code-cell index)


def _cells(record: RunRecord) -> dict[int, dict[str, Any]]:
    return {c["index"]: c for c in record.measurements["cells"]}


@pytest.mark.slow
def test_calls_after_a_cut_are_counted_not_extrapolated() -> None:
    """forecast_cut.md's 200,000 calls of ``step``: the trace is cut after ~1,000 of them; every call is still
    counted, with its program (before: ≈131,000-134,000 "extrapolated" from the window's time)."""
    pytest.importorskip("jax")
    record = profile_with_programs("forecast_cut.md")
    cells = _cells(record)
    loop = cells[LOOP]["programs"]
    assert loop["window"]["cut"] is True  # the trace was cut short, as the notebook means it to be
    (execution,) = loop["executions"]
    assert execution["program"].startswith("jit_step#")
    assert execution["count"] == 200_000 and execution["count_basis"] == "counted"
    assert execution["traced_count"] < 200_000  # the trace saw fewer: the count is not the trace's
    assert cells[2]["programs"]["executions"] == [] and cells[2]["programs"]["counted"] is True


def _nested_while() -> Any:
    jax = pytest.importorskip("jax")
    jnp, lax = jax.numpy, jax.lax

    def f(x: Any, tol: float) -> Any:
        def cond(c: Any) -> Any:
            i, _, err = c
            return (i < 5) & (err > tol)

        def body(c: Any) -> Any:
            i, x, _ = c
            y = lax.fori_loop(0, 100, lambda j, z: jnp.cos(z), x)
            return i + 1, y, jnp.abs(y - x).max()

        return lax.while_loop(cond, body, (0, x, jnp.inf))

    text = jax.jit(f).lower(jnp.ones(3), 1e-9).compile().as_text()
    return encode(hlo.describe(text))


def test_a_while_loop_is_capped_by_its_condition_not_estimated_from_its_inner_loops_time() -> None:
    """A ``while_loop`` stopped by ``i < 5`` (and a tolerance) around a 100-step ``fori_loop``: at most 5
    iterations, whatever CPU time the loop took (before: ~270,000 iterations estimated from the time its inner
    loop spent, the outer loop's body counted once)."""
    program = _nested_while()
    outer = next(loop for loop in program["loops"] if loop["parent"] is None)
    assert outer["trip_count"] is None  # known only at run time
    table = load_table()
    seen = {outer["id"]: LoopOnCpu(iterations=None, cpu_s_each=1.35e-3)}
    terms = program_terms(program, table.devices["t4"], table.model, 1.4e-3, seen)
    (term,) = [t for t in terms if t.kind == "loop" and t.figures.loop == outer["id"]]
    assert term.figures.iterations_high == 5 and term.figures.iterations_low <= 5
    assert term.high_s is not None  # bounded: the notebook keeps an upper bound
    assert outer["trip_cap"] == 5


def test_cells_under_timing_magics_run_their_codes_jax() -> None:
    sources = {
        0: "import jax\nf = jax.jit(lambda x: x)\nx = 1",
        1: "%time y = f(x)",
        2: "%%time\ny = f(x)\n",
        3: "%timeit -n 3 -r 1 f(x)",
        4: "%%capture\ny = f(x)\n",
        5: "%%timeit -n 3\ny = f(x)\n",
        6: "%time print(2)",
    }
    assert cells_touching_jax(sources) == {0, 1, 2, 3, 4, 5}


def test_a_cell_in_which_nothing_executed_is_unchanged_whatever_its_trace_did() -> None:
    """The loop cell with its trace cut and nothing counted (as a plot of a JAX array is: no program runs): its code
    names ``step``, but no execution was counted and nothing compiled, so it runs no JAX (before: "≥ 0 µs,
    uncertain", and the notebook lost its upper bound)."""
    record = edited(load_record("cpu_forecast_cut"))
    programs = _cells(record)[LOOP]["programs"]
    programs.update(executions=[], cpu_busy_s=0.0, xla_busy_s=0.0, call_rate=None, counted=True)
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(LOOP)
    assert cell is not None and cell.gpu["t4"].verdict == "unchanged"
    assert result.notebook["t4"].high_s is not None


def test_keep_on_the_cpu_compares_the_whole_calls_not_a_cut_traces_part() -> None:
    """20,000 counted calls of ``step`` whose cut trace saw 10 ms of their time in a cell of 1.9 s: against 10 ms
    the GPU's 0.2-0.8 s of dispatch would say "keep step on the CPU"; against the cell's JAX time it does not."""
    record = edited(load_record("cpu_forecast_cut"))
    programs = _cells(record)[LOOP]["programs"]
    (execution,) = programs["executions"]
    execution.update(count=20_000, count_basis="counted", cpu_s=0.01)
    programs.update(cpu_busy_s=0.01, xla_busy_s=0.01, call_rate=None, counted=True)
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(LOOP)
    assert cell is not None and cell.cpu.jax_s > 0.5
    assert [k.function for k in result.notebook["t4"].keep_on_cpu] == []


def test_xla_work_no_thunk_claimed_is_the_counted_programs_time() -> None:
    """A whole trace whose XLA work exceeds its programs' thunks by 0.5 s (executor spans, a kernel between two
    thunks): with every execution counted, that time is theirs, not "JAX time the trace did not attribute"
    (before: GPU time unknown, as jax_intro's jnp.cos cells were, and the notebook lost its upper bound)."""
    record = edited(load_record("cpu_forecast_cut"))
    programs = _cells(record)[LOOP]["programs"]
    (execution,) = programs["executions"]
    execution.update(count=200_000, count_basis="counted", cpu_s=0.8)
    programs.update(cpu_busy_s=0.8, xla_busy_s=1.3, call_rate=None, window=None, counted=True)
    result = forecast(RunRecord.from_dict(record.to_dict()), "t4")
    cell = result.cell(LOOP)
    assert cell is not None
    assert not [t for t in cell.gpu["t4"].terms if t.kind == "unattributed"]
    assert cell.gpu["t4"].high_s is not None and cell.cpu.jax_s >= 1.3


def test_a_cut_cells_copies_scale_with_the_calls_counted_not_its_time() -> None:
    # A window that saw one call and its 2 copies, in a cell whose trace was cut 100× short of its time, and the
    # probe counted 3 calls: 6 copies, not the 200 (of 100× the bytes) its time would make.
    from nbscope.collect.program import CellResult, Executed, ProgramCollector
    from nbscope.schema.programs import Transfers

    result = CellResult(
        executions=[Executed(program="jit_f#1", count=1, count_basis="trace", cpu_s=0.01, traced_count=1)],
        transfers=Transfers(1, 1, 2, 0, 8e6, 8e6, 0.002),
        trace="read",
        cut=True,
    )
    ProgramCollector([])._count(result, {"jit_f#1": 3})
    assert result.transfers is not None
    assert (result.transfers.host_to_device, result.transfers.device_to_host) == (3, 3)
    assert result.transfers.bytes_high == pytest.approx(24e6)
    assert result.executions[0].count == 3 and result.executions[0].count_basis == "counted"


def _hlo(module: str) -> str:
    return f"HloModule {module}\n\nENTRY main {{\n  ROOT x = f32[100]{{0}} parameter(0)\n}}\n"


def test_a_device_traces_executions_are_one_entry_per_program_whatever_their_fingerprints() -> None:
    # The names a TPU v5e's trace gave three rounds of eager operations (2026-12-07): each dynamic slice its own
    # fingerprint, every multiply the same one. Taken one entry a name, the slices were an entry each of the newest
    # slice program, and each entry was then counted as all its runs (129 executions of a cell's 100).
    from nbscope.collect.program import CellResult, ProgramCollector

    collector = ProgramCollector([])
    for key in ("jit_dynamic_slice#1", "jit_multiply#2", "jit_dynamic_slice#3", "jit_dynamic_slice#5"):
        collector.programs[key] = hlo.describe(_hlo(key.split("#")[0]))
    modules = Counter(
        {
            "jit_dynamic_slice(8581733625998085721)": 1,
            "jit_multiply(11758107655236772869)": 3,
            "jit_dynamic_slice(14607557129759543773)": 1,
            "jit_dynamic_slice(5700446898396491765)": 1,
        }
    )
    result = CellResult(executions=collector._device_executions(modules), trace="read", cut=True)
    assert [(e.program, e.count) for e in result.executions] == [("jit_dynamic_slice#5", 3), ("jit_multiply#2", 3)]
    collector._count(
        result, {"jit_dynamic_slice#1": 1, "jit_multiply#2": 3, "jit_dynamic_slice#3": 1, "jit_dynamic_slice#5": 1}
    )
    counted = sorted((e.program, e.count, e.count_basis) for e in result.executions)
    assert counted == [
        ("jit_dynamic_slice#1", 1, "counted"),
        ("jit_dynamic_slice#3", 1, "counted"),
        ("jit_dynamic_slice#5", 1, "counted"),
        ("jit_multiply#2", 3, "counted"),
    ]
