"""Views of a gate result (terminal and markdown for ``$GITHUB_STEP_SUMMARY``) and of a history."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from nbscope._units import count, seconds_range
from nbscope.analyse.gate import GateComparison, GateResult, GateRunSummary
from nbscope.analyse.history import History, Series
from nbscope.render._markdown import markdown_table, plain_text, table_cell
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import cell_columns, console, format_seconds, metric_name, terminal_table

VERDICT_STYLE = {
    "regression": "bold red",
    "failed": "bold red",
    "not-significant": "yellow",
    "faster": "green",
    "new": "cyan",
    "removed": "cyan",
    "not-comparable": "dim",
    "below-floor": "dim",
    "unchanged": "",
}
VERDICT_MARK = {
    "regression": "❌ regression",
    "failed": "❌ failed",
    "not-significant": "⚠️ slower, not significant",
    "faster": "✅ faster",
    "new": "new",
    "removed": "removed",
    "not-comparable": "not comparable",
    "below-floor": "below noise floor",
    "unchanged": "unchanged",
}


def _run_text(run: GateRunSummary) -> str:
    name = f"run {run.run_id}" if run.run_id is not None else "run"
    return f"{name} ({run.started_at[:19].replace('T', ' ')} UTC, digest {run.digest or '?'}, {run.repeats}×)"


def _ratio(c: GateComparison) -> str:
    if c.ratio is None:
        return "–"
    if c.ratio == float("inf"):
        return "∞"
    return f"×{c.ratio:.2f}"


def _delta(c: GateComparison) -> str:
    if c.delta_s is None:
        return "–"
    sign = "+" if c.delta_s >= 0 else "−"
    return sign + format_seconds(abs(c.delta_s))


def _p(c: GateComparison) -> str:
    # Blank, not "–", where nothing was tested: the terminal then leaves out a column with no p value at all.
    return "" if c.p_value is None else f"{c.p_value:.3g}"


def _shown(result: GateResult, *, everything: bool) -> list[GateComparison]:
    if everything:
        return result.cells
    quiet = ("unchanged", "below-floor")
    return [c for c in result.cells if c.verdict not in quiet]


def _floors(result: GateResult, comparisons: list[GateComparison]) -> set[float]:
    return {c.floor_s for c in [*comparisons, result.total] if c.floor_s}


def _floor_column(result: GateResult, comparisons: list[GateComparison]) -> bool:
    """The noise floor is a terminal column only where cells differ in it (or the console has room)."""
    return len(_floors(result, comparisons)) > 1 or console.width >= 100


def gate_rows(
    result: GateResult, comparisons: list[GateComparison], *, total: bool = True, floor_column: bool = False
) -> Rows:
    """The gate's table, once for both formats: a row per comparison, then the total (with ``total``).

    A verdict's note is in the markdown verdict; a terminal prints it below the table, so that every row
    stays one line at 80 columns. The floor is a terminal column only with ``floor_column``."""
    columns = (
        *cell_columns(),
        Column("baseline", "right", "number"), Column("candidate", "right", "number"),
        Column("change", "right", "number"), Column("ratio", "right", "number"),
        Column("p", "right", "number", optional=True, markdown="p"),
        Column("floor", "right", "number", terminal=floor_column, in_markdown=False),
        Column("verdict", "left", "text", min_width=17, in_markdown=False),  # "below noise floor" whole
        Column("verdict", "left", "text", terminal=False),
    )
    rows = []
    for c in [*comparisons, *result.totals] if total else comparisons:
        is_total = c in result.totals
        mark = VERDICT_MARK.get(c.verdict, c.verdict)
        rows.append((
            "" if is_total or c.index is None else str(c.index + 1),
            "" if is_total or not c.line else str(c.line),
            Item(_row_name(c, result), strong=True) if is_total else Item(c.first_line, code=True),
            format_seconds(c.base_s), format_seconds(c.cand_s), _delta(c), _ratio(c), _p(c),
            format_seconds(c.floor_s) if c.floor_s else "–",
            Item(mark, VERDICT_STYLE.get(c.verdict, "")),
            mark + (f" ({c.note})" if c.note else ""),
        ))
    return Rows.of(columns, rows)


def print_gate(result: GateResult, *, everything: bool = False) -> None:
    """The verdict, then the cells that moved (all cells with ``everything``), then the total.

    Every figure and verdict is whole at the console's width (the source gives way first)."""
    verdict = "[bold green]PASS[/bold green]" if result.passed else "[bold red]FAIL[/bold red]"
    console.print(
        f"{verdict} · gate on {escape(result.candidate.target)} · max slowdown {result.options.max_slowdown:.0%}"
        f" · α={result.options.alpha:g}"
    )
    console.print(f"[dim]baseline  {escape(_run_text(result.baseline))}[/dim]")
    console.print(f"[dim]candidate {escape(_run_text(result.candidate))}[/dim]")
    if result.noise_note:
        console.print(f"[dim]{escape(result.noise_note)}[/dim]", highlight=False)
    for warning in result.warnings:
        console.print(f"[yellow]note:[/yellow] {escape(warning)}", highlight=False)
    rows = _shown(result, everything=everything)
    if result.cells:
        console.print(f"{len(rows)} of {len(result.cells)} cells shown")
    floor_column = _floor_column(result, rows)
    floors = _floors(result, rows)
    if not floor_column and floors:
        console.print(f"[dim]noise floor {format_seconds(next(iter(floors)))} for each cell and the total[/dim]")
    if result.whole is not None:
        covers = result.whole.label.removeprefix("whole notebook (paired cells").removesuffix(")")
        console.print(f"[dim]total: the {escape(result.total.label.removeprefix('total of '))} only; "
                      f"whole: the paired cells{escape(covers)}[/dim]", highlight=False)
    console.print(terminal_table(gate_rows(result, rows, floor_column=floor_column)))
    for reason in result.reasons():
        console.print(f"[red]regression[/red] {escape(reason)}", highlight=False)
    for c in [*rows, *result.totals]:
        if c.note:  # below the table, so that every row stays one line at 80 columns
            console.print(f"[dim]{escape(_row_name(c, result))}: {escape(c.note)}[/dim]", highlight=False)


