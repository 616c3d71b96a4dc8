"""The job behind ``nbscope bench``: a hardware benchmark suite whose figures can be trusted and compared.

Groups (python, numpy, numba, jax, multi-size, dispatch, transfer, loops) each run in a fresh
subprocess; every steady-state figure comes from calibrated repeated samples (median, min, MAD,
relative spread), the first call is its own figure (split into compile and run where a compiler is
involved), and every figure carries its dtype. The result is a run record of kind ``bench``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nbscope.collect import fingerprint as fp
from nbscope.collect.bench import _stats
from nbscope.collect.bench._config import (
    BUDGETS,
    GROUPS,
    SIZES,
    TIMEOUTS_S,
    dtypes_for,
    parse_dtypes,
    parse_groups,
    parse_size,
    sizes_for,
)
from nbscope.collect.bench._config import DEFAULT_DTYPE as DEFAULT_DTYPE
from nbscope.collect.bench._config import DEFAULT_SIZE as DEFAULT_SIZE
from nbscope.collect.bench._runner import run_worker
from nbscope.record.live import save_or_keep
from nbscope.record.run import RunRecord, check_label, default_label
from nbscope.record.store import Store
from nbscope.schema.codec import decode, encode
from nbscope.schema.progress import GroupProgress, PathwayProgress
from nbscope.schema.suite import BenchRun, BenchTotals, GroupFigure, WorkerRun

__all__ = ["BUDGETS", "BUSY_CORES_WARN", "GROUPS", "SIZES", "count_figures", "run_bench"]

# Average cores used by other processes during a group above which its figures are flagged.
BUSY_CORES_WARN = 0.25

# Called as each group's worker starts and as it ends.
ProgressCallback = Callable[[GroupProgress], None]


def run_bench(
    *,
    only: Iterable[str] | None = None,
    dtype: str = DEFAULT_DTYPE,
    size: str = DEFAULT_SIZE,
    jax_platform: str | None = None,
    overrides: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    progress: ProgressCallback | None = None,
    fingerprint: dict[str, Any] | None = None,
    label: str | None = None,
) -> RunRecord:
    """Run the suite (or the ``only`` groups) and return its run record (labelled ``label``; None:
    ``$NBSCOPE_LABEL``), not yet stored.

    ``overrides`` replaces problem sizes (``{"numba.n": 4_000_000}``); user errors (an unknown group,
    dtype or size) raise :class:`nbscope.NbscopeError`. An interrupt stops the suite and returns what
    was measured, with status ``partial``.
    """
    groups = parse_groups(only)
    dtypes = parse_dtypes(dtype)
    size = parse_size(size)
    sizes = sizes_for(size, overrides)  # validates the override keys
    started = time.perf_counter()  # the suite's wall time includes reading the fingerprint
    if fingerprint is None:
        fingerprint = fp.collect()
    record = RunRecord(
        kind="bench",
        label=label if label is not None else default_label(),
        target=f"suite:{size}",
        fingerprint=fingerprint,
        settings={
            "size": size,
            "dtype": dtype.strip().lower(),
            "dtypes": dtypes,
            "only": groups if only else None,
            "jax_platform": jax_platform,
            "overrides": overrides or None,
        },
    )
    results: dict[str, dict[str, Any]] = {}
    interrupted = False
    try:
        for group in groups:
            runs = results.setdefault(group, {"runs": []})["runs"]
            for group_dtype in dtypes_for(group, dtypes):
                if progress:
                    progress(GroupProgress("start", group, group_dtype))
                run = run_worker(
                    group,
                    group_dtype,
                    size,
                    timeout_s=timeout_s or TIMEOUTS_S[size],
                    jax_platform=jax_platform,
                    overrides={k: v for k, v in (overrides or {}).items() if k.startswith(group + ".")},
                )
                runs.append(run)
                if progress:
                    ended = decode(WorkerRun, run)
                    progress(GroupProgress("done", group, group_dtype, status=ended.status, reason=ended.reason))
    except KeyboardInterrupt:
        interrupted = True
    wall = time.perf_counter() - started
    measurements = record.measurements = _measurements(results, sizes, wall, interrupted)
    failed = any(g["status"] == "error" for g in measurements["groups"].values())
    return record.finish("partial" if interrupted or failed else "ok")


def _measurements(
    results: dict[str, dict[str, Any]], sizes: dict[str, Any], wall: float, interrupted: bool
) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    reference: list[float] = []  # the reference workload's times, every worker's
    for name, entry in results.items():
        runs = entry["runs"]
        if not runs:
            continue
        workers = [decode(WorkerRun, run) for run in runs]  # each worker's document, as the group stores it
        reference.extend(t for worker in workers for t in worker.reference_s or () if t is not None)
        statuses = [worker.status for worker in workers]
        status = "error" if "error" in statuses else "skipped" if all(s == "skipped" for s in statuses) else "ok"
        reasons = sorted({worker.reason for worker in workers if worker.reason})
        background = max((worker.background_cores or 0.0 for worker in workers), default=0.0)
        warnings = []
        if background > BUSY_CORES_WARN:
            warnings.append(
                f"other processes kept {background:.1f} core(s) busy while this group ran: its figures are "
                "slower and noisier than this machine alone"
            )
        groups[name] = {
            "title": GROUPS[name].title,
            "status": status,
            "reason": "; ".join(reasons) or None,
            "wall_s": sum(worker.wall_s or 0.0 for worker in workers),
            "peak_rss_bytes": max((worker.peak_rss_bytes or 0 for worker in workers), default=None),
            "background_cores": background,
            "warnings": warnings,
            "sizes": {k.partition(".")[2]: v for k, v in sizes.items() if k.startswith(name + ".")},
            "runs": [encode(worker) for worker in workers],
            "figures": [figure for worker in workers for figure in worker.figures],
        }
    figures = [figure for group in groups.values() for figure in group["figures"]]
    typed = [decode(GroupFigure, figure) for figure in figures]
    machine = _stats.steadiness(reference)
    machine_spread = (machine.spread if machine is not None else None) or 0.0
    for figure, read in zip(figures, typed, strict=True):
        for part, block in (("steady", read.steady), ("fit", read.fit)):
            if block is not None and block.spread is not None:
                # What a figure is known to: its own spread, or the machine's drift if that is larger.
                figure[part]["uncertainty"] = max(block.spread, machine_spread)
    warnings = []
    if machine_spread > _stats.SPREAD_WARN:
        warnings.append(
            f"this machine was unsteady: a fixed reference workload's time varied ±{machine_spread:.0%} during "
            "the run (10–90 % range), so no figure is known better than that"
        )
    return {
        "totals": {
            "figures": count_figures(typed),
            "rows": len(figures),
            "wall_s": wall,
            "groups": len(groups),
            "groups_ok": sum(g["status"] == "ok" for g in groups.values()),
            "groups_skipped": sum(g["status"] == "skipped" for g in groups.values()),
            "groups_failed": sum(g["status"] == "error" for g in groups.values()),
            "warnings": sum(len(f.warnings) for f in typed),
            "peak_rss_bytes": max((g["peak_rss_bytes"] or 0 for g in groups.values()), default=None),
            "background_cores": max((g["background_cores"] for g in groups.values()), default=0.0),
            "interrupted": interrupted,
            "machine_spread": machine_spread if machine else None,
        },
        "machine": encode(machine) if machine is not None else None,
        "warnings": warnings,
        "groups": groups,
    }


def count_figures(figures: Iterable[GroupFigure]) -> int:
    """Timed values reported: each first call, each steady state and each fitted slope is one figure."""
    return sum((f.first is not None) + (f.steady is not None) + (f.fit is not None) for f in figures)


@dataclass(frozen=True)
class BenchOutcome:
    """What ``nbscope bench`` did: the stored run (the suite's, or with ``via`` the pathways' that ran its
    workloads as notebook cells), whether a signal cut the suite short, whether a group or a pathway failed."""

    record: RunRecord
    via: tuple[str, ...] = ()  # the pathways the workloads ran through; empty: the suite itself

    @property
    def totals(self) -> BenchTotals:
        return decode(BenchRun, self.record.measurements).totals

    @property
    def interrupted(self) -> bool:
        return not self.via and self.totals.interrupted

    @property
    def exit_status(self) -> int:
        """1 when a group (a pathway) failed, else 0 (a cut-short suite re-raises the interrupt instead)."""
        if self.via:
            return 1 if self.record.status == "error" else 0
        return 1 if self.totals.groups_failed else 0


def bench(
    store: Store,
    *,
    only: Iterable[str] | None = None,
    dtype: str = DEFAULT_DTYPE,
    size: str = DEFAULT_SIZE,
    jax_platform: str | None = None,
    progress: ProgressCallback | None = None,
    label: str | None = None,
    via: str | None = None,
    repeat: int = 1,
    via_progress: Callable[[PathwayProgress], None] | None = None,
) -> BenchOutcome:
    """``nbscope bench``: run the suite and store it, also when a signal cut it short (then noted as saved); with
    ``via`` (``script,kernel,...``) its workloads run as notebook cells through those pathways, ``repeat`` times
    each (:func:`nbscope.api.pathways.run_bench_pathways`). The runs carry ``label``."""
    if via:
        from nbscope.api.pathways import parse_via, run_bench_pathways

        pathways = parse_via(via)
        record = run_bench_pathways(
            via=pathways,
            only=only,
            dtype=dtype,
            size=size,
            jax_platform=jax_platform,
            repeat=repeat,
            store=store,
            progress=via_progress,
            label=check_label(label),
        )
        return BenchOutcome(record, tuple(pathways))
    record = run_bench(
        only=only, dtype=dtype, size=size, jax_platform=jax_platform, progress=progress, label=check_label(label)
    )
    save_or_keep(store, [record])
    outcome = BenchOutcome(record)
    if outcome.interrupted:
        from nbscope import _signals

        _signals.note_saved(f"partial run {record.run_id}")
    return outcome
