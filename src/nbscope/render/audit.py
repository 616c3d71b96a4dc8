"""Views of an audit: terminal table, GitHub markdown, and a self-contained HTML page."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.table import Table

from nbscope.analyse.diagnose import Finding
from nbscope.record.run import RunRecord
from nbscope.render import html as report_html
from nbscope.render.terminal import console, format_seconds, print_record_header


def _lectures(record: RunRecord) -> list[dict[str, Any]]:
    return list(record.measurements.get("lectures") or [])


def _gpu_backend(record: RunRecord) -> str | None:
    rows = _lectures(record)
    return rows[0].get("gpu_backend") if rows else None


def _backend_cell(row: dict[str, Any], backend: str | None) -> str:
    """A lecture's total on one backend, or why there is none."""
    if backend is None:
        return "–"
    run = (row.get("backends") or {}).get(backend)
    if not run:
        return "–"
    status = run.get("status")
    if status == "unavailable":
        return "unavailable"
    if status == "error":
        return "error"
    if status == "not-run":
        return "not run"
    text = format_seconds(run.get("wall_s"))
    if status == "partial":
        text += " (partial)"
    if run.get("cells_failed"):
        text += f" ({run['cells_failed']} failed)"
    return text


def winner_text(row: dict[str, Any]) -> str:
    winner, ratio = row.get("winner"), row.get("ratio")
    if winner is None:
        return "–"
    if winner == "tie":
        return f"tie (within {ratio:.2f}×)" if ratio else "tie"
    return f"{winner} {ratio:.1f}× faster" if ratio else str(winner)


def _cause(row: dict[str, Any]) -> tuple[str, str]:
    finding = row.get("top_finding") or {}
    title = finding.get("title") or finding.get("rule") or ""
    if title and finding.get("backend"):
        title += f" ({finding['backend']})"
    return title, row.get("action") or ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _failures(record: RunRecord) -> list[dict[str, Any]]:
    return [e for e in record.measurements.get("notebooks", []) if e.get("status") in ("error", "not-run")]


def print_audit_findings(record: RunRecord, command: Callable[[Any], str]) -> None:
    """Each profiled notebook's top findings, two lines each with the fix, and the command that shows them all
    (``command(run_id)``); the notebooks without findings on one line."""
    from nbscope.render.compare import print_top_findings

    quiet = []
    for entry in record.measurements.get("notebooks") or []:
        findings = entry.get("top_findings")
        if not entry.get("run_id") or not isinstance(findings, list):
            continue
        shown = [Finding.from_dict(f) for f in findings if isinstance(f, dict)]
        if not shown:
            quiet.append(f"{entry['path']} ({entry['backend']})")
            continue
        console.print(f"\n[bold]{escape(entry['path'])}[/bold] ({escape(entry['backend'])}, run {entry['run_id']})")
        total = entry.get("findings") if isinstance(entry.get("findings"), int) else len(shown)
        print_top_findings(shown, None, command(entry["run_id"]), top=len(shown), total=total)
    if quiet:
        console.print(f"\n[dim]no findings: {escape(', '.join(quiet))}[/dim]")


