"""``nbscope compare``: two runs of a notebook side by side, the backend each cell should run on when their
platforms differ, and a CPU run's GPU forecast against what a GPU run measured."""

from __future__ import annotations

from dataclasses import dataclass

from nbscope.analyse import compare as compare_module
from nbscope.analyse.forecast.measured import ForecastVsMeasured, forecast_vs_measured
from nbscope.analyse.recommend import Recommendation, recommend
from nbscope.record.run import PROFILE_KINDS
from nbscope.record.store import Store, resolve_run


@dataclass(frozen=True)
class CompareOutcome:
    """What ``nbscope compare`` found: the comparison, the recommendation (runs on two platforms, else None) and
    the forecast against the measured GPU run (a CPU run with program data beside a GPU run, else None)."""

    comparison: compare_module.Comparison
    recommendation: Recommendation | None
    measured: ForecastVsMeasured | None


def compare(a: str, b: str, store: Store, *, allow_different: bool = False) -> CompareOutcome:
    """Compare the profile runs ``a`` and ``b`` name (runs of two notebooks only with ``allow_different``)."""
    run_a, run_b = resolve_run(a, store, kinds=PROFILE_KINDS), resolve_run(b, store, kinds=PROFILE_KINDS)
    comparison = compare_module.compare(run_a, run_b, allow_different=allow_different)
    platforms = {comparison.run_a.platform, comparison.run_b.platform}
    recommendation = recommend(run_a, run_b) if len(platforms) > 1 else None
    return CompareOutcome(comparison, recommendation, forecast_vs_measured(run_a, run_b))
