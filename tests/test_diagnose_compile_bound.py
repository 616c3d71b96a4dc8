"""Rule compile-bound: a cell whose time is mostly compilation, vs a cell with one compile and real work;
and the thresholds a caller passes to diagnose()."""

from __future__ import annotations

from typing import Any

import pytest

from diag_support import assert_compact, fired, load_record, sources_of
from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import diagnose, rule_thresholds

# Far below the compile seconds of the unrolled loop on any machine (0.9 s here): whether the rules fire
# depends on the compile's share of the cell and on the loop in the source, not on this machine's speed.
LOW = {
    "compile-bound": {"min_compile_s": 0.01},
    "unrolled-loop": {"min_compile_s": 0.01, "min_compile_s_long_loop": 0.01},
}


@pytest.fixture(scope="module")
def runs(profiled: Any) -> dict:
    # diag_unrolled_loop's profile is the session's one (test_diagnose_unrolled_loop.py reads it too).
    return {name: profiled(name) for name in ("diag_unrolled_loop", "diag_compute_bound")}


@pytest.mark.slow
def test_fires_on_the_compiling_cell_and_points_to_the_cause(runs: dict) -> None:
    record = runs["diag_unrolled_loop"]
    findings = diagnose(record, thresholds=LOW)
    [finding] = fired(findings, "compile-bound")
    assert_compact([finding], record)
    cell = record.measurements["cells"][1]
    assert finding.cell_index == 1
    assert finding.evidence["compile_s"] == pytest.approx(cell["compile_s"], abs=1e-3)
    assert finding.evidence["compile_share"] >= 0.5
    assert finding.evidence["compiled"][0]["name"] == "simulate"
    assert finding.evidence["see_also"] == ["unrolled-loop"]
    # The specific cause is listed before the generic symptom of the same severity (each severity follows from the
    # seconds this machine took: the unrolled function's compile, or the whole cell's with its eager compiles).
    order = [f.rule for f in findings]
    [cause] = fired(findings, "unrolled-loop")
    ranks = ("high", "medium", "low")
    if ranks.index(cause.severity) <= ranks.index(finding.severity):
        assert order.index("unrolled-loop") < order.index("compile-bound")
    else:
        assert order.index("compile-bound") < order.index("unrolled-loop")


@pytest.mark.slow
def test_silent_on_a_compute_bound_cell(runs: dict) -> None:
    record = runs["diag_compute_bound"]
    cell = record.measurements["cells"][1]
    # It compiled, for longer than the threshold passed: only the compile's share of the cell keeps the rule silent.
    assert cell["jax"]["user_compiles"] == 1 and cell["compile_s"] > LOW["compile-bound"]["min_compile_s"]
    assert not fired(diagnose(record, thresholds=LOW), "compile-bound")


# ---- thresholds passed by the caller (on a stored real run: cell 2 compiles 1.37 s of its 1.43 s) -------

SOURCES = sources_of("diag_unrolled_loop")


def test_thresholds_decide_with_the_measured_figures() -> None:
    record = load_record("cpu_unrolled_loop")
    compile_s = record.measurements["cells"][1]["compile_s"]
    assert fired(diagnose(record, sources=SOURCES), "compile-bound", 1)  # the defaults: 0.5 s
    above = {"compile-bound": {"min_compile_s": 2 * compile_s}}
    assert not fired(diagnose(record, sources=SOURCES, thresholds=above), "compile-bound")
    share = record.measurements["cells"][1]["compile_s"] / record.measurements["cells"][1]["wall_s"]
    assert not fired(
        diagnose(record, sources=SOURCES, thresholds={"compile-bound": {"min_share": (1 + share) / 2}}), "compile-bound"
    )
    # The findings say which thresholds differed from the defaults; a plain diagnosis says nothing.
    assert diagnose(record, sources=SOURCES, thresholds=above).to_dict()["thresholds"] == above  # type: ignore[attr-defined]
    assert "thresholds" not in diagnose(record, sources=SOURCES).to_dict()  # type: ignore[attr-defined]


def test_every_threshold_is_listed_with_its_default() -> None:
    thresholds = rule_thresholds()
    assert thresholds["compile-bound"]["min_compile_s"] == 0.5
    assert thresholds["cold-cache"]["min_backend_s"] == 0.5
    assert thresholds["unrolled-loop"]["min_compile_s_long_loop"] == 0.2
    assert {"first-call", "eager-flood", "latency-bound-loop"} <= set(thresholds)


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        ({"no-such-rule": {"min_s": 1}}, "no thresholds for rule 'no-such-rule'"),
        ({"compile-bound": {"min_seconds": 1}}, "rule compile-bound has no threshold min_seconds"),
        ({"compile-bound": {"min_compile_s": "fast"}}, "must be a number"),
        ({"compile-bound": {"min_compile_s": float("nan")}}, "must be a number"),
    ],
)
def test_bad_thresholds_are_one_line_errors(thresholds: dict, message: str) -> None:
    with pytest.raises(NbscopeError, match=message) as caught:
        diagnose(load_record("cpu_unrolled_loop"), sources=SOURCES, thresholds=thresholds)
    assert "\n" not in str(caught.value)
