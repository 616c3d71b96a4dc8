"""``nbscope report``: one self-contained HTML file (no network, no scripts) with inline SVG plots.

Sections, each present only when the runs hold what it needs: the runs, the gate of the last run
against the first (two profile runs), the fingerprints, per profile a waterfall of its cells (compile
and run stacked) and its ledger, side-by-side bars of cells paired by source hash across runs, the
pathway comparison (``pathways`` runs), loop sweeps (``loops`` runs), the GPU forecast (profiles
recorded with program data), diagnosis cards (when
:mod:`nbscope.diagnose` is installed) and the history of each target in the store.

Every text from a notebook or a record goes through :func:`html.escape`; plots are drawn by matplotlib
(Agg figures saved as SVG with text kept as ``<text>``, which matplotlib escapes), and a
Content-Security-Policy forbids scripts and any network access.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from nbscope import fingerprint as fp
from nbscope._errors import NbscopeError
from nbscope._version import __version__
from nbscope.gate import cell_keys
from nbscope.record import RunRecord

CELL_KINDS = ("profile", "trace")
MAX_WATERFALL_CELLS = 150
MAX_BAR_CELLS = 30
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
COMPILE_COLOR = "#dd8452"
RUN_COLOR = "#4c72b0"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"

_salt = itertools.count()


def e(value: Any) -> str:
    """HTML-escaped text of any value."""
    return html.escape("" if value is None else str(value), quote=True)


def e_code(value: Any) -> str:
    """Escaped text whose `backtick spans` become <code> (after escaping, so nothing else is markup)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", e(value))


