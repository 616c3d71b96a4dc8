"""``nbscope history``: a notebook's (or benchmark's) figures over time, per environment digest.

Runs of one target are grouped into series by (kind, fingerprint digest, measurement settings, the names and
hashed values of ``--env`` settings): only runs in the same environment, measured the same way (backend, JAX
cache mode, timeline, repeat count, kernel environment), are comparable. Each series is labelled by what sets it
apart from the others (``--env XLA_FLAGS #3fa2c1``: an ``--env`` value is never shown, only a hash of it). In each series, change points are found by binary segmentation on
medians: among the splits of a segment whose two sides each have most of their values nearer their
own median than the other side's, the one that maximises the shift of medians, scaled by the noise
(estimated robustly from successive differences) and by the segment sizes, is kept when that score
exceeds ``k`` and the shift exceeds a noise floor ``max(abs_floor, rel_floor × the level before)``;
the change is placed, among the splits scoring at least half as well, where both sides deviate least from
their own medians (the first run of the new level); both halves are then searched again. A newest run that
departs from the level before it by the same tests is reported as a tentative change (one run cannot confirm
a level).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeGuard

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.record.run import RunRecord, series_settings
from nbscope.schema.codec import Encoded, Write, decode, given
from nbscope.schema.machine import Settings
from nbscope.schema.model import Cell, Samples, Totals
from nbscope.schema.recorded_figures import RecordedFigures

if TYPE_CHECKING:
    from nbscope.record.store import Store

SPARK_BARS = "▁▂▃▄▅▆▇█"


@dataclass
class ChangeOptions:
    """Sensitivity of change-point detection."""

    min_size: int = 2  # fewest runs on each side of a change
    k: float = 4.0  # score threshold (a z-like value: shift / noise × sqrt(n_left·n_right / n))
    rel_floor: float = 0.10  # shifts below this fraction of the level before are ignored
    abs_floor: float = 0.02  # ... and so are shifts below this (seconds for *_s metrics)
    max_changes: int = 10


@dataclass(frozen=True, slots=True)
class ChangePoint(Encoded):  # publish writes the change points it shows
    """A level shift: from ``index`` on (0-based position in the series) the median moved."""

    index: int
    run_id: int | None
    started_at: str
    before: float
    after: float
    delta: float
    ratio: float | None
    score: float
    tentative: bool = False  # the newest run alone: a change if the next runs confirm it


@dataclass(frozen=True, slots=True)
class Point:
    run_id: int | None
    started_at: str
    value: float | None
    status: str
    samples: list[float] = field(default_factory=list)
    cache_state: str | None = None  # the persistent compile cache at the start of the run: off, cold or warm


@dataclass(frozen=True, slots=True)
class Series:
    """The runs of one target in one environment with one set of measurement settings, oldest first."""

    kind: str
    digest: str
    machine: str
    points: list[Point]
    changes: list[ChangePoint] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # --env name -> a short hash of its value (never the value)
    label: str = ""  # what sets this series apart from the target's others (see :func:`series_labels`)
    document_keys: ClassVar = (
        "kind",
        "digest",
        "machine",
        "settings",
        "env",
        "label",
        ("runs", "run_count"),
        "latest",
        "median",
        ("min", "smallest"),
        ("max", "largest"),
        "sparkline",
        "points",
        "changes",
    )

    def parts(self) -> dict[str, str]:
        """What this series is, as the options a reader gives: ``{"jax_cache": "--jax-cache warm", ...}``."""
        settings = decode(Settings, self.settings)
        parts = {
            "kind": self.kind,
            "machine": self.machine,
            "digest": f"digest {self.digest}",
            "jax_platform": f"--jax-platform {settings.jax_platform}" if settings.jax_platform else "default backend",
            "jax_cache": f"--jax-cache {settings.jax_cache}" if settings.jax_cache != "off" else "no persistent cache",
            "timeline": "--timeline" if settings.timeline else "no timeline",
            "repeat": f"--repeat {settings.repeat}",
        }
        for name, value in sorted(self.env.items()):
            parts[f"env {name}"] = f"--env {name} #{value}"
        return parts

    @property
    def values(self) -> list[float | None]:
        return [p.value for p in self.points]

    @property
    def known_values(self) -> list[float]:
        return [v for v in self.values if v is not None]

    @property
    def run_count(self) -> int:
        return len(self.points)

    @property
    def latest(self) -> float | None:
        return self.known_values[-1] if self.known_values else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.known_values) if self.known_values else None

    @property
    def smallest(self) -> float | None:
        return min(self.known_values, default=None)

    @property
    def largest(self) -> float | None:
        return max(self.known_values, default=None)

    @property
    def sparkline(self) -> str:
        return sparkline(self.values)


@dataclass(frozen=True, slots=True)
class History(Encoded):
    target: str
    metric: str
    cell: str | None
    series: list[Series]
    # What a reader must know to read the series (runs whose --env hashes another store's key made).
    notes: Annotated[tuple[str, ...], Write(when=given)] = ()

    @property
    def unit(self) -> str:
        return "s" if self.metric.endswith("_s") else ""


def foreign_env_note(store: Store, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """A note when runs hid their ``--env`` values under another store's key (imported runs): equal values
    then hash differently, so such a run starts a series of its own (``record.secrets``)."""
    from nbscope.record.secrets import hidden_key_ids, key_id

    own = key_id(store.env_key())
    foreign = sorted({row["id"] for row in rows if hidden_key_ids(decode(Settings, row["settings"]).env) - {own}})
    if not foreign:
        return None
    shown = ", ".join(map(str, foreign[:8])) + (" ..." if len(foreign) > 8 else "")
    return (
        f"run(s) {shown} hid their --env values with another store's key (imported): equal values hash "
        "differently there, so they are in a series of their own"
    )


# --- change points ---------------------------------------------------------------------------------------


def noise_sigma(values: Sequence[float]) -> float:
    """Robust noise estimate: MAD of successive differences, scaled to a normal σ.

    A level shift changes only one difference, so it barely moves this estimate.
    """
    diffs = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    if not diffs:
        return 0.0
    return 1.4826 * statistics.median(diffs) / math.sqrt(2)


def _sorted_median(ordered: Sequence[float]) -> float:
    """``statistics.median`` of an already sorted sequence."""
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _consistent_sorted(ordered: Sequence[float], own: float, other: float) -> bool:
    """More than half of a sorted side's values lie nearer its own level than the other side's. Those values
    lie on ``own``'s side of the midpoint, found by bisection; from there values are judged one by one while
    a float's rounding could say otherwise."""
    if own == other:
        return False

    def nearer(value: float) -> bool:
        return abs(value - own) < abs(value - other)

    size = len(ordered)
    if own < other:  # the nearer values are the smaller ones
        split = bisect.bisect_left(ordered, (own + other) / 2)
        start, stop = split, split
        while start > 0 and not nearer(ordered[start - 1]):
            start -= 1
        while stop < size and nearer(ordered[stop]):
            stop += 1
        count = start + (stop - split)
    else:  # the nearer values are the larger ones
        split = bisect.bisect_right(ordered, (own + other) / 2)
        start, stop = split, split
        while stop < size and not nearer(ordered[stop]):
            stop += 1
        while start > 0 and nearer(ordered[start - 1]):
            start -= 1
        count = (size - stop) + (split - start)
    return count * 2 > size


