"""Compiling a CPU run's programs for a TPU on a machine without one (``nbscope target-env tpu``, ``forecast
--device tpu-v5e``): the kernel keeps each program's module, XLA:TPU compiles it here for ``v5e:1x1``, and the
forecast takes the measured compile, the compiler's own refusals and device memory.

The compile itself needs libtpu, in nbscope's target environment (``.ci/run`` makes it): those tests skip, saying
so, where it is absent. The forecast's tests read what that environment compiled for a recorded run
(``tests/files/device/target``: ``cpu_target_compile.json``, the profile of ``tests/files/target_compile.md`` with
program data, and ``target_compile_v5e.json``, its programs compiled for v5e:1x1 with jax 0.10.2 and libtpu
0.0.42.1), so they hold without it."""

from __future__ import annotations

import base64
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from nbscope.analyse.forecast import forecast
from nbscope.api.forecast import compiled_for_target, target_environment
from nbscope.collect.target_compile import TargetCompiles, compile_programs
from nbscope.record.run import RunRecord, loads

HERE = Path(__file__).resolve().parent / "files" / "device" / "target"
MLIR_BYTECODE = b"ML\xefR"  # the magic number that opens an MLIR bytecode file


def recorded() -> RunRecord:
    return loads((HERE / "cpu_target_compile.json").read_text())


def compiled_here(name: str = "target_compile_v5e.json") -> TargetCompiles:
    return TargetCompiles.from_document((HERE / name).read_text())


def _programs(record: RunRecord) -> dict[str, object]:
    data = record.notebook_run().program_data
    assert data is not None
    return dict(data.programs)


@pytest.mark.slow
def test_the_kernel_keeps_each_compiled_program_for_the_target() -> None:
    from diag_support import profile_with_programs

    programs = profile_with_programs("target_compile.md").notebook_run().program_data
    assert programs is not None
    kept = {p.function: p.target for p in programs.programs.values()}
    assert {"power_sum", "fixed_point", "solve"} <= set(kept)
    assert all(target is not None and target.module for target in kept.values())
    # The LU solve lowers otherwise for the TPU (LuDecomposition, not LAPACK): lowered again for it in the kernel.
    assert kept["solve"] is not None and kept["solve"].how == "lowered for tpu"
    assert kept["power_sum"] is not None and kept["power_sum"].how == "cpu module"
    for target in kept.values():
        assert target is not None and target.module is not None
        assert zlib.decompress(base64.b64decode(target.module)).startswith(MLIR_BYTECODE)


def test_the_forecast_takes_the_measured_compile_and_the_compilers_own_refusal() -> None:
    record, target = recorded(), compiled_here()
    result = forecast(record, "tpu-v5e", target=target)
    by_index = {cell.index: cell for cell in result.cells}
    # cell 3 (index 2): the float64 while loop, its compile measured for the chip here
    loop = by_index[2].gpu["tpu-v5e"]
    compile_term = next(t for t in loop.terms if t.kind == "compile")
    assert "measured on this machine" in compile_term.words and "libtpu 0.0.42.1" in compile_term.words
    measured = sum(
        target.compiled[key].compile_s or 0.0
        for key, program in _programs(record).items()
        if getattr(program, "first_cell", None) == 2
    )
    cpu_jax = record.notebook_run().cells[2].jax
    assert cpu_jax is not None
    jax_s = cpu_jax.trace_s + cpu_jax.lower_s
    assert compile_term.low_s == pytest.approx(jax_s + 0.5 * measured)
    assert compile_term.high_s == pytest.approx(jax_s + 2.5 * measured)
    # cell 4 (index 3): the float64 LU solve fails, in the compiler's words, not a table's
    solve = by_index[3].gpu["tpu-v5e"]
    assert solve.verdict == "fails"
    assert "Only F32 and C64 types are implemented in LuDecomposition" in solve.fails[0].reason
    assert "XLA:TPU on this machine" in solve.fails[0].source
    assert any("refused by the compiler" in note for note in result.notes)


