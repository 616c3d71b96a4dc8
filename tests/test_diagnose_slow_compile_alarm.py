"""Rule slow-compile-alarm: XLA's slow_operation_alarm lines in a cell (synthetic: XLA did not print one
in a CPU run short enough for tests), and real runs without alarms."""

from __future__ import annotations

from diag_support import assert_compact, fired, load_record, sources_of
from nbscope.analyse.diagnose import diagnose

SOURCES = sources_of("diag_unrolled_loop")


def test_fires_on_the_cell_with_the_alarm() -> None:
    record = load_record("synthetic_cpu_slow_compile_alarm")
    [finding] = fired(diagnose(record, sources=SOURCES), "slow-compile-alarm")
    assert_compact([finding], record)
    assert finding.cell_index == 1
    assert finding.evidence["alarm_count"] == 2
    assert finding.evidence["largest_compile"] == "simulate"
    assert finding.severity in ("high", "medium") and finding.confidence == 1.0
    assert "Constant folding" in finding.fix or "constant" in finding.fix


def test_silent_on_real_runs_without_alarms() -> None:
    for name, notebook in (("cpu_unrolled_loop", "diag_unrolled_loop"), ("cpu_latency_loop", "diag_latency_loop")):
        record = load_record(name)
        assert not any(c.get("alarms") for c in record.measurements["cells"])
        assert not fired(diagnose(record, sources=sources_of(notebook)), "slow-compile-alarm")
