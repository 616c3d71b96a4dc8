"""The gate, history and noise model read typed records: the typed result is what ``gate --json`` prints, the
busy-machine check reads the typed CPU, and the wait for a CPU comes with the typed cells. On real runs: the
stored CPU profiles of tests/files/records, and fresh profiles of gate_sleep.ipynb (their cells carry the
probe's wait for a CPU)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from diag_support import load_record
from nbscope.analyse import noise
from nbscope.analyse.gate import GateComparison, GateRunSummary, busy, gate
from nbscope.analyse.history import find_cell, metric_value
from nbscope.api.gate import history_runs
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.schema.model import CpuTime

NOTEBOOK = Path(__file__).resolve().parent / "files" / "gate_sleep.ipynb"


def slowed(record: RunRecord, index: int, factor: float, started: str) -> RunRecord:
    """A copy of a real run whose cell ``index`` took ``factor`` × its wall, started at ``started``."""
    document = copy.deepcopy(record.to_dict())
    document["started_at"] = started
    cell = document["measurements"]["cells"][index]
    cell["wall_s"] *= factor
    document["measurements"]["totals"]["wall_s"] += cell["wall_s"] * (1 - 1 / factor)
    return RunRecord.from_dict(document)


def as_printed(result: Any) -> Any:
    return json.loads(json.dumps(result.to_dict(), indent=1, default=str))


def test_the_typed_result_is_what_gate_json_prints(tmp_db: Path, run_cli: Any) -> None:
    base = load_record("cpu_latency_loop")
    store = Store(tmp_db)
    base_id = store.save(base)
    cand_id = store.save(slowed(base, 2, 5.0, "2026-12-01T00:00:00.000Z"))
    candidate = store.get(cand_id)
    result = gate(store.get(base_id), candidate, history=history_runs(store, candidate, 10))
    assert isinstance(result.candidate, GateRunSummary) and isinstance(result.total, GateComparison)
    assert result.candidate.run_id == cand_id and result.baseline.run_id == base_id
    assert [c.verdict for c in result.cells if c.failing] == ["regression"] and result.cells[2].index == 2

    done = run_cli("gate", "--db", tmp_db, "--baseline", base_id, "--candidate", cand_id, "--json")
    assert done.returncode == result.exit_code == 1, done.stderr
    assert json.loads(done.stdout) == as_printed(result)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.total.verdict = "unchanged"  # type: ignore[misc]


def test_the_busy_machine_check_reads_the_typed_cpu_load() -> None:
    record = load_record("cpu_x64")  # profiled at a load of 5.94 on 2 cores
    cpu = record.machine().cpu
    assert busy(record) == (cpu.load_average[0], cpu.logical_cores) == (5.94, 2)
    other = slowed(record, 0, 1.0, "2026-12-01T00:00:00.000Z")
    result = gate(record, other)
    assert result.baseline.load_average == 5.94
    assert sum("machine was busy" in w and "load average 5.9 on 2 cores" in w for w in result.warnings) == 2
    quiet = copy.deepcopy(record.to_dict())
    quiet["fingerprint"]["cpu"]["load_average"] = [0.4, 0.5, 0.5]
    assert busy(RunRecord.from_dict(quiet)) == (None, None)
    unreadable = copy.deepcopy(record.to_dict())
    unreadable["fingerprint"]["cpu"]["load_average"] = {"absent": "no /proc/loadavg"}
    assert busy(RunRecord.from_dict(unreadable)) == (None, None)


def test_history_reads_typed_cells_and_the_figures_the_model_does_not_type() -> None:
    record = load_record("cpu_latency_loop")
    cells = record.notebook_run().cells
    found = find_cell(cells, "#3")
    assert found is not None and found is cells[2]
    assert metric_value(record, "wall_s", "#3") == (found.wall_s, [])
    document = record.measurements["cells"][2]
    assert metric_value(record, "output_bytes", "#3") == (float(document["output_bytes"]), [])
    assert metric_value(record, "wall_s") == (record.notebook_run().totals.wall_s, [])


def test_the_noise_model_reads_the_typed_cells_wait_for_a_cpu() -> None:
    record = load_record("cpu_unrolled_loop")
    cells = record.notebook_run().cells
    assert all(c.sched is None for c in cells)  # recorded before the probe read the wait for a CPU
    assert noise.pair_noise(cells[0], cells[1]).judged == "wall"  # no wait recorded: the walls are judged
    waited = dataclasses.replace(cells[1], wall_s=2.0, sched=CpuTime(on_cpu_s=0.5, wait_s=1.5, cpu_s=0.5))
    assert noise.wait_of(waited) == 1.5 and noise.unwaited(waited) == 0.5
    assert noise.pair_noise(waited, waited).judged == "unwaited"
    assert (
        noise.wait_of(dataclasses.replace(waited, sched=CpuTime(on_cpu_s=0.5, wait_s=9.0, cpu_s=0.5))) is None
    )  # > wall
