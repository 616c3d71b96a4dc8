"""A cell of an nbformat 4 notebook, as nbscope reads it: its type, its tags, and once nbclient ran it, the
timestamps nbclient put in its ``metadata.execution`` and what it sent to its ``outputs``, typed. Decoded once
per cell where it is read (``collect.notebook``, ``collect.runner``; a whole notebook's cells where the audit asks
whether it has code, ``api.audit._discover``); what a cell lacks (a kernel that never answered) reads as None,
or as no tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class ExecutionTimes:
    """``metadata.execution``: the kernel-clock ISO timestamps nbclient records (``record_timing``)."""

    busy: Annotated[str | None, Read(key="iopub.status.busy")]  # the kernel began the cell
    idle: Annotated[str | None, Read(key="iopub.status.idle")]  # it was done with it


@dataclass(frozen=True, slots=True)
class CellMetadata:
    tags: tuple[str, ...]  # skip-execution, raises-exception, ...
    execution: ExecutionTimes


@dataclass(frozen=True, slots=True)
class CellOutput:
    """One output of the cell; an ``error`` output names the exception (``ename``) and its message."""

    output_type: str | None
    ename: str | None
    evalue: str | None


@dataclass(frozen=True, slots=True)
class NotebookCell:
    cell_type: str | None  # code, markdown, raw
    metadata: CellMetadata
    outputs: tuple[CellOutput, ...]


@dataclass(frozen=True, slots=True)
class NotebookCells:
    """A notebook's cells, as far as telling whether it has code cells needs (``api.audit._discover``)."""

    cells: tuple[NotebookCell, ...]
