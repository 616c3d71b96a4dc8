"""Terminal and markdown views of a run's findings (``diagnose``, and the top findings that end ``profile``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text

from nbscope._redact import shorten
from nbscope._units import count
from nbscope.collect import fingerprint as fp
from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import table_cell as _md
from nbscope.render.terminal import console, format_bytes, format_seconds, literal, metric_name

if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Finding, Findings
    from nbscope.analyse.diagnose._base import Severity
    from nbscope.record.run import RunRecord
    from nbscope.schema.model import Cell


# ---- findings -----------------------------------------------------------------------------------

SEVERITY_STYLE: dict[Severity, str] = {"high": "bold red", "medium": "yellow", "low": "cyan"}
FINDING_LINES = 8  # a finding without --verbose fits in this many lines, at any console width
SUMMARY_LINES = 3  # of which the sentence takes at most this many


def _value_text(key: str, value: object) -> str:
    if key.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_seconds(value)
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_bytes(value)
    if fp.is_absent(value):
        return f"absent ({value['absent']})"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _evidence_lines(evidence: Mapping[str, object]) -> list[str]:
    """Every evidence entry as ``key: value`` (plain text; the caller escapes it)."""
    return [
        f"{metric_name(key)}: {_value_text(key, value)}"
        for key, value in evidence.items()
        if key != "seconds_at_stake" and value not in (None, [], {})
    ]


def _cells_of(record: RunRecord | None) -> dict[int, Cell]:
    """A run's cells by index (none without a run), for naming where a finding is."""
    return {c.index: c for c in record.notebook_run().cells} if record is not None else {}


def _where(finding: Finding, cells: Mapping[int, Cell]) -> str:
    if finding.cell_index is None:
        return "notebook"
    cell = cells.get(finding.cell_index)
    line = f" · line {cell.line}" if cell is not None and cell.line else ""
    return f"cell {finding.cell_index + 1}{line}"


def _wrapped(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text, width=max(20, width), initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    ) or [first.rstrip()]


def _whole_words(text: str, width: int) -> list[str]:
    """``text`` wrapped, never cut inside a word: a command in it is what the reader copies."""
    return textwrap.wrap(text, width=max(20, width), break_long_words=False, break_on_hyphens=False)


def _clip(lines: list[str], keep: int, width: int, note: str = "") -> list[str]:
    """The first ``keep`` lines, the last one ending with "…" (and ``note``) when lines were dropped."""
    if len(lines) <= keep:
        return lines
    kept = lines[:keep]
    tail = "…" + note
    kept[-1] = kept[-1][: max(0, width - len(tail))].rstrip() + tail
    return kept


def finding_text(
    finding: Finding, cells: Mapping[int, Cell], width: int, *, verbose: bool = False
) -> list[tuple[str, str]]:
    """A finding as (style, plain line) pairs at most ``width`` wide: the header, the sentence, the fix and a
    few labelled evidence lines; FINDING_LINES at most unless ``verbose`` (which adds the whole evidence)."""
    style = SEVERITY_STYLE[finding.severity]
    header = f"{finding.severity} · {finding.title} · {_where(finding, cells)}"
    tag = f"{finding.rule} · {finding.confidence:.0%}"
    if len(header) + len(tag) + 3 <= width:
        header = header + " " * (width - len(header) - len(tag)) + tag
    lines = [(style or "bold", shorten(header, width))]
    summary = _wrapped(finding.summary, width, "  ", "  ")
    fix = _wrapped(finding.fix, width, "  fix: ", "       ")
    highlights = [f"  · {label}: {text}" for label, text in finding.evidence_highlights()]
    if verbose:
        lines += [("", line) for line in summary] + [("green", line) for line in fix]
        lines += [("", line) for item in highlights for line in _wrapped(item.strip(), width, "  ", "      ")]
        lines.append(("dim", "  evidence:"))
        # A trial's data (``measured``) is the highlight above, in words; --json gives it whole.
        for item in _evidence_lines({k: v for k, v in finding.evidence.items() if k != "measured"}):
            lines += [("dim", line) for line in _wrapped(item, width, "    ", "      ")]
        return lines
    summary = _clip(summary, SUMMARY_LINES, width)
    room = FINDING_LINES - 1 - len(summary)
    fix = _clip(fix, max(1, room - min(1, len(highlights))), width, " (--verbose)")
    room -= len(fix)
    lines += [("", line) for line in summary] + [("green", line) for line in fix]
    lines += [("", shorten(item, width)) for item in highlights[: max(0, room)]]
    return lines


def _print_lines(lines: list[tuple[str, str]]) -> None:
    """Lines already fitted to the width (a command that cannot be is printed whole, never cut)."""
    for style, line in lines:
        console.print(Text(line, style=style), no_wrap=True, overflow="ignore", crop=False)


