"""The job behind ``nbscope loops``: run the trip-count sweep in a fresh process and record its fit."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from nbscope.collect import fingerprint as fp
from nbscope.collect.loops import BUILTIN_TARGET, LoopOptions, Progress, extrapolate, run_worker
from nbscope.record.live import save_or_keep
from nbscope.record.run import RunRecord, check_label, default_label
from nbscope.record.store import Store
from nbscope.schema.codec import decode, encode
from nbscope.schema.suite import Extrapolation, LoopEstimate, LoopsRun, LoopsTotals

__all__ = ["LoopOptions", "LoopsOutcome", "loops", "run_loops"]  # the command's options, with the job that takes them


@dataclass(frozen=True)
class LoopsOutcome:
    """What ``nbscope loops`` did: the ``loops`` run recorded, and the store that keeps it."""

    record: RunRecord
    store_path: Path


def loops(
    options: LoopOptions, store: Store, *, label: str | None = None, progress: Progress | None = None
) -> LoopsOutcome:
    """``nbscope loops``: the sweep run (options checked first), its run labelled ``label`` and stored."""
    options.validate()
    record = run_loops(options, store=store, progress=progress, label=check_label(label))
    return LoopsOutcome(record, store.path)


def run_loops(
    options: LoopOptions | None = None,
    *,
    store: Store | None = None,
    progress: Progress | None = None,
    fingerprint: dict[str, object] | None = None,
    label: str | None = None,
) -> RunRecord:
    """Sweep trip counts, fit, extrapolate; returns a ``loops`` RunRecord labelled ``label`` (None:
    ``$NBSCOPE_LABEL``), saved in ``store`` if given."""
    options = options or LoopOptions()
    options.validate()
    fingerprint = fingerprint or fp.collect()
    started = time.perf_counter()
    result = run_worker(options, progress)
    settings = options.resolved()
    settings.pop("timeout_s", None)
    record = RunRecord(
        kind="loops",
        target=options.target or BUILTIN_TARGET,
        fingerprint=fingerprint,
        settings=settings,
        label=label if label is not None else default_label(),
    )
    measured = decode(LoopsRun, result)  # the worker's document holds a loops record's loop, jax, sweeps and notes
    fitted = [(sweep, sweep.fit) for sweep in measured.sweeps if sweep.fit is not None]
    estimates = [
        LoopEstimate(
            device=sweep.device,
            placement=sweep.placement,
            seconds=extrapolate(fit, options.at),
            measured_up_to=max(sweep.trip_counts, default=None),
        )
        for sweep, fit in fitted
    ]
    dump = None
    if options.xla_dump is not None:
        files = [p for p in options.xla_dump.rglob("*") if p.is_file()]
        dump = {"dir": str(options.xla_dump.resolve()), "files": len(files)}
    fits = [fit for _, fit in fitted]
    # The worker's parts are written as it wrote them (``worker`` always writes each); the rest from the typed view.
    record.measurements = {
        "totals": encode(
            LoopsTotals(
                sweeps=len(measured.sweeps),
                wall_s=time.perf_counter() - started,
                us_per_iter=fits[0].us_per_iter if fits else None,
                r2_min=min((f.r2 for f in fits if f.r2 is not None), default=None),
                at=options.at,
                at_s=estimates[0].seconds if estimates else None,
            )
        ),
        "loop": result["loop"],
        "jax": result["jax"],
        "sweeps": result["sweeps"],
        "extrapolation": encode(Extrapolation(trip_count=options.at, estimates=tuple(estimates))),
        "notes": result["notes"],
        "xla_dump": dump,
    }
    record.finish("ok" if fits else "partial")
    if store is not None:
        save_or_keep(store, [record])
    return record
