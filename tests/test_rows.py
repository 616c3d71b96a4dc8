"""One row model per view (``render._rows``): the terminal and markdown are two formats of the same rows."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from diag_support import load_record
from nbscope.render import ledger
from nbscope.render._markdown import markdown_table, plain_text
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import terminal_table


def _printed(rows: Rows, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, highlight=False).print(terminal_table(rows, width=width))
    return out.getvalue()


COLUMNS = (
    Column("cell", "right", "number"),
    Column("line", "right", "number", optional=True),
    Column("source", "left", "source", markdown="Code"),
    Column("only here", terminal=False),
    Column("wall", "right", "number"),
)


def test_one_rows_two_formats_each_escaped_its_own_way() -> None:
    hostile = "x[i] = y | `z` <b>*a*</b> [/red]"
    rows = Rows.of(COLUMNS, [("1", "", Item(hostile, code=True), Item("a_b <i>", "red"), "1.50 s")])
    text = _printed(rows)
    assert hostile in text and "1.50 s" in text and "only here" not in text
    assert "line" not in text  # an optional column nothing fills is left out on a terminal
    lines = markdown_table(rows)
    assert lines[0] == "| Cell | Line | Code | Only here | Wall |" and lines[1] == "|---:|---:|---|---|---:|"
    assert lines[2] == ("| 1 |  | `x[i] = y \\| 'z' <b>*a*</b> [/red]` | a\\_b &lt;i&gt; | 1.50 s |")


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="a row of 2 items for 5 columns"):
        Rows.of(COLUMNS, [("1", "2")])


def test_plain_words_around_code_stay_outside_the_backticks() -> None:
    rows = Rows.of((Column("benchmark"),), [(Item("f(x)", code=True, lead="cell 3: ", tail=" (edited)"),)])
    assert markdown_table(rows)[2] == "| cell 3: `f(x)` (edited) |"
    assert "cell 3: f(x) (edited)" in _printed(rows)
    assert plain_text("<script>") == "&lt;script&gt;"


def test_the_ledger_prints_the_same_figures_in_both_formats() -> None:
    record = load_record("cpu_unrolled_loop")
    rows = ledger.ledger_rows(record, top=None, notebook_order=True)
    markdown = ledger.profile_markdown(record, top=None, notebook_order=True)
    text = _printed(rows, width=200)
    assert len(rows.rows) == len(record.measurements["cells"])
    for row in rows.rows:
        wall = row[3].text  # wall, compile and run are the same strings in both
        assert wall in text and wall in markdown
        assert f"| {row[0].text} |" in markdown
