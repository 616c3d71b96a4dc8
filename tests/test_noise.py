"""The noise model of a pair of single runs (nbscope.analyse.noise): kinds of cell, judged figures, floors."""

from __future__ import annotations

from builder import cell as typed_cell
from nbscope.analyse import noise
from nbscope.schema.model import Cell, CpuTime


def cell(
    wall: float,
    *,
    on_cpu: float | None = None,
    cpu: float | None = None,
    wait: float = 0.0,
    source: str = "work()",
    compile_s: float = 0.0,
) -> Cell:
    sched = None if on_cpu is None else CpuTime(on_cpu_s=on_cpu, wait_s=wait, cpu_s=cpu)
    return typed_cell(wall_s=wall, compile_s=compile_s, source=source, sched=sched)


def test_a_cell_that_sleeps_is_plain_though_the_kernels_other_threads_outweigh_its_own_cpu() -> None:
    # time.sleep(0.4): the cell's thread ran 1 ms; the kernel's heartbeat and output threads 40 ms.
    assert noise.kind_of(cell(0.4, on_cpu=0.001, cpu=0.04)) == "plain"
    # BLAS on four threads: the other threads did three times the cell thread's work.
    assert noise.kind_of(cell(0.45, on_cpu=0.4, cpu=1.6)) == "threaded"


def test_kinds_by_source_and_compile_time() -> None:
    assert noise.kind_of(cell(2.0, source="import jax\nimport numpy as np")) == "import"
    assert noise.kind_of(cell(2.0, source="f(x)", compile_s=1.0)) == "first-call"
    assert noise.kind_of(cell(2.0, source="import jax\nf(x)")) == "plain"
    assert noise.kind_of(None) == "plain"


def test_a_threefold_slower_sleep_is_never_within_noise() -> None:
    # The test package of tests/test_versions.py: work() sleeps 0.4 s, then 1.2 s.
    base = cell(0.40, on_cpu=0.001, cpu=0.05)
    cand = cell(1.20, on_cpu=0.001, cpu=0.09)
    pair = noise.pair_noise(base, cand)
    assert pair.kind == "plain" and pair.judged == "unwaited"
    assert pair.base_s is not None and pair.cand_s is not None and pair.cand_s - pair.base_s >= pair.floor_s
    assert pair.floor_s < 0.8 / 2  # far from the change


def test_the_wait_for_a_cpu_is_taken_out_and_an_implausible_wait_is_ignored() -> None:
    waited = cell(3.0, on_cpu=1.0, cpu=1.0, wait=2.0)
    assert noise.unwaited(waited) == 1.0
    busy = noise.pair_noise(cell(1.0, on_cpu=1.0, cpu=1.0), waited)
    assert busy.judged == "unwaited" and busy.base_s == busy.cand_s == 1.0  # the same 1 s of work, on a busy machine
    assert noise.wait_of(cell(1.0, on_cpu=1.0, cpu=1.0, wait=5.0)) is None  # longer than the wall
    assert noise.unwaited(cell(1.0)) is None  # no sched recorded: the wall is judged
    assert noise.pair_noise(cell(1.0), cell(1.0, on_cpu=1.0, cpu=1.0)).judged == "wall"


def test_a_threaded_cells_floor_widens_with_contention_and_a_plain_cells_does_not() -> None:
    quiet = noise.pair_noise(cell(1.0, on_cpu=0.5, cpu=2.0), cell(1.0, on_cpu=0.5, cpu=2.0))
    busy = noise.pair_noise(cell(2.0, on_cpu=0.5, cpu=2.0, wait=1.0), cell(1.0, on_cpu=0.5, cpu=2.0))
    assert quiet.kind == busy.kind == "threaded"
    assert busy.floor_s > 1.5 * quiet.floor_s
    plain_busy = noise.pair_noise(cell(2.0, on_cpu=1.0, cpu=1.0, wait=1.0), cell(1.0, on_cpu=1.0, cpu=1.0))
    assert plain_busy.floor_s == noise.model_floor(1.0)


def test_floors_grow_relatively_for_short_cells_and_never_fall_below_the_jitter() -> None:
    assert noise.model_floor(0.0) == noise.JITTER_S
    short, long = noise.model_floor(0.25) / 0.25, noise.model_floor(25.0) / 25.0
    assert short > 1.5 * long
    assert noise.history_floor(0.0, 3.0, 1.0) == noise.JITTER_S + noise.HISTORY_RELATIVE
    assert noise.history_floor(0.0, 3.0, 1.0, range_s=0.5) == 0.5  # a value seen in unchanged runs is noise
