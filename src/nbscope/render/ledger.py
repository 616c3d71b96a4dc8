"""The per-cell ledger of a profile: terminal table and markdown."""

from __future__ import annotations

from typing import Any

from nbscope import _units as units
from nbscope.record.cells import shown_line
from nbscope.record.run import RunRecord
from nbscope.render._markdown import table_cell as _md
from nbscope.render.terminal import (
    TIME_COLUMNS,
    Column,
    cell_columns,
    console,
    fitted_table,
    format_bytes,
    format_seconds,
    literal,
    print_record_header,
    source_text,
)

# status -> (style, text) of its flag
STATUS_FLAGS = {
    "error": ("red", "error"),
    "expected-error": ("", "expected error"),
    "timeout": ("red", "TIMEOUT"),
    "kernel-died": ("red", "KERNEL DIED"),
    "not-run": ("dim", "not run"),
    "interrupted": ("yellow", "INTERRUPTED"),
    "skipped": ("dim", "skipped"),
}


def cell_flags(cell: dict[str, Any], *, markup: bool = True) -> list[str]:
    """Short notes on a cell: status, cache hits, eager compiles, alarms (rich markup, or plain text)."""
    flags: list[tuple[str, str]] = []
    status = cell.get("status")
    if status in STATUS_FLAGS:
        style, flag = STATUS_FLAGS[status]
        if cell.get("error") and status in ("error", "expected-error"):
            flag += f" {cell['error'].get('name')}"
        flags.append((style, flag))
    jax = cell.get("jax") or {}
    if jax.get("cache_hits"):
        flags.append(("", units.count(jax["cache_hits"], "cache hit")))
    if cell.get("alarms"):
        flags.append(("yellow", "XLA slow-compile alarm"))
    numba = cell.get("numba") or {}
    if numba.get("compiles"):
        flags.append(("", f"numba ×{numba['compiles']}"))
    if cell.get("spread") is not None and cell["spread"] > 0.1:
        flags.append(("", f"spread {cell['spread']:.0%}"))
    if not markup:
        return [text for _, text in flags]
    return [f"[{style}]{literal(text)}[/{style}]" if style else literal(text) for style, text in flags]


def compile_text(cell: dict[str, Any]) -> str:
    jax = cell.get("jax") or {}
    parts = []
    if jax.get("compiles"):
        kinds = [f"{jax[k + '_compiles']} {k}" for k in ("user", "eager", "library") if jax.get(k + "_compiles")]
        parts.append(f"{jax['compiles']} ({', '.join(kinds)})" if kinds else str(jax["compiles"]))
    numba = cell.get("numba") or {}
    if numba.get("compiles"):
        parts.append(f"{numba['compiles']} numba")
    return " + ".join(parts) or "–"


def ordered_cells(record: RunRecord, *, top: int | None, notebook_order: bool) -> list[dict[str, Any]]:
    cells = list(record.measurements.get("cells", []))
    if not notebook_order:
        cells.sort(key=lambda c: c.get("wall_s") or 0.0, reverse=True)
    return cells[:top] if top else cells


LEDGER_COLUMNS = (
    *cell_columns("#"),
    *TIME_COLUMNS,
    Column("compiles", "right", "text", min_width=6),
    Column("flags", "left", "text", min_width=10, optional=True),
)


def print_profile(record: RunRecord, *, top: int | None = 15, notebook_order: bool = False) -> None:
    """The ledger: header, a row per cell (the ``top`` slowest, or every cell in notebook order), totals.

    On a narrow console the source column gives way first, then compiles and flags wrap; the cell number,
    line and times are never cut.
    """
    print_record_header(record)
    m = record.measurements
    cells = ordered_cells(record, top=top, notebook_order=notebook_order)
    total_cells = len(m.get("cells", []))
    title = "cells in notebook order" if notebook_order else f"slowest {len(cells)} of {total_cells} cells"
    rows = [
        (
            literal(cell["index"] + 1),
            literal(cell.get("line") or ""),
            source_text(shown_line(cell)),
            format_seconds(cell.get("wall_s")),
            format_seconds(cell.get("compile_s")) if cell.get("compile_s") else "–",
            format_seconds(cell.get("run_s")),
            literal(compile_text(cell)),
            ", ".join(cell_flags(cell)),
        )
        for cell in cells
    ]
    console.print(fitted_table(LEDGER_COLUMNS, rows, title=title))
    print_summary(record)


