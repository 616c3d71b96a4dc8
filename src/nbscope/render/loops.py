"""View of a ``loops`` run: per-device sweep tables, the fit and the extrapolation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope.record.run import RunRecord
from nbscope.render.terminal import (
    Column,
    console,
    fitted_table,
    format_seconds,
    literal,
    print_record_header,
    stderr_console,
)
from nbscope.schema.codec import decode
from nbscope.schema.suite import LoopFit, LoopsRun

if TYPE_CHECKING:
    from nbscope.collect.loops import LoopsProgress


def _per_iter(seconds: float, trips: int) -> str:
    return f"{seconds / trips * 1e9:.3g} ns" if trips else "–"


def fit_text(fit: LoopFit | None) -> str:
    """``0.0047 µs/iter + 42 µs per call, R² 0.9995``."""
    if fit is None or fit.a_s is None or fit.us_per_iter is None:
        return "no fit"
    a = fit.a_s
    # A small negative intercept is the fit's noise around zero fixed cost: shown as such, not hidden.
    text = f"{fit.us_per_iter:.4g} µs/iteration {'+' if a >= 0 else '−'} {format_seconds(abs(a))} per call"
    return text + (f", R² {fit.r2:.4f}" if fit.r2 is not None else "")


def print_loops(record: RunRecord) -> None:
    """Print a ``loops`` record (registered for kind "loops" in render.terminal.RECORD_VIEWS)."""
    print_record_header(record)
    run = decode(LoopsRun, record.measurements)
    if run.loop is not None and run.loop.description:
        console.print(f"loop: {literal(run.loop.description)}")
    for sweep in run.sweeps:
        columns = [
            Column(header, "right", "number")
            for header in ("trips", "time (median)", "per iteration", "first call", "samples")
        ]
        rows = []
        for point in sweep.points:
            count, inner = len(point.samples), point.inner
            rows.append(
                [
                    f"{point.trips:,}",
                    format_seconds(point.seconds),
                    _per_iter(point.seconds, point.trips),
                    format_seconds(point.first_call_s),
                    f"{count}×{inner}" if inner and inner > 1 else str(count),
                ]
            )
        title = literal(f"{sweep.placement} · {sweep.device} ({sweep.platform})")
        console.print(fitted_table(columns, rows, title=title))
        fit = sweep.fit
        style = "" if fit and (fit.r2 or 0) >= 0.98 else "[yellow]"
        console.print(f"  fit (wall clock): {style}{fit_text(fit)}")
        if sweep.cpu_fit:
            # Process CPU time: the loop's cost without the machine's load (on a GPU, the host's part only).
            console.print(f"  [dim]fit (process CPU time): {fit_text(sweep.cpu_fit)}[/dim]")
    at = run.extrapolation.trip_count
    for estimate in run.extrapolation.estimates if at is not None else ():
        measured = estimate.measured_up_to
        beyond = " (beyond the measured range)" if measured is not None and at is not None and at > measured else ""
        console.print(
            f"at {at:,} trips on {literal(estimate.placement)} ({literal(estimate.device)}): "
            f"[bold]{format_seconds(estimate.seconds)}[/bold]{beyond}"
        )
    for note in run.notes:
        console.print(f"[dim]note: {literal(note)}[/dim]")
    if run.xla_dump is not None:
        console.print(f"[dim]XLA dump: {literal(run.xla_dump.files)} files in {literal(run.xla_dump.dir)}[/dim]")


def loops_progress(quiet: bool) -> Callable[[LoopsProgress], None]:
    """The sweep's progress on standard error: each placement as it starts and each trip count's time (nothing
    when ``quiet``: the JSON output stands alone)."""
    status = stderr_console()

    def progress(event: LoopsProgress) -> None:
        if quiet:
            return
        if event.event == "sweep":
            status.print(f"[dim]loops: sweeping on {event.placement} ({event.device}) …[/dim]")
        elif event.event == "point":
            status.print(f"[dim]  {event.n:>10,} trips  {event.seconds * 1e3:9.3f} ms[/dim]")

    return progress


def print_loops_saved(record: RunRecord, store_path: Path) -> None:
    """The loops view, then where the run was saved."""
    print_loops(record)
    console.print(f"[dim]saved as run {record.run_id} in {store_path}[/dim]")
