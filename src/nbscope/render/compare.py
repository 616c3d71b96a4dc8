"""Terminal and markdown views of comparisons, diagnoses and backend recommendations."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from rich.text import Text

from nbscope._units import count, size
from nbscope.record.cells import label as cell_label
from nbscope.render._markdown import markdown_table, plain_text
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.terminal import (
    console,
    field_name,
    format_bytes,
    format_seconds,
    literal,
    metric_name,
    terminal_table,
)

if TYPE_CHECKING:
    from nbscope.analyse.compare import CellFigures, CellRow, Comparison, Difference, RunSummary, TotalRow
    from nbscope.analyse.recommend import Estimate, Recommendation
    from nbscope.schema.model import Cell

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}
MATCH_NOTE = {"hash": "", "edited": "edited", "moved": "moved", "similar": "similar", "only-a": "only in A", "only-b": "only in B"}


def _cell_name(row: CellRow) -> str:
    return f"cell {_cell_number(row)}" + (f" · line {row.line}" if row.line else "")


def _cell_number(row: CellRow) -> str:
    """``3``, or ``3→4`` for a cell that moved (its number in A, then in B)."""
    ia, ib = row.index_a, row.index_b
    if ia is not None and ib is not None and ia != ib:
        return f"{ia + 1}→{ib + 1}"
    return str((ia if ia is not None else ib or 0) + 1)


def _side(figures: CellFigures | None, *, with_compile: bool) -> Item:
    """One side's wall time of a cell (``with_compile``: and its compile time), red with its status when the
    cell did not finish."""
    if figures is None:
        return Item("–")
    text = format_seconds(figures.wall_s)
    if with_compile and figures.compile_s:
        text += f" (compile {format_seconds(figures.compile_s)})"
    if figures.status in ("ok", "expected-error"):
        return Item(text)
    return Item(f"{text} {figures.status}", "red")


def _side_compile(figures: CellFigures | None) -> str:
    return format_seconds(figures.compile_s) if figures and figures.compile_s else "–"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 100 else text[:97] + "…"
    return str(value)


def _run_title(run: RunSummary) -> str:
    shown = ", ".join(f"{field_name('settings.' + key)} {value}" for key, value in run.title_settings)
    return (f"{run.label} · {run.target} · {run.platform} · {run.machine}" + (f" · {shown}" if shown else ""))


def _different_note(comparison: Comparison) -> str | None:
    """The warning of a comparison of two different notebooks (made with --allow-different)."""
    if comparison.same_notebook:
        return None
    return (f"different notebooks ({comparison.run_a.target} and {comparison.run_b.target}), compared with "
            "--allow-different: the totals and winners compare two programs, not one notebook's speed")


# ---- comparison ---------------------------------------------------------------------------------

WINNER_STYLE = {"B": "green", "A": "red"}  # B against A: green when it is faster; a tie or no winner is dim

# The cells table. A terminal names a cell by its number, line and source (and how it was paired); markdown
# by one "Benchmark" label: "cell 3 · line 41: `code` (edited)".
COMPARISON_COLUMNS = (
    Column("cell", "right", "number", in_markdown=False),
    Column("line", "right", "number", optional=True, in_markdown=False),
    Column("source", "left", "source", min_width=12, in_markdown=False),
    Column("benchmark", terminal=False, markdown="Benchmark"),
    Column("A", "right", "number"),
    Column("B", "right", "number"),
)
COMPILE_COLUMNS = (Column("A compile", "right", "number"), Column("B compile", "right", "number"))
WINNER_COLUMNS = (
    Column("winner", "left", "number"),
    Column("pairing", "left", "text", optional=True, in_markdown=False),
)
TOTAL_ROWS = ("wall_s", "compile_s", "run_s")  # the totals the cells table ends with (with_totals)


def _total_figures(total: TotalRow | None) -> tuple[str, str, str]:
    """A total's figures as both tables show them: A, B and the winner's text."""
    if total is None:
        return "–", "–", ""

    def shown(value: Any) -> str:
        if total.key.endswith("_s"):
            return format_seconds(value)
        if total.key.endswith("_bytes"):
            return size(value) or _value(value)
        return _value(value)

    return shown(total.a), shown(total.b), total.winner.text if total.winner else ""


def comparison_rows(comparison: Comparison, *, top: int | None = None,
                    compile_figures: Literal["columns", "inline"] | None = None,
                    with_totals: bool = False) -> Rows:
    """The paired cells, in notebook order (``top``: the largest differences only), once for both formats.

    ``compile_figures``: each side's compile time in columns of its own, or after its wall time; ``with_totals``
    ends the table with the total wall, compile and run times.
    """
    cells = list(comparison.rows)
    if top:
        cells = sorted(cells, key=lambda r: abs(r.delta_s or 0.0), reverse=True)[:top]
    columns = [*COMPARISON_COLUMNS, *(COMPILE_COLUMNS if compile_figures == "columns" else ()), *WINNER_COLUMNS]
    inline = compile_figures == "inline"
    rows: list[list[Any]] = []
    for row in cells:
        code = row.code_line or row.first_line
        note = MATCH_NOTE.get(row.match, row.match)
        benchmark = Item(code[:60], code=True, lead=f"{_cell_name(row)}: ", tail=f" ({note})" if note else "")
        figures = [_side(row.a, with_compile=inline), _side(row.b, with_compile=inline)]
        if compile_figures == "columns":
            figures += [_side_compile(row.a), _side_compile(row.b)]
        winner = Item(row.winner.text or "–", WINNER_STYLE.get(row.winner.side or "", "dim"))
        rows.append([_cell_number(row), str(row.line or ""), Item(code, code=True),
                     benchmark, *figures, winner, note])
    for key in TOTAL_ROWS if with_totals else ():
        a, b, text = _total_figures(comparison.total(key))
        totals = [Item(a, strong=True), Item(b, strong=True)]
        if compile_figures == "columns":
            totals += ["", ""]
        rows.append(["", "", "", Item(f"total {key[:-2]}", strong=True), *totals,
                     Item(text or "–", strong=True), ""])
    title = f"{len(cells)} largest differences" if top else "cells in notebook order"
    return Rows.of(columns, rows, title=title)


def totals_rows(totals: Sequence[TotalRow]) -> Rows:
    """The comparison's totals: a row per figure either run measured."""
    rows = [(metric_name(total.key), *_total_figures(total)) for total in totals
            if total.a is not None or total.b is not None]
    columns = (Column("figure", "left", "number"), Column("A", "right", "number"), Column("B", "right", "number"),
               Column("winner", "left", "number"))
    return Rows.of(columns, rows, title="totals")