def print_audit(record: RunRecord) -> None:
    """The audit in the terminal: one row per lecture, then the summary line."""
    print_record_header(record)
    m = record.measurements
    gpu = _gpu_backend(record)
    table = Table(title=f"audit · {m.get('totals', {}).get('notebooks', 0)} notebooks")
    for column, justify in (("lecture", "left"), ("cpu", "right"), (escape(gpu or "gpu"), "right"), ("winner", "left"),
                            ("top cause", "left"), ("recommended action", "left")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in _lectures(record):
        cause, action = _cause(row)
        table.add_row(escape(row["path"]), _backend_cell(row, "cpu"), _backend_cell(row, gpu), escape(winner_text(row)),
                      escape(cause), escape(_clip(action, 240)))
    console.print(table)
    for backend, info in (m.get("backends") or {}).items():
        if not info.get("available"):
            console.print(f"[yellow]{escape(backend)} unavailable:[/yellow] {escape(str(info.get('reason')))}")
    for entry in _failures(record):
        console.print(f"[red]{escape(entry['path'])} on {escape(entry['backend'])}: {escape(str(entry['status']))}[/red] "
                      f"{escape(str(entry.get('error') or ''))[:200]}")
    coverage = m.get("coverage") or {}
    if coverage.get("missing"):
        console.print(f"[red]missing from the merged files: {escape(', '.join(coverage['missing']))}[/red]")
    t = m.get("totals") or {}
    console.print(
        f"[bold]{escape(m.get('summary', ''))}[/bold] · profiled {t.get('profiled', 0)}, reused {t.get('reused', 0)}, "
        f"failed {t.get('failed', 0)} · audit wall {format_seconds(t.get('wall_s'))}"
    )


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def audit_markdown(record: RunRecord) -> str:
    """A GitHub-ready table: Lecture | CPU | GPU | Winner | Top cause | Recommended action."""
    m = record.measurements
    gpu = _gpu_backend(record)
    lines = [
        f"### nbscope audit: `{_md(record.target)}`",
        "",
        f"**{_md(m.get('summary', ''))}**",
        "",
        f"| Lecture | CPU | {_md(gpu or 'GPU')} | Winner | Top cause | Recommended action |",
        "|---|---:|---:|---|---|---|",
    ]
    for row in _lectures(record):
        cause, action = _cause(row)
        lines.append(f"| `{_md(row['path'])}` | {_backend_cell(row, 'cpu')} | {_backend_cell(row, gpu)} | "
                     f"{winner_text(row)} | {_md(cause)} | {_md(_clip(action, 300))} |")
    notes = [f"- {_md(b)} unavailable: {_md(i.get('reason'))}" for b, i in (m.get("backends") or {}).items()
             if not i.get("available")]
    notes += [f"- `{_md(e['path'])}` on {_md(e['backend'])}: {e['status']} {_md(e.get('error') or '')[:200]}"
              for e in _failures(record)]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


_AUDIT_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: .3em .6em; vertical-align: top; }
th { background: #f3f3f3; } td:nth-child(2), td:nth-child(3) { text-align: right; white-space: nowrap; }
.meta { color: #666; }
"""


def audit_html(record: RunRecord) -> str:
    """One self-contained HTML page (no scripts, no network) with the look of nbscope's other reports."""
    e = html.escape
    m = record.measurements
    gpu = _gpu_backend(record)
    rows = []
    for row in _lectures(record):
        cause, action = _cause(row)
        rows.append(
            "<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in (
                row["path"], _backend_cell(row, "cpu"), _backend_cell(row, gpu), winner_text(row), cause, action)) + "</tr>"
        )
    notes = [f"<li>{e(b)} unavailable: {e(str(i.get('reason')))}</li>" for b, i in (m.get("backends") or {}).items()
             if not i.get("available")]
    notes += [f"<li>{e(x['path'])} on {e(x['backend'])}: {e(x['status'])} {e(str(x.get('error') or ''))}</li>"
              for x in _failures(record)]
    head = "".join(f"<th>{e(h)}</th>" for h in ("Lecture", "CPU", gpu or "GPU", "Winner", "Top cause", "Recommended action"))
    style, csp = report_html.STYLE + _AUDIT_STYLE, report_html.CSP
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{e(csp)}">
<title>nbscope audit: {e(record.target)}</title>
<style>{style}</style></head>
<body>
<h1>nbscope audit: {e(record.target)}</h1>
<p class="meta">{e(record.started_at)} · {e(record.status)} · digest {e(record.digest)}</p>
<p><strong>{e(str(m.get('summary', '')))}</strong></p>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
{('<ul>' + ''.join(notes) + '</ul>') if notes else ''}
</body></html>
"""
