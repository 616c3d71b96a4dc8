"""Rule cold-cache: JAX persistent cache cold vs warm (real kernels), Numba functions without cache=True."""

from __future__ import annotations

from typing import Any

import pytest

from diag_support import assert_compact, fired
from nbscope.analyse.diagnose import diagnose

# Far below the seconds these notebooks compile for on any machine (here: JAX backend 0.6 s, Numba 1.3 s):
# whether the rule fires depends on the cache, not on how fast this machine compiles.
LOW = {"cold-cache": {"min_backend_s": 0.01, "min_numba_s": 0.01}}


@pytest.fixture(scope="module")
def jax_runs(profiled: Any) -> dict:
    # The session's cold-then-warm pair (test_compare.py compares it too).
    return {mode: profiled("diag_cold_cache", jax_cache=mode) for mode in ("cold", "warm")}


@pytest.mark.slow
def test_cold_cache_fires_with_measured_backend_compile(jax_runs: dict) -> None:
    cold = jax_runs["cold"]
    [finding] = fired(diagnose(cold, thresholds=LOW), "cold-cache")
    assert_compact([finding], cold)
    assert finding.cell_index is None and finding.evidence["cache_state"] == "cold"
    backend = sum((c.get("jax") or {}).get("backend_s") or 0.0 for c in cold.measurements["cells"])
    assert finding.evidence["saving_s"] == pytest.approx(backend, abs=1e-3)
    assert "upper bound" in finding.evidence["saving_is"]
    assert "JAX_COMPILATION_CACHE_DIR" in finding.fix


@pytest.mark.slow
def test_warm_run_gives_the_measured_saving(jax_runs: dict) -> None:
    cold, warm = jax_runs["cold"], jax_runs["warm"]
    assert warm.measurements["totals"]["cache_state"] == "warm" and warm.measurements["totals"]["cache_hits"] > 0
    [finding] = fired(diagnose(cold, other=warm, thresholds=LOW), "cold-cache")
    assert finding.evidence["saving_is"].startswith("measured")
    assert finding.evidence["warm_cache_hits"] == warm.measurements["totals"]["cache_hits"]
    # A compile against a retrieval from the cache, both measured on this machine: the saving is positive.
    assert finding.evidence["saving_s"] > 0


@pytest.mark.slow
def test_silent_on_the_warm_run(jax_runs: dict) -> None:
    assert not fired(diagnose(jax_runs["warm"], thresholds=LOW), "cold-cache")


@pytest.fixture(scope="module")
def numba_runs(profiled: Any) -> dict:
    # cache=True must not write beside the notebook; diag_numba_cache's profile is the session's one
    # (test_diagnose_library_fixes.py reads it too).
    env = {"NUMBA_CACHE_DIR": str(profiled.folder / "numba-cache")}
    return {name: profiled(name, env=env) for name in ("diag_numba_cache", "diag_numba_cache_fixed")}


@pytest.mark.slow
def test_numba_without_cache_fires(numba_runs: dict) -> None:
    [finding] = fired(diagnose(numba_runs["diag_numba_cache"], thresholds=LOW), "cold-cache")
    assert_compact([finding], numba_runs["diag_numba_cache"])
    assert set(finding.evidence["uncached_functions"]) == {"logistic", "mean"}
    assert finding.evidence["cache_hits"] == "not recorded by the probe"
    assert "cache=True" in finding.fix


@pytest.mark.slow
def test_numba_with_cache_true_is_silent(numba_runs: dict) -> None:
    assert not fired(diagnose(numba_runs["diag_numba_cache_fixed"], thresholds=LOW), "cold-cache")
