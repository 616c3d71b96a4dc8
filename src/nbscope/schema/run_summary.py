"""A run's summary as the store keeps it (``Store.run_summaries``; made by ``analyse.run_summary``): what the book's
status site shows of one run, decoded once where ``api.publish`` reads it into a NamedTuple (the command of an
incremental publish imports neither ``dataclasses`` nor the record model), and written back as the same JSON.

Its parts, each made on its own: the status (``status`` with ``error``, ``cache_state`` and ``cells``), the findings
(``findings`` with ``forecast``: None, or an object with its ``text``), what changed since the run before it in its
row (``attribution``: an object with that run's ``before_id`` and its ``text``) and, with a row's newest run, the
row's change points for that very series of runs (``changes``). A part not as it is written is read as not made:
publish makes it again.
"""

# Not ``from __future__ import annotations``: a NamedTuple would compile each field's annotation from its text
# at import, a part of the start-up an incremental publish is made of.
from typing import NamedTuple

from nbscope.schema.site_manifest import Change


class KeptChanges(NamedTuple):
    """A row's change points (as ``ChangePoint.to_dict`` gives them) and which of them are confirmed regressions
    (their places in ``found``), found for the series of runs ``series`` names (``api.publish._series_key``)."""

    series: str
    found: list[Change]
    steps: list[int]


class RunSummary(NamedTuple):
    status: str | None  # None: the status part is not made (nor error, cache state and cells)
    error: str | None
    cache_state: str | None
    cells: list[dict[str, object]]
    findings: list[dict[str, object]] | None  # None: the findings part is not made (nor the forecast)
    forecast: dict[str, object] | None
    attribution: dict[str, object] | None
    changes: KeptChanges | None


NO_SUMMARY = RunSummary(
    status=None, error=None, cache_state=None, cells=[], findings=None, forecast=None, attribution=None, changes=None
)


def _changes(value: object) -> KeptChanges | None:
    if not isinstance(value, dict):
        return None
    series, found, steps = value.get("series"), value.get("found"), value.get("steps")
    if not (
        isinstance(series, str)
        and isinstance(found, list)
        and isinstance(steps, list)
        and all(type(n) is int and 0 <= n < len(found) for n in steps)
    ):
        return None
    return KeptChanges(series, found, steps)


def read_run_summary(document: object, summary_format: int) -> RunSummary | None:
    """The summary ``document`` holds, None when it is not one of ``summary_format`` (made by other rules)."""
    if not isinstance(document, dict) or document.get("format") != summary_format:
        return None
    status, cells = document.get("status"), document.get("cells")
    if not (isinstance(status, str) and isinstance(cells, list)):
        status, cells = None, []
    findings, forecast = document.get("findings"), document.get("forecast")
    has_findings = isinstance(findings, list) and (forecast is None or isinstance(forecast, dict))
    attribution = document.get("attribution")
    if not (
        isinstance(attribution, dict)
        and isinstance(attribution.get("before_id"), int)
        and isinstance(attribution.get("text"), str)
    ):
        attribution = None
    return RunSummary(
        status=status,
        error=None if status is None else document.get("error"),
        cache_state=None if status is None else document.get("cache_state"),
        cells=cells,
        findings=findings if has_findings else None,
        forecast=forecast if has_findings else None,
        attribution=attribution,
        changes=_changes(document.get("changes")),
    )


def summary_document(summary: RunSummary, summary_format: int) -> dict[str, object]:
    """The JSON the store keeps of ``summary``: its format and the parts made."""
    document: dict[str, object] = {"format": summary_format}
    if summary.status is not None:
        document.update(
            status=summary.status, error=summary.error, cache_state=summary.cache_state, cells=summary.cells
        )
    if summary.findings is not None:
        document.update(findings=summary.findings, forecast=summary.forecast)
    if summary.attribution is not None:
        document["attribution"] = summary.attribution
    if summary.changes is not None:
        document["changes"] = summary.changes._asdict()
    return document
