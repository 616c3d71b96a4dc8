"""Rule gpu-memory: JAX preallocation on a T4 shared with another process (synthetic fixture)."""

from __future__ import annotations

from diag_support import assert_compact, edited, fired, load_record, sources_of
from nbscope.analyse.diagnose import diagnose

SOURCES = sources_of("diag_latency_loop")


def test_fires_on_preallocation_with_another_process() -> None:
    record = load_record("synthetic_t4_gpu_memory")
    [finding] = fired(diagnose(record, sources=SOURCES), "gpu-memory")
    assert_compact([finding], record)
    evidence = finding.evidence
    assert evidence["kernel_peak_share"] == 0.75
    assert evidence["others_at_start_bytes"] == 4 * 2**30
    assert evidence["allocator_settings"] is None
    assert finding.severity == "high"  # 4 GiB + 75 % > 90 % of the device
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in finding.fix


def test_silent_with_preallocation_off_and_small_use() -> None:
    record = edited(load_record("synthetic_t4_gpu_memory"))
    record.settings["env"] = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    record.fingerprint["gpu"]["devices"][0]["memory_used_bytes"] = 0
    for cell in record.measurements["cells"]:
        cell["gpu_memory"] = {"before_bytes": 0, "after_bytes": 300 * 2**20}
    assert not fired(diagnose(record, sources=SOURCES), "gpu-memory")


def test_out_of_memory_error_is_named() -> None:
    record = edited(load_record("synthetic_t4_gpu_memory"))
    cell = record.measurements["cells"][4]
    cell["status"], cell["error"] = "error", {"name": "XlaRuntimeError", "message": "RESOURCE_EXHAUSTED: Out of memory"}
    [finding] = fired(diagnose(record, sources=SOURCES), "gpu-memory")
    assert_compact([finding], record)
    assert finding.cell_index == 4 and finding.title == "GPU out of memory"


def test_no_readings_is_reported_and_cpu_runs_are_silent() -> None:
    findings = diagnose(load_record("synthetic_t4_latency_loop"), sources=SOURCES)  # GPU, no per-cell memory
    assert not fired(findings, "gpu-memory")
    assert any(s.rule == "gpu-memory" and "NVML" in s.reason for s in findings.skipped)  # type: ignore[attr-defined]
    cpu = diagnose(load_record("cpu_latency_loop"), sources=SOURCES)
    assert not fired(cpu, "gpu-memory") and not [s for s in cpu.skipped if s.rule == "gpu-memory"]  # type: ignore[attr-defined]
