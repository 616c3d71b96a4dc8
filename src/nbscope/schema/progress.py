"""The progress events long commands report as they go, typed: the suite's groups (``bench``), each pathway's runs
(``pathways``, ``bench --via``) and the audit's plan and notebooks (``audit``). The API builds them and hands
each to a caller's callback; the renderers' progress lines read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nbscope.schema.audit import AuditEntry, Availability


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """A group of the suite starts one worker (one dtype), or that worker ended (``status``, and ``reason``
    when it did not run or failed)."""

    event: str  # start, done
    group: str
    dtype: str
    status: str | None = None  # done: ok, skipped, error
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PathwayProgress:
    """One run of one pathway starts, or ended (``status``, and ``reason`` when it was skipped or failed)."""

    event: str  # start, done
    pathway: str
    repeat: int  # from 0
    status: str | None = None  # done: ok, partial, skipped, error
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class AuditPlanned:
    """The audit's plan, before a notebook runs."""

    notebooks: int  # to audit (this shard's)
    in_book: int  # in the whole book
    jobs: int  # notebook and backend pairs to profile
    reused: int  # pairs an earlier stored profile stands for
    availability: Mapping[str, Availability]  # by backend
    skipped: tuple[Mapping[str, str], ...]  # pages that are no notebooks, with why


@dataclass(frozen=True, slots=True)
class AuditJobStarted:
    """A notebook starts on a backend (``queued``: handed to Dask, which starts it when a worker is free)."""

    path: str  # the notebook's book-relative path
    backend: str
    gpu: str | None  # the GPU it is pinned to (local scheduling)
    queued: bool = False


@dataclass(frozen=True, slots=True)
class AuditRetry:
    """A notebook failed in a way worth one more try, after the others."""

    path: str
    backend: str
    error: str | None


@dataclass(frozen=True, slots=True)
class AuditJobDone:
    """A notebook's profile on a backend ended: its entry, and how many of the plan's are done."""

    entry: AuditEntry
    done: int
    total: int


AuditEvent = AuditPlanned | AuditJobStarted | AuditRetry | AuditJobDone
