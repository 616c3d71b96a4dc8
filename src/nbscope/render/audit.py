"""Views of an audit: terminal table, GitHub markdown, and a self-contained HTML page."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from nbscope._redact import shorten
from nbscope._units import count
from nbscope.record.run import RunRecord
from nbscope.render import html as report_html
from nbscope.render._clean import for_html
from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import markdown_table
from nbscope.render._markdown import table_cell as _md
from nbscope.render._rows import Column, Item, Rows
from nbscope.render.forecast import seconds_range as _seconds_range
from nbscope.render.html._base import CSP
from nbscope.render.terminal import console, format_seconds, print_record_header, stderr_console, terminal_table
from nbscope.schema.audit import Audit, BackendRun, BlastLecture, BlastRadius, Lecture
from nbscope.schema.codec import decode
from nbscope.schema.progress import AuditEvent, AuditJobDone, AuditJobStarted, AuditPlanned, AuditRetry


def _audit(record: RunRecord, audit: Audit | None) -> Audit:
    """The audit's typed measurements: as the command decoded them once, else read from the record."""
    return audit if audit is not None else decode(Audit, record.measurements)


def _backend_cell(row: Lecture, backend: str | None) -> str:
    """A lecture's total on one backend, or why there is none."""
    if backend is None:
        return "–"
    run: BackendRun | None = row.backends.get(backend)
    if run is None:
        return "–"
    if run.status == "unavailable":
        return "unavailable"
    if run.status == "error":
        return "error"
    if run.status == "not-run":
        return "not run"
    text = format_seconds(run.wall_s)
    if run.status == "partial":
        text += " (partial)"
    if run.cells_failed:
        text += f" ({run.cells_failed} failed)"
    return text


def winner_text(row: Lecture) -> str:
    winner, ratio = row.winner, row.ratio
    if winner is None:
        return "–"
    if winner == "tie":
        return f"tie (within {ratio:.2f}×)" if ratio else "tie"
    return f"{winner} {ratio:.1f}× faster" if ratio else str(winner)


def _cause(row: Lecture) -> tuple[str, str]:
    finding = row.top_finding
    title = finding.title if finding is not None else ""
    if title and finding is not None and finding.backend:
        title += f" ({finding.backend})"
    return title, row.action or ""


def _clip(text: str, limit: int | None) -> str:
    return text if limit is None else shorten(text, limit)


def _slowdown(value: object) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    return f"{value:.0f}×" if value >= 10 else f"{value:.2g}×"


def _dominant(lecture: BlastLecture) -> str:
    dominant = lecture.dominant
    if not lecture.has_jax:
        return "no JAX: host work as measured"
    if dominant is None:
        return "–"
    where = ", ".join(
        f"line {line}" if line else f"cell {index + 1}"
        for index, line in zip(dominant.cells, dominant.lines, strict=False)
    )
    return f"{dominant.words} ({_seconds_range(dominant.low_s, dominant.high_s)}" + (f", {where})" if where else ")")


# How long a text may be in a table before it is cut with "…" (None: never): a long action or dominant term
# would wrap into a column of many lines. The HTML page shows them whole.
ACTION_LIMIT = 240
BLAST_LIMIT = 160


def _blast_columns(radius: BlastRadius) -> tuple[Column, ...]:
    gpu = (radius.gpu or "gpu").upper()
    # (header, role, least width); the markdown headers are as the terminal's, lower case
    shape = (
        ("lecture", "path", 12),
        ("CPU (measured)", "number", 8),
        (f"{gpu} forecast", "number", 8),
        ("slowdown", "number", 8),
        ("verdict", "text", 10),
        ("dominant term", "text", 14),
        ("keep on CPU", "text", 10),
    )
    return tuple(
        Column(escape(header), "right" if role == "number" else "left", role, min_width=least, markdown=_md(header))
        for header, role, least in shape
    )


def blast_radius_rows(radius: BlastRadius, *, limit: int | None = BLAST_LIMIT) -> Rows:
    """The blast radius's table, once for every format: a row per lecture (lecture, CPU, forecast, slowdown,
    verdict, dominant term, keep on CPU), largest slowdown first as the forecast lists them."""
    rows = []
    for lecture in radius.lectures:
        verdict = lecture.verdict or "–"
        if lecture.all_on_gpu and lecture.all_on_gpu != verdict:
            verdict += f" (all on GPU: {lecture.all_on_gpu})"
        values = (
            lecture.path,
            format_seconds(lecture.cpu_s),
            _seconds_range(lecture.low_s, lecture.high_s),
            _slowdown(lecture.slowdown),
            verdict,
            _dominant(lecture),
            ", ".join(lecture.keep_on_cpu) or "–",
        )
        path, *figures = (_clip(str(v), limit) for v in values)
        rows.append((Item(path, code=True), *figures))
    return Rows.of(_blast_columns(radius), rows)


