"""Rule eager-flood: eager array operations on a new shape per iteration, each compiled again."""

from __future__ import annotations

import pytest

from diag_support import assert_compact, fired, profile_notebook
from nbscope.analyse.diagnose import diagnose

# Far below what 50 eager compiles take on any machine (2.7 s here): the rule fires on how many eager
# compiles the loop causes, not on how fast this machine compiles them.
LOW = {"eager-flood": {"min_eager_s": 0.01}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("eager")
    return {name: profile_notebook(name, folder) for name in ("diag_eager_flood", "diag_eager_flood_fixed")}


@pytest.mark.slow
def test_fires_on_the_loop_cell(runs: dict) -> None:
    [finding] = fired(diagnose(runs["diag_eager_flood"], thresholds=LOW), "eager-flood")
    assert_compact([finding], runs["diag_eager_flood"])
    assert finding.cell_index == 1
    evidence = finding.evidence
    assert evidence["eager_compiles"] >= 40  # 10 sizes × (ones, 2 multiplies, add, sum)
    assert {"multiply", "add", "broadcast_in_dim"} <= set(evidence["ops"])
    assert evidence["distinct_shapes"] >= 10
    cell = runs["diag_eager_flood"].measurements["cells"][1]
    assert 0 < evidence["eager_compile_s"] <= cell["compile_s"] + 1e-3  # measured, part of the cell's compiles
    assert "jax.jit" in finding.fix


@pytest.mark.slow
def test_silent_when_the_loop_is_one_jitted_function(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_eager_flood_fixed"], thresholds=LOW), "eager-flood")
