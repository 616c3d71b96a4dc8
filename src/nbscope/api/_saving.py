"""Saving a run: :func:`save_run`, which every job that stores a run calls, and the rows of runs publish shows
(a notebook × runner, oldest run first, ``Store.book_series``'s columns), which a saved run's summary is kept
against.

A run is saved, then its summary as publish shows it is made and kept in the store (``analyse.run_summary``), so
that the next publish reads it and diagnoses nothing. A summary that cannot be made or kept is said (a warning on
the ``nbscope`` logger, or a note in the job's outcome) and made by the next publish instead: the run is saved.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import operator
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from nbscope.record.store import SeriesRun, Store
from nbscope.schema.kinds import PROFILE_KINDS

if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Findings
    from nbscope.analyse.history import ChangeOptions, ChangePoint
    from nbscope.record.run import RunRecord
    from nbscope.schema.run_summary import KeptChanges, RunSummary
    from nbscope.schema.site_manifest import Change


def save_run(
    store: Store | None,
    record: RunRecord,
    *,
    findings: Findings | None = None,
    diagnose: bool = True,
    notes: list[str] | None = None,
) -> None:
    """Save ``record`` in ``store`` (unless the job saved it already, as ``profile`` does before it diagnoses, or
    found it stored: ``run_id`` set), then keep its summary as publish shows it, with what changed since the run
    before it in its row and, when it is the row's newest run, the row's change points. ``findings``: those the
    job made of the run (it is not diagnosed twice); ``diagnose=False`` (``--no-diagnose``): none made, publish
    makes them. Only a notebook's stored run is summarised, and none after a stop signal (the command is ending).

    A summary that cannot be made or kept costs the run its summary, never the command (the next publish makes
    it), and is said in one line: added to ``notes`` (the job's outcome shows them), else a warning on the
    ``nbscope`` logger."""
    from nbscope import _signals
    from nbscope.record.live import save_or_keep

    if store is None:
        return
    if record.run_id is None:
        save_or_keep(store, [record])
    if record.kind not in PROFILE_KINDS or _signals.received() is not None:
        return
    try:
        _keep_summary(store, record, findings, diagnose)
    except Exception as exc:  # a failed diagnosis or a store that refuses the write: said, not swallowed
        note = f"the summary of run {record.run_id} was not kept ({type(exc).__name__}: {exc}); publish makes it"
        if notes is None:
            logging.getLogger("nbscope").warning("nbscope: %s", note)
        else:
            notes.append(note)


def _keep_summary(store: Store, record: RunRecord, findings: Findings | None, diagnose: bool) -> None:
    from nbscope.analyse.run_summary import run_summary

    with store.held():
        rows = series_by_row(store.book_series(PROFILE_KINDS, [record.target]), None)
        key, series = next(
            ((key, series) for key, series in rows.items() if any(run[ID] == record.run_id for run in series)), ("", [])
        )
        ids = [run[ID] for run in series]
        if not ids or record.run_id is None:
            return
        place = ids.index(record.run_id)
        before = store.readable(ids[place - 1]) if place else None
        summary = run_summary(record, runner=key.split("\x1f", 1)[0], before=before, found=findings, diagnose=diagnose)
        found = plan_row(series).found if place == len(ids) - 1 else None
        if found is not None:  # the row's newest run keeps the row's change points
            summary["changes"] = found._asdict()
        store.keep_run_summaries({record.run_id: summary})


def row_key(target: str, runner: str) -> str:
    return f"{runner}\x1f{target}"


def number(value: object) -> float | None:
    if type(value) is float:  # what a REAL column gives: 87,600 runs' three figures are read per full publish
        return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# A run in a row's series: ``Store.book_series``'s columns.
# (Final: each a literal index, so that a run's column has its own type.)
TARGET: Final = 0
BACKEND: Final = 1
STARTED_AT: Final = 2
ID: Final = 3
STATUS: Final = 4
WALL: Final = 5
COMPILE: Final = 6
RUN: Final = 7


class RowPlan:
    """A row's runs (``Store.book_series`` tuples, oldest first), its change points and its confirmed regressions
    (as ``ChangePoint.to_dict`` gives them): found from the columns alone, or kept in the newest run's summary
    for the same series, so that the runs' summaries every row needs are read (or made) together."""

    def __init__(
        self,
        series: Sequence[SeriesRun],
        ids: list[int],
        walls: list[float | None],
        changes: list[Change],
        steps: list[tuple[Change, int]],
        found: KeptChanges | None = None,
    ) -> None:
        self.series = series
        self.ids = ids
        self.walls = walls
        self.changes = changes
        self.steps = steps  # each confirmed regression and the index of its new level's first run
        self.found = found  # change points found now, for the newest run's summary


def _series_key(ids: Sequence[int], options: ChangeOptions | None) -> str:
    """What a row's change points depend on: its runs (a stored run's figures never change) and the detection's
    options (None: this version's defaults, as summaries are kept per version)."""
    digest = hashlib.sha256(array("q", ids).tobytes())
    digest.update(repr(options).encode())
    return digest.hexdigest()[:32]


def plan_row(
    series: Sequence[SeriesRun], options: ChangeOptions | None = None, kept: RunSummary | None = None
) -> RowPlan:
    """The row's plan; its change points and regressions are those ``kept`` (the newest run's summary) holds for
    this very series, else found now."""
    ids = [run[ID] for run in series]
    walls = [number(run[WALL]) for run in series]
    key = _series_key(ids, options)
    cached = None if kept is None else kept.changes
    if cached is not None and cached.series == key:
        changes = cached.found
        return RowPlan(series, ids, walls, changes, [(changes[n], changes[n]["index"]) for n in cached.steps])
    from nbscope.analyse.history import ChangeOptions, Point, change_points
    from nbscope.schema.run_summary import KeptChanges

    points = [
        Point(run_id, run[STARTED_AT], wall, run[STATUS]) for run_id, run, wall in zip(ids, series, walls, strict=True)
    ]
    changes = (
        [_change(c) for c in change_points(points, options)] if len([w for w in walls if w is not None]) > 2 else []
    )
    floor = 1 + (options or ChangeOptions()).rel_floor
    # A change whose medians, measured up to the neighbouring changes, moved less than the history's own floor
    # is not a regression (its split was found in a wider segment, where the shift looked larger).
    confirmed = [
        n
        for n, change in enumerate(changes)
        if not change["tentative"] and change["ratio"] is not None and change["ratio"] >= floor
    ]
    return RowPlan(
        series,
        ids,
        walls,
        changes,
        [(changes[n], changes[n]["index"]) for n in confirmed],
        KeptChanges(key, changes, confirmed),
    )


def _change(point: ChangePoint) -> Change:
    """``point.to_dict()``, typed (its figures are finite: the codec would write nothing else of them)."""
    from nbscope.schema.site_manifest import Change

    return Change(
        index=point.index,
        run_id=point.run_id,
        started_at=point.started_at,
        before=point.before,
        after=point.after,
        delta=point.delta,
        ratio=point.ratio,
        score=point.score,
        tentative=point.tentative,
    )


def series_by_row(per_kind: Iterable[Sequence[SeriesRun]], keys: set[str] | None) -> dict[str, list[SeriesRun]]:
    """The runs of each row of ``keys`` (None: of every row), oldest first (by start, then id). ``Store.book_series``
    gives each kind's runs of a row in that order already; a row with runs of two kinds, or of backends that are one
    row (none recorded and "unknown"), is sorted."""
    grouped: dict[str, list[SeriesRun]] = {}
    unordered: set[str] = set()
    groups = (
        group for series in per_kind for group in itertools.groupby(series, key=operator.itemgetter(TARGET, BACKEND))
    )
    for (target, backend), runs in groups:
        key = row_key(target, backend or "unknown")
        if keys is not None and key not in keys:
            continue
        group = grouped.get(key)
        if group is None:
            grouped[key] = list(runs)
        else:
            group.extend(runs)
            unordered.add(key)
    for key in unordered:
        grouped[key].sort(key=lambda run: (run[STARTED_AT], run[ID]))
    # The rows in the order the manifest has always kept them: the row with the newest run first.
    return dict(sorted(grouped.items(), key=lambda item: (item[1][-1][STARTED_AT], item[1][-1][ID]), reverse=True))
