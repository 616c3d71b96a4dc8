"""Views of a gate result (terminal and markdown for ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

from rich.markup import escape

from nbscope._units import count
from nbscope.analyse.gate import GateComparison, GateResult, GateRunSummary, GateVerdict
from nbscope.render._clean import code_span
from nbscope.render._markdown import markdown_table, plain_text, table_cell
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import cell_columns, console, format_seconds, terminal_table

VERDICT_STYLE: dict[GateVerdict, str] = {  # every verdict: tests/test_gate.py checks the tables are whole
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
VERDICT_MARK: dict[GateVerdict, str] = {
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


def gate_rows(
    result: GateResult, comparisons: list[GateComparison], *, total: bool = True, floor_column: bool = False
) -> Rows:
    """The gate's table, once for both formats: a row per comparison, then the total (with ``total``).

    A verdict's note is in the markdown verdict; a terminal prints it below the table, so that every row
    stays one line at 80 columns. The floor is a terminal column only with ``floor_column``."""
    columns = (
        *cell_columns(),
        Column("baseline", "right", "number"),
        Column("candidate", "right", "number"),
        Column("change", "right", "number"),
        Column("ratio", "right", "number"),
        Column("p", "right", "number", optional=True, markdown="p"),
        Column("floor", "right", "number", terminal=floor_column, in_markdown=False),
        Column("verdict", "left", "text", min_width=17, in_markdown=False),  # "below noise floor" whole
        Column("verdict", "left", "text", terminal=False),
    )
    rows = []
    for c in [*comparisons, *result.totals] if total else comparisons:
        is_total = c in result.totals
        mark = VERDICT_MARK[c.verdict]
        rows.append(
            (
                "" if is_total or c.index is None else str(c.index + 1),
                "" if is_total or not c.line else str(c.line),
                Item(_row_name(c, result), strong=True) if is_total else Item(c.first_line, code=True),
                *_judged(c),
                _delta(c),
                _ratio(c),
                _p(c),
                format_seconds(c.floor_s) if c.floor_s else "–",
                Item(mark, VERDICT_STYLE[c.verdict]),
                mark + (f" ({c.note})" if c.note else ""),
            )
        )
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
    floors = {c.floor_s for c in [*rows, result.total] if c.floor_s}
    # The noise floor is a column only where cells differ in it (or the console has room), else a line here.
    floor_column = len(floors) > 1 or console.width >= 100
    if not floor_column and floors:
        console.print(f"[dim]noise floor {format_seconds(next(iter(floors)))} for each cell and the total[/dim]")
    if result.whole is not None:
        covers = result.whole.label.removeprefix("whole notebook (paired cells").removesuffix(")")
        console.print(
            f"[dim]total: the {escape(result.total.label.removeprefix('total of '))} only; "
            f"whole: the paired cells{escape(covers)}[/dim]",
            highlight=False,
        )
    console.print(terminal_table(gate_rows(result, rows, floor_column=floor_column)))
    for reason in result.reasons:
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


def _judged(c: GateComparison) -> tuple[str, str]:
    """The two figures the change, ratio and verdict are of (the walls less the wait for a CPU, where judged so)."""
    base, cand = (c.base_s, c.cand_s) if c.base_judged_s is None else (c.base_judged_s, c.cand_judged_s)
    return format_seconds(base), format_seconds(cand)


def _total_line(c: GateComparison, name: str) -> str:
    return f"**{name}**: {' → '.join(_judged(c))} ({_ratio(c)}, {VERDICT_MARK[c.verdict]})"


def _reason(c: GateComparison, reason: str) -> str:
    """A regression's line in markdown: the cell's source line in a code span, where no link or image is live."""
    head, sep, source = c.label.partition(": ")
    if not (sep and c.index is not None and reason.startswith(c.label)):
        return plain_text(reason)
    return plain_text(head + sep) + code_span(source) + plain_text(reason.removeprefix(c.label))


def gate_markdown(result: GateResult, *, everything: bool = False) -> str:
    """A GitHub-ready summary (for ``$GITHUB_STEP_SUMMARY``): verdict, failing cells, the table."""
    icon = "✅" if result.passed else "❌"
    word = "passed" if result.passed else "failed"
    if result.confirmation is not None:  # the sentence itself is the first note
        word += (
            " (regression confirmed by a rerun)"
            if result.confirmation.confirmed
            else " (a rerun did not confirm a regression)"
        )
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
        lines[-1:-1] = [
            "",
            _total_line(result.whole, "Whole notebook")
            + f" · {plain_text(result.whole.label.removeprefix('whole notebook '))}",
        ]
    reasons = result.reasons
    if reasons:
        lines += (
            ["**Regressions:**", ""]
            + [f"- {_reason(c, r)}" for c, r in zip(result.failures, reasons, strict=True)]
            + [""]
        )
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
