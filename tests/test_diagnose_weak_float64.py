"""Rule weak-float64: float64 JAX work on a T4 (synthetic fixture built from a real float64 CPU run)."""

from __future__ import annotations

import pytest

from diag_support import fired, fixture_builder, load_record, sources_of
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.diagnose._weak_float64 import THRESHOLDS
from nbscope.record.run import RunRecord

SOURCES = sources_of("diag_x64")


def test_fires_on_a_t4_with_x64() -> None:
    record = load_record("synthetic_t4_x64")
    [finding] = fired(diagnose(record, other=load_record("cpu_x64"), sources=SOURCES), "weak-float64")
    evidence = finding.evidence
    assert evidence["device"] == "Tesla T4" and evidence["fp64_ratio"] == "1/32"
    assert evidence["x64"] is True and "float64" in evidence["x64_source"]
    assert evidence["x64_set_in_cells"] == [0]
    assert evidence["affected_cells"] == [1, 2]  # compiled for float64 in cell 1, called again in cell 2
    assert evidence["gpu_over_other"]["2"] > 1
    assert "float32" in finding.fix


@pytest.mark.parametrize("device", [1])  # fake NVML device 1: H200, float64 at 1/2 rate
def test_silent_on_a_full_rate_gpu(device: int) -> None:
    builder = fixture_builder()
    record = RunRecord.from_dict(builder.on_gpu(load_record("cpu_x64").to_dict(), device=device))
    assert record.fingerprint["gpu"]["devices"][0]["name"] == "NVIDIA H200"
    assert not fired(diagnose(record, sources=SOURCES), "weak-float64")


def test_silent_on_cpu_and_on_float32_gpu_work() -> None:
    assert not fired(diagnose(load_record("cpu_x64"), sources=SOURCES), "weak-float64")
    t4_float32 = load_record("synthetic_t4_latency_loop")  # a T4, but only float32 compiles
    assert not fired(diagnose(t4_float32, sources=sources_of("diag_latency_loop")), "weak-float64")


def test_unknown_gpu_class_is_reported() -> None:
    record = load_record("synthetic_t4_x64")
    record.fingerprint["gpu"]["devices"][0]["fp64_class"] = {
        "ratio": None,
        "reason": "compute capability 99.0 not in nbscope's table",
    }
    findings = diagnose(record, sources=SOURCES)
    assert not fired(findings, "weak-float64")
    assert any(s.rule == "weak-float64" and "99.0" in s.reason for s in findings.skipped)  # type: ignore[attr-defined]


def test_fires_from_the_observed_trip_count_of_a_float64_loop() -> None:
    """Real CPU run: a float64 while_loop (a 200×200 matrix product per iteration) whose trip count is known
    only at run time ran 2,000 iterations; its body's float64 arithmetic counts once per iteration."""
    record = load_record("cpu_forecast_f64_loop")
    (execution,) = record.measurements["cells"][1]["programs"]["executions"]
    (seen,) = execution["loops"].values()
    assert seen["iterations"] == 2000  # observed in the trace
    [finding] = fired(diagnose(record), "weak-float64")
    t4 = finding.evidence["forecast"]["t4"]
    assert t4["extra_low_s"] >= THRESHOLDS["min_forecast_cost_s"]
    assert 1 in finding.evidence["float64_cells"]


def test_silent_when_the_float64_loop_runs_a_few_iterations() -> None:
    """The same loop for 3 iterations: the same body, too little work to matter on a T4."""
    record = load_record("cpu_forecast_f64_small")
    (execution,) = record.measurements["cells"][1]["programs"]["executions"]
    assert [seen["iterations"] for seen in execution["loops"].values()] == [3]
    assert not fired(diagnose(record), "weak-float64")
