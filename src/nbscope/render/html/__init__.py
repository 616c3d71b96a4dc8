"""``nbscope report``: one self-contained HTML file (no network, no scripts) with inline SVG plots.

Sections, each present only when the runs hold what it needs: the runs, the gate of the last run
against the first (two profile runs), the fingerprints, per profile a waterfall of its cells (compile
and run stacked) and its ledger, side-by-side bars of cells paired by source hash across runs, the
pathway comparison (``pathways`` runs), loop sweeps (``loops`` runs), the GPU forecast (profiles
recorded with program data), diagnosis cards (when
:mod:`nbscope.analyse.diagnose` is installed) and the history of each target in the store.

Every text from a notebook or a record goes through :func:`nbscope.render._clean.for_html`; plots are SVG written directly
(``_svg``), their text kept as escaped ``<text>``, and a Content-Security-Policy forbids scripts and any
network access.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope._version import __version__
from nbscope.analyse.report import ReportData
from nbscope.render.forecast import report_section as forecast_section
from nbscope.render.html import _sections as sections
from nbscope.render.html._base import CELL_KINDS, CSP, e, run_name
from nbscope.render.html._plots import side_by_side_svg
from nbscope.render.trial import trials_html

__all__ = ["report", "write_report"]

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1em 2em;color:#1f2328;background:#fff;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
h3{margin-bottom:.3em} .meta{color:#59636e;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #d0d7de;padding:.25em .5em;
vertical-align:top} th{background:#f6f8fa;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff8c5} .nowrap{white-space:nowrap} code,.src{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.95em;
white-space:pre-wrap;word-break:break-word}
svg.plot{max-width:100%;height:auto;display:block;margin:.5em 0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:.8em}
.card{border:1px solid #d0d7de;border-left:6px solid #8c8c8c;border-radius:6px;padding:.6em .9em;
overflow-wrap:anywhere}
.card.high,.card.error,.card.critical{border-left-color:#c44e52} .card.medium,.card.warning{border-left-color:#dd8452}
.card.low,.card.info{border-left-color:#4c72b0} .card h3{margin:.1em 0 .3em;font-size:1em}
.verdict-regression,.verdict-failed{color:#c00000;font-weight:600} .verdict-faster{color:#1a7f37}
.verdict-not-significant{color:#9a6700} .pass{color:#1a7f37} .fail{color:#c00000}
.note{color:#59636e;font-style:italic} details{margin:.5em 0} summary{cursor:pointer;font-weight:600}
"""


def report(data: ReportData, *, title: str | None = None) -> str:
    """The whole HTML document for a report's runs (in the given order; the first is the baseline) and
    their analyses (:func:`nbscope.analyse.report.report_data`)."""
    records = data.records
    if not records:
        raise NbscopeError("report needs at least one run")
    title = title or ("nbscope report: " + ", ".join(dict.fromkeys(r.target for r in records)))
    body = [
        f"<h1>{e(title)}</h1>",
        f'<p class="meta">nbscope {e(__version__)} · generated {e(dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"))}'
        " UTC · self-contained: no scripts, no network</p>",
        sections._runs_section(records),
        sections.gate(data),
        sections._fingerprint_section(records, data),
    ]
    profiles = [(i, r) for i, r in enumerate(records) if r.kind in CELL_KINDS and r.notebook_run().cells]
    if profiles:
        body.append("<h2>Cells: waterfall (compile and run stacked)</h2>")
        body.extend(sections._profile_section(r, i) for i, r in profiles)
    bars = side_by_side_svg(data)
    if bars:
        body.append("<h2>Compared runs: cells side by side</h2>" + bars)
    pathways = "".join(sections._pathways_section(r, i) for i, r in enumerate(records) if r.kind == "pathways")
    if pathways:
        body.append("<h2>Pathways</h2>" + pathways)
    loops = "".join(sections._loops_section(r, i) for i, r in enumerate(records) if r.kind == "loops")
    if loops:
        body.append("<h2>Loop sweeps</h2>" + loops)
    others = [(i, r) for i, r in enumerate(records) if r.kind not in (*CELL_KINDS, "pathways", "loops")]
    for i, r in others:
        # Whatever totals a record of another kind holds, each shown as recorded (no typed view spans every kind).
        body.append(f"<h2>{e(run_name(r, i))}: {e(r.kind)} totals</h2>" + sections._totals_table(r.totals()))
    body += [forecast_section(data), sections.diagnosis(data), trials_html(data.trials), sections.history(data)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


def write_report(data: ReportData, path: str | Path, *, title: str | None = None) -> Path:
    from nbscope._files import check_target, write_text

    check_target(path)  # before the report is built: a bad -o costs nothing
    write_text(path, report(data, title=title))
    return Path(path)