def print_blast_radius(radius: BlastRadius | None) -> None:
    """``audit --forecast``: the lectures by forecast slowdown on the first GPU named."""
    if radius is None:
        return
    rows = blast_radius_rows(radius)
    if rows.rows:
        title = (
            f"GPU blast radius · forecast on the {escape(str(radius.gpu_name or radius.gpu))} "
            "from CPU runs, largest slowdown first"
        )
        console.print(terminal_table(replace(rows, title=title)))
    for error in radius.errors:
        console.print(f"[yellow]no forecast for {escape(error.path)}:[/yellow] {escape(error.error)}")
    console.print(
        f"[bold]{escape(radius.summary)}[/bold] [dim](a forecast, not a measurement: "
        "nbscope forecast RUN shows a lecture's cells; docs/forecast.md)[/dim]"
    )


def print_audit_findings(record: RunRecord, command: Callable[[Any], str], audit: Audit | None = None) -> None:
    """Each profiled notebook's top findings, two lines each with the fix, and the command that shows them all
    (``command(run_id)``); the notebooks without findings on one line."""
    from nbscope.analyse.diagnose import Finding, Findings
    from nbscope.render.findings import print_top_findings

    quiet = []
    for entry in _audit(record, audit).notebooks:
        if not entry.run_id or entry.top_findings is None:
            continue
        shown = [Finding.from_dict(f) for f in entry.top_findings]
        if not shown:
            quiet.append(f"{entry.path} ({entry.backend})")
            continue
        console.print(f"\n[bold]{escape(entry.path)}[/bold] ({escape(entry.backend)}, run {entry.run_id})")
        total = entry.findings if entry.findings is not None else len(shown)
        print_top_findings(Findings(tuple(shown)), None, command(entry.run_id), top=len(shown), total=total)
    if quiet:
        console.print(f"\n[dim]no findings: {escape(', '.join(quiet))}[/dim]")


def _audit_columns(gpu: str | None) -> tuple[Column, ...]:
    return (
        Column("lecture", "left", "path", min_width=12),
        Column("cpu", "right", "number", markdown="CPU"),
        Column(escape(gpu or "gpu"), "right", "number", markdown=_md(gpu or "GPU")),
        Column("winner", "left", "number"),
        Column("top cause", "left", "text", min_width=12),
        Column("recommended action", "left", "text", min_width=16),
    )


def audit_rows(audit: Audit, *, limit: int | None = ACTION_LIMIT) -> Rows:
    """The audit's table, once for every format: a row per lecture (its total on the CPU and on the GPU
    backend, the winner, the top cause and the recommended action, cut at ``limit`` characters)."""
    gpu = audit.gpu_backend
    rows = []
    for row in audit.lectures:
        cause, action = _cause(row)
        rows.append(
            (
                Item(row.path, code=True),
                _backend_cell(row, "cpu"),
                _backend_cell(row, gpu),
                winner_text(row),
                cause,
                _clip(action, limit),
            )
        )
    return Rows.of(_audit_columns(gpu), rows, title=f"audit · {count(audit.totals.notebooks, 'notebook')}")


def print_audit(record: RunRecord, audit: Audit | None = None) -> None:
    """The audit in the terminal: one row per lecture, then the summary line."""
    print_record_header(record)
    audit = _audit(record, audit)
    console.print(terminal_table(audit_rows(audit)))
    print_blast_radius(audit.forecast)
    for backend, info in audit.backends.items():
        if not info.available:
            console.print(f"[yellow]{escape(backend)} unavailable:[/yellow] {escape(str(info.reason))}")
    for entry in audit.failures:
        console.print(
            f"[red]{escape(entry.path)} on {escape(entry.backend)}: {escape(str(entry.status))}[/red] "
            f"{escape(shorten(entry.error or '', 200))}"
        )
    if audit.missing:
        console.print(f"[red]missing from the merged files: {escape(', '.join(audit.missing))}[/red]")
    t = audit.totals
    console.print(
        f"[bold]{escape(audit.summary)}[/bold] · profiled {t.profiled}, reused {t.reused}, "
        f"failed {t.failed} · audit wall {format_seconds(t.wall_s)}"
    )


