"""Views of a gate result (terminal and markdown for ``$GITHUB_STEP_SUMMARY``) and of a history."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from nbscope.analyse.gate import Comparison, GateResult
from nbscope.analyse.history import History
from nbscope.render.terminal import console, format_seconds

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
    table = Table(title=f"{len(rows)} of {len(result.cells)} cells shown" if result.cells else None, title_justify="left")
    for column, justify in (
        ("cell", "left"), ("baseline", "right"), ("candidate", "right"), ("change", "right"),
        ("ratio", "right"), ("p", "right"), ("floor", "right"), ("verdict", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold" if column == "cell" else "ellipsis")
    for c in [*rows, result.total]:
        style = VERDICT_STYLE.get(c.verdict, "")
        verdict = VERDICT_MARK.get(c.verdict, c.verdict) + (f" ({c.note})" if c.note else "")
        table.add_row(
            escape(c.label), format_seconds(c.base_s), format_seconds(c.cand_s), _delta(c), _ratio(c), _p(c),
            format_seconds(c.floor_s) if c.floor_s else "–", escape(verdict),
            style=style or None, end_section=bool(rows) and c is rows[-1],
        )
    console.print(table)
    for reason in result.reasons():
        console.print(f"[red]regression[/red] {escape(reason)}", highlight=False)


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
            lines += ["", f"{hidden} more cell(s) unchanged or below the noise floor."]
    elif result.cells:
        lines.append(f"All {len(result.cells)} cells unchanged or below the noise floor.")
    return "\n".join(lines) + "\n"


# --- history ---------------------------------------------------------------------------------------------


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return format_seconds(value) if unit == "s" else f"{value:g}"


def _settings(series: Any) -> str:
    """`` · repeat 4 · timeline`` for a series measured with other than the default settings, else empty."""
    text = series.settings_text
    return "" if text == "default settings" else f" · {text}"


def print_history(result: History, *, show_points: int = 12) -> None:
    what = f"cell {result.cell} · " if result.cell else ""
    console.print(f"[bold]history[/bold] · {escape(result.target)} · {escape(what)}{result.metric}", highlight=False)
    for series in result.series:
        values = [v for v in series.values if v is not None]
        console.print(
            f"\n[bold]{escape(series.kind)}[/bold] on {escape(series.machine)} · digest {escape(str(series.digest))}{escape(_settings(series))} · "
            f"{len(series.points)} runs · "
            f"latest {_value(values[-1] if values else None, result.unit)} · median "
            f"{_value(series.to_dict()['median'], result.unit)} · range {_value(min(values), result.unit)}–"
            f"{_value(max(values), result.unit)}",
            highlight=False,
        )
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
        table = Table(show_header=True, box=None, padding=(0, 2))
        for column in ("run", "started (UTC)", "status", result.metric):
            table.add_column(column)
        for point in series.points[-show_points:]:
            table.add_row(
                str(point.run_id), escape(point.started_at[:19].replace("T", " ")), escape(str(point.status)),
                _value(point.value, result.unit),
            )
        console.print(table)


def history_markdown(result: History) -> str:
    what = f" · cell `{_code(result.cell)}`" if result.cell else ""
    lines = [f"### nbscope history: `{_code(result.target)}`{what} · {result.metric}", ""]
    for series in result.series:
        data = series.to_dict()
        lines += [
            f"**{series.kind}** on {_md(series.machine)} · digest `{series.digest}`{_md(_settings(series))} · "
            f"{data['runs']} runs · "
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
