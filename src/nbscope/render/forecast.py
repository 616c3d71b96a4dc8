"""Views of a GPU forecast (``nbscope.analyse.forecast``): terminal tables and markdown.

Each table reads the typed :class:`~nbscope.analyse.forecast.Forecast` in its row builder
(:func:`forecast_rows`, :func:`measured_rows`) and the terminal and markdown format those rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rich.table import Table

from nbscope import _units as units
from nbscope._redact import shorten
from nbscope.render._clean import code_span
from nbscope.render._markdown import markdown_table
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import console, format_seconds, literal, terminal_table
from nbscope.schema.codec import encode

if TYPE_CHECKING:
    from nbscope.analyse.forecast import CellForecast, Forecast, GainedFunction, KeptFunction, NotebookVerdict, Outcome
    from nbscope.analyse.forecast.devices import DeviceTable, Figure
    from nbscope.analyse.forecast.measured import MeasuredComparison
    from nbscope.analyse.report import ReportData

VERDICT_STYLE: dict[NotebookVerdict | Literal["not forecast"], str] = {
    "faster": "green",
    "slower": "red",
    "similar": "yellow",
    "mixed": "yellow",
    "unchanged": "dim",
    "uncertain": "magenta",
    "not forecast": "dim",
    "fails": "bold red",
}
MEANING = (
    "CPU: the cell's time measured on this machine. Forecast: low–high seconds on the GPU = host work "
    "(Python, NumPy, Numba) carried over as measured here, XLA:GPU compile derived from this CPU's compile, "
    "plus each JAX program run forecast from its HLO with the device table's figures (ranges carried "
    "through); calls pinned to the CPU stay as measured. Verdict: faster / slower beyond ±10 %, similar "
    "wholly within it, uncertain when the range reaches past ±10 % without lying wholly beyond it, or the "
    "dominant term is wider than ×4; "
    "unchanged = no JAX work; not forecast = the cell raised, died or timed out."
)
WIDE = 120  # below this console width the dominant term goes under the table, not in a narrow column
CODE_WIDTH = 40  # a cell's first line, cut here in both formats (a terminal cuts it further to fit)


seconds_range = units.seconds_range


def dominant_words(outcome: Outcome, kind: str = "GPU") -> str:
    """The dominant term with its total; when that is carried-over host time (or compile), the main
    JAX term too; for an uncertain cell, what is unknown and what would settle it."""
    dominant, jax = outcome.dominant, outcome.jax_dominant
    fails = "; ".join(
        f"raises on the {kind}: {f.operation} in `{f.function}` ({f.reason}; {f.source}): keep `{f.function}` on the CPU"
        for f in outcome.fails
    )
    words = dominant.words if dominant is not None else ""
    if fails:
        return f"{fails}; if it ran: {words}" if words else fails
    if dominant is not None and words and (dominant.high_s is not None or dominant.low_s):
        words += f" = {seconds_range(dominant.low_s, dominant.high_s)}"
    if dominant is not None and dominant.kind in ("host", "compile") and jax is not None and jax.words:
        words += f"; on the {kind}: {jax.words} = {seconds_range(jax.low_s, jax.high_s)}"
    uncertain = outcome.uncertain
    if uncertain is not None:
        words += f"; unknown: {uncertain.unknown}; to settle: {uncertain.settle}"
    return words


def _cells_in_order(result: Forecast, device: str, top: int | None, show_all: bool) -> list[CellForecast]:
    """Cells by forecast change (largest first), the top N, always with the cells that gain and lose
    the most and every uncertain one."""
    cells = {c.index: c for c in result.cells}
    if show_all:
        return sorted(cells.values(), key=lambda c: c.index)
    notebook = result.notebook[device]
    ranking = [i for i in notebook.ranking if i in cells]
    chosen = ranking[:top] if top else ranking
    for index in (notebook.most_slower, notebook.most_faster, *notebook.uncertain):
        if index is not None and index in cells and index not in chosen:
            chosen.append(index)
    order = {index: position for position, index in enumerate(ranking)}
    return [cells[i] for i in sorted(chosen, key=lambda i: order.get(i, len(order)))]


def _targets_word(result: Forecast) -> str:
    """``GPU``, ``TPU`` or ``Device``: what the forecast's targets are, in its title."""
    kinds = {device.kind for device in result.devices}
    return kinds.pop() if len(kinds) == 1 else "Device"


