"""Typed builders for tests: a cell (``schema.model.Cell``) with only the figures a test cares about, and a run
record made of such cells, its totals derived by the cell writers as a collected run's are.

A test says what it means by name (``cell(wall_s=0.4, sched=CpuTime(...))``); mypy checks the names and types,
and no test edits a record's document by key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from nbscope.record.run import RunRecord
from nbscope.schema.build import totals
from nbscope.schema.codec import encode
from nbscope.schema.memory import MemoryReading
from nbscope.schema.model import Cell

_BLANK = Cell(
    index=0,
    cell_index=0,
    source_hash="0" * 16,
    source="pass",
    line=1,
    lines=(1, 1),
    first_line="pass",
    code_line="pass",
    tags=(),
    status="ok",
    error=None,
    execution_count=1,
    wall_s=None,
    code_s=None,
    roundtrip_s=None,
    compile_s=None,
    run_s=None,
    overhead_s=None,
    compile_share=None,
    spread=None,
    jax=None,
    numba=None,
    samples=None,
    timeline=None,
    timeline_summary=None,
    programs=None,
    alarms=(),
    rss=MemoryReading(None, None, None),
    gpu_memory=MemoryReading(None, None, None),
)


def cell(**figures: Any) -> Cell:
    """A cell that ran ``pass`` with nothing measured, but ``figures`` (a source also gives its first line)."""
    source = figures.get("source")
    if isinstance(source, str) and "first_line" not in figures:
        first = source.splitlines()[0] if source.strip() else ""
        figures = {"first_line": first, "code_line": first, **figures}
    return replace(_BLANK, **figures)


def record(cells: Sequence[Cell], *, kind: str = "profile", target: str = "notebook.ipynb", **fields: Any) -> RunRecord:
    """A finished run of ``cells`` (numbered in order), with the totals the cell writers derive from them."""
    documents = [encode(replace(c, index=n, cell_index=n)) for n, c in enumerate(cells)]
    measurements = {"cells": documents, "totals": totals(documents, {}, "off"), "repeats": 1}
    return RunRecord(kind=kind, target=target, fingerprint={}, measurements=measurements, **fields).finish()
