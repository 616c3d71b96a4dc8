"""Shared pieces of the HTML report: escaping, tables, names and the constants of its plots."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from nbscope import _units
from nbscope._redact import shorten
from nbscope.record.run import RunRecord
from nbscope.render._clean import for_html

_seconds = _units.seconds
CELL_KINDS = ("profile", "trace")
MAX_WATERFALL_CELLS = 150
MAX_BAR_CELLS = 30
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
COMPILE_COLOR = "#dd8452"
RUN_COLOR = "#4c72b0"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"


e = for_html  # the one HTML escaper (``render._clean``): any value, without control or escape sequences


def e_code(value: object) -> str:
    """Escaped text whose `backtick spans` become <code> (after escaping, so nothing else is markup)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", e(value))


_number = _units.number


def _short(given: object, width: int = 40) -> str:
    text = " ".join(str(given or "").split())
    return shorten(text, width)


def run_name(record: RunRecord, position: int) -> str:
    return f"run {record.run_id}" if record.run_id is not None else f"record {position + 1}"


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    numeric: Iterable[int] = (),
    row_class: Callable[[int], str] | None = None,
) -> str:
    """An HTML table; cells are escaped unless given as ``Markup``."""
    right = set(numeric)
    out = ["<table><thead><tr>", *(f"<th>{e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for number, row in enumerate(rows):
        css = row_class(number) if row_class else ""
        out.append(f'<tr class="{e(css)}">' if css else "<tr>")
        for column, value in enumerate(row):
            text = value.html if isinstance(value, Markup) else e(value)
            out.append(f'<td class="n">{text}</td>' if column in right else f"<td>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class Markup:
    """Already-escaped HTML for :func:`_table`."""

    def __init__(self, html_text: str) -> None:
        self.html = html_text
