"""Views of a target's history: its series over time with their change points (terminal and markdown)."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from nbscope._units import count, seconds_range
from nbscope.analyse.history import History, Series
from nbscope.render._markdown import markdown_table, plain_text, table_cell
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import console, format_seconds, metric_name, terminal_table


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return format_seconds(value) if unit == "s" else f"{value:g}"


def history_points_rows(result: History, series: Series, show_points: int = 12) -> Rows:
    """A series' newest runs: run, start, status, the figure; the cache state at the start of each run where
    nbscope set a persistent cache (one series holds a run that filled it and runs that read it)."""
    with_cache = any(p.cache_state not in (None, "off") for p in series.points)
    columns = (
        Column("run", "right", "number"),
        Column("started (UTC)", "left", "number"),
        Column("status", "left", "number"),
        Column(metric_name(result.metric), "right", "number"),
        Column("cache at start", "left", "number", terminal=with_cache, in_markdown=with_cache),
    )
    rows = [
        (
            str(point.run_id),
            point.started_at[:16].replace("T", " "),
            str(point.status),
            _value(point.value, result.unit),
            point.cache_state or "–",
        )
        for point in series.points[-show_points:]
    ]
    return Rows.of(columns, rows)


def history_changes_rows(result: History, series: Series) -> Rows:
    """A series' change points: the run each starts at, and the level before and after it."""
    columns = (
        Column("change at run", "right", "number", markdown="Change at run"),
        Column("started (UTC)", "left", "number"),
        Column("before", "right", "number"),
        Column("after", "right", "number"),
        Column("ratio", "right", "number"),
    )
    rows = [
        (
            Item(f"{c.run_id}{' (tentative: newest run only)' if c.tentative else ''}", "yellow"),
            c.started_at[:19].replace("T", " "),
            _value(c.before, result.unit),
            _value(c.after, result.unit),
            f"×{c.ratio:.2f}" if c.ratio else "–",
        )
        for c in series.changes
    ]
    return Rows.of(columns, rows)


def _series_heading(result: History, series: Series) -> str:
    """``profile · AMD EPYC ×2 · --jax-cache warm · 2 runs · latest 3.40 s · median 3.52 s · range 3.40–3.63 s``"""
    values = [v for v in series.values if v is not None]
    return (
        f"{series.label} · {count(len(series.points), 'run')} · latest "
        f"{_value(values[-1] if values else None, result.unit)} · median {_value(series.median, result.unit)}"
        + (f" · range {_range(min(values), max(values), result.unit)}" if len(values) > 1 else "")
    )


def _range(low: float, high: float, unit: str) -> str:
    return seconds_range(low, high) if unit == "s" else f"{low:g}–{high:g}"


def print_history(result: History, *, show_points: int = 12) -> None:
    """Each series: its heading, sparkline and change points, then a table of its newest runs."""
    what = f"cell {result.cell} · " if result.cell else ""
    console.print(
        f"[bold]history[/bold] · {escape(result.target)} · {escape(what)}{metric_name(result.metric)}", highlight=False
    )
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    if len(result.series) > 1:
        console.print(
            f"[dim]{len(result.series)} series: runs are compared only within one, each labelled by what "
            "sets it apart[/dim]",
            highlight=False,
        )
    for series in result.series:
        console.print()
        console.print(Text(_series_heading(result, series), style="bold"))
        line = series.sparkline
        console.print(f"  {line}", highlight=False)
        marks = [" "] * len(line)
        for change in series.changes:
            marks[change.index] = "^"
        if series.changes:
            console.print(f"  [yellow]{''.join(marks)}[/yellow]", highlight=False)
            console.print(terminal_table(history_changes_rows(result, series)))
        else:
            console.print("  [dim]no change point[/dim]")
        console.print(terminal_table(history_points_rows(result, series, show_points)))


def history_markdown(result: History, *, show_points: int = 12) -> str:
    """Each series: its label and sparkline, a table of its change points and one of its newest runs."""
    what = f" · cell `{table_cell(result.cell)}`" if result.cell else ""
    lines = [f"### nbscope history: `{table_cell(result.target)}`{what} · {metric_name(result.metric)}", ""]
    for series in result.series:
        lines += [f"**{plain_text(series.label)}** · {count(series.run_count, 'run')} · `{series.sparkline}`", ""]
        if series.changes:
            lines += [*markdown_table(history_changes_rows(result, series)), ""]
        else:
            lines += ["No change point.", ""]
        lines += [*markdown_table(history_points_rows(result, series, show_points)), ""]
    return "\n".join(lines)
