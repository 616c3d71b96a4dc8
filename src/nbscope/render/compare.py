"""Terminal and markdown views of two runs compared cell by cell."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from nbscope._redact import shorten
from nbscope._units import count, size
from nbscope.collect import fingerprint as fp
from nbscope.render._markdown import markdown_table, plain_text
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import console, field_name, format_seconds, literal, metric_name, terminal_table

if TYPE_CHECKING:
    from nbscope.analyse.compare import CellFigures, CellRow, ComparedRun, Comparison, Difference, TotalRow, WinnerSide
    from nbscope.record.cells import CellMatch

MATCH_NOTE: dict[CellMatch, str] = {
    "hash": "",
    "edited": "edited",
    "moved": "moved",
    "similar": "similar",
    "only-a": "only in A",
    "only-b": "only in B",
}


def _cell_name(row: CellRow) -> str:
    return f"cell {_cell_number(row)}" + (f" · line {row.line}" if row.line else "")


def _cell_number(row: CellRow) -> str:
    """``3``, or ``3→4`` for a cell that moved (its number in A, then in B)."""
    ia, ib = row.index_a, row.index_b
    if ia is not None and ib is not None and ia != ib:
        return f"{ia + 1}→{ib + 1}"
    return str((ia if ia is not None else ib or 0) + 1)


def _side(figures: CellFigures | None, *, with_compile: bool) -> Item:
    """One side's wall time of a cell (``with_compile``: and its compile time), red with its status when the
    cell did not finish."""
    if figures is None:
        return Item("–")
    text = format_seconds(figures.wall_s)
    if with_compile and figures.compile_s:
        text += f" (compile {format_seconds(figures.compile_s)})"
    if figures.status in ("ok", "expected-error"):
        return Item(text)
    return Item(f"{text} {figures.status}", "red")


def _side_compile(figures: CellFigures | None) -> str:
    return format_seconds(figures.compile_s) if figures and figures.compile_s else "–"


def _value(value: object) -> str:
    if fp.is_absent(value):  # a field one side did not record: its reason, never the marker's JSON
        return f"absent ({value['absent']})"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return shorten(text, 100)
    return str(value)


def _run_title(run: ComparedRun) -> str:
    shown = ", ".join(f"{field_name('settings.' + key)} {value}" for key, value in run.title_settings)
    return f"{run.label} · {run.target} · {run.platform} · {run.machine}" + (f" · {shown}" if shown else "")


def _different_note(comparison: Comparison) -> str | None:
    """The warning of a comparison of two different notebooks (made with --allow-different)."""
    if comparison.same_notebook:
        return None
    return (
        f"different notebooks ({comparison.run_a.target} and {comparison.run_b.target}), compared with "
        "--allow-different: the totals and winners compare two programs, not one notebook's speed"
    )


# ---- comparison ---------------------------------------------------------------------------------

# B against A: green when it is faster; a tie or no winner (a side without a figure) is dim
WINNER_STYLE: dict[WinnerSide | None, str] = {"B": "green", "A": "red", "tie": "dim", None: "dim"}

# The cells table. A terminal names a cell by its number, line and source (and how it was paired); markdown
# by one "Benchmark" label: "cell 3 · line 41: `code` (edited)".
COMPARISON_COLUMNS = (
    Column("cell", "right", "number", in_markdown=False),
    Column("line", "right", "number", optional=True, in_markdown=False),
    Column("source", "left", "source", min_width=12, in_markdown=False),
    Column("benchmark", terminal=False, markdown="Benchmark"),
    Column("A", "right", "number"),
    Column("B", "right", "number"),
)
COMPILE_COLUMNS = (Column("A compile", "right", "number"), Column("B compile", "right", "number"))
WINNER_COLUMNS = (
    Column("winner", "left", "number"),
    Column("pairing", "left", "text", optional=True, in_markdown=False),
)
TOTAL_ROWS = ("wall_s", "compile_s", "run_s")  # the totals the cells table ends with (with_totals)


def _total_figures(total: TotalRow | None) -> tuple[str, str, str]:
    """A total's figures as both tables show them: A, B and the winner's text."""
    if total is None:
        return "–", "–", ""

    def shown(value: object) -> str:
        if total.key.endswith("_s"):
            return format_seconds(value)
        if total.key.endswith("_bytes"):
            return size(value) or _value(value)
        return _value(value)

    return shown(total.a), shown(total.b), total.winner.text if total.winner else ""


def comparison_rows(
    comparison: Comparison,
    *,
    top: int | None = None,
    compile_figures: Literal["columns", "inline"] | None = None,
    with_totals: bool = False,
) -> Rows:
    """The paired cells, in notebook order (``top``: the largest differences only), once for both formats.

    ``compile_figures``: each side's compile time in columns of its own, or after its wall time; ``with_totals``
    ends the table with the total wall, compile and run times.
    """
    cells = list(comparison.rows)
    if top:
        cells = sorted(cells, key=lambda r: abs(r.delta_s or 0.0), reverse=True)[:top]
    columns = [*COMPARISON_COLUMNS, *(COMPILE_COLUMNS if compile_figures == "columns" else ()), *WINNER_COLUMNS]
    inline = compile_figures == "inline"
    rows: list[list[Any]] = []
    for row in cells:
        code = row.code_line or row.first_line
        note = MATCH_NOTE[row.match]
        benchmark = Item(shorten(code, 60), code=True, lead=f"{_cell_name(row)}: ", tail=f" ({note})" if note else "")
        figures: list[Item | str] = [_side(row.a, with_compile=inline), _side(row.b, with_compile=inline)]
        if compile_figures == "columns":
            figures += [_side_compile(row.a), _side_compile(row.b)]
        winner = Item(row.winner.text or "–", WINNER_STYLE[row.winner.side])
        rows.append([_cell_number(row), str(row.line or ""), Item(code, code=True), benchmark, *figures, winner, note])
    for key in TOTAL_ROWS if with_totals else ():
        a, b, text = _total_figures(comparison.total(key))
        totals = [Item(a, strong=True), Item(b, strong=True)]
        if compile_figures == "columns":
            totals += [Item(""), Item("")]
        rows.append(["", "", "", Item(f"total {key[:-2]}", strong=True), *totals, Item(text or "–", strong=True), ""])
    title = f"{len(cells)} largest differences" if top else "cells in notebook order"
    return Rows.of(columns, rows, title=title)


def totals_rows(totals: Sequence[TotalRow]) -> Rows:
    """The comparison's totals: a row per figure either run measured."""
    rows = [
        (metric_name(total.key), *_total_figures(total))
        for total in totals
        if total.a is not None or total.b is not None
    ]
    columns = (
        Column("figure", "left", "number"),
        Column("A", "right", "number"),
        Column("B", "right", "number"),
        Column("winner", "left", "number"),
    )
    return Rows.of(columns, rows, title="totals")


