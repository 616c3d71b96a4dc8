"""``nbscope report``: what one HTML page of stored runs shows (the page itself is the renderer's)."""

from __future__ import annotations

from collections.abc import Mapping

from nbscope._errors import NbscopeError
from nbscope.analyse.report import ReportData, report_data
from nbscope.api.runs import trials_of
from nbscope.record.store import Store, resolve_run


def report(references: list[str], store: Store, *, history: bool = True, metric: str = "wall_s") -> ReportData:
    """Every analysis the report of the runs ``references`` name shows, the first the baseline; the histories
    (of ``metric``) only when asked and the store exists."""
    records = [resolve_run(reference, store) for reference in references]
    totals = [record.totals() for record in records]
    figures = sorted({name for found in totals if isinstance(found, Mapping) for name in found})
    if history and metric not in figures:
        raise NbscopeError(f"--metric {metric!r} is not a figure of these runs; their figures: {', '.join(figures)}")
    history_store = store if history and store.path.exists() else None
    data = report_data(records, store=history_store, history_metric=metric)
    data.trials = [trial for record in records for trial in trials_of(store, record)]
    return data
