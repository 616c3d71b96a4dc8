"""The HTML report's sections, each formatting data it is given (runs, analyses); none computes one."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from nbscope._units import count
from nbscope.analyse.gate import GateVerdict
from nbscope.analyse.report import ReportData
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord
from nbscope.render.gate import VERDICT_MARK
from nbscope.render.html._base import (
    MAX_WATERFALL_CELLS,
    Markup,
    _number,
    _seconds,
    _short,
    _table,
    e,
    e_code,
    run_name,
)
from nbscope.render.html._plots import history_svg, loops_svg, pathways_svg, waterfall_svg
from nbscope.render.terminal import field_name, format_bytes, headline_text, metric_name, settings_text
from nbscope.schema.codec import decode
from nbscope.schema.pathways import PathwayCell, PathwaysRun
from nbscope.schema.suite import LoopsRun


def _unbroken(text: str) -> Markup:
    """``a · b · c`` wrapped only between its parts ("--env NAME" never splits after "--")."""
    return Markup(" · ".join(f'<span class="nowrap">{e(part)}</span>' for part in text.split(" · ")))


def _runs_section(records: list[RunRecord]) -> str:
    rows = [
        (
            run_name(record, position),
            record.kind,
            Markup(f"<code>{e(record.target)}</code>"),
            record.status,
            record.started_at[:19].replace("T", " "),
            record.machine().summary,
            record.digest,
            _unbroken(settings_text(record.settings or {}) or "defaults"),
            _unbroken(headline_text(record.headline())),
        )
        for position, record in enumerate(records)
    ]
    headers = ("run", "kind", "notebook", "status", "started (UTC)", "machine", "digest", "settings", "figures")
    return "<h2>Runs</h2>" + _table(headers, rows)


KEY_FIELDS = (
    "cpu.model",
    "cpu.logical_cores",
    "memory.total_bytes",
    "blas.library",
    "blas.threads",
    "gpu.devices.0.name",
    "gpu.devices.0.fp64_class",
    "gpu.driver_version",
    "versions.python",
    "versions.jax",
    "versions.jaxlib",
    "versions.numpy",
    "versions.numba",
    "environment",
    "digest",
)


def _settings_differences(data: ReportData) -> str:
    """The settings the runs differ in, by the option that sets them; an ``--env`` value only as a hash."""
    if not data.setting_differences:
        return ""
    headers = ("setting", *(run_name(data.records[i], i) for i in data.setting_runs))
    rows = [(field_name(path), *values) for path, values in data.setting_differences]
    differ = "1 setting differs" if len(rows) == 1 else f"{len(rows)} settings differ"
    return (
        f"<p>{differ} between the profile runs (an <code>--env</code> value is shown only as a hash of it, never as "
        "written):</p>" + _table(headers, rows, row_class=lambda _: "diff")
    )


def _fingerprint_section(records: list[RunRecord], data: ReportData | None = None) -> str:
    """Key fields of each run's environment, the comparable fields that differ, the settings that differ, then
    all fields folded."""
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
            return format_bytes(value)
        if value in ({}, []):
            return "none set" if path == "environment" else "none"
        if isinstance(value, (dict, list)):
            return json.dumps(value, default=str)
        return str(value)

    shown = {path: [show(path, flat.get(path, missing)) for flat in flats] for path in paths}  # each run's value

    def rows_for(selected: Iterable[str]) -> list[tuple[str, ...]]:
        return [(field_name(path), *shown[path]) for path in selected]

    headers = ("field", *(f"{run_name(r, i)}" for i, r in enumerate(records)))
    settings = _settings_differences(data) if data is not None else ""
    differing = [p for p in paths if len(records) > 1 and p in comparable and len(set(shown[p])) > 1]
    key = [p for p in KEY_FIELDS if any(p in f for f in flats) and p not in differing]
    out = ["<h2>Fingerprint</h2>"]
    if len(records) > 1:
        if differing:
            out.append(f"<p>{count(len(differing), 'comparable field')} of the runs' machine fingerprints differ:</p>")
            out.append(_table(headers, rows_for(differing[:12]), row_class=lambda _: "diff"))
            if len(differing) > 12:
                out.append(
                    f"<details><summary>{len(differing) - 12} more differing fields</summary>"
                    f"{_table(headers, rows_for(differing[12:]), row_class=lambda _: 'diff')}</details>"
                )
        elif settings:
            out.append("<p>All comparable fields of the machine fingerprints agree, but not the runs' settings:</p>")
        else:
            out.append(
                "<p>All comparable fields agree, and so do the runs' settings: the runs share one environment.</p>"
            )
        out.append(settings)
    out.append(_table(headers, rows_for(key)))
    out.append(f"<details><summary>all {len(paths)} fields</summary>{_table(headers, rows_for(paths))}</details>")
    return "".join(out)


def _cell_table(record: RunRecord) -> str:
    from nbscope.render.ledger import compile_text, flags_text

    rows = []
    for cell in record.notebook_run().cells:
        message = f"{cell.error.name}: {cell.error.message}" if cell.error else ""
        rows.append(
            (
                cell.index + 1,
                cell.line or "",
                Markup(f'<span class="src">{e(cell.first_line)}</span>'),
                cell.status,
                _seconds(cell.wall_s),
                _seconds(cell.compile_s),
                _seconds(cell.run_s),
                compile_text(cell),
                flags_text(cell),
                _short(message, 200),
            )
        )
    headers = ("#", "line", "source", "status", "wall", "compile", "run", "compiles", "notes", "error")
    return f"<details><summary>{'all ' + count(len(rows), 'cell') if len(rows) != 1 else 'the cell'}</summary>{_table(headers, rows, numeric=(0, 1, 4, 5, 6))}</details>"


def _totals_table(totals: Mapping[str, object]) -> str:
    rows = []
    for key, value in totals.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=str)
        elif key.endswith("_s"):
            value = _seconds(value)
        elif key.endswith("_bytes") and _number(value) is not None:
            value = format_bytes(value)
        rows.append((metric_name(key), value))
    return _table(("total", "value"), rows, numeric=(1,))


def _profile_section(record: RunRecord, position: int) -> str:
    run = record.notebook_run()
    totals = run.totals
    wall = totals.wall_s or 0.0
    compile_s = totals.compile_s or 0.0
    share = f" ({compile_s / wall:.0%})" if wall else ""
    head = (
        f"<h3>{e(run_name(record, position))}: <code>{e(record.target)}</code></h3>"
        f'<p class="meta">{e(record.kind)} · {e(record.status)} · total {e(_seconds(wall))} · compile '
        f"{e(_seconds(compile_s))}{e(share)} · {e(totals.compiles)} JAX compiles · "
        f"{e(totals.cells_run)}/{e(totals.cells)} cells run · repeats {e(run.repeats)}</p>"
    )
    plot = waterfall_svg(record)
    more = (
        f'<p class="note">first {MAX_WATERFALL_CELLS} of {len(run.cells)} cells shown</p>'
        if len(run.cells) > MAX_WATERFALL_CELLS
        else ""
    )
    return head + (plot or '<p class="note">no cell timings</p>') + more + _cell_table(record)


def _total_cell(key: str, value: object) -> object:
    """One of a pathway's totals as its column shows it: seconds, a JSON value, or as recorded."""
    if key.endswith("_s"):
        return _seconds(value)
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else value