def _sorted_deviation(ordered: Sequence[float]) -> float:
    """The sum of a sorted side's distances to its median: its upper half's sum less its lower half's."""
    half = len(ordered) // 2
    return sum(ordered[len(ordered) - half :]) - sum(ordered[:half])


def detect_changes(values: Sequence[float], options: ChangeOptions | None = None) -> list[tuple[int, float]]:
    """Change points of a series as (first index of the new level, score), in series order."""
    options = options or ChangeOptions()
    values = list(values)
    sigma = noise_sigma(values)
    found: list[tuple[int, float]] = []

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2 * options.min_size or len(found) >= options.max_changes:
            return
        best: tuple[float, int, float] | None = None
        scored: list[tuple[float, int, float]] = []  # (score, split, the two sides' deviation from their medians)
        # Both sides kept sorted as the split moves (one value crosses per step): each split's medians and
        # consistency counts are read by bisection, not by sorting and scanning both sides again.
        first = lo + options.min_size
        left, right = sorted(values[lo:first]), sorted(values[first:hi])
        for split in range(first, hi - options.min_size + 1):
            if split > first:
                moved = values[split - 1]
                del right[bisect.bisect_left(right, moved)]
                bisect.insort(left, moved)
            low, high = _sorted_median(left), _sorted_median(right)
            shift = high - low
            weight = math.sqrt(len(left) * len(right) / (hi - lo))
            # Without noise (identical repeats) every shift is "infinitely" significant: rank by size.
            score = abs(shift) * weight / (sigma if sigma > 0 else 1e-12)
            if score < (options.k if best is None else max(options.k, best[0])) / 2:
                # Below half the best so far, or half the threshold a change must pass: neither the best split
                # of a segment that has a change, nor its step.
                continue
            if not (_consistent_sorted(left, low, high) and _consistent_sorted(right, high, low)):
                continue  # an outlier dragging a small side's median, not a level shift
            scored.append((score, split, _sorted_deviation(left) + _sorted_deviation(right)))
            if best is None or score > best[0]:
                best = (score, split, shift)
        if best is None:
            return
        score, split, _ = best
        # The score weighs a split towards balanced sides, and a median barely moves for a few values of the other
        # level: the best-scored split can land several runs before or after the step. The step is where, among
        # the splits that score at least half as well, the two sides deviate least from their own medians.
        split = min(((deviation, abs(at - split), at) for value, at, deviation in scored if value >= score / 2))[2]
        level = statistics.median(values[lo:split])
        shift = statistics.median(values[split:hi]) - level
        level = abs(level)
        if score < options.k or abs(shift) < max(options.abs_floor, options.rel_floor * level):
            return
        found.append((split, score))
        search(lo, split)
        search(split, hi)

    search(0, len(values))
    return sorted(found)


