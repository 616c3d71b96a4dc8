"""What a Dask scheduler says of its cluster (``Client.scheduler_info()``), typed: decoded where ``audit --dask``
asks it (``api.audit._dask``). Only what the audit needs is read: which workers there are and the GPUs each
declares as a resource (``dask worker --resources GPU=1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class WorkerResources:
    """The resources a worker declares (a resource it does not declare reads as None)."""

    gpu: Annotated[float | None, Read(key="GPU")]


@dataclass(frozen=True, slots=True)
class DaskWorker:
    resources: WorkerResources


@dataclass(frozen=True, slots=True)
class DaskScheduler:
    workers: Mapping[str, DaskWorker]  # by the worker's address