def differences_rows(differences: Sequence[Difference]) -> Rows:
    """The settings and fingerprint fields that differ, and why each could change the figures."""
    columns = (Column("setting", "left", "path", min_width=10), Column("A", "left", "text", min_width=10),
               Column("B", "left", "text", min_width=10), Column("why it matters", "left", "text", min_width=16))
    rows = [(field_name(row.field), _value(row.a), _value(row.b), row.why or row.note or "") for row in differences]
    title = f"{len(rows)} difference{'s' if len(rows) != 1 else ''} that could explain the figures"
    return Rows.of(columns, rows, title=title)


def print_comparison(comparison: Comparison, *, top: int | None = None) -> None:
    """A table of paired cells (notebook order; ``top`` keeps the largest differences), totals, differences."""
    console.print(f"[bold]A[/bold] = {literal(_run_title(comparison.run_a))}")
    console.print(f"[bold]B[/bold] = {literal(_run_title(comparison.run_b))}")
    different = _different_note(comparison)
    if different:
        console.print(f"[bold yellow]{literal(different)}[/bold yellow]")
    pairing = comparison.pairing
    note = "every cell paired" if pairing.all_paired else f"{pairing.only_a} only in A, {pairing.only_b} only in B"
    console.print(literal(
        f"{pairing.cells_a} vs {pairing.cells_b} cells: {pairing.by_hash} paired by source hash, "
        f"{pairing.by_order + pairing.by_similarity + pairing.by_move} moved, edited or similar; {note}"
    ), style="dim")
    # Every figure stays whole on a narrow console: the source gives way; compile columns show from 110.
    compile_figures = "columns" if console.width >= 110 else None
    console.print(terminal_table(comparison_rows(comparison, top=top, compile_figures=compile_figures)))
    print_totals(comparison.totals)
    print_differences(comparison.differences)


