"""The HTML report's plots: matplotlib figures inlined as SVG (text kept as escaped ``<text>``)."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from nbscope._units import count
from nbscope.analyse.report import ReportData
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord
from nbscope.render.html._base import (
    COLORS,
    COMPILE_COLOR,
    MAX_BAR_CELLS,
    MAX_WATERFALL_CELLS,
    RUN_COLOR,
    _number,
    _seconds,
    _short,
    run_name,
)
from nbscope.render.terminal import metric_name

_salt = itertools.count()



def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    return figure


def svg(figure: Any) -> str:
    """The figure as an ``<svg>`` element to inline (no XML prolog); text kept as escaped ``<text>``."""
    import matplotlib

    buffer = io.StringIO()
    rc = {"svg.fonttype": "none", "svg.hashsalt": f"nbscope-{next(_salt)}"}
    with matplotlib.rc_context(rc):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    return re.sub(r"<svg\b", '<svg class="plot" role="img"', text, count=1)


def _plain(text: str) -> str:
    """A label for matplotlib shown as written: ``$`` escaped (no mathtext), no control characters."""
    return "".join(ch if ch.isprintable() else " " for ch in text).replace("$", r"\$")


def _label(cell: dict[str, Any], width: int = 38) -> str:
    where = f" L{cell['line']}" if cell.get("line") else ""
    return _plain(f"{int(cell.get('index', 0)) + 1}{where} {_short(cell.get('first_line'), width)}")


def waterfall_svg(record: RunRecord) -> str | None:
    """Cells in notebook order on a time axis: each bar starts where the previous cell ended; compile
    (orange) and run (blue) stacked; failing cells outlined in red."""
    cells = [c for c in record.measurements.get("cells") or [] if _number(c.get("wall_s")) is not None]
    if not cells:
        return None
    shown = cells[:MAX_WATERFALL_CELLS]
    figure = _figure(10, max(2.2, 0.24 * len(shown) + 1.2))
    axes = figure.subplots()
    start = 0.0
    total = sum(_number(c.get("wall_s")) or 0.0 for c in shown) or 1.0
    for row, cell in enumerate(shown):
        wall = _number(cell.get("wall_s")) or 0.0
        compile_s = min(wall, _number(cell.get("compile_s")) or 0.0)
        failed = cell.get("status") in ("error", "timeout", "kernel-died")
        edge = {"edgecolor": "#c00000", "linewidth": 1.2} if failed else {}
        axes.barh(row, compile_s, left=start, color=COMPILE_COLOR, height=0.7, **edge)
        axes.barh(row, wall - compile_s, left=start + compile_s, color=RUN_COLOR, height=0.7, **edge)
        if wall >= 0.02 * total:
            axes.text(start + wall, row, " " + _seconds(wall), va="center", fontsize=7)
        start += wall
    axes.set_yticks(range(len(shown)), [_label(c) for c in shown], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first cell started (kernel-side wall time)")
    axes.set_xlim(0, start * 1.12 or 1)
    from matplotlib.patches import Patch

    figure.legend(
        handles=[Patch(color=COMPILE_COLOR, label="compile (JAX + Numba)"), Patch(color=RUN_COLOR, label="run")],
        loc="outside upper right", fontsize=8, ncols=2,
    )
    axes.set_title(_plain(f"{record.target}: {count(len(cells), 'cell')}, {_seconds(start)}"), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    return svg(figure)


def grouped_bars_svg(
    labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], *, title: str, xlabel: str
) -> str:
    """Horizontal bars, one group per label, one bar per series."""
    figure = _figure(10, max(2.2, 0.22 * len(labels) * max(1, len(series)) * 0.8 + 1.4))
    axes = figure.subplots()
    height = 0.8 / max(1, len(series))
    for number, (name, values) in enumerate(series):
        positions = [i - 0.4 + height * (number + 0.5) for i in range(len(labels))]
        widths = [v if v is not None else 0.0 for v in values]
        axes.barh(positions, widths, height=height, color=COLORS[number % len(COLORS)], label=_plain(name))
    axes.set_yticks(range(len(labels)), [_plain(label) for label in labels], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(_plain(title), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    figure.legend(fontsize=8, loc="outside lower center", ncols=min(2, len(series)))
    return svg(figure)


def side_by_side_svg(data: ReportData) -> str | None:
    """Cells paired across runs (:attr:`ReportData.side_by_side`): the slowest cells, one bar per run."""
    if not data.side_by_side:
        return None
    runs = [data.records[i] for i in data.side_by_side_runs]

    def wall(cell: dict[str, Any] | None) -> float | None:
        return _number(cell.get("wall_s")) if cell is not None else None

    slowest = sorted(data.side_by_side, key=lambda row: max((wall(c) or 0.0) for c in row), reverse=True)
    keep = {id(row) for row in slowest[:MAX_BAR_CELLS]}
    rows = [row for row in data.side_by_side if id(row) in keep]
    labels = [_label(next(c for c in row if c is not None)) for row in rows]
    series = [
        (f"{run_name(r, i)} · {r.digest} · {fp.summary(r.fingerprint)}", [wall(row[k]) for row in rows])
        for k, (i, r) in enumerate(zip(data.side_by_side_runs, runs, strict=True))
    ]
    title = f"slowest {count(len(rows), 'cell')}, paired by source across {len(runs)} runs"
    return grouped_bars_svg(labels, series, title=title, xlabel="wall time per cell (s)")


def pathways_svg(record: RunRecord) -> str | None:
    pathways = list((record.measurements.get("pathways") or {}).keys())
    cells = [c for c in record.measurements.get("cells") or [] if isinstance(c.get("by_pathway"), dict)]
    if not pathways or not cells:
        return None

    def wall(cell: dict[str, Any], name: str) -> float | None:
        return _number((cell["by_pathway"].get(name) or {}).get("wall_s"))

    slowest = sorted(cells, key=lambda c: max((wall(c, p) or 0.0) for p in pathways), reverse=True)[:MAX_BAR_CELLS]
    shown = [c for c in cells if any(c is s for s in slowest)]
    series = [(name, [wall(c, name) for c in shown]) for name in pathways]
    return grouped_bars_svg(
        [_label(c) for c in shown], series, title=f"{record.target}: cell wall time per pathway",
        xlabel="wall time per cell (s)",
    )


def loops_svg(record: RunRecord) -> str | None:
    sweeps = [s for s in record.measurements.get("sweeps") or [] if isinstance(s, dict)]
    sweeps = [s for s in sweeps if s.get("trip_counts") and s.get("seconds")]
    if not sweeps:
        return None
    figure = _figure(9, 5)
    axes = figure.subplots()
    for number, sweep in enumerate(sweeps):
        color = COLORS[number % len(COLORS)]
        pairs = [
            (float(n), float(t))
            for n, t in zip(sweep["trip_counts"], sweep["seconds"], strict=False)
            if _number(n) and _number(t)
        ]
        if not pairs:
            continue
        fit = sweep.get("fit") or {}
        us = _number(fit.get("us_per_iter"))
        where = " · ".join(str(sweep[k]) for k in ("device", "placement") if sweep.get(k))
        name = f"{where or '?'} · {sweep.get('loop', '?')}" + (f" · {us:.3g} µs/iter" if us else "")
        axes.plot(*zip(*pairs, strict=True), "o", color=color, label=_plain(name))
        a, b = _number(fit.get("a_s")), _number(fit.get("b_s"))
        if a is not None and b is not None:
            low, high = min(n for n, _ in pairs), max(n for n, _ in pairs)
            grid = [low * (high / low) ** (i / 40) for i in range(41)] if low > 0 else [low, high]
            axes.plot(grid, [a + b * n for n in grid], "-", color=color, alpha=0.6)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("trip count (iterations)")
    axes.set_ylabel("seconds")
    axes.set_title(_plain(f"{record.target}: loop sweeps (points measured, lines fitted a + b·n)"), fontsize=10)
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=8)
    return svg(figure)


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def history_svg(result: Any, highlight: Iterable[int] = ()) -> str | None:
    """Each series of a :class:`nbscope.analyse.history.History` over time; change points as dashed lines with
    their ratio; the segment medians as steps; runs in the report drawn larger."""
    series = [s for s in result.series if any(p.value is not None for p in s.points)]
    if not series:
        return None
    marked = set(highlight)
    figure = _figure(10, 3.8)
    axes = figure.subplots()
    for number, entry in enumerate(series[: len(COLORS)]):
        color = COLORS[number % len(COLORS)]
        points = [p for p in entry.points if p.value is not None]
        times = [_parse_time(p.started_at) for p in points]
        values = [p.value for p in points]
        axes.plot(times, values, "o-", color=color, markersize=4, linewidth=1,
                  label=_plain(entry.label or f"{entry.kind} · {entry.digest} · {entry.machine}"))
        big = [(t, p.value) for t, p in zip(times, points, strict=True) if p.run_id in marked]
        if big:
            axes.plot(*zip(*big, strict=True), "o", color=color, markersize=9, markerfacecolor="none")
        for change in entry.changes:
            when = _parse_time(change.started_at)
            axes.axvline(when, color=color, linestyle="--", alpha=0.7)
            ratio = f"×{change.ratio:.2f}" if change.ratio else ""
            axes.annotate(ratio, (when, change.after), textcoords="offset points", xytext=(4, 6), fontsize=8,
                          color=color)
    axes.set_ylabel(_plain(metric_name(result.metric) + (" (s)" if result.unit == "s" else "")))
    what = f" · cell {result.cell}" if result.cell else ""
    axes.set_title(_plain(f"history of {result.target}{what}"), fontsize=10)
    axes.grid(alpha=0.3)
    top = max((p.value for entry in series for p in entry.points if p.value is not None), default=1.0)
    axes.set_ylim(0, top * 1.15 or 1.0)
    axes.legend(fontsize=8, loc="lower left")
    figure.autofmt_xdate()
    return svg(figure)