def print_findings(
    findings: Findings, record: RunRecord | None = None, *, limit: int | None = None, verbose: bool = False
) -> None:
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
    for skip in findings.skipped:
        where = f" (cell {skip.cell_index + 1})" if skip.cell_index is not None else ""
        console.print(f"[dim]not evaluated: {literal(skip.rule)}{where}: {literal(skip.reason)}[/dim]")
    for note in findings.notes:
        console.print(f"[dim]note: {literal(note)}[/dim]")


def failed_cells_lines(findings: Findings) -> list[str]:
    """``cell 3 died (DeadKernelError: …)`` for each failed cell, and the count that never ran, then that the
    rules judged only what ran; no lines when every cell finished."""
    not_run = findings.cells_not_run
    lines = [f"{c.label} {c.text}" for c in findings.failed_cells]
    if not_run:
        lines.append(f"{count(not_run, 'cell')} did not run")
    if lines:
        lines[-1] += ": the rules judged only what ran"
    return lines


def top_findings_text(
    findings: Findings,
    record: RunRecord | None,
    command: str,
    *,
    top: int = 3,
    width: int = 100,
    total: int | None = None,
) -> list[tuple[str, str]]:
    """The lines that end ``nbscope profile`` (and ``trace``, and each notebook of ``audit``): the ``top`` findings,
    two lines each (severity, where, title and the sentence; the fix), and the command that shows them in full.
    ``total``: how many findings there are when ``findings`` holds only the first ones."""
    cells = _cells_of(record)
    items = list(findings)
    count_all = max(total or 0, len(items))
    if not items:
        # The command is named only when it has something to show: what could not be evaluated.
        skipped = len(findings.skipped)
        text = "no findings: no rule fired on this run" + (
            f"; {count(skipped, 'check')} could not be evaluated (`{command}` lists {'them' if skipped != 1 else 'it'})"
            if skipped
            else ""
        )
        return [("green", line) for line in _whole_words(text, width)]
    shown = f"the top {min(top, len(items))} below" if count_all > min(top, len(items)) else "below"
    them = "them" if count_all != 1 else "it"
    heading = f"{count(count_all, 'finding')} ({shown}); `{command}` shows {them} in full:"
    lines = [("bold", line) for line in _whole_words(heading, width)]
    for finding in items[:top]:
        lead = f"  {finding.severity} · {_where(finding, cells)} · "
        line = f"{lead}{finding.title}: {finding.summary}"
        if len(line) > width and len(lead) + len(finding.summary) <= width:
            line = lead + finding.summary  # the sentence whole rather than the title
        lines.append((SEVERITY_STYLE[finding.severity], shorten(line, width)))
        lines.append(("green", shorten(f"    fix: {finding.short_fix()}", width)))
    return lines


def print_top_findings(
    findings: Findings, record: RunRecord | None, command: str, *, top: int = 3, total: int | None = None
) -> None:
    _print_lines(top_findings_text(findings, record, command, top=top, width=console.width, total=total))


def findings_markdown(
    findings: Findings, record: RunRecord | None = None, *, top: int | None = None, command: str | None = None
) -> str:
    """Findings for GitHub: severity, title and where; the sentence; the fix; a few labelled evidence lines.
    ``top`` keeps the first findings (with ``command``, the one that shows them all)."""
    cells = _cells_of(record)
    items = list(findings)
    lines = ["### nbscope diagnose" + (f": `{_md(record.target)}`" if record is not None else ""), ""]
    unjudged = failed_cells_lines(findings)
    if unjudged:
        lines += [f"- {prose(line)}" for line in unjudged] + [""]
    if not items:
        lines.append("No rule fired on " + ("the cells that ran." if unjudged else "this run."))
    for finding in items[:top] if top else items:
        lines += [
            f"**{finding.severity}** · {prose(finding.title)} · {_where(finding, cells)} · confidence {finding.confidence:.0%}",
            "",
            f"{prose(finding.summary)}",
            "",
            f"*Fix*: {prose(finding.fix)}",
            "",
        ]
        highlights = finding.evidence_highlights()
        if highlights:
            lines += [f"- {prose(label)}: {prose(text)}" for label, text in highlights] + [""]
    if top and len(items) > top:
        lines += [count(len(items) - top, "more finding") + (f": `{_md(command)}`" if command else ""), ""]
    elif command and items:
        lines += [f"In full: `{_md(command)}`", ""]
    skipped = findings.skipped
    if skipped and not top:
        lines.append("Not evaluated: " + "; ".join(f"{prose(s.rule)}: {prose(s.reason)}" for s in skipped))
    return "\n".join(lines) + "\n"
