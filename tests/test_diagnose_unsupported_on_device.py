"""The unsupported-on-device rule: a cell that raised on an accelerator for an operation XLA there does not
implement for its dtype, named from its error with the function to keep on the CPU; read from runs recorded on the
lent TPU v5e (tests/files/device/tpu_v5e)."""

from __future__ import annotations

from pathlib import Path

from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.trial import remedy_for
from nbscope.record.run import RunRecord, loads

DEVICE = Path(__file__).resolve().parent / "files" / "device" / "tpu_v5e"


def record(name: str) -> RunRecord:
    return loads((DEVICE / f"{name}.json").read_text())


def test_a_float64_solve_that_raised_on_the_tpu_names_the_function_to_keep_on_the_cpu() -> None:
    run = record("tpu_markov_asset")
    found = [f for f in diagnose(run) if f.rule == "unsupported-on-device"]
    assert [f.cell_index for f in found] == [26, 27]  # cells 27 and 28 raised LuDecomposition there
    first = found[0]
    assert first.title == "Fails on the TPU: float64 LU decomposition" and first.severity == "high"
    assert first.evidence["functions"] == ["sv_pd_ratio_jax"] and "LuDecomposition" in first.evidence["error"]
    assert "keep `sv_pd_ratio_jax` on the CPU" == first.action
    assert "--remedy cpu:sv_pd_ratio_jax" in (first.fix or "")
    assert remedy_for(first, run) == (27, "cpu:sv_pd_ratio_jax")  # what `diagnose --try` tries


def test_nothing_is_found_where_nothing_raised_or_jax_ran_on_the_cpu() -> None:
    for name in ("tpu_job_search", "tpu_kesten_processes", "cpu_host_markov_asset"):
        assert not [f for f in diagnose(record(name)) if f.rule == "unsupported-on-device"], name