def _meaning(result: Forecast) -> str:
    """The legend, in the words of the forecast's targets (a TPU's compile is XLA:TPU's)."""
    word = _targets_word(result)
    if word == "GPU":
        return MEANING
    compiler = "XLA:TPU" if word == "TPU" else "XLA"
    where = "the TPU" if word == "TPU" else "the device"
    return MEANING.replace("on the GPU", f"on {where}").replace("XLA:GPU", compiler)


def _kind(result: Forecast, key: str) -> str:
    device = result.device(key)
    return device.kind if device is not None else "GPU"


def _headline(result: Forecast, key: str) -> str:
    notebook = result.notebook[key]
    name = result.device_name(key)
    total = seconds_range(notebook.low_s, notebook.high_s)
    verdict = notebook.verdict
    cpu = format_seconds(notebook.cpu_s)
    kind = _kind(result, key)
    if verdict == "unchanged":
        return f"{name}: the notebook's time stays {cpu}: it runs no JAX, so a {kind} changes nothing"
    text = f"{name}: {total} with everything on the {kind} vs {cpu} measured on this CPU"
    extra = ""
    if notebook.unbounded:
        cells = ", ".join(str(i + 1) for i in notebook.unbounded)
        extra += (
            f"; no upper bound: the {kind} time of cell{'s' if len(notebook.unbounded) > 1 else ''} {cells} is unknown"
        )
    if notebook.uncertain:
        extra += f"; uncertain cells: {', '.join(str(i + 1) for i in notebook.uncertain)}"
    if notebook.not_forecast:
        extra += f"; not forecast: cells {', '.join(str(i + 1) for i in notebook.not_forecast)}"
    plan = notebook.plan
    if verdict == "mixed" and plan is not None:
        return (
            f"{text}; mixed: {seconds_range(plan.low_s, plan.high_s)} with "
            f"{', '.join(plan.keep_on_cpu)} kept on the CPU{extra}"
        )
    if notebook.failing:
        failing = ", ".join(str(i + 1) for i in notebook.failing)
        return (
            f"{text}: fails on the {kind}: cell{'s' if len(notebook.failing) > 1 else ''} {failing} raise there{extra}"
        )
    return f"{text}: {verdict} on the {kind}{extra}"


@dataclass(frozen=True, slots=True)
class FunctionAdvice:
    """A function the forecast names: one to keep on the CPU (with the change that does it), or one that
    gains on the GPU."""

    function: str
    gpu: str  # its forecast range on the GPU
    cpu: str  # its time measured here
    change: str = ""
    example: str = ""


@dataclass(frozen=True, slots=True)
class DeviceSummary:
    """What is said about one GPU around its table: the headline and the functions to move."""

    headline: str
    style: str
    keep_on_cpu: tuple[FunctionAdvice, ...]
    gains: tuple[FunctionAdvice, ...]


def _kept(entry: KeptFunction) -> FunctionAdvice:
    return FunctionAdvice(
        entry.function,
        seconds_range(entry.gpu_low_s, entry.gpu_high_s),
        format_seconds(entry.cpu_s),
        entry.change.text or "",
        entry.change.example or "",
    )


def _gained(entry: GainedFunction) -> FunctionAdvice:
    return FunctionAdvice(entry.function, seconds_range(entry.gpu_low_s, entry.gpu_high_s), format_seconds(entry.cpu_s))


def _device_summary(result: Forecast, key: str) -> DeviceSummary:
    notebook = result.notebook[key]
    return DeviceSummary(
        _headline(result, key),
        VERDICT_STYLE[notebook.verdict],
        tuple(_kept(e) for e in notebook.keep_on_cpu),
        tuple(_gained(e) for e in notebook.gains),
    )


