"""The typed model of a notebook run, read from real recorded runs (tests/files/records)."""

from __future__ import annotations

import dataclasses

import pytest

from diag_support import load_record
from nbscope.collect._cells import merge_described
from nbscope.schema.codec import decode
from nbscope.schema.memory import MemoryReading
from nbscope.schema.model import Cell, JaxFigures, NotebookRun
from nbscope.schema.probe import ProbeCell


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


def test_the_machine_and_settings_read_as_typed_views_with_absent_fields_as_none() -> None:
    from nbscope.schema.machine import Machine, Settings

    machine = decode(
        Machine,
        {
            "digest": "abc",
            "cpu": {"model": "EPYC", "logical_cores": 4, "load_average": [6.0, 1.0, 1.0]},
            "gpu": {
                "devices": [
                    {
                        "index": 0,
                        "name": "Tesla T4",
                        "memory_total_bytes": 16 * 2**30,
                        "compute_capability": "7.5",
                        "fp64_class": {"ratio": "1/32", "value": 0.03, "weak": True},
                    }
                ]
            },
            "versions": {
                "jax": "0.10.2",
                "numba": {"absent": "not installed"},
                "jax_plugins": {"jax-cuda12-plugin": "0.10.2"},
            },
            "environment": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            "jax_runtime": {"absent": "not collected: pass --jax"},
        },
    )
    assert machine.cpu.load_per_core == 1.5
    assert machine.gpu is not None and machine.gpu.name == "Tesla T4" and machine.gpu.fp64.weak is True
    assert machine.versions == {"jax": "0.10.2"} and "jax-cuda12-plugin" in machine.jax_plugins
    assert machine.jax_runtime is None and machine.gpus_absent is None
    bare = decode(Machine, {"gpu": {"devices": {"absent": "no NVIDIA driver"}}, "cpu": {"load_average": [1, "x"]}})
    assert bare.gpus == () and bare.gpus_absent == "no NVIDIA driver" and bare.cpu.load_average is None
    settings = decode(Settings, {"repeat": True, "env": {"A": "1"}, "forecast": ["t4"]})
    assert settings.repeat == 1 and settings.jax_cache == "off" and settings.forecast == ("t4",)
    assert settings.environment(machine) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "A": "1"}


def test_a_record_built_from_typed_cells_reads_back_the_same_cells_and_their_totals() -> None:
    """``tests/builder.py``: typed cells in, the run as a store and every reader see it out (round trip through
    the document, totals by the cell writers)."""
    from builder import cell, record
    from nbscope.record.run import RunRecord
    from nbscope.schema.model import CpuTime

    cells = [cell(wall_s=0.5, compile_s=0.2, source="import jax"), cell(wall_s=1.5, sched=CpuTime(1.0, 0.4, 2.0))]
    run = RunRecord.from_dict(record(cells).to_dict()).notebook_run()
    assert [c.wall_s for c in run.cells] == [0.5, 1.5] and [c.index for c in run.cells] == [0, 1]
    assert run.cells[0].first_line == "import jax" and run.cells[1].sched == CpuTime(1.0, 0.4, 2.0)
    assert run.totals.wall_s == 2.0 and run.totals.compile_s == 0.2 and run.totals.cells_ok == 2


def test_a_figure_the_probe_adds_reaches_the_record_and_its_reader_without_a_collector_line() -> None:
    """A new per-cell figure touches three places: the probe that writes it, the ``Cell`` field that reads it, and
    the format's documentation. The collector records it as the probe measured it, under the probe's name; the
    line's own keys (type, seq, hash) stay out of the record."""
    memory = {"before_bytes": 1, "after_bytes": 5, "peak_bytes": 9}
    line = {"type": "cell", "seq": 1, "hash": "ab", "status": "ok", "wall_s": 0.5, "device_memory": memory}
    described = {"index": 0, "cell_index": 0, "source_hash": "ab", "source": "x = 1", "first_line": "x = 1"}
    record = merge_described(described, decode(ProbeCell, line))
    assert record["device_memory"] == memory and record["wall_s"] == 0.5
    assert not {"type", "seq", "hash"} & set(record)

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithDeviceMemory(Cell):  # the one field a reader of the new figure adds
        device_memory: MemoryReading | None = None

    assert decode(WithDeviceMemory, record).device_memory == MemoryReading(1, 5, 9)
