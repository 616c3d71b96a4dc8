"""A diagnosis finding's document (``Finding.to_dict``: ``diagnose --json``, an audit entry's top findings), as
``analyse.diagnose.Finding`` is read back from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A finding as its document wrote it: its cell at ``index`` (or ``cell_index``), its title the rule's name
    when it has none."""
    index = next((value[k] for k in ("cell_index", "index") if isinstance(value.get(k), int)), None)
    return {**value, "index": index, "title": value.get("title") or value.get("rule")}
