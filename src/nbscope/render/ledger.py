"""The per-cell ledger of a profile: terminal table and markdown."""

from __future__ import annotations

from collections.abc import Sequence

from nbscope import _units as units
from nbscope._redact import shorten
from nbscope.record.run import RunRecord
from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import markdown_table
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import (
    TIME_COLUMNS,
    console,
    format_bytes,
    format_seconds,
    literal,
    print_parts,
    print_record_header,
    terminal_table,
)
from nbscope.schema.model import Cell, NotebookRun, Totals

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


def cell_flags(cell: Cell) -> list[Item]:
    """Short notes on a cell: status, cache hits, eager compiles, alarms."""
    flags: list[Item] = []
    if cell.status in STATUS_FLAGS:
        style, flag = STATUS_FLAGS[cell.status]
        if cell.error is not None and cell.status in ("error", "expected-error"):
            flag += f" {cell.error.name}"
        flags.append(Item(flag, style))
    if cell.jax is not None and cell.jax.cache_hits:
        flags.append(Item(units.count(cell.jax.cache_hits, "cache hit")))
    if cell.alarms:
        flags.append(Item("XLA slow-compile alarm", "yellow"))
    if cell.numba is not None and cell.numba.compiles:
        flags.append(Item(f"numba ×{cell.numba.compiles}"))
    if cell.spread is not None and cell.spread > 0.1:
        flags.append(Item(f"spread {cell.spread:.0%}"))
    return flags


def flags_text(cell: Cell) -> str:
    return ", ".join(flag.text for flag in cell_flags(cell))


def compile_text(cell: Cell) -> str:
    """``3 (2 user, 1 eager) + 1 numba``: what a cell compiled, by kind."""
    parts = []
    jax = cell.jax
    if jax is not None and jax.compiles:
        kinds = [
            f"{n} {k}"
            for k, n in (("user", jax.user_compiles), ("eager", jax.eager_compiles), ("library", jax.library_compiles))
            if n
        ]
        parts.append(f"{jax.compiles} ({', '.join(kinds)})" if kinds else str(jax.compiles))
    if cell.numba is not None and cell.numba.compiles:
        parts.append(f"{cell.numba.compiles} numba")
    return " + ".join(parts) or "–"


LEDGER_COLUMNS = (
    Column("#", "right", "number", markdown="Cell"),
    Column("line", "right", "number", optional=True),
    Column("source", "left", "source", min_width=12),
    *TIME_COLUMNS,
    Column("compiles", "right", "text", min_width=6),
    Column("flags", "left", "text", min_width=10, optional=True, markdown="Notes"),
)


def ledger_rows(record: RunRecord, *, top: int | None = 15, notebook_order: bool = False) -> Rows:
    """The ledger's table, once for both formats: a row per cell (the ``top`` slowest, or every cell in
    notebook order)."""
    run = record.notebook_run()
    cells = list(run.cells)
    if not notebook_order:
        cells.sort(key=lambda c: c.wall_s or 0.0, reverse=True)
    cells = cells[:top] if top else cells
    title = "cells in notebook order" if notebook_order else f"slowest {len(cells)} of {len(run.cells)} cells"
    rows = []
    for cell in cells:
        flags = cell_flags(cell)
        rows.append(
            (
                str(cell.index + 1),
                str(cell.line or ""),
                Item(cell.code_line, code=True),
                format_seconds(cell.wall_s),
                format_seconds(cell.compile_s) if cell.compile_s else "–",
                format_seconds(cell.run_s),
                compile_text(cell),
                # one flag's style colours the whole note: the worst comes first (status)
                Item(", ".join(f.text for f in flags), flags[0].style if flags else ""),
            )
        )
    return Rows.of(LEDGER_COLUMNS, rows, title=title)


def print_profile(record: RunRecord, *, top: int | None = 15, notebook_order: bool = False) -> None:
    """The ledger: header, a row per cell (the ``top`` slowest, or every cell in notebook order), totals.

    On a narrow console the source column gives way first, then compiles and flags wrap; the cell number,
    line and times are never cut.
    """
    print_record_header(record)
    console.print(terminal_table(ledger_rows(record, top=top, notebook_order=notebook_order)))
    print_summary(record)


