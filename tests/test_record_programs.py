"""The typed program data (``schema.programs``), read from a real ``--forecast`` profile: every recorded field
reads as the same figure, a field a record lacks reads as None, and each cell knows the programs it ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nbscope.analyse.forecast.devices import load_table
from nbscope.analyse.forecast.model import program_terms
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record.run import RunRecord
from nbscope.schema.codec import decode, decode_optional
from nbscope.schema.model import Cell, NotebookRun
from nbscope.schema.programs import CellPrograms, Execution, Loop, Program, ProgramData, Transfers

FILES = Path(__file__).resolve().parent / "files"


@pytest.fixture(scope="module")
def record() -> RunRecord:
    """A profile with program data of a notebook whose one jitted function has a scan, loops only XLA:CPU builds
    (threefry, LU) and a cuSOLVER call on the GPU, read back from its JSON document as a stored run is."""
    pytest.importorskip("jax")
    made = profile(
        FILES / "forecast_random_solve.md",
        ProfileOptions(forecast=["t4"], jax_platform="cpu"),
        fingerprint={"digest": "test"},
    )
    return RunRecord.from_dict(made.to_dict())


def same(typed: Any, document: Mapping[str, Any]) -> None:
    """Every field of ``document`` reads as the same figure in the typed view ``typed`` (none is left unread),
    and a field the document lacks reads as None (or empty)."""
    names = {f.name for f in dataclasses.fields(typed)}
    assert set(document) <= names, f"{type(typed).__name__} does not read {sorted(set(document) - names)}"
    for name in names:
        value = getattr(typed, name)
        if name in document:
            equal(value, document[name], f"{type(typed).__name__}.{name}")
        else:
            assert value is None or value == () or value == {}, f"{type(typed).__name__}.{name}: {value!r}"


def equal(value: Any, recorded: Any, where: str) -> None:
    if dataclasses.is_dataclass(value):
        same(value, recorded)
    elif isinstance(value, tuple):
        assert len(value) == len(recorded), where
        for item, recorded_item in zip(value, recorded, strict=True):
            equal(item, recorded_item, where)
    elif isinstance(value, Mapping):
        assert set(value) == set(recorded), where
        for key in value:
            equal(value[key], recorded[key], f"{where}[{key}]")
    else:
        assert value == recorded, f"{where}: {value!r} != {recorded!r}"


def test_the_run_s_program_table_reads_as_typed_programs_with_the_document_s_figures(record: RunRecord) -> None:
    document = record.measurements["programs"]
    data = record.notebook_run().program_data
    assert isinstance(data, ProgramData)
    assert (data.version, data.cost_source, list(data.notes)) == (
        document["version"],
        document["cost_source"],
        document["notes"],
    )
    assert set(data.programs) == set(document["programs"]) and data.programs
    for key, program in data.programs.items():
        assert isinstance(program, Program) and program.key == key
        same(program, document["programs"][key])
    solve = next(p for p in data.programs.values() if p.function == "draw_and_solve")
    assert solve.loops and all(isinstance(loop, Loop) for loop in solve.loops)
    assert any(loop.cpu_only for loop in solve.loops) and any(loop.trip_count == 100 for loop in solve.loops)
    assert solve.gpu is not None and any(t.startswith("cusolver") for t in solve.gpu.custom_calls)
    assert solve.entry.kernels and solve.per_execution.complete is not None


def test_a_cell_that_ran_a_jitted_function_knows_its_programs(record: RunRecord) -> None:
    run = record.notebook_run()
    programs = run.program_data.programs if run.program_data else {}
    for cell, document in zip(run.cells, record.measurements["cells"], strict=True):
        assert isinstance(cell.programs, CellPrograms)  # a --forecast run records every cell's
        same(cell.programs, document["programs"])
    solving = next(
        c
        for c in run.cells
        if c.programs and any(programs[e.program].function == "draw_and_solve" for e in c.programs.executions)
    )
    assert solving.programs is not None and solving.programs.trace == "read"
    execution = next(e for e in solving.programs.executions if programs[e.program].function == "draw_and_solve")
    assert isinstance(execution, Execution) and execution.count == execution.runs == 1
    assert execution.count_basis == "counted" and execution.cpu_s is not None and execution.cpu_s > 0
    assert execution.loops and set(execution.loops) <= {loop.id for loop in programs[execution.program].loops}
    assert solving.programs.new_programs and set(solving.programs.new_programs) <= set(programs)


def test_the_forecast_reads_a_typed_program_as_it_read_its_document(record: RunRecord) -> None:
    table = load_table(environ={})
    data = record.notebook_run().program_data
    assert data is not None
    for key, program in data.programs.items():
        document = record.measurements["programs"]["programs"][key]
        assert program_terms(program, table.devices["t4"], table.model) == program_terms(
            document, table.devices["t4"], table.model
        )


def test_absent_fields_read_as_none_never_as_a_guess() -> None:
    program = decode(Program, {"loops": [{"id": "while.1"}]})
    assert (program.key, program.function, program.gpu, program.output_bytes) == (None, None, None, None)
    assert program.entry.flops is None and program.entry.kernels is None and program.per_execution.complete is None
    (loop,) = program.loops
    assert loop.trip_count is None and loop.syncs_per_iteration is None and loop.cpu_only is None
    assert loop.source is None and loop.per_iteration.bytes is None
    cell = decode(
        CellPrograms, {"executions": [{"program": "jit_f#1", "count": None, "sampled_runs": 40}, {"count": 3}]}
    )
    assert cell is not None and cell.transfers is None and cell.window is None and cell.cpu_busy_s is None
    (execution,) = cell.executions  # an entry naming no program is none to read against the table
    assert execution.count is None and execution.cpu_s is None and execution.runs == 40
    assert decode(Transfers, {"host_to_device": 2}) == Transfers(2, None, None, None, None, None, None)
    assert decode_optional(ProgramData, None) is None and decode_optional(ProgramData, {}) is None
    assert decode(Cell, {"index": 0}).programs is None
    assert decode(NotebookRun, {"cells": []}).program_data is None


def test_the_typed_program_data_is_read_only(record: RunRecord) -> None:
    data = record.notebook_run().program_data
    assert data is not None
    program = next(iter(data.programs.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        program.entry.flops = 0.0  # type: ignore[misc]
