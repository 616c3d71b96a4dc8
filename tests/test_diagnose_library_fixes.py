"""Fixes are addressed to code the reader owns: a Numba function inside a package (tests/files/numba_tables, as
quantecon's `_fill_tauchen` is) gets the notebook line that calls it and what can be done from there, never an
edit of the package's decorator; the notebook's own Numba functions still get `cache=True` at their def."""

from __future__ import annotations

from typing import Any

import pytest

from diag_support import assert_compact, edited, fired, profile_notebook
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.diagnose._source import analyse

# Far below the seconds Numba compiles for on any machine (~1 s here): what the finding says is under test,
# not this machine's speed.
LOW = {"compile-bound": {"min_compile_s": 0.01}, "cold-cache": {"min_numba_s": 0.01}}


@pytest.fixture(scope="module")
def runs(profiled: Any) -> dict:
    # diag_numba_cache's profile is the session's one (test_diagnose_cold_cache.py reads it too).
    env = {"NUMBA_CACHE_DIR": str(profiled.folder / "numba-cache")}
    return {name: profiled(name, env=env) for name in ("diag_library_numba", "diag_numba_cache")}


@pytest.mark.slow
def test_the_probe_records_whose_code_numba_compiled(runs: dict) -> None:
    [entry] = runs["diag_library_numba"].measurements["cells"][1]["numba"]["functions"]
    assert entry["name"] == "_fill_decay" and entry["module"] == "numba_tables" and entry["cache"] is False
    own = {
        f["name"]: f
        for c in runs["diag_numba_cache"].measurements["cells"]
        for f in (c.get("numba") or {}).get("functions") or []
    }
    assert {f["module"] for f in own.values()} == {"__main__"}


@pytest.mark.slow
def test_library_function_fix_names_the_calling_cell_not_the_decorator(runs: dict) -> None:
    findings = diagnose(runs["diag_library_numba"], thresholds=LOW)
    [finding] = fired(findings, "compile-bound", 1)
    assert_compact([finding], runs["diag_library_numba"])
    assert "line 2 of cell 2" in finding.fix and "`P = nt.decay_matrix(200)`" in finding.fix
    assert "numba_tables" in finding.fix
    assert "cache=True` to its decorator" not in finding.fix and "add `cache=True`" not in finding.fix.lower()
    assert "line 2 of cell 2" in finding.short_fix()
    assert dict(finding.evidence_highlights())["library"] == "`_fill_decay` from numba_tables; cache off"
    # Not the notebook's function: the cold-cache rule has nothing for the reader to decorate.
    assert not fired(findings, "cold-cache")


@pytest.mark.slow
def test_a_library_that_caches_gets_numba_cache_dir(runs: dict) -> None:
    record = edited(runs["diag_library_numba"])
    record.measurements["cells"][1]["numba"]["functions"][0]["cache"] = True
    [finding] = fired(diagnose(record, thresholds=LOW), "compile-bound", 1)
    assert "NUMBA_CACHE_DIR" in finding.fix and "line 2 of cell 2" in finding.fix


@pytest.mark.slow
def test_the_notebooks_own_function_gets_cache_true_at_its_def(runs: dict) -> None:
    findings = diagnose(runs["diag_numba_cache"], thresholds=LOW)
    [bound] = fired(findings, "compile-bound", 1)
    assert "add `cache=True` to its decorator (cell 2, line" in bound.fix
    [cold] = fired(findings, "cold-cache")
    assert "`logistic` (cell 2, line 1)" in cold.fix


@pytest.mark.slow
def test_a_library_jax_function_gets_the_calling_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    """tests/files/jaxlike_library.py compiles JAX operations inside its own function: kind "library"."""
    record = profile_notebook("probe_jax_named_package", tmp_path_factory.mktemp("jax-library"))
    thresholds = {"compile-bound": {"min_compile_s": 0.001, "min_share": 0.01}}
    [finding] = fired(diagnose(record, thresholds=thresholds, rules=["compile-bound"]), "compile-bound", 1)
    assert finding.evidence["compiled"][0]["kind"] == "jax library"
    assert "line 1 of cell 2 (`jaxlike_library.shifted_ones(5)`, into `jaxlike_library`)" in finding.fix
    assert_compact([finding], record)


def test_a_redefined_numba_function_is_the_one_in_force_where_it_compiled() -> None:
    """numpy_vs_numba_vs_jax.md defines `compute_max_numba_parallel` twice (a racy version, then a corrected one):
    the decorator to edit is the one of the definition the compiling cell called."""
    code = analyse(
        {
            0: "import numba",
            1: "@numba.jit(parallel=True)\ndef f(x):\n    return x",
            2: "f(1.0)",
            3: "\n@numba.jit(parallel=True, cache=True)\ndef f(x):\n    return x + 1",
            4: "f(2.0)",
        }
    )
    first, second = code.numba_function_at("f", 2), code.numba_function_at("f", 4)
    assert first is not None and (first.cell, first.line, first.cache) == (1, 1, False)
    assert second is not None and (second.cell, second.line, second.cache) == (3, 2, True)
    assert code.numba_function_at("f", 0) is None