def _row_name(c: GateComparison, result: GateResult) -> str:
    if c is result.total:
        return "total"
    if c is result.whole:
        return "whole"  # short: the source column is narrow at 80 columns; a line above says what it covers
    return f"cell {c.index + 1}" if c.index is not None else "cell"


def _total_line(c: GateComparison, name: str) -> str:
    return (f"**{name}**: {format_seconds(c.base_s)} → {format_seconds(c.cand_s)} ({_ratio(c)}, "
            f"{VERDICT_MARK.get(c.verdict, c.verdict)})")


def gate_markdown(result: GateResult, *, everything: bool = False) -> str:
    """A GitHub-ready summary (for ``$GITHUB_STEP_SUMMARY``): verdict, failing cells, the table."""
    icon = "✅" if result.passed else "❌"
    word = "passed" if result.passed else "failed"
    total = result.total
    lines = [
        f"### {icon} nbscope gate {word}: `{table_cell(result.candidate.target)}`",
        "",
        f"Baseline {plain_text(_run_text(result.baseline))} · candidate {plain_text(_run_text(result.candidate))} · "
        f"max slowdown **{result.options.max_slowdown:.0%}**, α = {result.options.alpha:g}, "
        f"cells under {format_seconds(result.options.min_cell_s)} ignored · {plain_text(result.noise_note)}",
        "",
        # Each total says what it covers: the paired cells, and the whole notebook where cells are unpaired.
        _total_line(total, f"Total ({plain_text(total.label.removeprefix('total of '))})" if result.cells else "Total"),
        "",
    ]
    if result.whole is not None:
        lines[-1:-1] = ["", _total_line(result.whole, "Whole notebook")
                        + f" · {plain_text(result.whole.label.removeprefix('whole notebook '))}"]
    reasons = result.reasons()
    if reasons:
        lines += ["**Regressions:**", ""] + [f"- {plain_text(r)}" for r in reasons] + [""]
    for warning in result.warnings:
        lines.append(f"> {plain_text(warning)}")
    if result.warnings:
        lines.append("")
    rows = _shown(result, everything=everything)
    if rows:
        # The total is the line above the table, not a row of it.
        lines += markdown_table(gate_rows(result, rows, total=False))
        hidden = len(result.cells) - len(rows)
        if hidden:
            lines += ["", f"{count(hidden, 'more cell')} unchanged or below the noise floor."]
    elif result.cells:
        lines.append(f"All {len(result.cells)} cells unchanged or below the noise floor.")
    return "\n".join(lines) + "\n"


