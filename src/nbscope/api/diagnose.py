"""``nbscope diagnose``: a stored run's named causes of slow cells, and on a CPU run with program data the backend
the forecast recommends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.analyse.compare import platform_of
from nbscope.analyse.diagnose import Findings, diagnose
from nbscope.analyse.forecast import Forecast
from nbscope.analyse.recommend import Recommendation
from nbscope.record.cells import same_notebook
from nbscope.record.run import PROFILE_KINDS, RunRecord
from nbscope.record.store import Store, resolve_run

# The severities ``--fail-on LEVEL`` fails on.
FAIL_LEVELS = {"high": ("high",), "medium": ("high", "medium")}


@dataclass(frozen=True)
class DiagnoseOutcome:
    """What ``nbscope diagnose`` found: the run, its findings, the forecast's backend choice (a CPU run with
    program data that no GPU run accompanies; else None), and the severities that fail it."""

    record: RunRecord
    findings: Findings
    recommendation: Recommendation | None
    failing: tuple[str, ...] = ()

    @property
    def exit_status(self) -> int:
        """1 when a finding is as severe as ``--fail-on`` asks, else 0."""
        return 1 if any(finding.severity in self.failing for finding in self.findings) else 0


def fail_levels(level: str | None) -> tuple[str, ...]:
    """The severities that make ``diagnose --fail-on LEVEL`` exit 1 (one line for an unknown level)."""
    if level is None:
        return ()
    if level not in FAIL_LEVELS:
        raise NbscopeError(f"--fail-on {level!r}: use medium or high")
    return FAIL_LEVELS[level]


def diagnose_run(
    run: str,
    store: Store,
    *,
    other: str | None = None,
    notebook: Path | None = None,
    rules: list[str] | None = None,
    gpus: str | None = None,
    devices_file: Path | None = None,
    thresholds: dict[str, dict[str, float]] | None = None,
    fail_on: str | None = None,
    try_repeats: int | None = None,
    try_through_cell: bool = False,
) -> DiagnoseOutcome:
    """Diagnose the run ``run`` names (``other``: a second run used as evidence; ``notebook``: the code of an
    older record that does not carry it), with the forecast's recommendation where it applies."""
    failing = fail_levels(fail_on)
    if try_through_cell and try_repeats is None:
        raise NbscopeError("--through-cell applies to the trials of --try: add --try")
    if try_repeats is not None:
        from nbscope.api.trial import check_repeats

        check_repeats(try_repeats)
    record = resolve_run(run, store, kinds=PROFILE_KINDS)
    other_record = resolve_run(other, store, kinds=PROFILE_KINDS) if other else None
    if other_record is not None and not same_notebook(record, other_record):  # its evidence would be another's
        raise NbscopeError(f"--other {other} is a run of {other_record.target}, not of {record.target}")
    if notebook is not None:  # the code of an older record that does not carry it
        from nbscope.record.sources import naming

        record = naming(record, notebook)
    findings = diagnose(
        record, other=other_record, rules=rules, gpus=gpus, thresholds=thresholds, devices_file=devices_file
    )
    recommendation = forecast_recommendation(record, other_record, gpus, devices_file, findings.forecast)
    if try_repeats is not None:
        measure_fixes(record, findings, store, try_repeats, through_cell=try_through_cell)
    return DiagnoseOutcome(record, findings, recommendation, failing)


def forecast_recommendation(
    record: RunRecord,
    other: RunRecord | None,
    gpus: str | None,
    devices_file: Path | None,
    made: Forecast | None = None,
) -> Recommendation | None:
    """The forecast's backend choice, on a CPU run with program data that no GPU run accompanies (``made``: the
    forecast the findings already made, reused)."""
    from nbscope.analyse.forecastable import forecast_unavailable

    if other is not None or forecast_unavailable(record, platform_of(record)["platform"]) is not None:
        return None
    from nbscope.analyse.recommend import recommend_forecast

    return recommend_forecast(record, gpus=gpus, devices_file=devices_file, made=made)


def measure_fixes(
    record: RunRecord, findings: Findings, store: Store, repeats: int, *, through_cell: bool = False
) -> None:
    """``diagnose --try``: each finding whose fix is a remedy ``nbscope try`` applies is tried (once per cell and
    remedy), and what was measured (or why it was not) becomes the finding's first highlight and its evidence's
    ``measured``. ``through_cell``: each trial's runs stop after the cell it tries."""
    from nbscope.analyse.trial import remedy_for
    from nbscope.api.trial import try_remedy
    from nbscope.record.live import NotStored

    done: dict[tuple[int, str], tuple[str, dict[str, object] | None]] = {}
    for finding in findings:
        wanted = remedy_for(finding, record)
        if wanted is None:
            continue
        if wanted not in done:
            try:
                result = try_remedy(str(record.run_id), *wanted, store, repeats=repeats, through_cell=through_cell)
                done[wanted] = (f"{wanted[1]}: {result.sentence()}", result.to_dict())
            except NbscopeError as exc:
                tried = "tried, not stored" if isinstance(exc, NotStored) else "not tried"
                done[wanted] = (f"{wanted[1]}: {tried}: {exc}", None)
        text, measured = done[wanted]
        finding.highlights = [("measured", text), *finding.evidence_highlights()]
        finding.evidence["measured"] = measured if measured is not None else text
