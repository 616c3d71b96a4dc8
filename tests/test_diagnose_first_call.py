"""Rule first-call: JAX import and first PRNG compiles dominating a tiny notebook."""

from __future__ import annotations

import pytest

from diag_support import assert_compact, fired, profile_notebook
from nbscope.analyse.diagnose import diagnose


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("first")
    return {name: profile_notebook(name, folder) for name in ("diag_first_call", "diag_first_call_clean")}


@pytest.mark.slow
def test_fires_on_a_tiny_prng_notebook(runs: dict) -> None:
    record = runs["diag_first_call"]
    [finding] = fired(diagnose(record), "first-call")
    assert_compact([finding], record)
    evidence = finding.evidence
    assert evidence["import_cell"] == 0
    assert evidence["import_s"] == pytest.approx(record.measurements["cells"][0]["wall_s"], abs=1e-3)
    assert "_normal" in evidence["prng_first_compiles"] and evidence["prng_compile_s"] > 0
    assert "not measured separately" in evidence["backend_init"]  # never guessed
    assert evidence["share"] >= 0.4


@pytest.mark.slow
def test_silent_when_real_work_dominates(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_first_call_clean"]), "first-call")