# --- history ---------------------------------------------------------------------------------------------


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return format_seconds(value) if unit == "s" else f"{value:g}"


def history_points_rows(result: History, series: Series, show_points: int = 12) -> Rows:
    """A series' newest runs: run, start, status, the figure; the cache state at the start of each run where
    nbscope set a persistent cache (one series holds a run that filled it and runs that read it)."""
    with_cache = any(p.cache_state not in (None, "off") for p in series.points)
    columns = (Column("run", "right", "number"), Column("started (UTC)", "left", "number"),
               Column("status", "left", "number"), Column(metric_name(result.metric), "right", "number"),
               Column("cache at start", "left", "number", terminal=with_cache, in_markdown=with_cache))
    rows = [(str(point.run_id), point.started_at[:16].replace("T", " "), str(point.status),
             _value(point.value, result.unit), point.cache_state or "–")
            for point in series.points[-show_points:]]
    return Rows.of(columns, rows)


def history_changes_rows(result: History, series: Series) -> Rows:
    """A series' change points: the run each starts at, and the level before and after it."""
    columns = (Column("change at run", "right", "number", markdown="Change at run"),
               Column("started (UTC)", "left", "number"),
               Column("before", "right", "number"), Column("after", "right", "number"),
               Column("ratio", "right", "number"))
    rows = [(Item(f"{c.run_id}{' (tentative: newest run only)' if c.tentative else ''}", "yellow"),
             c.started_at[:19].replace("T", " "), _value(c.before, result.unit), _value(c.after, result.unit),
             f"×{c.ratio:.2f}" if c.ratio else "–")
            for c in series.changes]
    return Rows.of(columns, rows)


def _series_heading(result: History, series: Series) -> str:
    """``profile · AMD EPYC ×2 · --jax-cache warm · 2 runs · latest 3.40 s · median 3.52 s · range 3.40–3.63 s``"""
    values = [v for v in series.values if v is not None]
    count = len(series.points)
    return (
        f"{series.label} · {count} run{'s' if count != 1 else ''} · latest "
        f"{_value(values[-1] if values else None, result.unit)} · median {_value(series.to_dict()['median'], result.unit)}"
        + (f" · range {_range(min(values), max(values), result.unit)}" if len(values) > 1 else "")
    )


def _range(low: float, high: float, unit: str) -> str:
    return seconds_range(low, high) if unit == "s" else f"{low:g}–{high:g}"


def print_history(result: History, *, show_points: int = 12) -> None:
    """Each series: its heading, sparkline and change points, then a table of its newest runs."""
    what = f"cell {result.cell} · " if result.cell else ""
    console.print(f"[bold]history[/bold] · {escape(result.target)} · {escape(what)}{metric_name(result.metric)}",
                  highlight=False)
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    if len(result.series) > 1:
        console.print(f"[dim]{len(result.series)} series: runs are compared only within one, each labelled by what "
                      "sets it apart[/dim]", highlight=False)
    for series in result.series:
        console.print()
        console.print(Text(_series_heading(result, series), style="bold"))
        line = series.to_dict()["sparkline"]
        console.print(f"  {line}", highlight=False)
        marks = [" "] * len(line)
        for change in series.changes:
            marks[change.index] = "^"
        if series.changes:
            console.print(f"  [yellow]{''.join(marks)}[/yellow]", highlight=False)
        if series.changes:
            console.print(terminal_table(history_changes_rows(result, series)))
        else:
            console.print("  [dim]no change point[/dim]")
        console.print(terminal_table(history_points_rows(result, series, show_points)))


def history_markdown(result: History, *, show_points: int = 12) -> str:
    """Each series: its label and sparkline, a table of its change points and one of its newest runs."""
    what = f" · cell `{table_cell(result.cell)}`" if result.cell else ""
    lines = [f"### nbscope history: `{table_cell(result.target)}`{what} · {metric_name(result.metric)}", ""]
    for series in result.series:
        data = series.to_dict()
        lines += [
            f"**{plain_text(series.label)}** · {data['runs']} run{'s' if data['runs'] != 1 else ''} · "
            f"`{data['sparkline']}`",
            "",
        ]
        if series.changes:
            lines += [*markdown_table(history_changes_rows(result, series)), ""]
        else:
            lines += ["No change point.", ""]
        lines += [*markdown_table(history_points_rows(result, series, show_points)), ""]
    return "\n".join(lines)