def _column(header: str, justify: str = "left", role: str = "text", **options: Any) -> Column:
    """A column whose header reads the same in both formats (markdown would capitalise it)."""
    return Column(header, justify, role, markdown=header, **options)


def _cell_columns() -> tuple[Column, ...]:
    return (
        _column("cell", "right", "number"),
        _column("line", "right", "number", optional=True),
        _column("code", "left", "source", min_width=24),
        _column("CPU", "right", "number"),
    )


def _cell_items(index: int, line: int | None, first_line: str | None, cpu_s: float | None) -> tuple[object, ...]:
    return (
        str(index + 1),
        str(line or ""),
        Item(shorten(first_line or "", CODE_WIDTH), code=True),
        format_seconds(cpu_s),
    )


DOMINANT = "dominant term"


def forecast_rows(
    result: Forecast, key: str, *, top: int | None = 15, show_all: bool = False, dominant_on_terminal: bool = True
) -> Rows:
    """The per-cell table for one GPU, once for both formats: the cells by forecast change (see
    ``_cells_in_order``), then each cell not forecast with why in the dominant term's place.

    ``dominant_on_terminal=False`` leaves the dominant term out of the terminal's table (a narrow console
    prints it under the table); markdown always has it."""
    columns = (
        *_cell_columns(),
        _column(f"{key.upper()} forecast", "right", "number"),
        _column("verdict", "left", "text", min_width=12),
        _column(DOMINANT, "left", "text", min_width=20, terminal=dominant_on_terminal),
    )
    rows = []
    for cell in _cells_in_order(result, key, top, show_all):
        outcome = cell.gpu[key]
        rows.append(
            (
                *_cell_items(cell.index, cell.line, cell.first_line, cell.cpu.wall_s),
                seconds_range(outcome.low_s, outcome.high_s),
                Item(outcome.verdict, VERDICT_STYLE[outcome.verdict]),
                dominant_words(outcome, _kind(result, key)),
            )
        )
    rows += [
        (
            *_cell_items(failed.index, failed.line, failed.first_line, failed.cpu_s),
            "–",
            Item("not forecast", VERDICT_STYLE["not forecast"]),
            failed.reason,
        )
        for failed in result.not_forecast
    ]
    return Rows.of(columns, rows, title=f"per cell on the {result.device_name(key)}")


def _dominant_terms(rows: Rows) -> list[tuple[str, str]]:
    """(cell number, dominant term) of each row that has one, for printing under a narrow table."""
    at = next(i for i, column in enumerate(rows.columns) if column.header == DOMINANT)
    return [(row[0].text, row[at].text) for row in rows.rows if row[at].text]


def print_forecast(result: Forecast, *, top: int | None = 15, show_all: bool = False) -> None:
    run = result.run
    where = f"run {run.id}" if run.id is not None else "the run"
    console.print(
        f"[bold]{_targets_word(result)} forecast[/bold] for {literal(run.target)} "
        f"({literal(where)}, measured on {literal(run.cpu or 'this CPU')})"
    )
    wide = console.width >= WIDE
    for device in result.devices:
        key = device.key
        rows = forecast_rows(result, key, top=top, show_all=show_all, dominant_on_terminal=wide)
        if rows.rows:
            console.print(terminal_table(rows))
        if not wide:
            for number, words in _dominant_terms(rows):
                console.print(f"  cell {number}: {words}", markup=False, highlight=False)
        summary = _device_summary(result, key)
        headline = literal(summary.headline)
        console.print(f"[{summary.style}]{headline}[/{summary.style}]" if summary.style else headline)
        for advice in summary.keep_on_cpu:
            console.print(
                f"  keep [bold]{literal(advice.function)}[/bold] on the CPU: {advice.gpu} forecast on the "
                f"{key.upper()} vs {advice.cpu} measured here"
            )
            console.print(f"    {advice.change}", markup=False)
            for line in advice.example.splitlines():
                console.print(f"      {line}", markup=False)
        for advice in summary.gains[:3]:
            console.print(f"  gains on the {device.kind}: {literal(advice.function)} {advice.cpu} here → {advice.gpu}")
    if len(result.devices) > 1:
        console.print(terminal_table(targets_rows(result)))
    for comparison in result.measured or ():
        print_measured(comparison)
    for note in result.notes:
        console.print(f"[dim]note: {literal(note)}[/dim]")
    console.print(f"[dim]{_meaning(result)}[/dim]")
    _print_figures(result)


