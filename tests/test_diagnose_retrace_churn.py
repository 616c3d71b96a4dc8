"""Rule retrace-churn: one function compiled for eight shapes, and a lambda jitted anew per call."""

from __future__ import annotations

import pytest

from diag_support import assert_compact, fired, profile_notebook
from nbscope.analyse.diagnose import diagnose


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("retrace")
    return {name: profile_notebook(name, folder) for name in ("diag_retrace", "diag_retrace_fixed")}


@pytest.mark.slow
def test_new_shapes_are_listed(runs: dict) -> None:
    [finding] = fired(diagnose(runs["diag_retrace"]), "retrace-churn", 2)
    assert_compact([finding], runs["diag_retrace"])
    evidence = finding.evidence
    assert evidence["function"] == "normalise" and evidence["compiles"] == 8
    assert evidence["cause"] == "new argument shapes"
    assert evidence["distinct_shapes"] == [f"float32[{n}]" for n in range(100, 108)]
    assert "pad" in finding.fix


@pytest.mark.slow
def test_lambda_recreated_per_call(runs: dict) -> None:
    [finding] = fired(diagnose(runs["diag_retrace"]), "retrace-churn", 3)
    assert_compact([finding], runs["diag_retrace"])
    assert finding.evidence["function"] == "<lambda>" and finding.evidence["compiles"] == 5
    assert finding.evidence["distinct_shapes"] == ["float32[100]"]
    assert "created anew" in finding.evidence["cause"]
    assert "out of the loop" in finding.fix


@pytest.mark.slow
def test_silent_when_shapes_fixed_and_jit_hoisted(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_retrace_fixed"]), "retrace-churn")


@pytest.mark.slow
def test_two_lambdas_in_two_cells_are_not_one_function(runs: dict) -> None:
    from diag_support import edited

    record = edited(runs["diag_retrace_fixed"])
    cells = record.measurements["cells"]
    # Move the fixed notebook's one lambda compile into a second cell too: one compile per cell is normal.
    lam = next(f for f in cells[3]["jax"]["functions"] if f["name"] == "<lambda>")
    cells[2]["jax"]["functions"].append(dict(lam))
    assert not fired(diagnose(record), "retrace-churn")


def test_a_redefined_function_is_two_functions() -> None:
    from diag_support import edited, load_record, with_code

    record = edited(load_record("cpu_latency_loop"))
    cells = record.measurements["cells"]
    sources = {
        cells[0]["source_hash"]: "import jax",
        cells[1]["source_hash"]: "@jax.jit\ndef f(x):\n    return x + 1",
        cells[2]["source_hash"]: "f(a)",
        cells[3]["source_hash"]: "f(b)",
        cells[4]["source_hash"]: "@jax.jit\ndef f(x):\n    return x * 2\nf(c)",
        cells[5]["source_hash"]: "f(d)",
    }

    def compile_of(shape: str) -> dict:
        return {
            "name": "f",
            "kind": "user",
            "count": 1,
            "cache_hits": 0,
            "trace_s": 0.01,
            "lower_s": 0.01,
            "backend_s": 0.05,
            "shapes": [shape],
        }

    for index, shape in ((2, "float32[2]"), (3, "float32[3]"), (4, "float32[4]"), (5, "float32[5]")):
        cells[index]["jax"] = {"compiles": 1, "user_compiles": 1, "functions": [compile_of(shape)]}
    for count in ("compiles", "user_compiles", "eager_compiles", "library_compiles"):  # the totals of other cells'
        record.measurements["totals"].pop(count, None)
    # Four compiles of "f", but two definitions compiled twice each: normal, not churn.
    assert not fired(diagnose(with_code(record, sources)), "retrace-churn")
    # Without the sources the name alone is all there is: four shapes of one "f".
    [finding] = fired(diagnose(with_code(record, {})), "retrace-churn")
    assert finding.evidence["compiles"] == 4
