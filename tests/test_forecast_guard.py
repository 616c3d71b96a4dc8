"""The trace guard's reading of the kernel's memory (``probe/_nbscope_program.py``, docs/forecast.md "Bounded
collection"): which growth counts as the session's events, and how a late poll makes the cut come earlier.

The pure rules are checked on figures of the kind /proc/self/statm gives; the bound itself on a real kernel,
a scan whose body calls LAPACK every iteration, at the default budget.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from nbscope.api.profile import ProfileOptions, profile

FILES = Path(__file__).resolve().parent / "files"
PROGRAM_FILE = Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe" / "_nbscope_program.py"
MB = 2**20
JUMP = 64 * MB


def _program_module() -> ModuleType:
    """The recorder module as kernels load it (a file beside the probe, no package)."""
    spec = importlib.util.spec_from_file_location("_nbscope_program", PROGRAM_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recorder = _program_module()


def test_a_heap_extended_and_filled_counts_as_events() -> None:
    # glibc's arenas map as they fill: the resident memory and the mapping grow alike.
    assert recorder._events_step(5 * MB, 5 * MB, JUMP, 0) == (5 * MB, 0)
    # The mapping leads by the top pad: what counts is what was written.
    assert recorder._events_step(5 * MB, 5 * MB + 128 * 1024, JUMP, 0) == (5 * MB, 128 * 1024)


def test_an_array_written_into_a_block_mapped_earlier_is_not_events() -> None:
    # A 400 MB result is mapped at once (VmData) and written over the next polls at the speed it computes.
    counted, unwritten = recorder._events_step(10 * MB, 400 * MB, JUMP, 0)
    assert counted == 0 and unwritten == 390 * MB
    total = counted
    for _ in range(39):
        step, unwritten = recorder._events_step(10 * MB, 0, JUMP, unwritten)
        total += step
    assert total == 0 and unwritten == 0
    # Events recorded meanwhile grow the heap's mapping as well and still count.
    step, unwritten = recorder._events_step(30 * MB, 20 * MB, JUMP, 100 * MB)
    assert step == 20 * MB and unwritten == 90 * MB


def test_a_result_replacing_the_one_before_is_not_events() -> None:
    # ``y = jnp.cos(x)`` again: the old 400 MB block freed and a new one mapped in the same poll (the mapping
    # nets out), then the new one written over the next polls.
    counted, unwritten = recorder._events_step(-300 * MB, 0, JUMP, 0)
    assert counted == 0 and unwritten == 300 * MB
    total = counted
    for _ in range(30):
        step, unwritten = recorder._events_step(10 * MB, 0, JUMP, unwritten)
        total += step
    assert total == 0 and unwritten == 0
    # Written at memory speed: a jump, which still writes the block mapped before.
    assert recorder._events_step(JUMP + 10 * MB, 0, JUMP, 400 * MB) == (0, 400 * MB - JUMP - 10 * MB)


def test_a_heap_refilled_after_its_pages_were_handed_back_counts_as_events() -> None:
    # malloc_trim after an earlier cell's stop keeps the heap mapped: refilling it grows the resident memory only.
    assert recorder._events_step(6 * MB, 0, JUMP, 0) == (6 * MB, 0)


def test_a_jump_is_not_events_and_a_heap_given_back_takes_its_growth_back() -> None:
    assert recorder._events_step(JUMP + 1, JUMP + 1, JUMP, 0) == (0, 0)
    # A loop's reused arrays grow the heap, and its top is trimmed and regrown: the swings net out.
    assert recorder._events_step(-50 * MB, -50 * MB, JUMP, 3 * MB) == (-50 * MB, 3 * MB)
    # A 400 MB array freed (its block unmapped) takes nothing from the events.
    assert recorder._events_step(-400 * MB, -400 * MB, JUMP, 0) == (0, 0)
    # A heap's top trimmed (its mapping kept) by less than a block: nothing counts, nothing is kept unwritten.
    assert recorder._events_step(-2 * MB, 0, JUMP, 0) == (0, 0)


def test_a_late_poll_brings_the_cut_forward() -> None:
    """The same events at the same rate are judged by what they will hold at the next poll, which comes as
    late as the latest of the last ones: on a loaded machine the cut comes earlier, before the stop outgrows
    the bound."""
    history = [(0.0, 0), (0.1, 10 * MB)]  # 100 MiB a second
    budget = 16 * MB
    rate, on_time = recorder._events_ahead(history, [0.02, 0.02])
    assert rate == pytest.approx(100 * MB)
    assert on_time == pytest.approx(12 * MB) and on_time < budget
    _, late = recorder._events_ahead(history, [0.02, 0.1])
    assert late == pytest.approx(20 * MB) and late > budget
    # Memory given back is no rate: what the events hold stays the reading.
    assert recorder._events_ahead([(0.0, 10 * MB), (0.1, 5 * MB)], [0.5]) == (pytest.approx(-50 * MB), 5 * MB)


@pytest.mark.slow
def test_a_scan_recording_events_every_iteration_stays_within_the_bound_at_the_default_budget() -> None:
    """Ten calls of a 4,000-step scan with a Cholesky in its body record ~230 MB of events, whose stop would
    peak at ~1.1 GB: at the default budget the session is cut, says so, and the cell's growth stays within
    200 MB of the same cell's without --forecast."""
    pytest.importorskip("jax")
    cells = {}
    for programs in (False, True):
        record = profile(FILES / "forecast_scan_events.md", ProfileOptions(programs=programs, jax_platform="cpu"),
                         fingerprint={"digest": "test"})
        cells[programs] = record.measurements["cells"]
    assert [c["status"] for c in cells[True]] == [c["status"] for c in cells[False]] == ["ok", "ok"]

    def growth(cell: dict) -> int:
        return cell["rss"]["peak_bytes"] - cell["rss"]["before_bytes"]

    for off, on in zip(cells[False], cells[True], strict=True):
        assert growth(on) - growth(off) <= 200e6, (on["index"], growth(on), growth(off), on["programs"].get("window"))
    window = cells[True][1]["programs"]["window"]
    assert window["cut"] is True and window["reason"] == "memory budget" and window["scale"] > 1
