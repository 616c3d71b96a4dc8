"""Fleet audit: every notebook of a book, per backend, scheduled safely, on one machine or a Dask cluster.

- :func:`discover` finds a book's notebooks (jupyter-book 1 ``_toc.yml``, mystmd ``myst.yml``, a folder,
  a glob); :func:`select_shard` deals them into CI shards.
- :func:`audit` profiles each on each backend (CPU jobs in parallel, GPU jobs one per GPU), resuming from
  runs already in the store, and returns an audit record (kind ``audit``).
- :func:`export_audit` writes an audit with its runs; :func:`merge` joins such files into one audit.
- :func:`run_audit` and :func:`run_merge` are the commands: each returns an :class:`AuditOutcome`.
"""

from __future__ import annotations

from nbscope.api.audit._command import AuditOutcome, run_audit, run_merge
from nbscope.api.audit._discover import Book, discover, parse_shard, select_shard
from nbscope.api.audit._jobs import Job, file_hash, run_job
from nbscope.api.audit._merge import export_audit, load_audit, merge, missing_notebooks
from nbscope.api.audit._run import AuditOptions, audit, local_availability
from nbscope.api.audit._schedule import GpuSlot, LocalScheduler, gpu_slots, memory_fraction
from nbscope.collect.platforms import parse_backends

__all__ = [
    "AuditOptions",
    "AuditOutcome",
    "Book",
    "GpuSlot",
    "Job",
    "LocalScheduler",
    "audit",
    "discover",
    "export_audit",
    "file_hash",
    "gpu_slots",
    "load_audit",
    "local_availability",
    "memory_fraction",
    "merge",
    "missing_notebooks",
    "parse_backends",
    "parse_shard",
    "run_audit",
    "run_job",
    "run_merge",
    "select_shard",
]
