"""What the markdown views share: text made safe for one cell of a markdown table."""

from __future__ import annotations

from typing import Any


def table_cell(text: Any) -> str:
    """``text`` on one line, with no ``|`` that would end the cell nor a backtick that would open code."""
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")
