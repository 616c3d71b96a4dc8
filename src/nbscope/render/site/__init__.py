"""The pages of ``nbscope publish``: the book page, a page per lecture, ``status.json`` and ``status.md``.

Only formatting: every figure comes from the rows ``api.publish`` built. The pages load nothing (no CDN, no
font, no network): readable from ``file://`` and GitHub Pages. Every name is escaped. The book table is sorted
(failures first) and complete without scripts; one small inline script, allowed by its hash in the page's
Content Security Policy and by nothing else, adds sorting by any column and a filter.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbscope._units import seconds
from nbscope.render._clean import for_html, markdown_text
from nbscope.schema.site_manifest import BookRow, Change, SiteRow

if TYPE_CHECKING:
    from nbscope.analyse.trial import TrialResult


e = for_html  # the one HTML escaper (``render._clean``)


STATUS_ORDER = {"died": 0, "stopped": 1, "timeout": 2, "failed": 3, "ok": 4}
STATUS_COLOURS = {"ok": "#2e7d32", "failed": "#c62828", "timeout": "#ef6c00", "died": "#6a1b9a", "stopped": "#546e7a"}

# In a function of its own: a global ``status`` would be ``window.status``, a string.
SCRIPT = """(function () {
document.querySelectorAll('table.sortable').forEach(function (table) {
  var body = table.tBodies[0];
  table.querySelectorAll('th').forEach(function (th, column) {
    th.tabIndex = 0;
    th.addEventListener('click', function () {
      var up = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].getAttribute('data-sort'), y = b.cells[column].getAttribute('data-sort');
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return up ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
var filter = document.getElementById('filter');
if (filter) {
  filter.hidden = false;
  var text = document.getElementById('filter-text'), choice = document.getElementById('filter-status');
  var apply = function () {
    var words = text.value.toLowerCase(), wanted = choice.value;
    document.querySelectorAll('#book tbody tr').forEach(function (row) {
      var shown = row.textContent.toLowerCase().indexOf(words) >= 0 &&
                  (!wanted || row.getAttribute('data-status') === wanted);
      row.hidden = !shown;
    });
  };
  text.addEventListener('input', apply);
  choice.addEventListener('change', apply);
}
})();
"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{SCRIPT_HASH}'"

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;width:100%;margin:.5em 0 1.5em}
th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4;cursor:pointer;white-space:nowrap}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.status{font-weight:600}.small{color:#555;font-size:12px}
.up{color:#c62828}.down{color:#2e7d32}
code{background:#f4f4f4;padding:0 .2em;overflow-wrap:anywhere}
#filter{margin:.5em 0}
"""


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width"><title>{e(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}\n<script>{SCRIPT}</script></body></html>\n"
    )


def _s(value: object) -> str:
    return seconds(value) if isinstance(value, (int, float)) else "—"


def _ratio(value: object) -> str:
    if not isinstance(value, (int, float)):
        return "—"
    css = "up" if value > 1.05 else "down" if value < 0.95 else ""
    return f'<span class="{css}">{value:.2f}×</span>'


def _share(value: object) -> str:
    return f"{value:.0%}" if isinstance(value, (int, float)) else "—"


def _key(value: object) -> str:
    return e(f"{value:.6g}") if isinstance(value, (int, float)) else "-1"


def spark_svg(values: Sequence[float | None], *, width: int = 120, height: int = 22) -> str:
    """The walls of the last builds as a small line, the newest as a dot; empty when none is known."""
    known = [(i, v) for i, v in enumerate(values) if isinstance(v, (int, float))]
    if not known:
        return ""
    low, high = min(v for _, v in known), max(v for _, v in known)
    span = (high - low) or 1.0
    step = width / max(1, len(values) - 1)

    def xy(i: int, v: float) -> str:
        return f"{i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"

    points = " ".join(xy(i, v) for i, v in known)
    last_x, last_y = xy(*known[-1]).split(",")
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="wall of the last {len(values)} builds">'
        f'<polyline fill="none" stroke="#4c72b0" stroke-width="1.2" points="{points}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2" fill="#c44e52"/></svg>'
    )


def _status(row: SiteRow) -> str:
    status = str(row.status)
    return f'<span class="status" style="color:{STATUS_COLOURS.get(status, "#000")}">{e(status)}</span>'


def _text(part: Mapping[str, Any] | None) -> str | None:
    """The text of a row's forecast or attribution (None: there is none)."""
    return None if part is None else part["text"]


def _regressions(row: SiteRow) -> str:
    if not row.regressions:
        return "none"
    last = row.regressions[-1]
    why = _text(last["attribution"]) or "no record of either side"
    return f"{row.regression_count}; last {last['ratio']:.2f}× at {e(last['started_at'][:10])}: {e(why)}"


def book_row(row: SiteRow) -> dict[str, str]:
    """A row's own parts of the book pages (its line of the book table, its entry of ``status.json`` and its line of
    ``status.md``): what the API keeps with the row, so that a publish formats only the rows that changed
    (``book_pages``' ``parts``)."""
    [entry] = status_entries([row])
    return {"index.html": _book_line(row), "status.json": _status_entry(entry), "status.md": _status_line(entry)}


def _status_entry(entry: Mapping[str, Any]) -> str:
    """The entry as ``json.dumps({"notebooks": [...]}, indent=1)`` writes it, two levels in (its values are
    scalars, and JSON writes a line break inside a string as ``\\n``: its lines are the entry's)."""
    return "\n".join("  " + line for line in json.dumps(entry, indent=1, default=str).split("\n"))


def _book_line(row: SiteRow) -> str:
    title, title_key = (row.findings[0]["title"],) * 2 if row.findings else ("none", "")
    forecast = _text(row.forecast) or "—"
    error = f'<div class="small">{e(row.error)}</div>' if row.error else ""
    return (
        f'<tr data-status="{e(row.status)}">'
        f'<td data-sort="{e(row.target)}"><a href="{e(row.page)}">{e(row.target)}</a></td>'
        f'<td data-sort="{e(row.runner)}">{e(row.runner)}<div class="small">{e(row.machine)}</div></td>'
        f'<td data-sort="{STATUS_ORDER.get(str(row.status), 9)}">{_status(row)}{error}</td>'
        f'<td data-sort="{e(row.started_at)}">{e(row.started_at[:16].replace("T", " "))}'
        f'<div class="small">run {e(row.newest_id)} · {e(row.runs)} runs</div></td>'
        f'<td class="n" data-sort="{_key(row.wall_s)}">{e(_s(row.wall_s))}</td>'
        f'<td class="n" data-sort="{_key(row.compile_share)}">'
        f"{_share(row.compile_share)}</td>"
        f'<td data-sort="{_key(row.wall_s)}">{spark_svg(row.spark)}</td>'
        f'<td class="n" data-sort="{_key(row.vs_previous)}">{_ratio(row.vs_previous)}</td>'
        f'<td class="n" data-sort="{_key(row.vs_baseline)}">{_ratio(row.vs_baseline)}'
        f'<div class="small">run {e(row.baseline_id)}</div></td>'
        f'<td data-sort="{row.regression_count}">{_regressions(row)}</td>'
        f'<td data-sort="{e(title_key)}">{e(title)}</td>'
        f'<td data-sort="{e(forecast)}">{e(forecast)}</td></tr>'
    )


def book_page(rows: Sequence[SiteRow | BookRow], lines: Sequence[str]) -> str:
    """The book table, failures first; ``lines``: each row's line as ``book_row`` made it."""
    order = sorted(
        range(len(rows)), key=lambda n: (STATUS_ORDER.get(str(rows[n].status), 9), rows[n].target, rows[n].runner)
    )
    statuses = sorted({str(r.status) for r in rows}, key=lambda s: STATUS_ORDER.get(s, 9))
    counts = ", ".join(f"{sum(r.status == s for r in rows)} {e(s)}" for s in statuses)
    head = (
        "lecture",
        "runner",
        "status",
        "newest run",
        "wall",
        "compile share",
        "last builds",
        "vs previous",
        "vs baseline",
        "confirmed regressions",
        "top finding",
        "GPU forecast",
    )
    options = "".join(f'<option value="{e(s)}">{e(s)}</option>' for s in statuses)
    body = (
        f"<h1>Book status</h1><p>{len({r.target for r in rows})} lectures, {len(rows)} lecture × runner rows: "
        f"{counts}. Newest run {e(max(r.started_at for r in rows)[:16].replace('T', ' '))} UTC. "
        '<a href="status.json">status.json</a> · <a href="status.md">status.md</a></p>'
        '<div id="filter" hidden><label>Filter <input id="filter-text" type="search"></label> '
        f'<label>status <select id="filter-status"><option value="">any</option>{options}</select></label></div>'
        '<table id="book" class="sortable"><thead><tr>'
        + "".join(f"<th>{e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(lines[n] for n in order)
        + "</tbody></table>"
    )
    return _page("Book status", body)


def status_entries(rows: Sequence[SiteRow]) -> list[dict[str, Any]]:
    """Per notebook and runner: the execution table's data (file, last run, run time, status, error, cache)."""
    return [
        {
            "file": r.target,
            "runner": r.runner,
            "last_run": r.started_at,
            "run_time_s": r.wall_s,
            "status": r.status,
            "error": r.error,
            "cache": r.cache_state,
            "run_id": r.newest_id,
        }
        for r in rows
    ]


def _md(value: Any) -> str:
    """A markdown table cell: pipes and line breaks cannot end or split the row; markup is shown as text."""
    text = "—" if value is None or value == "" else markdown_text(value)
    return " ".join(text.split())


def _status_line(entry: Mapping[str, Any]) -> str:
    return (
        f"| {_md(entry['file'])} | {_md(entry['runner'])} | {_md(entry['last_run'][:16].replace('T', ' '))} | "
        f"{_md(_s(entry['run_time_s']))} | {_md(entry['status'])} | {_md(entry['error'])} | {_md(entry['cache'])} |"
    )


def status_markdown(lines: Sequence[str]) -> str:
    """``status.md``: ``lines``, each row's line as ``book_row`` made it."""
    head = "| file | runner | last run | run time | status | error | cache |\n|---|---|---|---:|---|---|---|\n"
    return head + "\n".join(lines) + "\n"


def book_pages(rows: Sequence[SiteRow | BookRow], parts: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """``index.html``, ``status.json`` and ``status.md``, each of every row; ``parts``: each row's own parts as
    ``book_row`` made them (kept from an earlier publish for a row that did not change)."""
    entries = ",\n".join(part["status.json"] for part in parts)
    return {
        "index.html": book_page(rows, [part["index.html"] for part in parts]),
        "status.json": '{\n "notebooks": [\n' + entries + "\n ]\n}\n" if parts else '{\n "notebooks": []\n}\n',
        "status.md": status_markdown([part["status.md"] for part in parts]),
    }


def history_svg(row: SiteRow, *, width: int = 900, height: int = 180) -> str:
    """Wall, compile and run of every run of a row, oldest left; a dashed line at each change point."""
    history = row.history
    series = (("wall_s", "#4c72b0"), ("compile_s", "#dd8452"), ("run_s", "#55a868"))
    values = [v for name, _ in series for v in history[name] if isinstance(v, (int, float))]
    if not values:
        return "<p>No figures recorded.</p>"
    high = max(values) or 1.0
    count = len(history["wall_s"])
    step = (width - 60) / max(1, count - 1)
    parts = [
        f'<svg width="{width}" height="{height + 20}" role="img" aria-label="history of {e(row.target)}">',
        f'<text x="0" y="12" font-size="11">{e(_s(high))}</text><text x="0" y="{height}" font-size="11">0</text>',
    ]
    # Each row draws three lines of every run (365 a year): each run's x is formatted once for the three.
    xs = [f"{50 + i * step:.1f}," for i in range(count)]
    for name, colour in series:
        points = " ".join(
            [
                f"{xs[i]}{height - v / high * (height - 20):.1f}"
                for i, v in enumerate(history[name])
                if isinstance(v, (int, float))
            ]
        )
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.3" points="{points}"/>')
    for change in row.changes:
        x = 50 + change["index"] * step
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="14" y2="{height}" stroke="#c44e52" stroke-dasharray="4 3"/>')
    legend = " ".join(f'<tspan fill="{c}">■ {e(n.removesuffix("_s"))}</tspan>' for n, c in series)
    parts.append(
        f'<text x="50" y="{height + 16}" font-size="12">{legend} <tspan fill="#c44e52">┆ change point</tspan></text></svg>'
    )
    return "".join(parts)


def _runner_section(row: SiteRow) -> str:
    changes = row.changes
    change_rows = "".join(
        f"<tr><td>{e(c['started_at'][:16].replace('T', ' '))}</td><td>run {e(c['run_id'])}</td>"
        f'<td class="n">{e(_s(c["before"]))} → {e(_s(c["after"]))}</td><td class="n">{_ratio(c["ratio"])}</td>'
        f"<td>{_kind(row, c)}</td><td>{e(_why(row, c))}</td></tr>"
        for c in changes
    )
    cells = "".join(
        f'<tr><td data-sort="{e(c["label"])}">{e(c["label"])}<div class="small"><code>{e(c["first_line"])}</code></div></td>'
        f'<td data-sort="{e(c["status"])}">{e(c["status"])}{" (edited)" if c["edited"] else ""}</td>'
        f'<td class="n" data-sort="{_key(c["wall_s"])}">{e(_s(c["wall_s"]))}</td>'
        f'<td class="n" data-sort="{_key(c["previous_wall_s"])}">{e(_s(c["previous_wall_s"]))}</td>'
        f'<td class="n" data-sort="{_key(c["compile_s"])}">{e(_s(c["compile_s"]))}</td></tr>'
        for c in row.cells
    )
    findings = "".join(f"<li><b>{e(f['title'])}</b>: {e(f['summary'])}</li>" for f in row.findings)
    attribution = _text(row.attribution) or "no earlier run"
    forecast = _text(row.forecast) or "not forecast (a GPU run, or no program data recorded)"
    return (
        f'<h2>{e(row.runner)} runner <span class="small">{e(row.machine)}</span></h2>'
        f"<p>Newest: run {e(row.newest_id)}, {e(row.started_at[:16].replace('T', ' '))}, {_status(row)}"
        f"{' — ' + e(row.error) if row.error else ''}; wall {e(_s(row.wall_s))}, "
        f"{e(row.runs)} runs. Against the previous run: {e(attribution)}.</p>"
        + history_svg(row)
        + "<h3>Change points</h3>"
        + (
            f'<table class="sortable"><thead><tr><th>from</th><th>run</th><th>wall</th><th>ratio</th><th>kind</th>'
            f"<th>what changed</th></tr></thead><tbody>{change_rows}</tbody></table>"
            if changes
            else "<p>None.</p>"
        )
        + "<h3>Cells: newest run against the previous</h3>"
        + '<table class="sortable"><thead><tr><th>cell</th><th>status</th><th>wall</th><th>previous wall</th>'
        + f"<th>compile</th></tr></thead><tbody>{cells}</tbody></table>"
        + f"<h3>Findings</h3>{'<ul>' + findings + '</ul>' if findings else '<p>None.</p>'}"
        + f"<h3>GPU forecast</h3><p>{e(forecast)}</p>"
    )


def _kind(row: SiteRow, change: Change) -> str:
    """What a change point is: only those the row counts as regressions are called so (a shift under the
    history's floor, or a speed-up, is a change point but not a regression)."""
    if change["tentative"]:
        return "tentative (the newest run alone)"
    if any(regression["index"] == change["index"] for regression in row.regressions):
        return "regression"
    ratio = change["ratio"]
    return "speed-up" if ratio is not None and ratio < 1 else "under the floor (not a regression)"


def _why(row: SiteRow, change: Change) -> str:
    for regression in row.regressions:
        if regression["index"] == change["index"] and regression["attribution"]:
            return str(regression["attribution"]["text"])
    return "—"


def lecture_page(target: str, rows: Sequence[SiteRow], trials: Sequence[TrialResult] = ()) -> str:
    body = f'<p><a href="../index.html">← book status</a></p><h1>{e(target)}</h1>' + "".join(
        _runner_section(row) for row in rows
    )
    if trials:
        from nbscope.render.trial import trials_html

        body += trials_html(list(trials[:20]))
    return _page(target, body)
