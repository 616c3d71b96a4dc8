"""A code cell as nbclient leaves it once it ran (nbformat 4): nbclient's timestamps in its
``metadata.execution`` and what it sent to its ``outputs``, typed. The runner decodes each cell once
(``collect.runner``); what a cell lacks (a kernel that never answered) reads as None.
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
    execution: ExecutionTimes


@dataclass(frozen=True, slots=True)
class CellOutput:
    """One output of the cell; an ``error`` output names the exception (``ename``) and its message."""

    output_type: str | None
    ename: str | None
    evalue: str | None


@dataclass(frozen=True, slots=True)
class ExecutedCell:
    metadata: CellMetadata
    outputs: tuple[CellOutput, ...]