def print_every_cell(record: RunRecord) -> None:
    """``nbscope show RUN`` of a profile: every cell in notebook order."""
    print_profile(record, top=None, notebook_order=True)


def print_summary(record: RunRecord) -> None:
    t = record.measurements.get("totals", {})
    wall = t.get("wall_s") or 0.0
    share = (t.get("compile_s") or 0.0) / wall if wall else 0.0
    console.print(
        f"[bold]total[/bold] {format_seconds(wall)} in {literal(t.get('cells_run', 0))}/{literal(t.get('cells', 0))} cells · "
        f"compile {format_seconds(t.get('compile_s'))} ({share:.0%}) · run {format_seconds(t.get('run_s'))} · "
        f"kernel start {format_seconds(t.get('kernel_start_s'))}"
    )
    console.print(literal(
        f"JAX compiles {t.get('compiles', 0)} (user {t.get('user_compiles', 0)}, eager {t.get('eager_compiles', 0)}, "
        f"library {t.get('library_compiles', 0)}) · Numba compiles {t.get('numba_compiles', 0)} · "
        f"persistent cache {t.get('cache_state')} (hits {t.get('cache_hits', 0)}, misses {t.get('cache_misses', 0)})"
        + (f" · peak RSS {format_bytes(t['peak_rss_bytes'])}" if units.size(t.get("peak_rss_bytes")) else
           " · peak RSS not measured")
    ))
    if t.get("cache_saving_s") is not None:
        console.print(
            f"warm cache saved {format_seconds(t['cache_saving_s'])} of compile time against cold run "
            f"{literal(t['cache_baseline_run'])} ({literal(t.get('cold_compiles'))} compiles then, "
            f"{literal(t.get('compiles', 0))} now)"
        )
    failed = [c for c in record.measurements.get("cells", []) if c.get("status") in ("error", "timeout", "kernel-died")]
    for cell in failed:
        error = cell.get("error") or {}
        where = f"cell {cell['index'] + 1}" + (f" (line {cell['line']})" if cell.get("line") else "")
        console.print(
            f"[red]{literal(where)}: {literal(cell['status'])}[/red] "
            f"{literal(error.get('name', ''))}: {literal(str(error.get('message', ''))[:160])}"
        )




def profile_markdown(record: RunRecord, *, top: int | None = 15, notebook_order: bool = False) -> str:
    """A GitHub-ready table of the ledger, in the style of the original investigation."""
    t = record.measurements.get("totals", {})
    lines = [
        f"### nbscope profile: `{_md(record.target)}`",
        "",
        f"Machine: {_md(record.fingerprint.get('cpu', {}).get('model', '?') if isinstance(record.fingerprint.get('cpu', {}).get('model'), str) else '?')}"
        f" · digest `{record.digest}` · total **{format_seconds(t.get('wall_s'))}**, compile "
        f"{format_seconds(t.get('compile_s'))}, {t.get('compiles', 0)} JAX compiles",
        "",
        "| Cell | Line | Source | Wall | Compile | Run | Compiles | Notes |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for cell in ordered_cells(record, top=top, notebook_order=notebook_order):
        lines.append(
            f"| {cell['index'] + 1} | {cell.get('line') or ''} | `{_md(shown_line(cell)[:60])}` | "
            f"{format_seconds(cell.get('wall_s'))} | {format_seconds(cell.get('compile_s'))} | "
            f"{format_seconds(cell.get('run_s'))} | {compile_text(cell)} | {_md(', '.join(cell_flags(cell, markup=False)))} |"
        )
    return "\n".join(lines) + "\n"