def _seconds(value: Any) -> str:
    from nbscope.render.terminal import format_seconds

    return format_seconds(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _short(text: Any, width: int = 40) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def run_name(record: RunRecord, position: int) -> str:
    return f"run {record.run_id}" if record.run_id is not None else f"record {position + 1}"


# --- SVG plots -------------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    return figure


def svg(figure: Any) -> str:
    """The figure as an ``<svg>`` element to inline (no XML prolog); text kept as escaped ``<text>``."""
    import matplotlib

    buffer = io.StringIO()
    rc = {"svg.fonttype": "none", "svg.hashsalt": f"nbscope-{next(_salt)}"}
    with matplotlib.rc_context(rc):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    return re.sub(r"<svg\b", '<svg class="plot" role="img"', text, count=1)


def _plain(text: str) -> str:
    """A label for matplotlib shown as written: ``$`` escaped (no mathtext), no control characters."""
    return "".join(ch if ch.isprintable() else " " for ch in text).replace("$", r"\$")


def _label(cell: dict[str, Any], width: int = 38) -> str:
    where = f" L{cell['line']}" if cell.get("line") else ""
    return _plain(f"{int(cell.get('index', 0)) + 1}{where} {_short(cell.get('first_line'), width)}")


def waterfall_svg(record: RunRecord) -> str | None:
    """Cells in notebook order on a time axis: each bar starts where the previous cell ended; compile
    (orange) and run (blue) stacked; failing cells outlined in red."""
    cells = [c for c in record.measurements.get("cells") or [] if _number(c.get("wall_s")) is not None]
    if not cells:
        return None
    shown = cells[:MAX_WATERFALL_CELLS]
    figure = _figure(10, max(2.2, 0.24 * len(shown) + 1.2))
    axes = figure.subplots()
    start = 0.0
    total = sum(_number(c.get("wall_s")) or 0.0 for c in shown) or 1.0
    for row, cell in enumerate(shown):
        wall = _number(cell.get("wall_s")) or 0.0
        compile_s = min(wall, _number(cell.get("compile_s")) or 0.0)
        failed = cell.get("status") in ("error", "timeout", "kernel-died")
        edge = {"edgecolor": "#c00000", "linewidth": 1.2} if failed else {}
        axes.barh(row, compile_s, left=start, color=COMPILE_COLOR, height=0.7, **edge)
        axes.barh(row, wall - compile_s, left=start + compile_s, color=RUN_COLOR, height=0.7, **edge)
        if wall >= 0.02 * total:
            axes.text(start + wall, row, " " + _seconds(wall), va="center", fontsize=7)
        start += wall
    axes.set_yticks(range(len(shown)), [_label(c) for c in shown], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first cell started (kernel-side wall time)")
    axes.set_xlim(0, start * 1.12 or 1)
    from matplotlib.patches import Patch

    figure.legend(
        handles=[Patch(color=COMPILE_COLOR, label="compile (JAX + Numba)"), Patch(color=RUN_COLOR, label="run")],
        loc="outside upper right", fontsize=8, ncols=2,
    )
    axes.set_title(_plain(f"{record.target}: {len(cells)} cells, {_seconds(start)}"), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    return svg(figure)


def grouped_bars_svg(
    labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], *, title: str, xlabel: str
) -> str:
    """Horizontal bars, one group per label, one bar per series."""
    figure = _figure(10, max(2.2, 0.22 * len(labels) * max(1, len(series)) * 0.8 + 1.4))
    axes = figure.subplots()
    height = 0.8 / max(1, len(series))
    for number, (name, values) in enumerate(series):
        positions = [i - 0.4 + height * (number + 0.5) for i in range(len(labels))]
        widths = [v if v is not None else 0.0 for v in values]
        axes.barh(positions, widths, height=height, color=COLORS[number % len(COLORS)], label=_plain(name))
    axes.set_yticks(range(len(labels)), [_plain(label) for label in labels], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(_plain(title), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    figure.legend(fontsize=8, loc="outside lower center", ncols=min(2, len(series)))
    return svg(figure)


def side_by_side_svg(records: list[RunRecord]) -> str | None:
    """Cells paired by source hash across runs: the slowest cells, one bar per run."""
    runs = [r for r in records if r.kind in CELL_KINDS and r.measurements.get("cells")]
    if len(runs) < 2:
        return None
    by_run: list[dict[str, dict[str, Any]]] = []
    order: list[str] = []
    for record in runs:
        cells = list(record.measurements["cells"])
        mapping = dict(zip(cell_keys(cells), cells, strict=True))
        by_run.append(mapping)
        order.extend(k for k in mapping if k not in order)

    def wall(mapping: dict[str, dict[str, Any]], key: str) -> float | None:
        return _number(mapping[key].get("wall_s")) if key in mapping else None

    slowest = sorted(order, key=lambda k: max((wall(m, k) or 0.0) for m in by_run), reverse=True)[:MAX_BAR_CELLS]
    keys = [k for k in order if k in slowest]
    labels = []
    for key in keys:
        cell = next(m[key] for m in by_run if key in m)
        labels.append(_label(cell))
    series = [
        (f"{run_name(r, i)} · {r.digest} · {fp.summary(r.fingerprint)}", [wall(m, k) for k in keys])
        for i, (r, m) in enumerate(zip(runs, by_run, strict=True))
    ]
    title = f"slowest {len(keys)} cells, paired by source across {len(runs)} runs"
    return grouped_bars_svg(labels, series, title=title, xlabel="wall time per cell (s)")


def pathways_svg(record: RunRecord) -> str | None:
    pathways = list((record.measurements.get("pathways") or {}).keys())
    cells = [c for c in record.measurements.get("cells") or [] if isinstance(c.get("by_pathway"), dict)]
    if not pathways or not cells:
        return None

    def wall(cell: dict[str, Any], name: str) -> float | None:
        return _number((cell["by_pathway"].get(name) or {}).get("wall_s"))

    slowest = sorted(cells, key=lambda c: max((wall(c, p) or 0.0) for p in pathways), reverse=True)[:MAX_BAR_CELLS]
    shown = [c for c in cells if any(c is s for s in slowest)]
    series = [(name, [wall(c, name) for c in shown]) for name in pathways]
    return grouped_bars_svg(
        [_label(c) for c in shown], series, title=f"{record.target}: cell wall time per pathway",
        xlabel="wall time per cell (s)",
    )


def loops_svg(record: RunRecord) -> str | None:
    sweeps = [s for s in record.measurements.get("sweeps") or [] if isinstance(s, dict)]
    sweeps = [s for s in sweeps if s.get("trip_counts") and s.get("seconds")]
    if not sweeps:
        return None
    figure = _figure(9, 5)
    axes = figure.subplots()
    for number, sweep in enumerate(sweeps):
        color = COLORS[number % len(COLORS)]
        pairs = [
            (float(n), float(t))
            for n, t in zip(sweep["trip_counts"], sweep["seconds"], strict=False)
            if _number(n) and _number(t)
        ]
        if not pairs:
            continue
        fit = sweep.get("fit") or {}
        us = _number(fit.get("us_per_iter"))
        where = " · ".join(str(sweep[k]) for k in ("device", "placement") if sweep.get(k))
        name = f"{where or '?'} · {sweep.get('loop', '?')}" + (f" · {us:.3g} µs/iter" if us else "")
        axes.plot(*zip(*pairs, strict=True), "o", color=color, label=_plain(name))
        a, b = _number(fit.get("a_s")), _number(fit.get("b_s"))
        if a is not None and b is not None:
            low, high = min(n for n, _ in pairs), max(n for n, _ in pairs)
            grid = [low * (high / low) ** (i / 40) for i in range(41)] if low > 0 else [low, high]
            axes.plot(grid, [a + b * n for n in grid], "-", color=color, alpha=0.6)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("trip count (iterations)")
    axes.set_ylabel("seconds")
    axes.set_title(_plain(f"{record.target}: loop sweeps (points measured, lines fitted a + b·n)"), fontsize=10)
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=8)
    return svg(figure)


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def history_svg(result: Any, highlight: Iterable[int] = ()) -> str | None:
    """Each series of a :class:`nbscope.history.History` over time; change points as dashed lines with
    their ratio; the segment medians as steps; runs in the report drawn larger."""
    series = [s for s in result.series if any(p.value is not None for p in s.points)]
    if not series:
        return None
    marked = set(highlight)
    figure = _figure(10, 3.8)
    axes = figure.subplots()
    for number, entry in enumerate(series[: len(COLORS)]):
        color = COLORS[number % len(COLORS)]
        points = [p for p in entry.points if p.value is not None]
        times = [_parse_time(p.started_at) for p in points]
        values = [p.value for p in points]
        axes.plot(times, values, "o-", color=color, markersize=4, linewidth=1,
                  label=_plain(f"{entry.kind} · {entry.digest} · {entry.machine}"))
        big = [(t, p.value) for t, p in zip(times, points, strict=True) if p.run_id in marked]
        if big:
            axes.plot(*zip(*big, strict=True), "o", color=color, markersize=9, markerfacecolor="none")
        for change in entry.changes:
            when = _parse_time(change.started_at)
            axes.axvline(when, color=color, linestyle="--", alpha=0.7)
            ratio = f"×{change.ratio:.2f}" if change.ratio else ""
            axes.annotate(ratio, (when, change.after), textcoords="offset points", xytext=(4, 6), fontsize=8,
                          color=color)
    axes.set_ylabel(_plain(result.metric + (" (s)" if result.unit == "s" else "")))
    what = f" · cell {result.cell}" if result.cell else ""
    axes.set_title(_plain(f"history of {result.target}{what}"), fontsize=10)
    axes.grid(alpha=0.3)
    top = max((p.value for entry in series for p in entry.points if p.value is not None), default=1.0)
    axes.set_ylim(0, top * 1.15 or 1.0)
    axes.legend(fontsize=8, loc="lower left")
    figure.autofmt_xdate()
    return svg(figure)


# --- HTML sections ---------------------------------------------------------------------------------------

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1em 2em;color:#1f2328;background:#fff;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
h3{margin-bottom:.3em} .meta{color:#59636e;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #d0d7de;padding:.25em .5em;
vertical-align:top} th{background:#f6f8fa;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff8c5} code,.src{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.95em;
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


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = (),
           row_class: Callable[[int], str] | None = None) -> str:
    """An HTML table; cells are escaped unless given as ``Markup``."""
    right = set(numeric)
    out = ["<table><thead><tr>", *(f"<th>{e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for number, row in enumerate(rows):
        css = row_class(number) if row_class else ""
        out.append(f'<tr class="{e(css)}">' if css else "<tr>")
        for column, value in enumerate(row):
            text = value.html if isinstance(value, Markup) else e(value)
            out.append(f'<td class="n">{text}</td>' if column in right else f"<td>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class Markup:
    """Already-escaped HTML for :func:`_table`."""

    def __init__(self, html_text: str) -> None:
        self.html = html_text


def _runs_section(records: list[RunRecord]) -> str:
    rows = []
    for position, record in enumerate(records):
        headline = ", ".join(
            f"{k} {_seconds(v) if k.endswith('_s') else v}" for k, v in record.headline().items()
        )
        rows.append(
            (run_name(record, position), record.kind, Markup(f"<code>{e(record.target)}</code>"), record.status,
             record.started_at[:19].replace("T", " "), fp.summary(record.fingerprint), record.digest, headline)
        )
    headers = ("run", "kind", "target", "status", "started (UTC)", "machine", "digest", "headline")
    return "<h2>Runs</h2>" + _table(headers, rows)


KEY_FIELDS = (
    "cpu.model", "cpu.logical_cores", "memory.total_bytes", "blas.library", "blas.threads", "gpu.devices.0.name",
    "gpu.devices.0.fp64_class", "gpu.driver_version", "versions.python", "versions.jax", "versions.jaxlib",
    "versions.numpy", "versions.numba", "environment", "digest",
)


def _fingerprint_section(records: list[RunRecord]) -> str:
    """Key fields of each run's environment, the comparable fields that differ, then all fields folded."""
    flats = [fp.flatten(r.fingerprint) for r in records]
    paths: list[str] = []
    for flat in flats:
        paths.extend(p for p in flat if p not in paths and not p.startswith("blas.pools."))
    comparable = set().union(*(fp.comparable_fields(r.fingerprint) for r in records))
    missing = {"absent": "not recorded"}

    def show(path: str, value: Any) -> str:
        if fp.is_absent(value):
            return f"absent: {value['absent']}"
        if path.endswith("_bytes") and _number(value) is not None:
            from nbscope.render.terminal import format_bytes

            return format_bytes(value)
        if isinstance(value, (dict, list)):
            return json.dumps(value, default=str)
        return str(value)

    def rows_for(selected: Iterable[str]) -> list[tuple[str, ...]]:
        return [(path, *(show(path, flat.get(path, missing)) for flat in flats)) for path in selected]

    headers = ("field", *(f"{run_name(r, i)}" for i, r in enumerate(records)))
    differing = [
        p for p in paths
        if len(records) > 1 and p in comparable and len({show(p, f.get(p, missing)) for f in flats}) > 1
    ]
    key = [p for p in KEY_FIELDS if any(p in f for f in flats) and p not in differing]
    out = ["<h2>Fingerprint</h2>"]
    if len(records) > 1:
        if differing:
            out.append(f"<p>{len(differing)} comparable field(s) differ between the runs' environments:</p>")
            out.append(_table(headers, rows_for(differing[:12]), row_class=lambda _: "diff"))
            if len(differing) > 12:
                out.append(f"<details><summary>{len(differing) - 12} more differing fields</summary>"
                           f"{_table(headers, rows_for(differing[12:]), row_class=lambda _: 'diff')}</details>")
        else:
            out.append("<p>All comparable fields agree: the runs share one environment.</p>")
    out.append(_table(headers, rows_for(key)))
    out.append(f"<details><summary>all {len(paths)} fields</summary>{_table(headers, rows_for(paths))}</details>")
    return "".join(out)


def _cell_table(record: RunRecord) -> str:
    from nbscope.render.ledger import cell_flags, compile_text

    rows = []
    for cell in record.measurements.get("cells") or []:
        error = cell.get("error") or {}
        message = f"{error.get('name', '')}: {error.get('message', '')}" if error else ""
        rows.append(
            (int(cell.get("index", 0)) + 1, cell.get("line") or "", Markup(f'<span class="src">{e(cell.get("first_line"))}</span>'),
             cell.get("status"), _seconds(cell.get("wall_s")), _seconds(cell.get("compile_s")),
             _seconds(cell.get("run_s")), compile_text(cell), ", ".join(cell_flags(cell, markup=False)),
             _short(message, 200))
        )
    headers = ("#", "line", "source", "status", "wall", "compile", "run", "compiles", "notes", "error")
    return f"<details><summary>all {len(rows)} cells</summary>{_table(headers, rows, numeric=(0, 1, 4, 5, 6))}</details>"


def _totals_table(totals: dict[str, Any]) -> str:
    rows = []
    for key, value in totals.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=str)
        elif key.endswith("_s"):
            value = _seconds(value)
        elif key.endswith("_bytes") and _number(value) is not None:
            from nbscope.render.terminal import format_bytes

            value = format_bytes(value)
        rows.append((key, value))
    return _table(("total", "value"), rows, numeric=(1,))


def _profile_section(record: RunRecord, position: int) -> str:
    totals = record.measurements.get("totals") or {}
    wall = _number(totals.get("wall_s")) or 0.0
    compile_s = _number(totals.get("compile_s")) or 0.0
    share = f" ({compile_s / wall:.0%})" if wall else ""
    head = (
        f"<h3>{e(run_name(record, position))}: <code>{e(record.target)}</code></h3>"
        f"<p class=\"meta\">{e(record.kind)} · {e(record.status)} · total {e(_seconds(wall))} · compile "
        f"{e(_seconds(compile_s))}{e(share)} · {e(totals.get('compiles', 0))} JAX compiles · "
        f"{e(totals.get('cells_run', totals.get('cells', 0)))}/{e(totals.get('cells', 0))} cells run · "
        f"repeats {e(record.measurements.get('repeats', 1))}</p>"
    )
    plot = waterfall_svg(record)
    cells = record.measurements.get("cells") or []
    more = (f'<p class="note">first {MAX_WATERFALL_CELLS} of {len(cells)} cells shown</p>'
            if len(cells) > MAX_WATERFALL_CELLS else "")
    return head + (plot or '<p class="note">no cell timings</p>') + more + _cell_table(record)


def _gate_section(records: list[RunRecord]) -> str:
    runs = [r for r in records if r.kind in CELL_KINDS and r.measurements.get("cells")]
    runs = [r for r in runs if runs and r.target == runs[-1].target]
    if len(runs) < 2:
        return ""  # gating pairs cells of one notebook: it needs two runs of the same target
    runs = [runs[0], runs[-1]]
    from nbscope.gate import gate
    from nbscope.render.gate import VERDICT_MARK

    def mark(verdict: str) -> str:
        return VERDICT_MARK.get(verdict, verdict).removeprefix("❌ ").removeprefix("✅ ").removeprefix("⚠️ ")

    try:
        result = gate(runs[0], runs[1])
    except NbscopeError as exc:
        return f"<h2>Gate</h2><p class=\"note\">{e(exc)}</p>"
    verdict = '<span class="pass">PASS</span>' if result.passed else '<span class="fail">FAIL</span>'
    rows = []
    for c in [*[c for c in result.cells if c.verdict not in ("unchanged", "below-floor")], result.total]:
        rows.append(
            (Markup(f'<span class="src">{e(c.label)}</span>'), _seconds(c.base_s), _seconds(c.cand_s),
             "–" if c.ratio is None else f"×{c.ratio:.2f}", "–" if c.p_value is None else f"{c.p_value:.3g}",
             Markup(f'<span class="verdict-{e(c.verdict)}">{e(mark(c.verdict))}</span>'
                    + (f" ({e(c.note)})" if c.note else "")))
        )
    notes = "".join(f'<p class="note">{e(w)}</p>' for w in result.warnings)
    return (
        f"<h2>Gate: {verdict}</h2><p>{e(run_name(runs[1], records.index(runs[1])))} against "
        f"{e(run_name(runs[0], records.index(runs[0])))}, max slowdown {result.options.max_slowdown:.0%}, "
        f"α = {result.options.alpha:g}; cells that moved, then the total.</p>{notes}"
        + _table(("cell", "baseline", "candidate", "ratio", "p", "verdict"), rows, numeric=(1, 2, 3, 4))
    )


def _pathways_section(record: RunRecord, position: int) -> str:
    pathways = record.measurements.get("pathways") or {}
    if not isinstance(pathways, dict) or not pathways:
        return ""
    keys: list[str] = []
    for entry in pathways.values():
        keys.extend(k for k in (entry.get("totals") or {}) if k not in keys)
    rows = []
    for name, entry in pathways.items():
        totals = entry.get("totals") or {}
        rows.append((name, *[
            _seconds(totals.get(k)) if k.endswith("_s") else
            (json.dumps(totals.get(k), default=str) if isinstance(totals.get(k), (dict, list)) else totals.get(k, ""))
            for k in keys
        ]))
    plot = pathways_svg(record) or ""
    names = list(pathways)
    cell_rows = []
    for cell in record.measurements.get("cells") or []:
        by = cell.get("by_pathway") if isinstance(cell.get("by_pathway"), dict) else {}
        cell_rows.append((
            int(cell.get("index", 0)) + 1, cell.get("line") or "",
            Markup(f'<span class="src">{e(cell.get("first_line"))}</span>'),
            *[f"{_seconds((by.get(n) or {}).get('wall_s'))} ({(by.get(n) or {}).get('status', '–')})" for n in names],
        ))
    cells = (f"<details><summary>all {len(cell_rows)} cells</summary>"
             f"{_table(('#', 'line', 'source', *names), cell_rows, numeric=range(3, 3 + len(names)))}</details>")
    return (
        f"<h3>{e(run_name(record, position))}: pathways of <code>{e(record.target)}</code></h3>"
        + _table(("pathway", *keys), rows, numeric=range(1, len(keys) + 1)) + plot + cells
    )


def _loops_section(record: RunRecord, position: int) -> str:
    sweeps = [s for s in record.measurements.get("sweeps") or [] if isinstance(s, dict)]
    if not sweeps:
        return ""
    rows = []
    for sweep in sweeps:
        fit = sweep.get("fit") or {}
        us, a, b, r2 = (_number(fit.get(k)) for k in ("us_per_iter", "a_s", "b_s", "r2"))
        rows.append((sweep.get("device", ""), sweep.get("loop", ""), len(sweep.get("trip_counts") or []),
                     "–" if us is None else f"{us:.4g}", _seconds(a), "–" if b is None else f"{b:.3g}",
                     "–" if r2 is None else f"{r2:.4f}"))
    return (
        f"<h3>{e(run_name(record, position))}: loop sweeps of <code>{e(record.target)}</code></h3>"
        + _table(("device", "loop", "points", "µs/iter", "a (fixed)", "b (s/iter)", "r²"), rows,
                 numeric=(2, 3, 4, 5, 6))
        + (loops_svg(record) or "")
    )


def _finding_value(finding: Any, name: str) -> Any:
    if isinstance(finding, dict):
        return finding.get(name)
    return getattr(finding, name, None)


def _diagnosis_section(records: list[RunRecord]) -> str:
    try:
        from nbscope.diagnose import diagnose
    except ImportError:
        return ""
    cards = []
    notes = []
    for position, record in enumerate(records):
        if record.kind not in CELL_KINDS:
            continue
        # The run before it of the same notebook, if any, is what diagnose() may compare it with.
        previous = [r for r in records[:position] if r.kind in CELL_KINDS and r.target == record.target]
        try:
            findings = diagnose(record, other=previous[-1] if previous else None)
        except NbscopeError as exc:
            notes.append(f"{run_name(record, position)} not diagnosed: {exc}")
            continue
        except Exception as exc:  # another feature's code must not break the report
            notes.append(f"diagnosis of {run_name(record, position)} failed: {type(exc).__name__}: {exc}")
            continue
        for finding in findings or []:
            severity = str(_finding_value(finding, "severity") or "info")
            index = _finding_value(finding, "cell_index")
            where = f" · cell {int(index) + 1}" if isinstance(index, int) else ""
            confidence = _finding_value(finding, "confidence")
            confidence_text = f" · confidence {confidence:.0%}" if isinstance(confidence, float) and confidence <= 1 else (
                f" · confidence {confidence}" if confidence is not None else "")
            evidence = _finding_value(finding, "evidence") or {}
            evidence_rows = [
                (k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else v) for k, v in evidence.items()
            ] if isinstance(evidence, dict) else []
            fix = _finding_value(finding, "fix")
            cards.append(
                f'<div class="card {e(severity.lower())}"><h3>{e(_finding_value(finding, "title"))}</h3>'
                f'<p class="meta">{e(run_name(record, position))}{e(where)} · {e(severity)}{e(confidence_text)} · '
                f'rule <code>{e(_finding_value(finding, "rule"))}</code></p>'
                f"<p>{e_code(_finding_value(finding, 'summary'))}</p>"
                + (f"<p><b>Fix:</b> {e_code(fix)}</p>" if fix else "")
                + (f"<details><summary>evidence</summary>{_table(('item', 'value'), evidence_rows)}</details>"
                   if evidence_rows else "")
                + "</div>"
            )
    if not cards and not notes:
        return "<h2>Diagnosis</h2><p>No findings.</p>"
    return (
        "<h2>Diagnosis</h2>" + "".join(f'<p class="note">{e(n)}</p>' for n in notes)
        + f'<div class="cards">{"".join(cards)}</div>'
    )


def _history_section(records: list[RunRecord], store: Any, metric: str) -> str:
    if store is None:
        return ""
    from nbscope.history import history

    parts = []
    ids = [r.run_id for r in records if r.run_id is not None]
    for target in dict.fromkeys(r.target for r in records):
        try:
            result = history(store, target, metric=metric)
        except NbscopeError:
            continue
        plot = history_svg(result, highlight=ids)
        if plot is None:
            continue
        changes = [
            (s.digest, c.run_id, c.started_at[:19].replace("T", " "), _seconds(c.before), _seconds(c.after),
             f"×{c.ratio:.2f}" if c.ratio else "–")
            for s in result.series for c in s.changes
        ]
        counts = ", ".join(f"{len(s.points)} {s.kind} runs on digest {s.digest}" for s in result.series)
        parts.append(
            f"<h3><code>{e(target)}</code></h3><p class=\"meta\">{e(counts)}</p>{plot}"
            + (_table(("digest", "run", "started (UTC)", "before", "after", "ratio"), changes, numeric=(1, 3, 4, 5))
               if changes else '<p class="note">no change point</p>')
        )
    return "<h2>History</h2>" + "".join(parts) if parts else ""


def _forecast_section(records: list[RunRecord]) -> str:
    """The GPU forecast of profile runs recorded with program data (``nbscope.render.forecast``)."""
    from nbscope.render.forecast import report_section

    return report_section(records)


def report(
    records: list[RunRecord], *, store: Any = None, title: str | None = None, history_metric: str = "wall_s"
) -> str:
    """The whole HTML document for ``records`` (in the given order; the first is the baseline)."""
    if not records:
        raise NbscopeError("report needs at least one run")
    title = title or ("nbscope report: " + ", ".join(dict.fromkeys(r.target for r in records)))
    body = [
        f"<h1>{e(title)}</h1>",
        f'<p class="meta">nbscope {e(__version__)} · generated {e(dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"))}'
        " UTC · self-contained: no scripts, no network</p>",
        _runs_section(records),
        _gate_section(records),
        _fingerprint_section(records),
    ]
    profiles = [(i, r) for i, r in enumerate(records) if r.kind in CELL_KINDS and r.measurements.get("cells")]
    if profiles:
        body.append("<h2>Cells: waterfall (compile and run stacked)</h2>")
        body.extend(_profile_section(r, i) for i, r in profiles)
    bars = side_by_side_svg(records)
    if bars:
        body.append("<h2>Compared runs: cells side by side</h2>" + bars)
    pathways = "".join(_pathways_section(r, i) for i, r in enumerate(records) if r.kind == "pathways")
    if pathways:
        body.append("<h2>Pathways</h2>" + pathways)
    loops = "".join(_loops_section(r, i) for i, r in enumerate(records) if r.kind == "loops")
    if loops:
        body.append("<h2>Loop sweeps</h2>" + loops)
    others = [(i, r) for i, r in enumerate(records) if r.kind not in (*CELL_KINDS, "pathways", "loops")]
    for i, r in others:
        body.append(f"<h2>{e(run_name(r, i))}: {e(r.kind)} totals</h2>" + _totals_table(r.measurements.get("totals") or {}))
    body.append(_forecast_section(records))
    body.append(_diagnosis_section(records))
    body.append(_history_section(records, store, history_metric))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


def write_report(
    records: list[RunRecord], path: str | Path, *, store: Any = None, title: str | None = None,
    history_metric: str = "wall_s",
) -> Path:
    path = Path(path)
    if path.is_dir():
        raise NbscopeError(f"-o {path} is a directory; give a file name")
    text = report(records, store=store, title=title, history_metric=history_metric)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
