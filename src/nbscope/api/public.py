"""The functions ``import nbscope`` offers: profile a notebook, compare and diagnose runs, benchmark the
machine, open the run store; each returns data (run records, comparisons, findings), never prints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.analyse import compare as compare_module
from nbscope.analyse import diagnose as diagnose_module
from nbscope.api import bench as bench_job
from nbscope.api import profile as profile_job
from nbscope.record.run import RunRecord, check_label
from nbscope.record.sources import naming
from nbscope.record.store import Store


def _given(name: str, value: object, *kinds: type | None) -> None:
    """Refuse (one line, as every job's bad input) an argument of another type: a TypeError deep inside named none."""
    if not any(value is None if kind is None else isinstance(value, kind) for kind in kinds):
        wanted = " or ".join("None" if kind is None else kind.__name__ for kind in kinds)
        raise NbscopeError(f"{name} is a {type(value).__name__}, not {wanted}")


def open_store(path: str | Path | None = None) -> Store:
    """The run store at ``path`` (default ``$NBSCOPE_DB``, else ``.nbscope/nbscope.db`` at the project root of
    the working directory: the git work tree, else the book's root, else the folder), created on first write."""
    _given("path", path, str, Path, None)
    return Store(path)


def _store(store: Store | str | Path | None) -> Store | None:
    return store if store is None or isinstance(store, Store) else Store(store)


def profile(
    path: str | Path,
    *,
    store: Store | str | Path | None = None,
    label: str | None = None,
    timeout: float | None = None,
    on_error: str = "continue",
    kernel: str | None = None,
    env: Mapping[str, str] | None = None,
    env_store_values: bool = False,
    jax_platform: str | None = None,
    jax_cache: str = "off",
    repeat: int = 1,
    timeline: bool = False,
    keep_traces: Path | None = None,
    cache_root: Path | None = None,
    programs: bool = False,
    forecast: Sequence[str] = (),
) -> RunRecord:
    """Profile a notebook per cell in a real Jupyter kernel and return its run record.

    The options are those of ``nbscope profile``: ``timeout``, ``on_error``, ``kernel``, ``env`` (values kept
    as hashes in the record; ``env_store_values=True`` keeps them), ``jax_platform``, ``jax_cache``,
    ``repeat``, ``timeline`` (``keep_traces``: a folder), ``programs``, ``forecast`` (GPU keys); ``cache_root``: where
    ``jax_cache`` cold or warm keeps its cache. With ``store`` (a :class:`Store` or a
    path) the run is saved there too; ``label`` names it, as ``--label`` does.
    """
    _given("path", path, str, Path)
    _given("timeout", timeout, int, float, None)
    _given("repeat", repeat, int)
    spec = profile_job.RunSpec(
        timeout=timeout,
        on_error=on_error,
        kernel=kernel,
        env=dict(env or {}),
        env_store_values=env_store_values,
        jax_platform=jax_platform,
        jax_cache=jax_cache,
        repeat=repeat,
        timeline=timeline,
        keep_traces=keep_traces,
        cache_root=cache_root,
        programs=programs,
        forecast=tuple(forecast),
        label=check_label(label),
    )
    return profile_job.profile(path, spec, store=_store(store))


def compare(
    a: RunRecord, b: RunRecord, *, sources: dict[str, str] | str | Path | None = None, allow_different: bool = False
) -> compare_module.Comparison:
    """Two profile runs side by side: cells paired by source, per-cell winners, totals, and the settings
    and fingerprint fields that differ (``.to_dict()`` is what ``nbscope compare --json`` prints).
    ``sources`` names the notebook's code (its path, or sources by hash) for runs that do not carry it."""
    _given("a", a, RunRecord)
    _given("b", b, RunRecord)
    a, b = naming(a, sources), naming(b, sources)
    return compare_module.compare(a, b, allow_different=allow_different)


def diagnose(
    record: RunRecord,
    *,
    other: RunRecord | None = None,
    sources: Mapping[str, str] | str | Path | None = None,
    rules: Iterable[str] | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    gpus: str | Sequence[str] | None = None,
    devices_file: str | Path | None = None,
) -> diagnose_module.Findings:
    """Named causes of slow cells, each with its evidence and fix, most important first (``other``: the
    same notebook on another backend or cache state, used as evidence; ``sources``, ``rules``,
    ``thresholds``; ``gpus``: on a CPU run recorded with ``forecast=[...]`` or ``programs=True``, the GPUs
    the GPU rules are forecast for, default those named when it was recorded, else the T4)."""
    _given("record", record, RunRecord)
    _given("other", other, RunRecord, None)
    return diagnose_module.diagnose(
        record, other=other, sources=sources, rules=rules, thresholds=thresholds, gpus=gpus, devices_file=devices_file
    )


def bench(
    *,
    store: Store | str | Path | None = None,
    label: str | None = None,
    only: Iterable[str] | None = None,
    dtype: str = bench_job.DEFAULT_DTYPE,
    size: str = bench_job.DEFAULT_SIZE,
    jax_platform: str | None = None,
) -> RunRecord:
    """Run the hardware suite (``only``, ``dtype``, ``size``, ``jax_platform``) and return its record
    (``label`` names it, as ``--label`` does)."""
    record = bench_job.run_bench(only=only, dtype=dtype, size=size, jax_platform=jax_platform, label=check_label(label))
    target = _store(store)
    if target is not None:
        from nbscope.record.live import save_or_keep

        save_or_keep(target, [record])
    return record
