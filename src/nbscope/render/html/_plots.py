"""The HTML report's plots, as inline SVG (``_svg``: text kept as escaped ``<text>``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from nbscope._units import count
from nbscope.analyse.report import ReportData
from nbscope.record.run import RunRecord
from nbscope.render.html._base import (
    COLORS,
    COMPILE_COLOR,
    MAX_BAR_CELLS,
    MAX_WATERFALL_CELLS,
    RUN_COLOR,
    _seconds,
    _short,
    run_name,
)
from nbscope.render.html._svg import BarChart, PointChart
from nbscope.render.terminal import metric_name
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell
from nbscope.schema.pathways import PathwayRow, PathwaysRun
from nbscope.schema.suite import LoopsRun

if TYPE_CHECKING:
    from nbscope.analyse.history import History


def _label(cell: Cell | PathwayRow, width: int = 38) -> str:
    """``3 L41 x = f(y)``: a cell's number, its line and its first line (a pathways row names its cell alike)."""
    where = f" L{cell.line}" if cell.line else ""
    return f"{(cell.index or 0) + 1}{where} {_short(cell.first_line, width)}"


def waterfall_svg(record: RunRecord) -> str | None:
    """Cells in notebook order on a time axis: each bar starts where the previous cell ended; compile
    (orange) and run (blue) stacked; failing cells outlined in red."""
    cells = [c for c in record.notebook_run().cells if c.wall_s is not None]
    if not cells:
        return None
    shown = cells[:MAX_WATERFALL_CELLS]
    start = 0.0
    total = sum(c.wall_s or 0.0 for c in shown) or 1.0
    chart = BarChart([_label(c) for c in shown], "", "seconds since the first cell started (kernel-side wall time)")
    for row, cell in enumerate(shown):
        wall = cell.wall_s or 0.0
        compile_s = min(wall, cell.compile_s or 0.0)
        failed = cell.status in ("error", "timeout", "kernel-died")
        chart.bar(row, start, compile_s, COMPILE_COLOR, outline=failed)
        chart.bar(row, start + compile_s, wall - compile_s, RUN_COLOR, outline=failed)
        if wall >= 0.02 * total:
            chart.note(row, start + wall, _seconds(wall))
        start += wall
    chart.title = f"{record.target}: {count(len(cells), 'cell')}, {_seconds(start)}"
    return chart.svg([("compile (JAX + Numba)", COMPILE_COLOR), ("run", RUN_COLOR)])


def grouped_bars_svg(
    labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], *, title: str, xlabel: str
) -> str:
    """Horizontal bars, one group per label, one bar per series."""
    chart = BarChart(list(labels), title, xlabel, bars_per_row=max(1, len(series)))
    for number, (_, values) in enumerate(series):
        for row, value in enumerate(values):
            if value is not None:
                chart.bar(row, 0.0, value, COLORS[number % len(COLORS)], slot=number)
    return chart.svg([(name, COLORS[number % len(COLORS)]) for number, (name, _) in enumerate(series)])


def side_by_side_svg(data: ReportData) -> str | None:
    """Cells paired across runs (:attr:`ReportData.side_by_side`): the slowest cells, one bar per run."""
    if not data.side_by_side:
        return None
    runs = [data.records[i] for i in data.side_by_side_runs]
    table = data.side_by_side

    def wall(cell: Cell | None) -> float | None:
        return cell.wall_s if cell is not None else None

    slowest = sorted(table, key=lambda row: max((wall(c) or 0.0) for c in row), reverse=True)
    keep = {id(row) for row in slowest[:MAX_BAR_CELLS]}
    rows = [row for row in table if id(row) in keep]
    labels = [_label(next(c for c in row if c is not None)) for row in rows]
    series = [
        (f"{run_name(r, i)} · {r.digest} · {r.machine().summary}", [wall(row[k]) for row in rows])
        for k, (i, r) in enumerate(zip(data.side_by_side_runs, runs, strict=True))
    ]
    title = f"slowest {count(len(rows), 'cell')}, paired by source across {len(runs)} runs"
    return grouped_bars_svg(labels, series, title=title, xlabel="wall time per cell (s)")


