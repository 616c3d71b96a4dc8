"""The profiler session is stopped as each compile begins and a new part started as it ends (``--forecast``):
a compile records tens of thousands of events no reader uses (QuantEcon bayes_nonconj's NUTS compile: ~61k,
~50 MB of heap, stopped at ~5x that just as the sampler flooded the next part), and the part after a loop's
compile looks at the program's first events before it records on."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

from diag_support import profile_with_programs
from nbscope.api.profile import ProfileOptions, profile

MEMORY_BOUND = 200e6
FILES = Path(__file__).resolve().parent / "files"
PROBE = Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe"


def _events(data: bytes) -> tuple[collections.Counter[str], dict[str, set[int]]]:
    """The trace's events by name, and each program's runs (its module's name: the run ids its thunks carry)."""
    from jax._src.lib import _profile_data

    names: collections.Counter[str] = collections.Counter()
    runs: dict[str, set[int]] = collections.defaultdict(set)
    for plane in _profile_data.ProfileData.from_serialized_xspace(data).planes:
        for line in plane.lines:
            for event in line.events:
                names[event.name] += 1
                stats = dict(event.stats)
                if "hlo_module" in stats and "run_id" in stats:
                    runs[stats["hlo_module"]].add(stats["run_id"])
    return names, runs


def test_a_compile_is_left_out_of_the_trace_and_calls_on_both_sides_of_it_are_in(tmp_path: Path) -> None:
    """One cell calls a small program, compiles a large one, and calls the small one again: the trace, written
    in parts, holds both calls' events and none of the compiler's passes, which a session left running
    through the same kind of compile holds by the thousand (compared within this run)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax._src import compiler
    from jax._src.interpreters import pxla

    sys.path.insert(0, str(PROBE))
    import _nbscope_program as recorder

    def unrolled(x: jax.Array, scale: float) -> jax.Array:
        for _ in range(150):
            x = jnp.sin(x) * scale + jnp.cos(x[::-1])
        return x

    def large(x: jax.Array) -> jax.Array:
        return unrolled(x, 1.0001)

    def small(v: jax.Array) -> jax.Array:
        return v * 2 + 1

    small_jit = jax.jit(small)
    hooked = compiler.compile_or_get_cached, pxla.lower_sharding_computation
    programs = recorder.Programs(str(tmp_path))
    try:
        programs.start(1)
        small_jit(jnp.ones(10)).block_until_ready()
        jax.jit(large)(jnp.ones(100)).block_until_ready()
        small_jit(jnp.ones(10)).block_until_ready()
        result = programs.stop(1, compiled=True)
    finally:
        compiler.compile_or_get_cached, pxla.lower_sharding_computation = hooked
    assert result is not None and result["split_s"] > 0, result
    split, runs = _events(Path(result["trace"]).read_bytes())
    assert len(runs["jit_small"]) == 2 and len(runs["jit_large"]) == 1, dict(runs)
    assert not [name for name in split if name.endswith("Pass")], split.most_common(8)

    whole = recorder._session(hlo_protos=False)
    jax.jit(lambda x: unrolled(x, 1.0002))(jnp.ones(100)).block_until_ready()
    unsplit, _ = _events(whole.stop())
    assert sum(count for name, count in unsplit.items() if name.endswith("Pass")) > 100, unsplit.most_common(8)


@pytest.mark.slow
def test_a_loop_writing_its_result_as_it_runs_is_not_cut_for_the_growth() -> None:
    """The part after the scan's compile looks at its events (few: XLA:CPU runs the loop as one kernel) while
    the kernel grows by the 40 MB result it writes: the trace is whole, and its one call is counted as one."""
    pytest.importorskip("jax")
    record = profile_with_programs("forecast_scan_result.md")
    cell = record.measurements["cells"][1]
    assert cell["status"] == "ok" and cell["programs"]["trace"] == "read", cell["programs"]
    assert not cell["programs"].get("window"), cell["programs"]["window"]
    (execution,) = [e for e in cell["programs"]["executions"] if e["program"].startswith("jit_path")]
    assert execution["count"] == 1 and execution["count_basis"] == "counted", execution
    assert cell["collection"]["split_s"] > 0 and cell["code_s"] <= cell["wall_s"] - cell["collection_s"] + 1e-9


def _growth(cell: dict) -> int:
    return int(cell["rss"]["peak_bytes"] - cell["rss"]["before_bytes"])


@pytest.mark.slow
def test_a_loop_flooding_the_trace_as_soon_as_it_is_compiled_is_cut_at_its_first_look() -> None:
    """The part after the scan's compile looks at its first events: they come fast (its body calls LAPACK every
    iteration), so the part is cut there, at the default budget, and the cell grows within the bound over the
    same cell without --forecast; its one call, still running at the cut, stays one call.

    The look is a thread polling every millisecond: a machine busy enough to keep it off a CPU for tens of
    milliseconds lets the flood run on meanwhile (CI once: 124 MB at the cut, +210 MB). So the bound must hold on
    one of two runs with program data, each cut at its look; a guard that fails to cut fails both."""
    pytest.importorskip("jax")

    def cell(programs: bool) -> dict:
        record = profile(
            FILES / "forecast_compile_then_flood.md",
            ProfileOptions(programs=programs, jax_platform="cpu"),
            fingerprint={"digest": "test"},
        )
        return record.measurements["cells"][1]

    off = cell(False)
    assert off["status"] == "ok"
    tries = []
    for _ in range(2):
        on = cell(True)
        assert on["status"] == "ok"
        window = on["programs"]["window"]
        assert window["cut"] is True and window["reason"] == "events flood", window
        (execution,) = [e for e in on["programs"]["executions"] if e["program"].startswith("jit_filter")]
        assert execution["count"] == 1, execution
        tries.append((_growth(on) - _growth(off), window))
        if tries[-1][0] <= MEMORY_BOUND:
            break
    assert min(growth for growth, _ in tries) <= MEMORY_BOUND, tries


class _Event:
    def __init__(self, name: str, start_ms: float, duration_ms: float, **stats: object) -> None:
        self.name, self.start_ns, self.duration_ns = name, start_ms * 1e6, duration_ms * 1e6
        self.stats = list(stats.items())


class _Line:
    def __init__(self, name: str, events: list[_Event]) -> None:
        self.name, self.events = name, events


class _Plane:
    def __init__(self, name: str, lines: list[_Line] | None = None, **stats: object) -> None:
        self.name, self.lines, self.stats = name, lines or [], list(stats.items())


class _Trace:
    def __init__(self, planes: list[_Plane]) -> None:
        self.planes = planes


def _kernel(start_ms: float, duration_ms: float) -> list[_Event]:
    """A loop's body kernel as XLA:CPU records it: its event, with the program's stats, and its end marker."""
    return [
        _Event("body_fusion", start_ms, duration_ms, program_id=7, run_id=1, hlo_module="jit_f"),
        _Event("end: body_fusion", start_ms + duration_ms, 0.0),
    ]


def test_a_trace_in_parts_is_read_on_one_clock_and_a_kernel_its_stop_cut_through_still_counts() -> None:
    """Two session parts, the second started 10 ms after the first, each timing its events from its own start:
    read on the first part's clock, and the iteration running as the first part stopped (its event in neither
    part, its end marker in the second) counts as the loop's fifth iteration."""
    from nbscope.collect.program import LoopKernels, ProgramCollector

    collector = ProgramCollector([])
    collector.key_of = {7: "jit_f#7"}
    collector.all_op_names = {"body_fusion"}
    collector.loop_ops = {7: {"while.1": LoopKernels(body=frozenset({"body_fusion"}), timer="while.1")}}
    collector.loop_body_names = {7: frozenset({"body_fusion"})}
    collector.timers = {7: {"while.1"}}
    thread = "tf_XLAEigen/1"
    first = [*_kernel(1.0, 2.0), *_kernel(3.5, 2.0)]  # then one from 6.0 ms, cut through by the stop at 8 ms
    second = [_Event("end: body_fusion", 0.5, 0.0), *_kernel(1.0, 2.0), *_kernel(3.5, 2.0)]
    trace = _Trace(
        [
            _Plane("/host:CPU", [_Line(thread, first)]),
            _Plane("Task Environment", profile_start_time=10**9),
            _Plane("/host:CPU", [_Line(thread, second)]),
            _Plane("Task Environment", profile_start_time=10**9 + 10**7),
        ]
    )
    events = collector._gather(trace)  # type: ignore[arg-type]
    starts = sorted(start for _, start, _, _ in events.ops)
    assert starts == [1_000_000, 3_500_000, 11_000_000, 13_500_000]
    found = collector._attribute(events)
    assert found.seen[(7, "body_fusion")] == 5 and found.runs == {7: {1}}


