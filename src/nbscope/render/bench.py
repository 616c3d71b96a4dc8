"""Views of a ``bench`` run: rich tables per group, and a markdown table in the seed's style."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nbscope.record.run import RunRecord
from nbscope.render._clean import code_span
from nbscope.render._markdown import markdown_table, plain_text
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import (
    console,
    format_bytes,
    format_seconds,
    literal,
    print_record_header,
    stderr_console,
    terminal_table,
)
from nbscope.schema.codec import decode
from nbscope.schema.progress import GroupProgress
from nbscope.schema.suite import BenchGroup, BenchRun, BenchSettings, GroupFigure


def time_text(figure: GroupFigure, *, first_fallback: bool = False) -> str:
    """The headline time of a row: the steady median, a fitted per-iteration cost, or (asked for) the
    first call of a row that has nothing else, like the multi-size total."""
    if figure.steady:
        return format_seconds(figure.steady.median_s)
    if figure.fit and figure.fit.per_iter_s is not None:
        return f"{figure.fit.per_iter_s * 1e6:.4g} µs/iter"
    if first_fallback and figure.first:
        return format_seconds(figure.first.wall_s)
    return "–"


def spread_text(figure: GroupFigure) -> str:
    spread = figure.steady.spread if figure.steady else None
    if spread is None and figure.fit:
        spread = figure.fit.spread
    return "–" if spread is None else f"{spread:.1%}"


def samples_text(figure: GroupFigure) -> str:
    steady = figure.steady
    if steady:
        inner = steady.inner or 1
        return f"{steady.samples}" + (f"×{inner}" if inner > 1 else "")
    if figure.fit:
        return f"fit of {len(figure.fit.points)}"
    return "1" if figure.first else "–"


def throughput_text(figure: GroupFigure) -> str:
    throughput = figure.throughput
    if throughput is None or throughput.value is None:
        return ""
    return f"{throughput.value:.3g} {throughput.unit}"


def first_text(figure: GroupFigure) -> str:
    return format_seconds(figure.first.wall_s) if figure.first else "–"


def compile_text(figure: GroupFigure) -> str:
    """A bench figure's compile time on its first call (not the ledger's per-cell compile counts)."""
    return format_seconds(figure.first.compile_s if figure.first else None)


def bench_columns(*, terminal_dtype: bool) -> tuple[Column, ...]:
    """The figure table's columns. The formats order them differently, so two are written once per format:
    a terminal shows dtype second and only when a group has several, and its steady time after the first
    call; markdown keeps the seed's order (time second, dtype last), and its time falls back to the first
    call of a row that has nothing else (the multi-size total)."""
    return (
        Column("benchmark", "left", "source", min_width=14, markdown="Benchmark"),
        Column("time", "right", "number", terminal=False, markdown="time"),
        Column("dtype", "left", "number", terminal=terminal_dtype, in_markdown=False),
        Column("first call", "right", "number", markdown="first call"),
        Column("compile", "right", "number", markdown="compile"),
        Column("steady", "right", "number", in_markdown=False),
        Column("min", "right", "number", in_markdown=False),
        Column("spread", "right", "number", markdown="spread"),
        Column("samples", "right", "number", markdown="samples"),
        Column("throughput", "right", "text", min_width=10, markdown="throughput"),
        Column("dtype", "left", "number", terminal=False, markdown="dtype"),
    )


def _figure_row(figure: GroupFigure) -> tuple[object, ...]:
    spread = spread_text(figure)
    minimum = figure.steady.min_s if figure.steady else None
    dtype = str(figure.dtype)
    return (
        str(figure.label),
        time_text(figure, first_fallback=True),
        dtype,
        first_text(figure),
        compile_text(figure),
        time_text(figure),
        format_seconds(minimum) if minimum is not None else "–",
        # a warned figure is flagged by its spread: a high spread is the usual warning
        Item(f"{spread} ⚠", "yellow") if figure.warnings else spread,
        samples_text(figure),
        throughput_text(figure),
        dtype,
    )


def bench_rows(groups: Mapping[str, BenchGroup], *, terminal_dtype: bool = True, failures: bool = False) -> Rows:
    """The figure table, once for both formats: a row per figure of each group that ran, and (``failures``)
    a row per worker that failed, under its group's figures (markdown's one table; a terminal's table per
    group says them in words below it)."""
    columns = bench_columns(terminal_dtype=terminal_dtype)
    rows: list[tuple[object, ...]] = []
    for name, group in groups.items():
        if group.skipped:
            continue
        rows += [_figure_row(figure) for figure in group.figures]
        if failures:
            rows += [
                (Item(f"{name} ({run.dtype}) failed: {run.reason}", "red"), *[""] * (len(columns) - 1))
                for run in group.runs
                if run.failed
            ]
    return Rows.of(columns, rows)


# Markdown's summary of the groups; a terminal gives each group's figures as the title of its table.
GROUP_COLUMNS = (
    Column("group", markdown="Group"),
    Column("status", markdown="status"),
    Column("wall (fresh processes)", "right", "number", markdown="wall (fresh processes)"),
    Column("peak RSS", "right", "number", markdown="peak RSS"),
    Column("other load", "right", "number", markdown="other load"),
)


def group_rows(groups: Mapping[str, BenchGroup]) -> Rows:
    """A row per group: its status (with the reason), wall time, peak RSS and the load of other processes."""
    rows = []
    for name, group in groups.items():
        status = str(group.status)
        if group.reason:
            status += f": {group.reason}"
        rss = group.peak_rss_bytes
        rows.append(
            (
                name,
                status,
                format_seconds(group.wall_s),
                format_bytes(rss) if rss else "–",
                f"{group.background_cores or 0:.2f} cores",
            )
        )
    return Rows.of(GROUP_COLUMNS, rows)


def _group_heading(name: str, group: BenchGroup, dtypes: list[str]) -> str:
    parts = [f"[bold]{literal(name)}[/bold]", literal(group.title or "")]
    if len(dtypes) == 1:
        parts.append(literal(dtypes[0]))
    runs = len(group.runs)
    parts.append(f"{format_seconds(group.wall_s)} in {runs} process{'es' if runs > 1 else ''}")
    if group.peak_rss_bytes:
        parts.append(f"peak RSS {format_bytes(group.peak_rss_bytes)}")
    return " · ".join(p for p in parts if p)


def _notes(name: str, group: BenchGroup) -> list[str]:
    """The lines under a group's table (rich markup): warnings that need words, notes shared by rows, the
    group's warnings and its workers' notes and failures; each once."""
    notes: list[str] = []
    shared: dict[str, list[str]] = {}
    for figure in group.figures:
        # A high spread is visible in its column; other warnings need words.
        other = [w for w in figure.warnings if "spread" not in w]
        if other:
            notes.append(f"[yellow]⚠ {literal(figure.label)}: {literal('; '.join(other))}[/yellow]")
        if figure.note:
            shared.setdefault(figure.note, []).append(str(figure.label))
    for note, labels in shared.items():
        where = ", ".join(labels) if len(labels) <= 2 else f"{len(labels)} rows"
        notes.append(f"[dim]{literal(where)}: {literal(note)}[/dim]")
    notes.extend(f"[yellow]⚠ {literal(warning)}[/yellow]" for warning in group.warnings)
    for run in group.runs:
        notes.extend(f"[dim]{literal(note)}[/dim]" for note in run.notes or ())
        if run.failed:
            notes.append(f"[red]{literal(name)} ({literal(run.dtype)}) failed:[/red] {literal(run.reason)}")
    return list(dict.fromkeys(notes))


def print_bench(record: RunRecord) -> None:
    """Print a bench run: one table per group, skipped and failed groups with their reason, totals."""
    print_record_header(record)
    run = decode(BenchRun, record.measurements)
    for name, group in run.groups.items():
        if group.skipped:
            console.print(f"[yellow]{literal(name)}: skipped[/yellow] – {literal(group.reason)}")
            continue
        dtypes = sorted({str(f.dtype) for f in group.figures})
        heading = _group_heading(name, group, dtypes)
        if group.figures:
            table = terminal_table(bench_rows({name: group}, terminal_dtype=len(dtypes) > 1))
            table.title = heading  # rich markup (the group's name in bold), which a row model's title is not
            console.print(table)
        else:
            console.print(heading)
        for line in _notes(name, group):
            console.print(f"  {line}")
    totals = run.totals
    line = f"{totals.figures or 0} figures from {totals.groups_ok or 0} group(s) in {format_seconds(totals.wall_s)}"
    if totals.groups_skipped:
        line += f", {totals.groups_skipped} skipped"
    if totals.groups_failed:
        line += f", [red]{totals.groups_failed} failed[/red]"
    if totals.warnings:
        line += f", [yellow]{totals.warnings} warning(s)[/yellow] (spread > 10 % or too few samples)"
    if totals.interrupted:
        line += ", [red]interrupted[/red]"
    machine = run.machine
    if machine is not None and machine.spread is not None:
        colour = "yellow" if machine.spread > 0.10 else "dim"
        console.print(
            f"[{colour}]machine steadiness: a fixed reference workload varied ±{machine.spread:.1%} over the run "
            f"(10–90 %, {machine.samples} probes); each figure's uncertainty is at least that[/{colour}]"
        )
    if (totals.background_cores or 0) > 0.25:
        line += f", [yellow]machine busy (up to {totals.background_cores:.1f} cores used by other processes)[/yellow]"
    console.print(line)
    console.print(
        "[dim]steady = median of calibrated samples; spread = MAD / median; first call is its own figure[/dim]"
    )


def bench_markdown(record: RunRecord) -> str:
    """A GitHub-ready markdown table of every row, in the seed's style (Benchmark | time | ...)."""
    settings = decode(BenchSettings, record.settings)
    run = decode(BenchRun, record.measurements or {})
    lines = [
        f"**nbscope bench** {code_span(record.target)} · {plain_text(record.machine().summary)} · digest "
        f"{code_span(record.digest)} · dtype {plain_text(settings.dtype or '?')} · "
        f"{plain_text(record.started_at[:19].replace('T', ' '))} UTC",
        "",
        *markdown_table(bench_rows(run.groups, failures=True)),
        "",
        f"{run.totals.figures or 0} figures in {format_seconds(run.totals.wall_s)}; time = median of the "
        "steady-state samples (µs/iter: fitted slope); spread = MAD / median; ⚠ = spread > 10 % or too few samples; "
        "other load = cores kept busy by other processes while the group ran.",
    ]
    machine = run.machine
    if machine is not None and machine.spread is not None:
        lines.append(
            f"Machine steadiness: a fixed reference workload varied ±{machine.spread:.1%} over the run "
            f"(10–90 % range of {machine.samples} probes); no figure is known better than that."
        )
    skipped = [f"{name} ({group.reason})" for name, group in run.groups.items() if group.skipped]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(skipped) + "."]
    lines += ["", *markdown_table(group_rows(run.groups))]
    return "\n".join(lines) + "\n"


def bench_progress() -> Callable[[GroupProgress], None]:
    """The suite's progress on standard error: each group as it starts, and why one did not run or failed."""
    status = stderr_console()

    def progress(event: GroupProgress) -> None:
        if event.event == "start":
            status.print(f"[dim]bench: {event.group} ({event.dtype}) …[/dim]")
        elif event.status != "ok":
            why = f" – {literal(event.reason)}" if event.reason else ""
            status.print(f"[dim]bench: {event.group}: {event.status}{why}[/dim]")

    return progress
