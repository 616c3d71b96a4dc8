"""View of a ``loops`` run: per-device sweep tables, the fit and the extrapolation."""

from __future__ import annotations

from typing import Any

from nbscope.record.run import RunRecord
from nbscope.render.terminal import Column, console, fitted_table, format_seconds, literal, print_record_header


def _per_iter(seconds: float, trips: int) -> str:
    return f"{seconds / trips * 1e9:.3g} ns" if trips else "–"


def fit_text(fit: dict[str, Any] | None) -> str:
    """``0.0047 µs/iter + 42 µs per call, R² 0.9995``."""
    if not fit:
        return "no fit"
    r2 = fit.get("r2")
    a = fit["a_s"]
    # A small negative intercept is the fit's noise around zero fixed cost: shown as such, not hidden.
    text = f"{fit['us_per_iter']:.4g} µs/iteration {'+' if a >= 0 else '−'} {format_seconds(abs(a))} per call"
    return text + (f", R² {r2:.4f}" if r2 is not None else "")


def print_loops(record: RunRecord) -> None:
    """Print a ``loops`` record (registered for kind "loops" in render.terminal.RECORD_VIEWS)."""
    print_record_header(record)
    measurements = record.measurements
    loop = measurements.get("loop") or {}
    if loop.get("description"):
        console.print(f"loop: {literal(loop['description'])}")
    for sweep in measurements.get("sweeps", []):
        columns = [Column(header, "right", "number")
                   for header in ("trips", "time (median)", "per iteration", "first call", "samples")]
        rows = []
        firsts = sweep.get("first_call_s") or [None] * len(sweep["trip_counts"])
        inners = sweep.get("inner") or [1] * len(sweep["trip_counts"])
        counts = [len(s) for s in sweep.get("samples") or [[]] * len(sweep["trip_counts"])]
        for n, seconds, first, inner, count in zip(sweep["trip_counts"], sweep["seconds"], firsts, inners, counts,
                                                   strict=False):
            rows.append([f"{n:,}", format_seconds(seconds), _per_iter(seconds, n), format_seconds(first),
                         f"{count}×{inner}" if inner and inner > 1 else str(count)])
        title = literal(f"{sweep.get('placement')} · {sweep.get('device')} ({sweep.get('platform')})")
        console.print(fitted_table(columns, rows, title=title))
        fit = sweep.get("fit")
        style = "" if fit and (fit.get("r2") or 0) >= 0.98 else "[yellow]"
        console.print(f"  fit (wall clock): {style}{fit_text(fit)}")
        if sweep.get("cpu_fit"):
            # Process CPU time: the loop's cost without the machine's load (on a GPU, the host's part only).
            console.print(f"  [dim]fit (process CPU time): {fit_text(sweep['cpu_fit'])}[/dim]")
    extrapolation = measurements.get("extrapolation") or {}
    for estimate in extrapolation.get("estimates", []):
        beyond = " (beyond the measured range)" if extrapolation["trip_count"] > estimate["measured_up_to"] else ""
        console.print(
            f"at {extrapolation['trip_count']:,} trips on {literal(estimate['placement'])} ({literal(estimate['device'])}): "
            f"[bold]{format_seconds(estimate['seconds'])}[/bold]{beyond}"
        )
    for note in measurements.get("notes", []):
        console.print(f"[dim]note: {literal(note)}[/dim]")
    dump = measurements.get("xla_dump")
    if dump:
        console.print(f"[dim]XLA dump: {literal(dump['files'])} files in {literal(dump['dir'])}[/dim]")