def latest_shift(values: Sequence[float], start: int, options: ChangeOptions | None = None) -> float | None:
    """Score of the newest value against the level of ``values[start:-1]``, when it passes the same
    tests as a change point (with one run on the new side); else None."""
    options = options or ChangeOptions()
    level_values = list(values[start:-1])
    if len(level_values) < options.min_size or len(values) < 3:
        return None
    sigma = noise_sigma(values[:-1])
    level = statistics.median(level_values)
    shift = values[-1] - level
    n = len(level_values)
    score = abs(shift) * math.sqrt(n / (n + 1)) / (sigma if sigma > 0 else 1e-12)
    if score < options.k or abs(shift) < max(options.abs_floor, options.rel_floor * abs(level)):
        return None
    return score


def change_points(points: list[Point], options: ChangeOptions | None = None) -> list[ChangePoint]:
    """Change points of a series of points (points without a value are skipped); a last run that
    departs from the level before it is reported as a tentative change."""
    measured = [p for p in points if p.value is not None]
    values = [float(p.value) for p in measured if p.value is not None]
    indices = detect_changes(values, options)
    start = indices[-1][0] if indices else 0
    tentative = latest_shift(values, start, options) if len(values) - start > 1 else None
    if tentative is not None:
        indices.append((len(values) - 1, tentative))
    bounds = [0, *(i for i, _ in indices), len(values)]
    changes = []
    for n, (index, score) in enumerate(indices):
        before = statistics.median(values[bounds[n] : index])
        after = statistics.median(values[index : bounds[n + 2]])
        point = measured[index]
        changes.append(
            ChangePoint(
                index=points.index(point),
                run_id=point.run_id,
                started_at=point.started_at,
                before=before,
                after=after,
                delta=after - before,
                ratio=after / before if before else None,
                score=min(score, 1e9),
                tentative=tentative is not None and index == len(values) - 1,
            )
        )
    return changes


