"""The typed model of a notebook run, read from real recorded runs (tests/files/records)."""

from __future__ import annotations

import dataclasses

import pytest

from diag_support import load_record
from nbscope.record.model import Cell, JaxFigures, NotebookRun


def test_a_recorded_profile_reads_as_typed_cells_totals_and_jax_figures() -> None:
    record = load_record("cpu_latency_loop")
    run = record.notebook_run()
    assert isinstance(run, NotebookRun) and len(run.cells) == len(record.measurements["cells"])
    assert run.totals.wall_s == record.measurements["totals"]["wall_s"]
    assert run.notebook.path == "tests/files/diag_latency_loop.ipynb" and run.repeats == 1
    jitted = next(c for c in run.cells if c.jax and c.jax.of_kind("user"))
    assert isinstance(jitted.jax, JaxFigures)
    function = jitted.jax.of_kind("user")[0]
    assert function.name == "logistic_path" and function.shapes == ("float32[]",)
    assert function.compile_s == pytest.approx(function.trace_s + function.lower_s + function.backend_s)
    assert all(isinstance(c, Cell) and c.label.startswith(f"cell {c.index + 1}") for c in run.cells)


def test_a_version_1_record_has_no_source_and_says_so_by_none() -> None:
    run = load_record("cpu_unrolled_loop").notebook_run()
    assert all(c.source is None for c in run.cells) and run.sources == {}


def test_the_typed_view_is_read_only() -> None:
    cell = load_record("cpu_x64").notebook_run().cells[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.wall_s = 0.0  # type: ignore[misc]