def differences_rows(differences: Sequence[Difference]) -> Rows:
    """The settings and fingerprint fields that differ, and why each could change the figures."""
    columns = (
        Column("setting", "left", "path", min_width=10),
        Column("A", "left", "text", min_width=10),
        Column("B", "left", "text", min_width=10),
        Column("why it matters", "left", "text", min_width=16),
    )
    rows = [(field_name(row.field), _value(row.a), _value(row.b), row.why or row.note or "") for row in differences]
    title = f"{count(len(rows), 'difference')} that could explain the figures"
    return Rows.of(columns, rows, title=title)


def print_comparison(comparison: Comparison, *, top: int | None = None) -> None:
    """A table of paired cells (notebook order; ``top`` keeps the largest differences), totals, differences."""
    console.print(f"[bold]A[/bold] = {literal(_run_title(comparison.run_a))}")
    console.print(f"[bold]B[/bold] = {literal(_run_title(comparison.run_b))}")
    different = _different_note(comparison)
    if different:
        console.print(f"[bold yellow]{literal(different)}[/bold yellow]")
    pairing = comparison.pairing
    note = "every cell paired" if pairing.all_paired else f"{pairing.only_a} only in A, {pairing.only_b} only in B"
    console.print(
        literal(
            f"{pairing.cells_a} vs {pairing.cells_b} cells: {pairing.by_hash} paired by source hash, "
            f"{pairing.by_order + pairing.by_similarity + pairing.by_move} moved, edited or similar; {note}"
        ),
        style="dim",
    )
    # Every figure stays whole on a narrow console: the source gives way; compile columns show from 110.
    compile_figures: Literal["columns"] | None = "columns" if console.width >= 110 else None
    console.print(terminal_table(comparison_rows(comparison, top=top, compile_figures=compile_figures)))
    console.print(terminal_table(totals_rows(comparison.totals)))
    if comparison.differences:
        console.print(terminal_table(differences_rows(comparison.differences)))
    else:
        console.print("Settings and fingerprints agree on every compared field.")


def comparison_markdown(comparison: Comparison) -> str:
    """GitHub-ready: ``| Benchmark | A | B | Winner |`` with "B 3.1× faster", then totals and differences."""
    a, b = comparison.run_a, comparison.run_b
    if comparison.same_notebook:
        title = f"### nbscope compare: `{_md(a.target)}`, {plain_text(a.label)} vs {plain_text(b.label)}"
    else:
        title = (
            f"### nbscope compare (different notebooks): {plain_text(a.label)} `{_md(a.target)}` vs "
            f"{plain_text(b.label)} `{_md(b.target)}`"
        )
    different = _different_note(comparison)
    lines = [
        title,
        "",
        *([f"> **Warning**: {plain_text(different)}", ""] if different else []),
        f"- **A** = {plain_text(_run_title(a))}",
        f"- **B** = {plain_text(_run_title(b))}",
        "",
        *markdown_table(comparison_rows(comparison, compile_figures="inline", with_totals=True)),
    ]
    differences = comparison.differences
    lines += [
        "",
        f"**Differences that could explain the figures** ({len(differences)}):"
        if differences
        else "Settings and fingerprints agree on every compared field.",
        "",
    ]
    # A list rather than a table: a field's values can be long (a JSON object, a path).
    for setting, value_a, value_b, why in differences_rows(differences).rows:
        reason = f" — {plain_text(why.text)}" if why.text else ""
        # Outside backticks: names and values are shown as written, never read as HTML or emphasis.
        lines.append(f"- `{_md(setting.text)}`: {plain_text(value_a.text)} → {plain_text(value_b.text)}{reason}")
    return "\n".join(lines) + "\n"
