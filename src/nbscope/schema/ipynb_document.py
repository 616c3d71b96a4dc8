"""An ``.ipynb`` file's JSON as written, before nbformat reads it (``collect.notebook`` reads it): its major
format version, and the check of the fields of its cells nbscope itself reads, which names the first wrong one
by its path (``cells[3].source: 42 is not a string or list of strings``) where nbformat's schema would name the
first of its own rules. The check reads the document raw, where it is loaded: whether a field is missing or
written as null is what it reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nbscope._redact import shorten

__all__ = ["IpynbDocument", "check_cells", "shown"]


@dataclass(frozen=True, slots=True)
class IpynbDocument:
    nbformat: Any  # as written: 4 for a current notebook; 1-3 for one nbformat upgrades; else not a notebook


def shown(value: object) -> str:
    """A value as an error message quotes it: its JSON, cut at 40 characters."""
    text = json.dumps(value, default=str)
    return shorten(text, 40)


def check_cells(data: object) -> None:
    """The fields nbscope itself reads, checked before nbformat's schema: the first wrong one, by path
    (``ValueError``)."""
    if not isinstance(data, dict):
        raise ValueError(f"the notebook: {shown(data)} is not a JSON object")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise ValueError(f"cells: {shown(cells)} is not a list" if "cells" in data else "cells: missing")
    for number, cell in enumerate(cells):
        where = f"cells[{number}]"
        if not isinstance(cell, dict):
            raise ValueError(f"{where}: {shown(cell)} is not a JSON object")
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise ValueError(f"{where}.cell_type: {shown(cell.get('cell_type'))} is not code, markdown or raw")
        source = cell.get("source")
        if "source" not in cell:
            raise ValueError(f"{where}.source: missing")
        if not (isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            raise ValueError(f"{where}.source: {shown(source)} is not a string or list of strings")
        metadata = cell.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ValueError(f"{where}.metadata: {shown(metadata)} is not a JSON object")
        tags = metadata.get("tags", [])
        if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise ValueError(f"{where}.metadata.tags: {shown(tags)} is not a list of strings")