def print_totals(totals: Sequence[TotalRow]) -> None:
    console.print(terminal_table(totals_rows(totals)))


def print_differences(differences: Sequence[Difference]) -> None:
    if not differences:
        console.print("Settings and fingerprints agree on every compared field.")
        return
    console.print(terminal_table(differences_rows(differences)))


def comparison_markdown(comparison: Comparison) -> str:
    """GitHub-ready: ``| Benchmark | A | B | Winner |`` with "B 3.1× faster", then totals and differences."""
    a, b = comparison.run_a, comparison.run_b
    if comparison.same_notebook:
        title = f"### nbscope compare: `{_md(a.target)}`, {plain_text(a.label)} vs {plain_text(b.label)}"
    else:
        title = (f"### nbscope compare (different notebooks): {plain_text(a.label)} `{_md(a.target)}` vs "
                 f"{plain_text(b.label)} `{_md(b.target)}`")
    different = _different_note(comparison)
    lines = [
        title,
        "",
        *([f"> **Warning**: {plain_text(different)}", ""] if different else []),
        f"- **A** = {plain_text(_run_title(a))}",
        f"- **B** = {plain_text(_run_title(b))}",
        "",
        *markdown_table(comparison_rows(comparison, compile_figures="inline", with_totals=True)),
    ]
    differences = comparison.differences
    lines += ["", f"**Differences that could explain the figures** ({len(differences)}):" if differences
              else "Settings and fingerprints agree on every compared field.", ""]
    # A list rather than a table: a field's values can be long (a JSON object, a path).
    for setting, value_a, value_b, why in differences_rows(differences).rows:
        reason = f" — {plain_text(why.text)}" if why.text else ""
        # Outside backticks: names and values are shown as written, never read as HTML or emphasis.
        lines.append(f"- `{_md(setting.text)}`: {plain_text(value_a.text)} → {plain_text(value_b.text)}{reason}")
    return "\n".join(lines) + "\n"


# ---- findings -----------------------------------------------------------------------------------

FINDING_LINES = 8  # a finding without --verbose fits in this many lines, at any console width
SUMMARY_LINES = 3  # of which the sentence takes at most this many


