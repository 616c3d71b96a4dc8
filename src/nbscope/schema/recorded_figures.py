"""A run's figures of any kind, each by name as recorded: its totals and its cells' objects.

A profile's totals and cells are typed (``schema.model``); other kinds carry totals of their own (a bench's
``figures``, an audit's ``notebooks``), and a probe newer than the model may record a figure the model does not
type. ``nbscope runs``, the store's summary column and ``history --metric`` read any of them by name: this view is
that part of the document, read once at the boundary (an absent or null ``totals`` or ``cells`` reads as empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RecordedFigures:
    totals: Mapping[str, Any]
    cells: tuple[Mapping[str, Any], ...]  # validated as objects at load, so in the order of the typed cells