def targets_rows(result: Forecast) -> Rows:
    """The notebook on the CPU it was measured on and on each device side by side: time range, verdict and the
    cells that decide it (those that raise there, else those it slows or speeds most), so a user picks the runner
    before paying for it."""
    columns = (
        _column("target", "left", "text"),
        _column("time", "right", "number"),
        _column("verdict", "left", "text", min_width=10),
        _column("deciding cells", "left", "text", min_width=20),
    )
    first = next(iter(result.notebook.values()), None)
    rows: list[tuple[object, ...]] = []
    if first is not None:
        rows.append(("this CPU (measured)", format_seconds(first.cpu_s), "–", "–"))
    for device in result.devices:
        notebook = result.notebook[device.key]
        if notebook.failing:
            deciding = "raise there: " + ", ".join(f"cell {i + 1}" for i in notebook.failing)
        else:
            parts = []
            if notebook.most_slower is not None:
                parts.append(f"cell {notebook.most_slower + 1} slower")
            if notebook.most_faster is not None:
                parts.append(f"cell {notebook.most_faster + 1} faster")
            if notebook.unbounded:
                parts.append("unbounded: " + ", ".join(str(i + 1) for i in notebook.unbounded))
            deciding = "; ".join(parts) or "–"
        rows.append(
            (
                f"{device.name} ({device.key})",
                seconds_range(notebook.low_s, notebook.high_s),
                Item(notebook.verdict, VERDICT_STYLE[notebook.verdict]),
                deciding,
            )
        )
    return Rows.of(columns, rows, title="the notebook on each target")


def _error(value: float | None) -> str:
    return "–" if value is None else f"{value:+.0%}"


def _measured_total(comparison: MeasuredComparison) -> str:
    total = comparison.total
    whole = comparison.with_compile
    return (
        f"total{'' if whole else ' without compile'}: forecast "
        f"{seconds_range(total.forecast_low_s, total.forecast_high_s)}, "
        f"measured {'at least ' if total.cut_short else ''}{format_seconds(total.measured_s)} "
        f"(error {_error(total.error)}); {comparison.within} of {comparison.paired} cells within the forecast range"
        + (
            f", {total.cut_short} cut short (a timeout or a dead kernel: their time a lower bound)"
            if total.cut_short
            else ""
        )
        + f" (error: forecast midpoint vs measured, {'compile included' if whole else 'compile left out of both'})"
    )


def measured_rows(comparison: MeasuredComparison) -> Rows:
    """Forecast vs a real GPU run, a row per cell the GPU run measured, once for both formats (compile
    time left out of both sides)."""
    run = comparison.measured_run
    where = f"run {run.id}" if run.id is not None else "the GPU run"
    title = f"forecast ({comparison.device}) vs measured on {', '.join(run.gpus) or 'the GPU'} ({where})"
    columns = (
        *_cell_columns(),
        _column("forecast", "right", "number"),
        _column("measured", "right", "number"),
        _column("error", "right", "number"),
        _column("in range", "left", "number"),
    )
    rows = [
        (
            *_cell_items(row.index, row.line, row.first_line, row.cpu_s),
            seconds_range(row.forecast_low_s, row.forecast_high_s),
            f"≥ {format_seconds(row.measured_s)}" if row.cut_short else format_seconds(row.measured_s),
            _error(row.error),
            "cut short" if row.within is None else "yes" if row.within else "no",
        )
        for row in comparison.cells
        if row.measured_s is not None
    ]
    return Rows.of(columns, rows, title=title)