def audit_markdown(record: RunRecord, audit: Audit | None = None) -> str:
    """A GitHub-ready table: Lecture | CPU | GPU | Winner | Top cause | Recommended action."""
    audit = _audit(record, audit)
    lines = [
        f"### nbscope audit: `{_md(record.target)}`",
        "",
        f"**{prose(audit.summary)}**",
        "",
        *markdown_table(audit_rows(audit)),
    ]
    radius = audit.forecast
    if radius is not None:
        lines += [
            "",
            f"#### GPU blast radius (forecast on the {prose(radius.gpu_name or radius.gpu)})",
            "",
            f"**{prose(radius.summary)}** (a forecast from CPU runs, not a measurement)",
            "",
            *markdown_table(blast_radius_rows(radius)),
        ]
    notes = [f"- {prose(b)} unavailable: {prose(i.reason)}" for b, i in audit.backends.items() if not i.available]
    notes += [
        f"- `{_md(e.path)}` on {prose(e.backend)}: {e.status} {prose(shorten(e.error or '', 200))}"
        for e in audit.failures
    ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


_AUDIT_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: .3em .6em; vertical-align: top; }
th { background: #f3f3f3; } td:nth-child(2), td:nth-child(3) { text-align: right; white-space: nowrap; }
.meta { color: #666; }
"""


def _html_table(rows: Rows) -> str:
    """A view's rows as an HTML table, with the markdown headers (a document's, not a terminal's)."""
    e = for_html
    columns, items = rows.shown(markdown=True)
    head = "".join(f"<th>{e(c.markdown_header)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f"<td>{e(item.text)}</td>" for item in row) + "</tr>" for row in items)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def audit_html(record: RunRecord, audit: Audit | None = None) -> str:
    """One self-contained HTML page (no scripts, no network) with the look of nbscope's other reports."""
    e = for_html
    audit = _audit(record, audit)
    notes = [f"<li>{e(b)} unavailable: {e(str(i.reason))}</li>" for b, i in audit.backends.items() if not i.available]
    notes += [f"<li>{e(x.path)} on {e(x.backend)}: {e(str(x.status))} {e(x.error or '')}</li>" for x in audit.failures]
    radius = audit.forecast
    blast = ""
    if radius is not None:
        blast = (
            f"<h2>GPU blast radius (forecast)</h2><p><strong>{e(radius.summary)}</strong> "
            "(a forecast from CPU runs, not a measurement)</p>" + _html_table(blast_radius_rows(radius, limit=None))
        )
    style, csp = report_html.STYLE + _AUDIT_STYLE, CSP
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{e(csp)}">
<title>nbscope audit: {e(record.target)}</title>
<style>{style}</style></head>
<body>
<h1>nbscope audit: {e(record.target)}</h1>
<p class="meta">{e(record.started_at)} · {e(record.status)} · digest {e(record.digest)}</p>
<p><strong>{e(audit.summary)}</strong></p>
{_html_table(audit_rows(audit, limit=None))}
{blast}
{("<ul>" + "".join(notes) + "</ul>") if notes else ""}
</body></html>
"""


def emit_audit(
    record: RunRecord,
    audit: Audit,
    *,
    as_json: bool,
    markdown: bool,
    store_path: Path,
    written: Sequence[Path | None] = (),
    diagnose_command: Callable[[Any], str] | None = None,
) -> None:
    """``nbscope audit`` or ``merge`` on stdout: the record as JSON, the markdown table, or the terminal's table with
    each notebook's top findings (``diagnose_command(run_id)`` names the command that shows them all; None: no
    findings) and where the audit was saved (``store_path``) and ``written``."""
    if as_json:
        print(record.to_json())
    elif markdown:
        print(audit_markdown(record, audit))
    else:
        print_audit(record, audit)
        if diagnose_command is not None:
            print_audit_findings(record, diagnose_command, audit)
        saved = f"saved as run {record.run_id} in {store_path}" if record.run_id else ""
        files = ", ".join(str(p) for p in written if p is not None)
        console.print(f"[dim]{'; '.join(x for x in (saved, f'written to {files}' if files else '') if x)}[/dim]")


def audit_progress(quiet: bool) -> Callable[[AuditEvent], None]:
    """Progress across notebooks as lines on stderr (stdout stays clean for --json / --markdown)."""
    err = stderr_console()

    def on_event(event: AuditEvent) -> None:
        if quiet:
            return
        if isinstance(event, AuditPlanned):
            unavailable = [f"{b} ({i.reason})" for b, i in event.availability.items() if not i.available]
            line = (
                f"audit: {event.notebooks} notebooks"
                + (f" (shard of {event.in_book})" if event.in_book != event.notebooks else "")
                + f", {event.jobs} to profile, {event.reused} reused from the store"
            )
            err.print(escape(line))
            for text in unavailable:
                err.print(f"[yellow]unavailable: {escape(text)}[/yellow]")
        elif isinstance(event, AuditJobStarted):
            where = f" on GPU {event.gpu}" if event.gpu else ""
            verb = "queued" if event.queued else "start"
            err.print(f"[dim]{verb} {escape(event.path)} ({event.backend}{escape(where)})[/dim]")
        elif isinstance(event, AuditRetry):
            err.print(
                f"[yellow]retry {escape(event.path)} ({event.backend}) later: {escape(str(event.error))}[/yellow]"
            )
        elif isinstance(event, AuditJobDone):
            entry = event.entry
            status = entry.status
            colour = "green" if status == "ok" and not entry.cells_failed else "yellow" if status != "error" else "red"
            detail = format_seconds(entry.wall_s) if entry.wall_s is not None else escape(str(entry.error))
            failed = f", {entry.cells_failed} cell(s) failed" if entry.cells_failed else ""
            run = f" · run {entry.run_id}" if entry.run_id else ""
            err.print(
                f"[{event.done}/{event.total}] {escape(entry.path)} {entry.backend}: "
                f"[{colour}]{status}[/{colour}] {detail}{failed}{run}"
            )

    return on_event
