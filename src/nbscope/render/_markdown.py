"""What the markdown views share: text made safe for one cell of a markdown table, and a view's rows as a table."""

from __future__ import annotations

from nbscope.render._clean import markdown_code, markdown_text
from nbscope.render._rows import Item, Rows

# The markdown escapers (``render._clean``) under the names the views use.
table_cell, plain_text = markdown_code, markdown_text


def _item(item: Item) -> str:
    text = table_cell(item.text) if item.code else plain_text(item.text)
    if item.code and text:
        text = f"`{text}`"
    text = plain_text(item.lead) + text + plain_text(item.tail)
    return f"**{text}**" if item.strong and text else text


def markdown_table(rows: Rows) -> list[str]:
    """A view's rows as the lines of a GitHub table: header, alignment, a line per row."""
    columns, items = rows.shown(markdown=True)
    lines = [
        "| " + " | ".join(c.markdown_header for c in columns) + " |",
        "|" + "|".join("---:" if c.justify == "right" else "---" for c in columns) + "|",
    ]
    lines += ["| " + " | ".join(_item(item) for item in row) + " |" for row in items]
    return lines