def print_measured(comparison: MeasuredComparison) -> None:
    """Forecast vs a real GPU run, per cell (compile time left out of both sides)."""
    console.print(terminal_table(measured_rows(comparison)))
    console.print(_measured_total(comparison), markup=False)
    for note in comparison.notes:
        console.print(f"[dim]note: {literal(note)}[/dim]")


def measured_markdown(comparison: MeasuredComparison) -> str:
    """Forecast vs a real GPU run as a markdown table."""
    rows = measured_rows(comparison)
    lines = [f"### {rows.title}", "", *markdown_table(rows), "", _measured_total(comparison)]
    lines += [f"_note: {note}_" for note in comparison.notes]
    return "\n".join(lines) + "\n"


def _print_figures(result: Forecast) -> None:
    for device in result.devices:
        parts = []
        for name, unit in (("loop_iteration_us", " µs/iteration"), ("sync_iteration_us", " µs/synced iteration")):
            figure = device.figure(name)
            parts.append(f"{_figure_text(figure)}{unit} ({figure.basis})")
        console.print(
            f"[dim]{device.key}: {'; '.join(parts)}; sources: nbscope forecast --json or docs/forecast.md[/dim]"
        )


def _figure_text(figure: Figure) -> str:
    low, high = figure.low, figure.high
    return f"{low:.3g}" if low == high else f"{low:.3g}–{high:.3g}"


def forecast_markdown(result: Forecast, *, top: int | None = 15, show_all: bool = False) -> str:
    run = result.run
    lines = [f"## {_targets_word(result)} forecast: {run.target}", ""]
    for device in result.devices:
        key = device.key
        summary = _device_summary(result, key)
        lines += [f"**{summary.headline}**", ""]
        rows = forecast_rows(result, key, top=top, show_all=show_all)
        if rows.rows:
            lines += [*markdown_table(rows), ""]
        for advice in summary.keep_on_cpu:
            lines.append(
                f"- keep {code_span(advice.function)} on the CPU ({advice.gpu} on the {key.upper()} vs "
                f"{advice.cpu} here): {advice.change}"
            )
            if advice.example:
                lines += ["", "  ```python", *[f"  {ln}" for ln in advice.example.splitlines()], "  ```"]
        lines.append("")
    if len(result.devices) > 1:
        lines += [f"### {targets_rows(result).title}", "", *markdown_table(targets_rows(result)), ""]
    for comparison in result.measured or ():
        lines += [measured_markdown(comparison)]
    lines += [f"_{_meaning(result)}_", ""]
    lines += [f"_note: {note}_" for note in result.notes]
    return "\n".join(lines).rstrip() + "\n"


def device_table_document(table: DeviceTable) -> dict[str, object]:
    """``forecast --list --json``: the devices, the model figures they share, and the files they came from."""
    return {"devices": encode(tuple(table.devices.values())), "model": encode(table.model), "files": table.files}


def print_device_table(table: DeviceTable) -> None:
    """The device table (``nbscope forecast --list``): each figure with its basis and source."""
    for device in table.devices.values():
        _print_figure_grid(f"{device.key}: {device.name} ({device.origin})", device.figures)
    _print_figure_grid("model figures (every device)", table.model)
    console.print(f"[dim]files: {', '.join(table.files)}[/dim]")


def _print_figure_grid(title: str, figures: Mapping[str, Figure]) -> None:
    grid = Table(title=title)
    for column in ("figure", "value", "basis", "source"):
        grid.add_column(column, overflow="fold")
    for name, figure in figures.items():
        grid.add_row(name, _figure_text(figure), figure.basis, figure.source)
    console.print(grid)


# ---- the HTML report's section (nbscope report) ---------------------------------------------------------

MAX_PLOT_CELLS = 30


