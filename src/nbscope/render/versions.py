"""Views of ``nbscope versions`` (variants side by side, per cell) and ``nbscope bisect`` (the first bad
release and the evidence), for the terminal and as markdown."""

from __future__ import annotations

import json
import math

from nbscope.analyse.compare import CellFigures
from nbscope.analyse.gate import GateComparison, GateVerdict
from nbscope.analyse.versions import (
    BisectResult,
    BisectVerdict,
    Evidence,
    VariantCell,
    VersionsResult,
    target_label,
    verdicts_by_cell,
)
from nbscope.collect import fingerprint as fp
from nbscope.render._markdown import markdown_table, plain_text, table_cell
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.gate import VERDICT_MARK, VERDICT_STYLE
from nbscope.render.terminal import console, field_name, format_seconds, literal, terminal_table
from nbscope.schema.codec import encode


def versions_json(result: VersionsResult | BisectResult) -> str:
    """``versions --json`` and ``bisect --json``: the result as the codec writes it."""
    return json.dumps(encode(result), indent=1, default=str)


def _value(value: object) -> str:
    if fp.is_absent(value):
        return f"absent ({value['absent']})"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _cell_name(row: VariantCell) -> str:
    return f"{row.index + 1}" + (f" (line {row.line})" if row.line else "")


def _wall(figures: CellFigures | None) -> str:
    if figures is None:
        return "–"
    text = format_seconds(figures.wall_s)
    if figures.status not in ("ok", "expected-error", "skipped"):
        text += f" {figures.status}"
    return text


# A bisection step's verdict: the gate's, or the two words of a step the gate did not judge.
BISECT_MARK: dict[BisectVerdict, str] = {"baseline": "baseline", "untestable": "untestable"}
BISECT_MARK.update((verdict, mark) for verdict, mark in VERDICT_MARK.items())
BISECT_STYLE: dict[BisectVerdict, str] = {"baseline": "", "untestable": ""}
BISECT_STYLE.update((verdict, style) for verdict, style in VERDICT_STYLE.items())


def _verdict(verdict: GateVerdict | None) -> Item:
    """A gate's verdict; a blank where the cell has none."""
    return Item("", "") if verdict is None else Item(VERDICT_MARK[verdict], VERDICT_STYLE[verdict])


def variant_letters(count: int) -> list[str]:
    """The variants that ran, by letter (named above the terminal's table): a requirement as a header would
    take the figures' room."""
    return [chr(ord("A") + number) if number < 26 else str(number + 1) for number in range(count)]


def versions_rows(result: VersionsResult) -> Rows:
    """The variants side by side, once for both formats: a row per cell (each variant's wall time, and the
    gate's verdict between consecutive variants), then the totals. A terminal heads a variant by its letter,
    markdown by its requirement."""
    ran = result.ran
    letters = variant_letters(len(ran))
    columns = [Column("cell", "right", "number"), Column("first line", "left", "source", min_width=12)]
    for number, (letter, variant) in enumerate(zip(letters, ran, strict=True)):
        columns.append(Column(letter, "right", "number", markdown=f"`{table_cell(variant.label)}`"))
        if number < len(result.gates):
            columns.append(Column(f"{letter}→{letters[number + 1]}", "left", "text", min_width=14, markdown="→"))
    verdicts = [verdicts_by_cell(g.result) for g in result.gates]
    rows: list[list[object]] = []
    for row in result.cells:
        values: list[object] = [_cell_name(row), Item(row.first_line, code=True)]
        for number, figures in enumerate(row.runs):
            values.append(_wall(figures))
            if number < len(verdicts):
                after = row.runs[number + 1]
                values.append(_verdict(verdicts[number].get(after.index) if after is not None else None))
        rows.append(values)
    total_row: list[object] = ["", Item("total", strong=True)]
    for number, totals in enumerate(result.totals):
        total_row.append(Item(format_seconds(totals.wall_s), strong=True))
        if number < len(result.gates):
            total_row.append(_verdict(result.gates[number].result.total.verdict))
    rows.append(total_row)
    return Rows.of(columns, rows)


def print_versions(result: VersionsResult, *, store_path: object = None) -> None:
    """Each variant's wall time per cell, the gate's verdict between consecutive variants, the totals,
    the fingerprint fields that differ, and the variants that could not run."""
    ran = result.ran
    console.print(
        f"[bold]nbscope versions[/bold] · {literal(result.target)} · {len(ran)} of {len(result.variants)} variants ran"
    )
    for variant in result.variants:
        if variant.ran:
            record = variant.record
            where = "reused" if variant.reused else f"built in {format_seconds(variant.build_s)}"
            console.print(
                f"[dim]{literal(variant.label)}: run {record.run_id} · {record.status} · "  # type: ignore[union-attr]
                f"environment {literal(variant.environment)} ({where})[/dim]"
            )
    if ran:
        for letter, variant in zip(variant_letters(len(ran)), ran, strict=True):
            console.print(f"{letter} = {literal(variant.label)}")
        console.print(terminal_table(versions_rows(result)))
    if result.differences:
        console.print("[bold]what differs between the variants' environments[/bold]")
        for row in result.differences:
            values = " → ".join(_value(v) for v in row.values)
            why = f" [dim]({literal(row.why)})[/dim]" if row.why else ""
            console.print(f"  {literal(field_name(row.field))}: {literal(values)}{why}")
    elif len(ran) > 1:
        console.print("[yellow]the variants' environments do not differ in any fingerprint field[/yellow]")
    for gate in result.gates:
        for warning in gate.result.warnings:
            console.print(f"[yellow]{literal(gate.a)} → {literal(gate.b)}: {literal(warning)}[/yellow]")
    for variant in result.failed:
        console.print(f"[red]{literal(variant.label)}: not run: {literal(variant.error)}[/red]")
    if store_path is not None and ran:
        console.print(f"[dim]runs {', '.join(str(v.record.run_id) for v in ran)} saved in {literal(store_path)}[/dim]")  # type: ignore[union-attr]