def _pathways_section(record: RunRecord, position: int) -> str:
    run = decode(PathwaysRun, record.measurements)
    if not run.pathways:
        return ""
    keys: list[str] = []
    for entry in run.pathways.values():
        keys.extend(k for k in entry.totals if k not in keys)
    # "": a total the pathway lacks
    rows = [(name, *[_total_cell(k, entry.totals.get(k, "")) for k in keys]) for name, entry in run.pathways.items()]
    plot = pathways_svg(record) or ""
    names = list(run.pathways)
    cell_rows = [
        (
            (row.index or 0) + 1,
            row.line or "",
            Markup(f'<span class="src">{e(row.first_line)}</span>'),
            *[_pathway_cell(row.in_pathway(n)) for n in names],
        )
        for row in run.cells
    ]
    cells = (
        f"<details><summary>all {count(len(cell_rows), 'cell')}</summary>"
        f"{_table(('#', 'line', 'source', *names), cell_rows, numeric=range(3, 3 + len(names)))}</details>"
    )
    return (
        f"<h3>{e(run_name(record, position))}: pathways of <code>{e(record.target)}</code></h3>"
        + _table(("pathway", *keys), rows, numeric=range(1, len(keys) + 1))
        + plot
        + cells
    )


def _pathway_cell(entry: PathwayCell | None) -> str:
    """``407 ms (ok)``: a cell's wall time and status in one pathway (``– (–)`` where that pathway lacks it)."""
    status = entry.status if entry is not None and entry.status is not None else "–"
    return f"{_seconds(entry.wall_s if entry is not None else None)} ({status})"


def _loops_section(record: RunRecord, position: int) -> str:
    sweeps = decode(LoopsRun, record.measurements).sweeps
    if not sweeps:
        return ""
    rows = []
    for sweep in sweeps:
        fit = sweep.fit
        us, a, b, r2 = (fit.us_per_iter, fit.a_s, fit.b_s, fit.r2) if fit else (None, None, None, None)
        rows.append(
            (
                sweep.device or "",
                sweep.loop or "",
                len(sweep.points),
                "–" if us is None else f"{us:.4g}",
                _seconds(a),
                "–" if b is None else f"{b:.3g}",
                "–" if r2 is None else f"{r2:.4f}",
            )
        )
    return (
        f"<h3>{e(run_name(record, position))}: loop sweeps of <code>{e(record.target)}</code></h3>"
        + _table(
            ("device", "loop", "points", "µs/iter", "a (fixed)", "b (s/iter)", "r²"), rows, numeric=(2, 3, 4, 5, 6)
        )
        + (loops_svg(record) or "")
    )


