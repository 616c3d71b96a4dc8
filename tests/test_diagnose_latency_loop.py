"""Rule latency-bound-loop: lax.scan with a tiny body, slow on a GPU. The GPU run is a synthetic fixture
(tests/files/records/synthetic_t4_latency_loop.json); the CPU run is real, and one test profiles the
notebook again on this CPU."""

from __future__ import annotations

import pytest

from diag_support import edited, fired, load_record, profile_notebook, sources_of
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.recommend import recommend
from nbscope.record.sources import naming

SOURCES = sources_of("diag_latency_loop")


@pytest.fixture(scope="module")
def gpu():
    return load_record("synthetic_t4_latency_loop")


@pytest.fixture(scope="module")
def cpu():
    return load_record("cpu_latency_loop")


def test_fixture_is_labelled_synthetic(gpu) -> None:
    import json

    from diag_support import RECORDS

    note = json.loads((RECORDS / "synthetic_t4_latency_loop.json").read_text())["_fixture_note"]
    assert note.startswith("SYNTHETIC")


@pytest.mark.slow
def test_fires_with_a_cpu_run_as_evidence(gpu, cpu) -> None:
    findings = fired(diagnose(gpu, other=cpu, sources=SOURCES), "latency-bound-loop")
    assert {f.cell_index for f in findings} == {2, 3}  # both calls of logistic_path, not the vectorised cells
    second = next(f for f in findings if f.cell_index == 3)
    assert second.evidence["loop_functions"] == {"logistic_path": ["lax.scan"]}
    assert second.evidence["gpu_over_cpu"] > 100
    assert second.evidence["platform"] == "gpu"
    assert "jax.default_device" in second.fix and "JAX_PLATFORMS=cpu" in second.fix


def test_without_timeline_or_cpu_run_it_says_what_it_needs(gpu) -> None:
    findings = diagnose(gpu, sources=SOURCES)
    assert not fired(findings, "latency-bound-loop")
    skipped = [s for s in findings.skipped if s.rule == "latency-bound-loop"]  # type: ignore[attr-defined]
    assert {s.cell_index for s in skipped} == {2, 3}
    assert "--timeline" in skipped[0].reason


def test_uses_the_timeline_summary_when_present(gpu) -> None:
    record = edited(gpu)
    record.measurements["cells"][3]["timeline"] = {
        "classification": "launch-bound",
        "device_busy_s": 0.4,
        "ops": 3_000_000,
        "wall_s": 8.2,
    }
    record.measurements["cells"][5]["timeline"] = {"classification": "compute-bound", "device_busy_s": 0.002}
    findings = fired(diagnose(record, sources=SOURCES), "latency-bound-loop")
    assert [f.cell_index for f in findings] == [3]
    assert findings[0].evidence["timeline"]["classification"] == "launch-bound"
    assert findings[0].evidence["timeline"]["ops"] == 3_000_000
    assert findings[0].confidence >= 0.85


def test_broken_timeline_is_ignored(gpu) -> None:
    record = edited(gpu)
    record.measurements["cells"][3]["timeline"] = {"error": "RuntimeError: no trace"}
    assert not fired(diagnose(record, sources=SOURCES), "latency-bound-loop")


@pytest.mark.slow
def test_silent_on_the_cpu_run(cpu, tmp_path) -> None:
    assert not fired(
        diagnose(cpu, other=load_record("synthetic_t4_latency_loop"), sources=SOURCES), "latency-bound-loop"
    )
    live = profile_notebook("diag_latency_loop", tmp_path)
    assert not fired(diagnose(live), "latency-bound-loop")


@pytest.mark.slow
def test_recommendation_pins_the_loop_to_the_cpu(gpu, cpu) -> None:
    result = recommend(naming(gpu, SOURCES), naming(cpu, SOURCES)).to_dict()
    assert result["accelerator"] == "gpu"
    estimates = result["estimates"]
    assert estimates["cpu_s"] == pytest.approx(sum(c["wall_s"] for c in cpu.measurements["cells"]), abs=1e-3)
    assert estimates["gpu_s"] == pytest.approx(sum(c["wall_s"] for c in gpu.measurements["cells"]), abs=1e-3)
    assert [p["cell"] for p in result["pinned"]] == [2, 3]
    assert all(p["functions"] == ["logistic_path"] for p in result["pinned"])
    saved = sum(p["saving_s"] for p in result["pinned"])
    assert estimates["mixed_s"] == pytest.approx(estimates["gpu_s"] - saved, abs=1e-3)
    best = min(estimates["cpu_s"], estimates["mixed_s"])
    assert result["recommendation"] in ("cpu", "mixed")
    assert estimates[f"{result['recommendation']}_s"] == best
    # argument order does not matter
    assert recommend(naming(cpu, SOURCES), naming(gpu, SOURCES)).to_dict()["estimates"] == estimates


@pytest.mark.slow
def test_recommend_same_backend_has_no_choice(cpu) -> None:
    result = recommend(cpu, cpu)
    assert result.recommendation is None and "both runs" in result.reason