def sparkline(values: Sequence[float | None]) -> str:
    """One character per value, from ▁ (lowest) to █ (highest); a space for a missing value."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    low, high = min(present), max(present)
    span = high - low
    chars = []
    for value in values:
        if value is None:
            chars.append(" ")
        elif span <= 0:
            chars.append(SPARK_BARS[3])
        else:
            chars.append(SPARK_BARS[min(len(SPARK_BARS) - 1, int((value - low) / span * len(SPARK_BARS)))])
    return "".join(chars)


# --- reading the store -----------------------------------------------------------------------------------


def find_cell(cells: Sequence[Cell], selector: str) -> Cell | None:
    """A cell by source-hash prefix, by ``#N`` / ``N`` (1-based, as the ledger numbers them), or by a
    unique substring of its first line."""
    selector = selector.strip()
    number = selector.removeprefix("#")
    if (found := units.whole(number, 0, 10**9)) is not None:
        wanted = found - 1
        return next((c for c in cells if c.index == wanted), None)
    by_hash = [c for c in cells if c.source_hash.startswith(selector)]
    if by_hash and len(selector) >= 4:
        return by_hash[0]
    return next((c for c in cells if selector in c.first_line), None)


# The figures the cell model types, and those it keeps per repeat: ``--metric`` names one of them, or a figure the
# model does not type (a probe's newer figure), read from the document as recorded.
_CELL_FIGURES = frozenset(f.name for f in fields(Cell))
_SAMPLE_FIGURES = frozenset(f.name for f in fields(Samples))


def metric_value(record: RunRecord, metric: str, cell: str | None = None) -> tuple[float | None, list[float]]:
    """The figure ``metric`` of a run (from ``totals``, or from one cell), with repeated samples if any."""
    if cell is None:
        return _total_value(record.totals(), metric)
    cells = record.notebook_run().cells
    found = find_cell(cells, cell)
    if found is None:
        return None, []
    samples: Sequence[Any] = ()
    if metric in _CELL_FIGURES:
        value = getattr(found, metric)
        if found.samples is not None and metric in _SAMPLE_FIGURES:
            samples = getattr(found.samples, metric)
    else:
        value = record.measured(RecordedFigures).cells[cells.index(found)].get(metric)
    if not _finite(value):
        return None, []  # NaN or a missing figure is a gap in the series, not a level
    return float(value), [float(s) for s in samples if _finite(s)]


def _total_value(totals: object, metric: str) -> tuple[float | None, list[float]]:
    """The figure ``metric`` of a run's totals. Read from the store's summary (or the document) as recorded:
    a total is any figure of any kind of run (a bench's ``figures``, a profile's ``wall_s``), which the
    typed ``Totals`` of a profile does not cover."""
    value = totals.get(metric) if isinstance(totals, Mapping) else None
    return (float(value), []) if _finite(value) else (None, [])


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def history(
    store: Store,
    target: str,
    *,
    metric: str = "wall_s",
    cell: str | None = None,
    kind: str | None = None,
    digest: str | None = None,
    limit: int | None = None,
    options: ChangeOptions | None = None,
    aliases: Sequence[str] | None = None,
) -> History:
    """The series of ``target``'s runs in ``store``, one per (kind, digest, measurement settings), oldest
    run first. ``aliases``: every name the target's runs may be stored under (its current name first;
    :meth:`nbscope.record.store.Store.names_of`). Rows the store cannot read are left out (the store
    reports them)."""
    names = list(aliases) if aliases else [target]
    target = names[0]
    # The store's summary columns group and order the runs; a run's document is read only for a cell's
    # figure (a total is in the summaries), and only for the runs the series keep.
    rows = store.summaries(
        ("started_at", "kind", "digest", "status", "machine", "settings", "totals"),
        target=names,
        kind=kind,
        digest=digest,
    )
    rows = [row for row in rows if row["kind"] != "trial"]  # a trial is its run's (``show``), not a series
    if not rows:
        known = store.targets()
        hint = f"; stored targets: {', '.join(known[:8])}" if known else ""
        raise NbscopeError(f"no runs of {target!r} in {store.path}{hint}")
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["settings"] is None or row["totals"] is None:  # unreadable when the store was migrated
            record = store.readable(row["id"])
            if record is None:
                continue  # reported by the store
            row = {**row, "settings": series_settings(record.settings), "totals": dict(record.totals())}
        settings_key = json.dumps(row["settings"], sort_keys=True, default=str)
        groups.setdefault((row["kind"], row["digest"], settings_key), []).append(row)
    series = []
    for (run_kind, run_digest, _), group in groups.items():
        group.sort(key=lambda r: (r["started_at"], r["id"]))
        if limit:
            group = group[-limit:]
        points = []
        for row in group:
            if cell is None:
                value, samples = _total_value(row["totals"], metric)
            elif (record := store.readable(row["id"])) is not None:
                value, samples = metric_value(record, metric, cell)
            else:
                continue  # reported by the store
            state = decode(Totals, row["totals"]).cache_state
            points.append(Point(row["id"], row["started_at"], value, row["status"], samples, state or None))
        if all(p.value is None for p in points):
            continue
        series.append(
            Series(
                kind=run_kind,
                digest=run_digest,
                machine=group[-1]["machine"],
                points=points,
                changes=change_points(points, options),
                settings={k: v for k, v in group[-1]["settings"].items() if k != "env"},
                env=short_hashes(decode(Settings, group[-1]["settings"]).env),
            )
        )
    if not series:
        what = f"cell {cell!r} " if cell else ""
        raise NbscopeError(f"the runs of {target!r} have no {what}figure {metric!r}")
    series.sort(key=lambda s: s.points[-1].started_at, reverse=True)
    labelled = [replace(entry, label=label) for entry, label in zip(series, series_labels(series), strict=True)]
    note = foreign_env_note(store, [row for group in groups.values() for row in group])
    return History(target=target, metric=metric, cell=cell, series=labelled, notes=(note,) if note else ())


def env_hashes(record: RunRecord) -> dict[str, str]:
    """The run's ``--env`` settings as name -> the first 6 hex digits of a SHA-256 of the stored value: enough to
    tell two values apart, never the value itself (a stored value may be a secret)."""
    return short_hashes(record.run_settings().env)


def short_hashes(env: Mapping[str, Any]) -> dict[str, str]:
    """name -> the first 6 hex digits of a SHA-256 of its value."""
    return {str(name): hashlib.sha256(str(value).encode()).hexdigest()[:6] for name, value in env.items()}


# Shown for every series; the rest only where series differ in it (or, for one series, where it is not the default).
_ALWAYS = ("kind", "machine")
_DEFAULTS = {"default backend", "no persistent cache", "no timeline", "--repeat 1"}


def series_labels(series: Sequence[Series]) -> list[str]:
    """One label per series: its kind and machine, then what separates it from the others (digest, options,
    ``--env`` names with hashed values); a setting one series has and another lacks reads ``no --env NAME``."""
    parts = [entry.parts() for entry in series]
    keys = list(dict.fromkeys(key for p in parts for key in p))
    labels = []
    for own in parts:
        shown = []
        for key in keys:
            values = {p.get(key) for p in parts}
            text = own.get(key) or (f"no --{key}" if key.startswith("env ") else None)
            if text is None:
                continue
            if key in _ALWAYS or len(values) > 1 or (len(parts) == 1 and text not in _DEFAULTS):
                shown.append(text)
        labels.append(" · ".join(shown))
    return labels
