"""A diagnosis finding's document (``Finding.to_dict``: ``diagnose --json``, an audit entry's top findings), as
``analyse.diagnose.Finding`` is read back from it, and the terms of its evidence every reader reads alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def reshape(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A finding as its document wrote it: its cell at ``index`` (or ``cell_index``), its title the rule's name
    when it has none."""
    index = next((value[k] for k in ("cell_index", "index") if isinstance(value.get(k), int)), None)
    return {**value, "index": index, "title": value.get("title") or value.get("rule")}


@dataclass(frozen=True, slots=True)
class EvidenceTerms:
    """The parts of a finding's evidence every reader reads alike (the rest is each rule's own)."""

    seconds_at_stake: float  # what the fix would save; 0.0 when the rule names no time
    see_also: tuple[str, ...]  # the specific findings on the same cell: a generic symptom's likely causes