def _value_text(key: str, value: Any) -> str:
    if key.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_seconds(value)
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_bytes(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _evidence_lines(evidence: Mapping[str, Any]) -> list[str]:
    """Every evidence entry as ``key: value`` (plain text; the caller escapes it)."""
    return [f"{metric_name(key)}: {_value_text(key, value)}" for key, value in evidence.items()
            if key != "seconds_at_stake" and value not in (None, [], {})]


def _cells_of(record: Any) -> dict[int, Cell]:
    """A run's cells by index (none without a run), for naming where a finding is."""
    return {c.index: c for c in record.notebook_run().cells} if record is not None else {}


def _where(finding: Any, cells: Mapping[int, Cell]) -> str:
    if finding.cell_index is None:
        return "notebook"
    cell = cells.get(finding.cell_index)
    line = f" · line {cell.line}" if cell is not None and cell.line else ""
    return f"cell {finding.cell_index + 1}{line}"


def _wrapped(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width=max(20, width), initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False) or [first.rstrip()]


def _clip(lines: list[str], keep: int, width: int, note: str = "") -> list[str]:
    """The first ``keep`` lines, the last one ending with "…" (and ``note``) when lines were dropped."""
    if len(lines) <= keep:
        return lines
    kept = lines[:keep]
    tail = "…" + note
    kept[-1] = kept[-1][: max(0, width - len(tail))].rstrip() + tail
    return kept


def _one_line(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def finding_text(finding: Any, cells: Mapping[int, Cell], width: int, *, verbose: bool = False) -> list[tuple[str, str]]:
    """A finding as (style, plain line) pairs at most ``width`` wide: the header, the sentence, the fix and a
    few labelled evidence lines; FINDING_LINES at most unless ``verbose`` (which adds the whole evidence)."""
    style = SEVERITY_STYLE.get(finding.severity, "")
    header = f"{finding.severity} · {finding.title} · {_where(finding, cells)}"
    tag = f"{finding.rule} · {finding.confidence:.0%}"
    if len(header) + len(tag) + 3 <= width:
        header = header + " " * (width - len(header) - len(tag)) + tag
    lines = [(style or "bold", _one_line(header, width))]
    summary = _wrapped(finding.summary, width, "  ", "  ")
    fix = _wrapped(finding.fix, width, "  fix: ", "       ")
    highlights = [f"  · {label}: {text}" for label, text in finding.evidence_highlights()]
    if verbose:
        lines += [("", line) for line in summary] + [("green", line) for line in fix]
        lines += [("", line) for item in highlights for line in _wrapped(item.strip(), width, "  ", "      ")]
        lines.append(("dim", "  evidence:"))
        for item in _evidence_lines(finding.evidence):
            lines += [("dim", line) for line in _wrapped(item, width, "    ", "      ")]
        return lines
    summary = _clip(summary, SUMMARY_LINES, width)
    room = FINDING_LINES - 1 - len(summary)
    fix = _clip(fix, max(1, room - min(1, len(highlights))), width, " (--verbose)")
    room -= len(fix)
    lines += [("", line) for line in summary] + [("green", line) for line in fix]
    lines += [("", _one_line(item, width)) for item in highlights[: max(0, room)]]
    return lines


def _print_lines(lines: list[tuple[str, str]]) -> None:
    """Lines already fitted to the width (a command that cannot be is printed whole, never cut)."""
    for style, line in lines:
        console.print(Text(line, style=style), no_wrap=True, overflow="ignore", crop=False)


def print_findings(findings: Any, record: Any = None, *, limit: int | None = None, verbose: bool = False) -> None:
    """Each finding as a short block (at most FINDING_LINES lines; ``verbose`` adds the whole evidence), then
    what was not evaluated."""
    cells = _cells_of(record)
    shown = list(findings)[:limit] if limit else list(findings)
    unjudged = failed_cells_lines(findings)
    for line in unjudged:
        console.print(Text(line, style="yellow"))
    if not shown:
        what = "the cells that ran" if unjudged else "this run"
        console.print(f"[green]No findings[/green]: no rule fired on {what}.")
    width = console.width
    for number, finding in enumerate(shown):
        if number:
            console.print()
        _print_lines(finding_text(finding, cells, width, verbose=verbose))
    if limit and len(findings) > limit:
        console.print(f"[dim]… {count(len(findings) - limit, 'more finding')}; --json lists all[/dim]")
    if shown and not verbose:
        console.print("[dim]--verbose shows every finding's whole evidence; --json gives it as data[/dim]")
    for skip in getattr(findings, "skipped", []):
        where = f" (cell {skip.cell_index + 1})" if skip.cell_index is not None else ""
        console.print(f"[dim]not evaluated: {literal(skip.rule)}{where}: {literal(skip.reason)}[/dim]")
    for note in getattr(findings, "notes", []):
        console.print(f"[dim]note: {literal(note)}[/dim]")


def failed_cells_lines(findings: Any) -> list[str]:
    """``cell 3 died (DeadKernelError: …)`` for each failed cell, and the count that never ran, then that the
    rules judged only what ran; no lines when every cell finished."""
    failed = getattr(findings, "failed_cells", None) or []
    not_run = int(getattr(findings, "cells_not_run", 0) or 0)
    lines = [f"{cell_label(c)} {c['text']}" for c in failed]
    if not_run:
        lines.append(f"{count(not_run, 'cell')} did not run")
    if lines:
        lines[-1] += ": the rules judged only what ran"
    return lines


def top_findings_text(findings: Any, record: Any, command: str, *, top: int = 3, width: int = 100,
                      total: int | None = None) -> list[tuple[str, str]]:
    """The lines that end ``nbscope profile`` (and ``trace``, and each notebook of ``audit``): the ``top`` findings,
    two lines each (severity, where, title and the sentence; the fix), and the command that shows them in full.
    ``total``: how many findings there are when ``findings`` holds only the first ones."""
    cells = _cells_of(record)
    items = list(findings)
    count_all = max(total or 0, len(items))
    if not items:
        # The command is named only when it has something to show: what could not be evaluated.
        skipped = len(getattr(findings, "skipped", None) or [])
        text = "no findings: no rule fired on this run" + (
            f"; {skipped} check{'s' if skipped != 1 else ''} could not be evaluated (`{command}` lists "
            f"{'them' if skipped != 1 else 'it'})" if skipped else "")
        return [("green", line) for line in textwrap.wrap(
            text, width=max(20, width), break_long_words=False, break_on_hyphens=False)]
    shown = f"the top {min(top, len(items))} below" if count_all > min(top, len(items)) else "below"
    count = f"{count_all} finding{'s' if count_all != 1 else ''}"
    them = "them" if count_all != 1 else "it"
    # Wrapped, never cut: the command is what the reader copies.
    heading = textwrap.wrap(f"{count} ({shown}); `{command}` shows {them} in full:", width=max(20, width),
                            break_long_words=False, break_on_hyphens=False)
    lines = [("bold", line) for line in heading]
    for finding in items[:top]:
        lead = f"  {finding.severity} · {_where(finding, cells)} · "
        line = f"{lead}{finding.title}: {finding.summary}"
        if len(line) > width and len(lead) + len(finding.summary) <= width:
            line = lead + finding.summary  # the sentence whole rather than the title
        lines.append((SEVERITY_STYLE.get(finding.severity, ""), _one_line(line, width)))
        lines.append(("green", _one_line(f"    fix: {finding.short_fix()}", width)))
    return lines


def print_top_findings(findings: Any, record: Any, command: str, *, top: int = 3, total: int | None = None) -> None:
    _print_lines(top_findings_text(findings, record, command, top=top, width=console.width, total=total))


def findings_markdown(findings: Any, record: Any = None, *, top: int | None = None, command: str | None = None) -> str:
    """Findings for GitHub: severity, title and where; the sentence; the fix; a few labelled evidence lines.
    ``top`` keeps the first findings (with ``command``, the one that shows them all)."""
    cells = _cells_of(record)
    items = list(findings)
    lines = ["### nbscope diagnose" + (f": `{_md(record.target)}`" if record is not None else ""), ""]
    unjudged = failed_cells_lines(findings)
    if unjudged:
        lines += [f"- {_md(line)}" for line in unjudged] + [""]
    if not items:
        lines.append("No rule fired on " + ("the cells that ran." if unjudged else "this run."))
    for finding in items[:top] if top else items:
        lines += [
            f"**{finding.severity}** · {_md(finding.title)} · {_where(finding, cells)} · confidence {finding.confidence:.0%}",
            "",
            f"{_md(finding.summary)}",
            "",
            f"*Fix*: {_md(finding.fix)}",
            "",
        ]
        highlights = finding.evidence_highlights()
        if highlights:
            lines += [f"- {_md(label)}: {_md(text)}" for label, text in highlights] + [""]
    if top and len(items) > top:
        lines += [count(len(items) - top, "more finding") + (f": `{_md(command)}`" if command else ""), ""]
    elif command and items:
        lines += [f"In full: `{_md(command)}`", ""]
    skipped = list(getattr(findings, "skipped", []))
    if skipped and not top:
        lines.append("Not evaluated: " + "; ".join(f"{s.rule}: {_md(s.reason)}" for s in skipped))
    return "\n".join(lines) + "\n"


# ---- recommendation -----------------------------------------------------------------------------


def estimates_rows(estimates: Sequence[Estimate] | None) -> Rows:
    """A recommendation's estimated total per backend (``cpu``, ``gpu``, ``mixed``, or forecast ranges
    such as ``gpu_low``), those it could estimate."""
    columns = (Column("backend", "left", "number"), Column("estimated total", "right", "number"))
    rows = [(e.name, format_seconds(e.seconds)) for e in estimates or () if e.seconds is not None]
    return Rows.of(columns, rows)


def print_recommendation(recommendation: Recommendation) -> None:
    choice = recommendation.recommendation
    if choice is None:
        console.print(f"[dim]no backend recommendation: {literal(recommendation.reason)}[/dim]")
        return
    # On a terminal the estimates are one line, "cpu 4.29 s · gpu 20.98 s", under the choice they explain.
    estimates = estimates_rows(recommendation.estimates)
    shown = " · ".join(" ".join(item.text for item in row) for row in estimates.rows)
    console.print(f"[bold]recommended backend: {literal(choice)}[/bold] — {literal(recommendation.reason)}")
    console.print(f"estimated totals: {literal(shown)}")
    for pin in recommendation.pinned:
        names = ", ".join(pin.functions) or "(cell)"
        where = f"cell {pin.cell + 1}" if pin.cell is not None else "cell ?"
        console.print(literal(f"  pin to CPU: {where}{' line ' + str(pin.line) if pin.line else ''} "
                              f"{names}: saves {format_seconds(pin.saving_s)}"))
    for caveat in recommendation.caveats:
        console.print(f"[dim]caveat: {literal(caveat)}[/dim]")


def recommendation_markdown(recommendation: Recommendation) -> str:
    choice = recommendation.recommendation
    if choice is None:
        return f"No backend recommendation: {_md(recommendation.reason)}\n"
    lines = [f"**Recommended backend: {choice}** — {_md(recommendation.reason)}", "",
             *markdown_table(estimates_rows(recommendation.estimates))]
    pins = recommendation.pinned
    if pins:
        lines += ["", "Pinned to the CPU in the mixed estimate:"]
        for pin in pins:
            where = f"cell {pin.cell + 1}" if pin.cell is not None else "cell ?"
            lines.append(f"- {where}: {', '.join(pin.functions) or '(cell)'} "
                         f"(saves {format_seconds(pin.saving_s)})")
    return "\n".join(lines) + "\n"


def print_unavailable(unavailable: Iterable[Mapping[str, Any]]) -> None:
    for item in unavailable:
        run = f" (run {item['run_id']})" if item.get("run_id") else ""
        console.print(f"[yellow]backend {literal(item['backend'])} unavailable{literal(run)}[/yellow]: "
                      f"{literal(item['reason'])}")


def backends_markdown(result: Any) -> str:
    """``profile --backends`` as markdown: unavailable backends, the comparison, the recommendation."""
    text = ""
    for item in result.unavailable:
        text += f"- backend **{item['backend']}** unavailable: {item['reason']}\n"
    if result.comparison is not None:
        text += ("\n" if text else "") + comparison_markdown(result.comparison)
    if result.recommendation is not None:
        text += "\n" + recommendation_markdown(result.recommendation)
    return text


def print_backends(result: Any, *, store_path: Any = None, commands: Mapping[str, str] | None = None,
                   diagnosis: bool = True) -> None:
    """``profile --backends`` on the terminal: comparison, recommendation and each run's top findings (``commands``:
    the command that shows a backend's findings in full)."""
    print_unavailable(result.unavailable)
    if result.comparison is not None:
        print_comparison(result.comparison)
        if result.recommendation is not None:
            print_recommendation(result.recommendation)
    elif result.available:
        console.print(f"only the {literal(result.available[0]['backend'])} backend ran: nothing to compare")
    saved = ", ".join(f"{r['backend']}: run {r['run_id']}" for r in result.runs if r["run_id"])
    if saved:
        console.print(literal(f"saved {saved} in {store_path}"), style="dim")
    for backend, findings in result.findings.items() if diagnosis else ():
        record = result.record_of(backend)
        command = (commands or {}).get(backend) or f"nbscope diagnose {getattr(record, 'run_id', None) or 'RUN'}"
        console.print(f"\n[bold]diagnosis of the {literal(backend)} run[/bold]")
        print_top_findings(findings, record, command)