def print_every_cell(record: RunRecord) -> None:
    """``nbscope show RUN`` of a profile: every cell in notebook order."""
    print_profile(record, top=None, notebook_order=True)


def print_summary(record: RunRecord) -> None:
    run = record.notebook_run()
    t = run.totals
    # A figure the record does not carry (a record without totals, from elsewhere) is "unknown", never 0 or None.
    if not t.recorded:
        console.print("[bold]total[/bold] unknown: the record carries no totals")
    else:
        _print_totals(t)
    _print_cell_errors(run)


def _print_totals(t: Totals) -> None:
    def known(name: str, value: object) -> str:
        return str(value) if name in t.recorded and value is not None else "unknown"

    wall = t.wall_s
    share = f" ({(t.compile_s or 0.0) / wall:.0%})" if wall and t.compile_s is not None else ""
    print_parts(
        f"[bold]total[/bold] {format_seconds(wall) if wall is not None else 'unknown'} in "
        f"{known('cells_run', t.cells_run)}/{known('cells', t.cells)} cells · "
        f"compile {format_seconds(t.compile_s)}{share} · run {format_seconds(t.run_s)} · "
        f"kernel start {format_seconds(t.kernel_start_s)}"
    )
    print_parts(
        literal(
            f"JAX compiles {known('compiles', t.compiles)} (user {known('user_compiles', t.user_compiles)}, "
            f"eager {known('eager_compiles', t.eager_compiles)}, library {known('library_compiles', t.library_compiles)}) · "
            f"Numba compiles {known('numba_compiles', t.numba_compiles)} · "
            f"persistent cache {t.cache_state or 'unknown'} (hits {known('cache_hits', t.cache_hits)}, "
            f"misses {known('cache_misses', t.cache_misses)})"
            + (
                f" · peak RSS {format_bytes(t.peak_rss_bytes)}"
                if units.size(t.peak_rss_bytes)
                else " · peak RSS not measured"
            )
        )
    )
    if t.cache_saving_s is not None:
        console.print(
            f"warm cache saved {format_seconds(t.cache_saving_s)} of compile time against cold run "
            f"{literal(t.cache_baseline_run)} ({literal(t.cold_compiles)} compiles then, {t.compiles} now)"
        )


def _print_cell_errors(run: NotebookRun) -> None:
    for cell in run.cells:
        if cell.status in ("error", "timeout", "kernel-died"):
            error = cell.error
            console.print(
                f"[red]{literal(cell.label)}: {literal(cell.status)}[/red] "
                f"{literal(error.name if error else '')}: {literal(shorten(error.message if error else '', 160))}"
            )


def profile_markdown(record: RunRecord, *, top: int | None = 15, notebook_order: bool = False) -> str:
    """A GitHub-ready table of the ledger, in the style of the original investigation."""
    totals = record.notebook_run().totals
    model = record.machine().cpu.model
    lines = [
        f"### nbscope profile: `{_md(record.target)}`",
        "",
        f"Machine: {prose(model if model is not None else '?')}"
        f" · digest `{record.digest}` · total **{format_seconds(totals.wall_s)}**, compile "
        f"{format_seconds(totals.compile_s)}, {totals.compiles} JAX compiles",
        "",
        *markdown_table(ledger_rows(record, top=top, notebook_order=notebook_order)),
    ]
    return "\n".join(lines) + "\n"


def failure_line(failed: Sequence[tuple[RunRecord, Cell]]) -> str:
    """The one line that ends a run a cell failed: the first such cell, how many more, and that the run is kept."""
    record, cell = failed[0]
    what = cell.status + (f" {cell.error.name}" if cell.error is not None and cell.error.name else "")
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    where = f"run {record.run_id}" if record.run_id is not None else "the run"
    return (
        f"nbscope: failed: {cell.label} of {record.target} ({what}){more}; {where} is stored "
        "with what it measured (--allow-errors exits 0 even so)"
    )
