"""The functions ``import nbscope`` offers: profile a notebook, compare and diagnose runs, benchmark the
machine, open the run store; each returns data (run records, comparisons, findings), never prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbscope.analyse import compare as compare_module
from nbscope.analyse import diagnose as diagnose_module
from nbscope.api import bench as bench_job
from nbscope.api import profile as profile_job
from nbscope.record.run import RunRecord, labelled
from nbscope.record.sources import naming
from nbscope.record.store import Store


def open_store(path: str | Path | None = None) -> Store:
    """The run store at ``path`` (default ``$NBSCOPE_DB``, else ``.nbscope/nbscope.db`` at the project root of
    the working directory: the git work tree, else the book's root, else the folder), created on first write."""
    return Store(path)


def _store(store: Store | str | Path | None) -> Store | None:
    return store if store is None or isinstance(store, Store) else Store(store)


def profile(
    path: str | Path, *, store: Store | str | Path | None = None, label: str | None = None, **options: Any
) -> RunRecord:
    """Profile a notebook per cell in a real Jupyter kernel and return its run record.

    ``options`` are those of ``nbscope profile``: ``timeout``, ``on_error``, ``kernel``, ``env`` (values kept
    as hashes in the record; ``env_store_values=True`` keeps them),
    ``jax_platform``, ``jax_cache``, ``repeat``, ``timeline``, ``programs``, ``forecast`` (GPU keys). With ``store`` (a :class:`Store` or a
    path) the run is saved there too; ``label`` names it, as ``--label`` does.
    """
    with labelled(label):
        return profile_job.profile(path, profile_job.ProfileOptions(**options), store=_store(store))


def compare(
    a: RunRecord, b: RunRecord, *, sources: dict[str, str] | str | Path | None = None, allow_different: bool = False
) -> compare_module.Comparison:
    """Two profile runs side by side: cells paired by source, per-cell winners, totals, and the settings
    and fingerprint fields that differ (``.to_dict()`` is what ``nbscope compare --json`` prints).
    ``sources`` names the notebook's code (its path, or sources by hash) for runs that do not carry it."""
    a, b = naming(a, sources), naming(b, sources)
    return compare_module.compare(a, b, allow_different=allow_different)


def diagnose(record: RunRecord, *, other: RunRecord | None = None, **options: Any) -> diagnose_module.Findings:
    """Named causes of slow cells, each with its evidence and fix, most important first (``other``: the
    same notebook on another backend or cache state, used as evidence; ``sources``, ``rules``,
    ``thresholds``; ``gpus``: on a CPU run recorded with ``forecast=[...]`` or ``programs=True``, the GPUs
    the GPU rules are forecast for, default those named when it was recorded, else the T4)."""
    return diagnose_module.diagnose(record, other=other, **options)


def bench(*, store: Store | str | Path | None = None, label: str | None = None, **options: Any) -> RunRecord:
    """Run the hardware suite (``only``, ``dtype``, ``size``, ``jax_platform``) and return its record
    (``label`` names it, as ``--label`` does)."""
    with labelled(label):
        record = bench_job.run_bench(**options)
    target = _store(store)
    if target is not None:
        target.save(record)
    return record
