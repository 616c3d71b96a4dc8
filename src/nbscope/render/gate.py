"""Views of a gate result (terminal and markdown for ``$GITHUB_STEP_SUMMARY``) and of a history."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text

from nbscope._units import count, seconds_range
from nbscope.analyse.gate import Comparison, GateResult
from nbscope.analyse.history import History
from nbscope.render.terminal import Column, cell_columns, console, fitted_table, format_seconds, metric_name

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


def _run_text(run: dict[str, Any]) -> str:
    name = f"run {run['run_id']}" if run.get("run_id") is not None else "run"
    return (
        f"{name} ({run.get('started_at', '')[:19].replace('T', ' ')} UTC, digest {run.get('digest') or '?'}, "
        f"{run.get('repeats')}× )"
    ).replace("× )", "×)")


def _ratio(c: Comparison) -> str:
    if c.ratio is None:
        return "–"
    if c.ratio == float("inf"):
        return "∞"
    return f"×{c.ratio:.2f}"


def _delta(c: Comparison) -> str:
    if c.delta_s is None:
        return "–"
    sign = "+" if c.delta_s >= 0 else "−"
    return sign + format_seconds(abs(c.delta_s))


def _p(c: Comparison) -> str:
    return "–" if c.p_value is None else f"{c.p_value:.3g}"


def _shown(result: GateResult, *, everything: bool) -> list[Comparison]:
    if everything:
        return result.cells
    quiet = ("unchanged", "below-floor")
    return [c for c in result.cells if c.verdict not in quiet]


def print_gate(result: GateResult, *, everything: bool = False) -> None:
    """The verdict, then the cells that moved (all cells with ``everything``), then the total."""
    verdict = "[bold green]PASS[/bold green]" if result.passed else "[bold red]FAIL[/bold red]"
    console.print(
        f"{verdict} · gate on {escape(str(result.candidate.get('target')))} · max slowdown {result.options.max_slowdown:.0%}"
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
    console.print(gate_table(result, rows))
    for reason in result.reasons():
        console.print(f"[red]regression[/red] {escape(reason)}", highlight=False)
    for c in [*rows, result.total]:
        if c.note:  # below the table, so that every row stays one line at 80 columns
            console.print(f"[dim]{escape(_row_name(c, result))}: {escape(c.note)}[/dim]", highlight=False)


def _row_name(c: Comparison, result: GateResult) -> str:
    return "total" if c is result.total else f"cell {c.index + 1}" if c.index is not None else "cell"


def gate_table(result: GateResult, rows: list[Comparison]) -> Any:
    """The cells that moved, then the total, at the console's width: every figure and verdict whole (the source
    gives way first; a verdict's note is printed below the table). The noise floor is a column only where cells
    differ in it."""
    floors = {c.floor_s for c in [*rows, result.total] if c.floor_s}
    floor_column = len(floors) > 1 or console.width >= 100
    if not floor_column and floors:
        console.print(f"[dim]noise floor {format_seconds(next(iter(floors)))} for each cell and the total[/dim]")
    columns = [
        *cell_columns(),
        Column("baseline", "right", "number"), Column("candidate", "right", "number"),
        Column("change", "right", "number"), Column("ratio", "right", "number"),
        Column("p", "right", "number", optional=True),
        *([Column("floor", "right", "number")] if floor_column else []),
        Column("verdict", "left", "text", min_width=17),  # "below noise floor" whole
    ]
    table_rows = []
    for c in [*rows, result.total]:
        style = VERDICT_STYLE.get(c.verdict, "")
        verdict = VERDICT_MARK.get(c.verdict, c.verdict)
        total = c is result.total
        table_rows.append([
            "" if total or c.index is None else str(c.index + 1),
            "" if total or not c.line else str(c.line),
            Text("total" if total else c.first_line, no_wrap=True, overflow="ellipsis", style="bold" if total else ""),
            format_seconds(c.base_s), format_seconds(c.cand_s), _delta(c), _ratio(c),
            "" if c.p_value is None else _p(c),
            *([format_seconds(c.floor_s) if c.floor_s else "–"] if floor_column else []),
            f"[{style}]{escape(verdict)}[/{style}]" if style else escape(verdict),
        ])
    return fitted_table(columns, table_rows)


def _code(text: str) -> str:
    """Text for inside a markdown code span in a table cell."""
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _md(text: str) -> str:
    """Plain markdown text: no HTML, no table breaks."""
    return (
        str(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("<", "&lt;")
        .replace(">", "&gt;").replace("*", "\\*").replace("_", "\\_").replace("\n", " ")
    )


def gate_markdown(result: GateResult, *, everything: bool = False) -> str:
    """A GitHub-ready summary (for ``$GITHUB_STEP_SUMMARY``): verdict, failing cells, the table."""
    icon = "✅" if result.passed else "❌"
    word = "passed" if result.passed else "failed"
    total = result.total
    lines = [
        f"### {icon} nbscope gate {word}: `{_code(result.candidate.get('target', ''))}`",
        "",
        f"Baseline {_md(_run_text(result.baseline))} · candidate {_md(_run_text(result.candidate))} · "
        f"max slowdown **{result.options.max_slowdown:.0%}**, α = {result.options.alpha:g}, "
        f"cells under {format_seconds(result.options.min_cell_s)} ignored · {_md(result.noise_note)}",
        "",
        f"**Total**: {format_seconds(total.base_s)} → {format_seconds(total.cand_s)} ({_ratio(total)}, "
        f"{VERDICT_MARK.get(total.verdict, total.verdict)})",
        "",
    ]
    reasons = result.reasons()
    if reasons:
        lines += ["**Regressions:**", ""] + [f"- {_md(r)}" for r in reasons] + [""]
    for warning in result.warnings:
        lines.append(f"> {_md(warning)}")
    if result.warnings:
        lines.append("")
    rows = _shown(result, everything=everything)
    if rows:
        lines += [
            "| Cell | Line | Source | Baseline | Candidate | Change | Ratio | p | Verdict |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---|",
        ]
        for c in rows:
            number = "" if c.index is None else str(c.index + 1)
            first = c.first_line if len(c.first_line) <= 60 else c.first_line[:59] + "…"
            verdict = VERDICT_MARK.get(c.verdict, c.verdict) + (f" ({c.note})" if c.note else "")
            lines.append(
                f"| {number} | {c.line or ''} | `{_code(first)}` | {format_seconds(c.base_s)} | "
                f"{format_seconds(c.cand_s)} | {_delta(c)} | {_ratio(c)} | {_p(c)} | {_md(verdict)} |"
            )
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


def _history_rows(result: History, series: Any, show_points: int) -> tuple[list[Column], list[list[str]]]:
    """The table of a series' newest runs: run, start, status, the figure; the cache state at the start of each
    run where nbscope set a persistent cache (one series holds a run that filled it and runs that read it)."""
    with_cache = any(p.cache_state not in (None, "off") for p in series.points)
    columns = [Column("run", "right", "number"), Column("started (UTC)", "left", "number"),
               Column("status", "left", "number"), Column(metric_name(result.metric), "right", "number")]
    if with_cache:
        columns.append(Column("cache at start", "left", "number"))
    rows = []
    for point in series.points[-show_points:]:
        row = [str(point.run_id), escape(point.started_at[:16].replace("T", " ")), escape(str(point.status)),
               _value(point.value, result.unit)]
        if with_cache:
            row.append(escape(point.cache_state or "–"))
        rows.append(row)
    return columns, rows


def _series_heading(result: History, series: Any) -> str:
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
    what = f"cell {result.cell} · " if result.cell else ""
    console.print(f"[bold]history[/bold] · {escape(result.target)} · {escape(what)}{metric_name(result.metric)}",
                  highlight=False)
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
        for change in series.changes:
            ratio = f" (×{change.ratio:.2f})" if change.ratio else ""
            console.print(
                f"  [yellow]{'tentative change (newest run only)' if change.tentative else 'change'}[/yellow] at run {change.run_id} ({escape(change.started_at[:19].replace('T', ' '))}): "
                f"{_value(change.before, result.unit)} → {_value(change.after, result.unit)}{ratio}",
                highlight=False,
            )
        if not series.changes:
            console.print("  [dim]no change point[/dim]")
        columns, rows = _history_rows(result, series, show_points)
        console.print(fitted_table(columns, rows))


def history_markdown(result: History) -> str:
    what = f" · cell `{_code(result.cell)}`" if result.cell else ""
    lines = [f"### nbscope history: `{_code(result.target)}`{what} · {metric_name(result.metric)}", ""]
    for series in result.series:
        data = series.to_dict()
        lines += [
            f"**{_md(series.label)}** · {data['runs']} run{'s' if data['runs'] != 1 else ''} · "
            f"`{data['sparkline']}`",
            "",
        ]
        if series.changes:
            lines += ["| Run | Started (UTC) | Before | After | Ratio |", "|---:|---|---:|---:|---:|"]
            for c in series.changes:
                lines.append(
                    f"| {c.run_id}{' (tentative)' if c.tentative else ''} | {c.started_at[:19].replace('T', ' ')} | "
                    f"{_value(c.before, result.unit)} | "
                    f"{_value(c.after, result.unit)} | {f'×{c.ratio:.2f}' if c.ratio else '–'} |"
                )
            lines.append("")
        else:
            lines += ["No change point.", ""]
    return "\n".join(lines)