def diagnosis(data: ReportData) -> str:
    cards = []
    notes = list(data.notes)
    for position, findings in data.diagnoses:
        record = data.records[position]
        for finding in findings:
            severity = finding.severity or "info"
            where = f" · cell {finding.cell_index + 1}" if finding.cell_index is not None else ""
            confidence = finding.confidence
            confidence_text = (
                f" · confidence {confidence:.0%}"
                if isinstance(confidence, float) and confidence <= 1
                else (f" · confidence {confidence}" if confidence is not None else "")
            )
            evidence_rows = [
                (k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else v)
                for k, v in finding.evidence.items()
            ]
            fix = finding.fix
            highlights = finding.evidence_highlights()  # the few a reader is shown; the rest stays in the evidence fold
            cards.append(
                f'<div class="card {e(severity.lower())}"><h3>{e(finding.title)}</h3>'
                f'<p class="meta">{e(run_name(record, position))}{e(where)} · {e(severity)}{e(confidence_text)} · '
                f"rule <code>{e(finding.rule)}</code></p>"
                f"<p>{e_code(finding.summary)}</p>"
                + (f"<p><b>Fix:</b> {e_code(fix)}</p>" if fix else "")
                + (
                    '<ul class="highlights">'
                    + "".join(f"<li><b>{e(label)}</b>: {e_code(text)}</li>" for label, text in highlights)
                    + "</ul>"
                    if highlights
                    else ""
                )
                + (
                    f"<details><summary>evidence</summary>{_table(('item', 'value'), evidence_rows)}</details>"
                    if evidence_rows
                    else ""
                )
                + "</div>"
            )
    if not cards and not notes:
        return "<h2>Diagnosis</h2><p>No findings.</p>"
    return (
        "<h2>Diagnosis</h2>"
        + "".join(f'<p class="note">{e(n)}</p>' for n in notes)
        + f'<div class="cards">{"".join(cards)}</div>'
    )


def history(data: ReportData) -> str:
    parts = []
    ids = [r.run_id for r in data.records if r.run_id is not None]
    for target, result in data.histories:
        plot = history_svg(result, highlight=ids)
        if plot is None:
            continue
        changes = [
            (
                s.label,
                c.run_id,
                c.started_at[:19].replace("T", " "),
                _seconds(c.before),
                _seconds(c.after),
                f"×{c.ratio:.2f}" if c.ratio else "–",
            )
            for s in result.series
            for c in s.changes
        ]
        counts = "; ".join(f"{count(len(s.points), 'run')}: {s.label}" for s in result.series)
        if len(result.series) > 1:
            counts = f"{len(result.series)} series, each labelled by what sets it apart: {counts}"
        parts.append(
            f'<h3><code>{e(target)}</code></h3><p class="meta">{e(counts)}</p>{plot}'
            + (
                _table(("series", "run", "started (UTC)", "before", "after", "ratio"), changes, numeric=(1, 3, 4, 5))
                if changes
                else '<p class="note">no change point</p>'
            )
        )
    return "<h2>History</h2>" + "".join(parts) if parts else ""


def gate(data: ReportData) -> str:
    if data.gate_runs is None:
        return ""  # gating pairs cells of one notebook: it needs two runs of the same target
    if data.gate is None:
        return f'<h2>Gate</h2><p class="note">{e(data.gate_error)}</p>'
    records, result = data.records, data.gate
    runs = [records[data.gate_runs[0]], records[data.gate_runs[1]]]

    def mark(verdict: GateVerdict) -> str:
        return VERDICT_MARK[verdict].removeprefix("❌ ").removeprefix("✅ ").removeprefix("⚠️ ")

    verdict = '<span class="pass">PASS</span>' if result.passed else '<span class="fail">FAIL</span>'
    rows = [
        (
            Markup(f'<span class="src">{e(c.label)}</span>'),
            _seconds(c.base_s),
            _seconds(c.cand_s),
            "–" if c.ratio is None else f"×{c.ratio:.2f}",
            "–" if c.p_value is None else f"{c.p_value:.3g}",
            Markup(
                f'<span class="verdict-{e(c.verdict)}">{e(mark(c.verdict))}</span>'
                + (f" ({e(c.note)})" if c.note else "")
            ),
        )
        for c in [*[c for c in result.cells if c.verdict not in ("unchanged", "below-floor")], result.total]
    ]
    notes = "".join(f'<p class="note">{e(w)}</p>' for w in result.warnings)
    return (
        f"<h2>Gate: {verdict}</h2><p>{e(run_name(runs[1], records.index(runs[1])))} against "
        f"{e(run_name(runs[0], records.index(runs[0])))}, max slowdown {result.options.max_slowdown:.0%}, "
        f"α = {result.options.alpha:g}; cells that moved, then the total.</p>{notes}"
        + _table(("cell", "baseline", "candidate", "ratio", "p", "verdict"), rows, numeric=(1, 2, 3, 4))
    )