def forecast_svg(result: Forecast) -> str | None:
    """Per cell the measured CPU time and each GPU's forecast (bar to the low end, whisker to the high
    end; an open-ended range draws an arrow), log time axis, the cells the GPU changes most first."""
    from nbscope.render.html._base import COLORS
    from nbscope.render.html._plots import _label
    from nbscope.render.html._svg import BarChart

    if not result.devices:
        return None
    first = result.devices[0].key
    order = result.notebook[first].ranking[:MAX_PLOT_CELLS]
    cells = {c.index: c for c in result.cells}
    rows = [cells[i] for i in order if i in cells]
    if not rows:
        return None
    floor = 1e-4
    chart = BarChart(
        [_label(c.recorded) for c in rows],
        "CPU measured vs GPU forecast per cell (bar: low end, whisker: high end)",
        "seconds (log scale)",
        scale="log",
        bars_per_row=1 + len(result.devices),
    )
    legend = [("CPU (measured)", "#8c8c8c")]
    for row, cell in enumerate(rows):
        chart.bar(row, floor, max(cell.cpu.wall_s, floor) - floor, "#8c8c8c")
    for number, device in enumerate(result.devices, start=1):
        color = COLORS[(number - 1) % len(COLORS)]
        legend.append((f"{device.name} (forecast)", color))
        for row, cell in enumerate(rows):
            outcome = cell.gpu[device.key]
            low, high = max(outcome.low_s, floor), outcome.high_s
            chart.bar(row, floor, low - floor, color, slot=number)
            chart.whisker(row, low, high, slot=number)
    return chart.svg(legend)


def forecast_html(result: Forecast) -> str:
    """The report section of one forecast: plot, verdicts and the changes to make."""
    from nbscope.render.html._base import Markup, _table, e, e_code

    run = result.run
    parts = [f"<h3>{e(run.target)} (run {e(run.id)})</h3>"]
    plot = forecast_svg(result)
    if plot:
        parts.append(plot)
    cells = {c.index: c for c in result.cells}
    for device in result.devices:
        key = device.key
        summary = _device_summary(result, key)
        parts.append(f"<p><strong>{e(summary.headline)}</strong></p>")
        rows = []
        for index in result.notebook[key].ranking[:MAX_PLOT_CELLS]:
            cell = cells[index]
            outcome = cell.gpu[key]
            rows.append(
                (
                    cell.index + 1,
                    cell.line or "",
                    Markup(f"<code>{e(cell.first_line)}</code>"),
                    format_seconds(cell.cpu.wall_s),
                    seconds_range(outcome.low_s, outcome.high_s),
                    outcome.verdict,
                    dominant_words(outcome, _kind(result, key)),
                )
            )
        if rows:
            parts.append(
                _table(
                    ("cell", "line", "code", "CPU", f"{key.upper()} forecast", "verdict", "dominant term"),
                    rows,
                    numeric=(0, 1, 3, 4),
                )
            )
        for advice in summary.keep_on_cpu:
            parts.append(
                f"<p>Keep <code>{e(advice.function)}</code> on the CPU: {e_code(advice.change)}</p>"
                + (f'<pre class="src">{e(advice.example)}</pre>' if advice.example else "")
            )
    for failed in result.not_forecast:
        parts.append(f'<p class="note">cell {failed.index + 1}: {e(failed.reason)}</p>')
    parts.append(f'<p class="note">{e(_meaning(result))}</p>')
    parts.extend(f'<p class="note">{e(note)}</p>' for note in result.notes)
    return "".join(parts)


def report_section(data: ReportData) -> str:
    """``<h2>GPU forecast</h2>`` for the forecasts a report holds (:func:`nbscope.analyse.report.report_data`
    forecasts the profile runs recorded with program data), or "" when it holds none."""
    from nbscope.render.html._base import e

    parts = [forecast_html(result) for result in data.forecasts]
    parts += [f'<p class="note">{e(note)}</p>' for note in data.forecast_notes]
    return "<h2>GPU forecast</h2>" + "".join(parts) if parts else ""