def pathways_svg(record: RunRecord) -> str | None:
    run = decode(PathwaysRun, record.measurements)
    pathways = list(run.pathways)
    if not pathways or not run.cells:
        return None

    def wall(row: PathwayRow, name: str) -> float | None:
        entry = row.in_pathway(name)
        return entry.wall_s if entry is not None else None

    slowest = sorted(run.cells, key=lambda c: max((wall(c, p) or 0.0) for p in pathways), reverse=True)[:MAX_BAR_CELLS]
    shown = [c for c in run.cells if any(c is s for s in slowest)]
    series = [(name, [wall(c, name) for c in shown]) for name in pathways]
    return grouped_bars_svg(
        [_label(c) for c in shown],
        series,
        title=f"{record.target}: cell wall time per pathway",
        xlabel="wall time per cell (s)",
    )


def loops_svg(record: RunRecord) -> str | None:
    sweeps = [s for s in decode(LoopsRun, record.measurements).sweeps if s.points]
    if not sweeps:
        return None
    chart = PointChart(
        f"{record.target}: loop sweeps (points measured, lines fitted a + b·n)",
        "trip count (iterations)",
        "seconds",
        xscale="log",
        yscale="log",
    )
    legend = []
    for number, sweep in enumerate(sweeps):
        color = COLORS[number % len(COLORS)]
        pairs = [(float(p.trips), float(p.seconds)) for p in sweep.points if p.trips > 0 and p.seconds > 0]
        if not pairs:
            continue
        fit = sweep.fit
        us = fit.us_per_iter if fit else None
        where = " · ".join(part for part in (sweep.device, sweep.placement) if part)
        legend.append((f"{where or '?'} · {sweep.loop or '?'}" + (f" · {us:.3g} µs/iter" if us else ""), color))
        chart.series(pairs, color)
        a, b = (fit.a_s, fit.b_s) if fit else (None, None)
        if a is not None and b is not None:
            low, high = min(n for n, _ in pairs), max(n for n, _ in pairs)
            grid = [low * (high / low) ** (i / 40) for i in range(41)]
            chart.series([(n, a + b * n) for n in grid if a + b * n > 0], color, markers=False, line=True)
    return chart.svg(legend)


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def history_svg(result: History, highlight: Iterable[int] = ()) -> str | None:
    """Each series of a :class:`nbscope.analyse.history.History` over time; change points as dashed lines with
    their ratio; the segment medians as steps; runs in the report drawn larger."""
    series = [s for s in result.series if any(p.value is not None for p in s.points)]
    if not series:
        return None
    marked = set(highlight)
    chart = PointChart(
        f"history of {result.target}" + (f" · cell {result.cell}" if result.cell else ""),
        "run started (UTC)",
        metric_name(result.metric) + (" (s)" if result.unit == "s" else ""),
        xscale="time",
        y_from_zero=True,
    )
    legend = []
    for number, entry in enumerate(series[: len(COLORS)]):
        color = COLORS[number % len(COLORS)]
        points = [p for p in entry.points if p.value is not None]
        placed = [(_parse_time(p.started_at).timestamp(), float(p.value or 0.0)) for p in points]  # none is None
        chart.series(placed, color, line=True)
        legend.append((entry.label or f"{entry.kind} · {entry.digest} · {entry.machine}", color))
        big = [xy for xy, p in zip(placed, points, strict=True) if p.run_id in marked]
        if big:
            chart.series(big, color, size=6.0, hollow=True)
        for change in entry.changes:
            ratio = f"×{change.ratio:.2f}" if change.ratio else ""
            chart.vline(_parse_time(change.started_at).timestamp(), color, ratio, change.after)
    return chart.svg(legend)
