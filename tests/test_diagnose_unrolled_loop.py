"""Rule unrolled-loop: a Python loop of 200 steps inside a jitted function, on a real CPU kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from diag_support import assert_compact, fired, sources_of, with_code
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.diagnose._base import severity
from nbscope.analyse.diagnose._source import analyse

# Far below what compiling 200 unrolled steps takes on any machine (0.9 s here): the rule fires because of
# the loop in the source and a compile that grows with it, not because this machine compiles slowly.
LOW = {"unrolled-loop": {"min_compile_s": 0.01, "min_compile_s_long_loop": 0.01}}


@pytest.fixture(scope="module")
def runs(profiled: Any) -> dict:
    # diag_unrolled_loop's profile is the session's one (test_diagnose_compile_bound.py reads it too).
    return {name: profiled(name) for name in ("diag_unrolled_loop", "diag_unrolled_loop_fixed")}


@pytest.mark.slow
def test_names_the_unrolled_loop_with_compile_time_and_fori_loop(runs: dict) -> None:
    record = runs["diag_unrolled_loop"]
    findings = diagnose(record, thresholds=LOW)
    [finding] = fired(findings, "unrolled-loop")
    assert_compact([finding], record)
    assert finding.cell_index == 1  # the cell that defines and calls `simulate`
    evidence = finding.evidence
    assert evidence["function"] == "simulate"
    assert evidence["loop"]["trips"] == 200 and evidence["loop"]["kind"] == "for"
    measured = record.measurements["cells"][1]["compile_s"]
    assert 0 < evidence["compile_s"] <= measured + 1e-9  # the function's own compile, from the record
    assert evidence["per_compile_s"] == pytest.approx(evidence["compile_s"] / max(1, evidence["compiles"]), abs=1e-3)
    assert "fori_loop" in finding.fix and "(0, 200," in finding.fix
    assert "simulate" in finding.summary and "200 steps" in finding.summary
    # How severe depends on the seconds this machine took; that it follows from them does not.
    assert finding.severity == severity(evidence["seconds_at_stake"], record.measurements["totals"]["wall_s"])
    assert finding.confidence == 0.9  # a literal loop of 200 steps, and a compile past the (passed) threshold
    assert not [s for s in findings.skipped if s.rule == "unrolled-loop"]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_silent_on_fori_loop_version(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_unrolled_loop_fixed"], thresholds=LOW), "unrolled-loop")


@pytest.mark.slow
def test_needs_sources_says_so(runs: dict, tmp_path: Path) -> None:
    findings = diagnose(with_code(runs["diag_unrolled_loop"], {}), thresholds=LOW)
    assert not fired(findings, "unrolled-loop")
    reasons = [s.reason for s in findings.skipped if s.rule == "unrolled-loop"]  # type: ignore[attr-defined]
    assert reasons and "sources" in reasons[0]


def test_source_analysis_follows_calls_and_literal_lengths() -> None:
    code = analyse(
        {
            0: "N = 64\n\ndef body(x):\n    for _ in range(N):\n        x = x + 1\n    return x",
            1: "import jax\n\n@jax.jit\ndef outer(x):\n    return body(x)\n\ng = jax.jit(lambda x: x)",
            2: "def plain(x):\n    for i in range(3):\n        pass",
        }
    )
    assert code.functions["outer"].jitted and not code.functions["body"].jitted
    [loop] = code.loops_in("outer")  # found through the call to `body`
    assert loop.trips == 64 and loop.function == "body"
    assert "plain" not in code.jitted


def test_unrolled_source_from_notebook_file() -> None:
    sources = sources_of("diag_unrolled_loop")
    code = analyse(dict(enumerate(sources.values())))
    assert [loop.trips for loop in code.loops_in("simulate")] == [200]