def test_without_the_compile_the_forecast_guesses_and_says_which_programs_and_why() -> None:
    record = recorded()
    absent = compile_programs(_programs(record), None, budget_s=1)  # type: ignore[arg-type]
    assert not absent.compiled.keys() - {k for k, c in absent.compiled.items() if c.error}
    assert absent.guessed and all("target-env tpu --install" in why for why in absent.guessed.values())
    result = forecast(record, "tpu-v5e", target=absent)
    loop = next(c for c in result.cells if c.index == 2).gpu["tpu-v5e"]
    compile_term = next(t for t in loop.terms if t.kind == "compile")
    assert "measured on this machine" not in compile_term.words  # the class guess, as before
    assert any("guessed from its class" in note and "target-env tpu --install" in note for note in result.notes)


def test_a_program_larger_than_the_chips_memory_is_named_with_its_bytes() -> None:
    record, target = recorded(), compiled_here()
    key = next(k for k, p in _programs(record).items() if getattr(p, "function", None) == "fixed_point")
    target.compiled[key] = replace(target.compiled[key], device_bytes=20 * 2**30)
    loop = next(c for c in forecast(record, "tpu-v5e", target=target).cells if c.index == 2).gpu["tpu-v5e"]
    assert loop.verdict == "fails"
    assert "20.0 GiB" in loop.fails[0].reason and "15.7 GiB" in loop.fails[0].reason


@pytest.mark.slow
def test_a_recorded_program_compiles_for_v5e_and_the_float64_lu_fails_at_compile(tmp_path: Path) -> None:
    if target_environment(install=False) is None:
        pytest.skip("no target environment with libtpu here (`nbscope target-env tpu --install` makes one)")
    record = recorded()
    compiled = compiled_for_target(record, budget_s=900)
    assert not compiled.guessed
    by_function = {getattr(p, "function", None): compiled.compiled[k] for k, p in _programs(record).items()}
    assert "Only F32 and C64 types are implemented in LuDecomposition" in (by_function["solve"].error or "")
    loop = by_function["fixed_point"]
    assert loop.error is None and loop.compile_s is not None and loop.compile_s > 0
    # float64 is emulated on the chip: XLA:TPU counts many float32 operations per float64 one. Its cost counts a
    # while loop's body once: a multiply, an add and a max over 1,000 values, 3,000 flops in float64 hardware.
    assert loop.flops is not None and loop.flops > 10 * 3_000
    assert by_function["power_sum"].device_bytes is not None and by_function["power_sum"].device_bytes > 40_000


TPU = HERE.parent / "tpu_v5e"


@pytest.mark.parametrize("lecture", ["jax_intro", "numpy_vs_numba_vs_jax", "opt_savings_2", "hopenhayn", "mle"])
def test_the_compile_measured_here_holds_on_the_chip(lecture: str) -> None:
    """Each lecture's CPU run (its kernel's modules compiled here for v5e:1x1) against its run on the lent v5e: a
    bounded range, the compile of each cell that compiled for 1 s or more there within 1.5× of its forecast but
    one, and the cells that raised there forecast to fail in the compiler's words."""
    cpu, chip = recorded_as(HERE / f"cpu_host_{lecture}.json"), recorded_as(TPU / f"tpu_{lecture}.json")
    target = compiled_here(f"compiled_{lecture}.json")
    result = forecast(cpu, "tpu-v5e", target=target)
    notebook = result.notebook["tpu-v5e"]
    assert notebook.high_s is not None and notebook.high_s / notebook.low_s < 2.7
    forecasts = {c.index: c.gpu["tpu-v5e"] for c in result.cells}
    misses = 0
    for index, cell in enumerate(chip.notebook_run().cells):
        if cell.jax is None or cell.jax.compile_s < 1 or index not in forecasts:
            continue
        term = next(t for t in forecasts[index].terms if t.kind == "compile")
        assert "measured on this machine" in term.words
        misses += not (term.high_s is not None and term.low_s / 1.5 <= cell.jax.compile_s <= term.high_s * 1.5)
    assert misses <= 1
    raised_here = {i for i, c in enumerate(cpu.notebook_run().cells) if c.error is not None}  # raised anywhere
    raised = {
        i for i, c in enumerate(chip.notebook_run().cells) if c.error is not None and c.error.name != "NameError"
    } - raised_here
    failing = {c.index for c in result.cells if c.gpu["tpu-v5e"].verdict == "fails"}
    assert failing == raised
    for index in failing:
        assert "LuDecomposition" in forecasts[index].fails[0].reason  # mle's Newton steps invert a float64 Hessian


def recorded_as(path: Path) -> RunRecord:
    return loads(path.read_text())
