"""A run's summary: what the book's status site (``nbscope publish``) shows of one run (its status, cells,
findings, forecast verdict and what changed since the run before it in its row), as plain JSON.

Made once, when the run is saved (``nbscope.api._saving.save_run``, called by the commands that store
runs), and kept in the store (``Store.keep_run_summaries``); ``publish`` makes one only for a run that has none (a
store of an older version, an imported run). Light to import: the analyses it runs are imported when it runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError

if TYPE_CHECKING:
    from nbscope.analyse.attribution import FailureKind
    from nbscope.analyse.diagnose import Findings
    from nbscope.analyse.forecast import Forecast
    from nbscope.analyse.forecast.devices import DeviceTable
    from nbscope.record.run import RunRecord
    from nbscope.schema.model import NotebookRun

# A summary's parts: ``status`` (with ``error``, ``cache_state`` and ``cells``), ``findings`` (with ``forecast``),
# ``attribution`` (against the run before it in its row, named by its ``before_id``); a row's newest run also keeps
# the row's change points (``changes``, made by the API, which finds the row's runs).
SUMMARY_FORMAT = 1  # made again when this changes
STATUS_OF_FAILURE: dict[FailureKind, str] = {
    "cell-error": "failed",
    "timeout": "timeout",
    "kernel-killed": "died",
    "out-of-memory": "died",
    "runner-stopped": "stopped",
    "interrupted": "stopped",
}


def status_summary(record: RunRecord, run: NotebookRun) -> dict[str, Any]:
    """A run's status word and its failure's text, its cache state and its cells."""
    from nbscope.analyse.attribution import classify_failure

    failure = classify_failure(record, run)
    return {
        "status": "ok" if failure is None else STATUS_OF_FAILURE[failure.kind],
        "error": None if failure is None else failure.text,
        "cache_state": run.totals.cache_state,
        "cells": [
            {
                "label": c.label,
                "first_line": c.first_line,
                "status": c.status,
                "wall_s": c.wall_s,
                "compile_s": c.compile_s,
                "source_hash": c.source_hash,
            }
            for c in run.cells
        ],
    }


def attribution_summary(before: RunRecord, record: RunRecord, run: NotebookRun | None = None) -> dict[str, Any]:
    """What changed from ``before`` (the run before it in its row) to ``record``, as plain JSON."""
    from nbscope.analyse.attribution import attribute

    return attribute(before, record, runs=(before.notebook_run(), run or record.notebook_run())).to_dict()


class RunFindings:
    """The diagnosis and the GPU forecast of runs, with what the summaries of many runs share: the GPU device table
    is read once (each forecast would read and parse it again)."""

    def __init__(self) -> None:
        self._table: DeviceTable | None = None

    def findings(
        self, record: RunRecord, run: NotebookRun, runner: str, found: Findings | None = None
    ) -> dict[str, Any]:
        """The run's first findings (``found``: those its command made already, else diagnosed here), and for a
        CPU run with program data the GPU forecast's verdict (the GPUs it was recorded for, else the T4): the
        forecast the diagnosis made for its GPU rules when it made one."""
        if found is None:
            from nbscope.analyse.diagnose import diagnose

            try:
                found = diagnose(record)
            except NbscopeError as exc:
                return {
                    "findings": [{"title": "not diagnosed", "summary": str(exc)}],
                    "forecast": self._forecast(record, run, runner, None),
                }
        findings = [{"title": f.title, "summary": f.summary, "severity": f.severity} for f in found[:5]]
        return {"findings": findings, "forecast": self._forecast(record, run, runner, found.forecast)}

    def _forecast(
        self, record: RunRecord, run: NotebookRun, runner: str, made: Forecast | None
    ) -> dict[str, Any] | None:
        if runner != "cpu" or run.program_data is None:
            return None
        result = made
        if result is None:
            from nbscope.analyse.forecast import forecast
            from nbscope.analyse.forecast.devices import load_table

            gpus = list(record.run_settings().forecast) or ["t4"]
            try:
                if self._table is None:
                    self._table = load_table()
                result = forecast(record, gpus, table=self._table)
            except NbscopeError as exc:
                return {"text": f"not forecast: {exc}"}
        verdicts = [f"{result.device_name(key)}: {notebook.verdict}" for key, notebook in result.notebook.items()]
        return {"text": "; ".join(verdicts) or "no verdict"}


def run_summary(
    record: RunRecord,
    *,
    runner: str,
    before: RunRecord | None = None,
    found: Findings | None = None,
    diagnose: bool = True,
) -> dict[str, Any]:
    """Every part of a run's summary (plain JSON): its status and cells, its findings and forecast verdict (it is
    on ``runner``, the row's backend; ``found``: the findings its command made, else diagnosed here; none when not
    to ``diagnose``: a publish makes them), and what changed since ``before`` when given."""
    run = record.notebook_run()
    summary: dict[str, Any] = {"format": SUMMARY_FORMAT, **status_summary(record, run)}
    if diagnose or found is not None:
        summary.update(RunFindings().findings(record, run, runner, found))
    if before is not None:
        summary["attribution"] = attribution_summary(before, record, run)
    return summary