def versions_markdown(result: VersionsResult) -> str:
    """The same as :func:`print_versions`, as a GitHub-ready markdown table."""
    ran = result.ran
    lines = [f"### nbscope versions: `{table_cell(result.target)}`", ""]
    if ran:
        lines += [*markdown_table(versions_rows(result)), ""]
    if result.differences:
        lines += ["**What differs:**", ""]
        for row in result.differences:
            values = " → ".join(_value(v) for v in row.values)
            lines.append(
                f"- `{table_cell(row.field)}`: {plain_text(values)}" + (f" ({plain_text(row.why)})" if row.why else "")
            )
        lines.append("")
    for variant in result.failed:
        lines.append(f"> `{table_cell(variant.label)}` not run: {plain_text(variant.error)}")
    return "\n".join(lines).rstrip() + "\n"


def _comparison_text(comparison: GateComparison | None) -> str:
    if comparison is None:
        return "–"
    ratio = comparison.ratio  # infinite for a cell that took 0 s before: no ratio to show (nor in --json)
    return (
        f"{format_seconds(comparison.base_s)} → {format_seconds(comparison.cand_s)}"
        + (f" (×{ratio:.2f}" if isinstance(ratio, float) and math.isfinite(ratio) else " (")
        + (f", p={comparison.p_value:.3g})" if comparison.p_value is not None else ", no test: too few repeats)")
    )


def _evidence_lines(evidence: Evidence | None) -> list[str]:
    """The evidence's lines; without evidence (no slowdown found), its times and counts as unknown."""
    good, bad = (evidence.good, evidence.bad) if evidence else (None, None)
    moved = evidence.moved if evidence else None
    lines = [
        f"compile {format_seconds(good and good.compile_s)} → {format_seconds(bad and bad.compile_s)}, "
        f"run {format_seconds(good and good.run_s)} → {format_seconds(bad and bad.run_s)}"
        + (
            f": the {moved.mostly.part} time grew most ({moved.mostly.share:.0%} of the added wall time)"
            if moved is not None and moved.mostly is not None
            else ""
        )
    ]
    counts = evidence.compile_counts_changed if evidence else {}
    if counts:
        lines.append(
            "compile counts changed: "
            + ", ".join(f"{name.replace('_', ' ')} {change.good} → {change.bad}" for name, change in counts.items())
        )
    else:
        lines.append("compile counts unchanged")
    for finding in evidence.findings_appeared if evidence else ():
        where = f" (cell {finding.cell_index + 1})" if finding.cell_index is not None else ""
        lines.append(f"new finding{where}: {finding.rule}: {finding.summary}")
    for row in evidence.differences if evidence else ():
        lines.append(f"{row.field}: {' → '.join(_value(v) for v in row.values)}")
    return lines


def _headline(result: BisectResult) -> str:
    on = target_label(result.cell)
    if result.first_bad is None:
        return result.note or f"no slowdown found on {on}"
    return (
        f"first bad release: {result.package} {result.first_bad} (last good {result.last_good}) on {on}: "
        f"{_comparison_text(result.slowdown)} against {result.good}"
    )


def bisect_rows(result: BisectResult) -> Rows:
    """The versions tried, once for both formats: each one's run, its comparison against the good version
    and the gate's verdict (or why it could not be tried)."""
    columns = (
        Column("version", "left", "number"),
        Column("run", "right", "number"),
        # a version is a record's text: escaped for the terminal's header, which is read as markup
        Column(literal("against " + result.good), "right", "number", markdown=f"Against {plain_text(result.good)}"),
        Column("verdict", "left", "text", min_width=14),
    )
    rows = []
    for step in result.steps:
        verdict = BISECT_MARK[step.verdict] + (f": {step.error}" if step.error else "")
        rows.append(
            (
                step.version,
                str(step.run_id or "–"),
                _comparison_text(step.comparison),
                Item(verdict, BISECT_STYLE[step.verdict]),
            )
        )
    return Rows.of(columns, rows)


def print_bisect(result: BisectResult) -> None:
    console.print(
        f"[bold]nbscope bisect[/bold] · {literal(result.target)} · {literal(result.package)} "
        f"{literal(result.good)} (good) … {literal(result.bad)} (bad) · {len(result.versions)} releases · "
        f"{result.profiles} profiles"
    )
    console.print(terminal_table(bisect_rows(result)))
    colour = "bold red" if result.first_bad else "green"
    console.print(f"[{colour}]{literal(_headline(result))}[/{colour}]")
    if result.first_bad and result.last_good != result.good:
        console.print(f"  against {literal(result.last_good)}: {literal(_comparison_text(result.step_slowdown))}")
    if result.note and result.first_bad:
        console.print(f"[yellow]{literal(result.note)}[/yellow]")
    for line in _evidence_lines(result.evidence):
        console.print(f"  {literal(line)}")


def bisect_markdown(result: BisectResult) -> str:
    lines = [
        f"### nbscope bisect: `{table_cell(result.target)}` · {plain_text(result.package)} {plain_text(result.good)} … {plain_text(result.bad)}",
        "",
        f"**{plain_text(_headline(result))}** ({result.profiles} profiles of {len(result.versions)} releases)",
        "",
        *markdown_table(bisect_rows(result)),
        "",
    ]
    if result.note and result.first_bad:
        lines += [f"> {plain_text(result.note)}", ""]
    lines += [f"- {plain_text(line)}" for line in _evidence_lines(result.evidence)]
    return "\n".join(lines).rstrip() + "\n"