@pytest.mark.slow
def test_a_loops_iterations_are_all_counted_across_looks_and_compiles_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop's 20 iterations are counted whole in the cell that compiles it (a loop over a 80 MB carry is not
    looked at: looks stopped while its kernels of ~40 ms ran, and one stop under load lost one of them whole)
    and in the cell that compiles something else while it runs: there the session is not split for that compile
    (what the loop ran meanwhile would be in no part: 17 of its 20 iterations were seen)."""
    pytest.importorskip("jax")
    # The kernel-wide memory budget is not what this test is about, and on a busy machine it cut the first cell's
    # session as the loop's 80 MB carry was allocated (the kernel grew 33 MB, read as events): it is set out of
    # reach here. Its own tests are in test_forecast_bounded.py.
    monkeypatch.setenv("NBSCOPE_PROBE_MEMORY_BUDGET", str(512 * 2**20))
    record = profile_with_programs("forecast_split_loop.md")
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok", "ok", "ok"]
    for cell in cells[1:]:
        (execution,) = [e for e in cell["programs"]["executions"] if e["program"].startswith("jit_doubling")]
        (loop,) = execution["loops"].values()
        assert execution["count"] == 1 and loop["iterations"] == 20, (cell["index"], execution)
    assert "split_s" not in cells[2]["collection"], cells[2]["collection"]
