"""Views of a ``bench`` run: rich tables per group, and a markdown table in the seed's style."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbscope.record.run import RunRecord
from nbscope.render.terminal import (
    Column,
    console,
    fitted_table,
    format_bytes,
    format_seconds,
    literal,
    print_record_header,
    source_text,
)


def _steady(figure: Mapping[str, Any]) -> Mapping[str, Any]:
    return figure.get("steady") or {}


def _first(figure: Mapping[str, Any]) -> Mapping[str, Any]:
    return figure.get("first") or {}


def _fit(figure: Mapping[str, Any]) -> Mapping[str, Any]:
    return figure.get("fit") or {}


def time_text(figure: Mapping[str, Any], *, first_fallback: bool = False) -> str:
    """The headline time of a row: the steady median, a fitted per-iteration cost, or (asked for) the
    first call of a row that has nothing else, like the multi-size total."""
    if _steady(figure):
        return format_seconds(_steady(figure).get("median_s"))
    if _fit(figure):
        return f"{_fit(figure)['per_iter_s'] * 1e6:.4g} µs/iter"
    if first_fallback and _first(figure):
        return format_seconds(_first(figure).get("wall_s"))
    return "–"


def spread_text(figure: Mapping[str, Any]) -> str:
    spread = _steady(figure).get("spread")
    if spread is None:
        spread = _fit(figure).get("spread")
    return "–" if spread is None else f"{spread:.1%}"


def samples_text(figure: Mapping[str, Any]) -> str:
    steady = _steady(figure)
    if steady:
        inner = steady.get("inner") or 1
        return f"{steady.get('samples')}" + (f"×{inner}" if inner > 1 else "")
    if _fit(figure):
        return f"fit of {len(_fit(figure).get('points') or [])}"
    return "1" if _first(figure) else "–"


def throughput_text(figure: Mapping[str, Any]) -> str:
    throughput = figure.get("throughput")
    if not throughput:
        return ""
    return f"{throughput['value']:.3g} {throughput['unit']}"


def first_text(figure: Mapping[str, Any]) -> str:
    return format_seconds(_first(figure).get("wall_s")) if _first(figure) else "–"


def compile_text(figure: Mapping[str, Any]) -> str:
    value = _first(figure).get("compile_s")
    return format_seconds(value) if value is not None else "–"


def _group_heading(name: str, group: Mapping[str, Any], dtypes: list[str]) -> str:
    parts = [f"[bold]{literal(name)}[/bold]", literal(group.get("title") or "")]
    if len(dtypes) == 1:
        parts.append(literal(dtypes[0]))
    runs = len(group.get("runs") or [])
    parts.append(f"{format_seconds(group.get('wall_s'))} in {runs} process{'es' if runs > 1 else ''}")
    if group.get("peak_rss_bytes"):
        parts.append(f"peak RSS {format_bytes(group['peak_rss_bytes'])}")
    return " · ".join(p for p in parts if p)


def print_bench(record: RunRecord) -> None:
    """Print a bench run: one table per group, skipped and failed groups with their reason, totals."""
    print_record_header(record)
    measurements = record.measurements
    for name, group in (measurements.get("groups") or {}).items():
        if group.get("status") == "skipped":
            console.print(f"[yellow]{literal(name)}: skipped[/yellow] – {literal(group.get('reason'))}")
            continue
        figures = group.get("figures") or []
        dtypes = sorted({str(f.get("dtype")) for f in figures})
        columns = [Column("benchmark", "left", "source", min_width=14),
                   *([Column("dtype", "left", "number")] if len(dtypes) > 1 else []),
                   *(Column(header, "right", "number") for header in ("first call", "compile", "steady", "min", "spread",
                                                                       "samples")),
                   Column("throughput", "right", "text", min_width=10)]
        rows: list[list[Any]] = []
        footnotes: list[str] = []
        notes: dict[str, list[str]] = {}
        for figure in figures:
            warnings = list(figure.get("warnings") or [])
            spread = spread_text(figure)
            if warnings:
                spread = f"[yellow]{spread} ⚠[/yellow]"
                # A high spread is visible in its column; other warnings need words.
                other = [w for w in warnings if "spread" not in w]
                if other:
                    footnotes.append(f"[yellow]⚠ {literal(figure.get('label'))}: {literal('; '.join(other))}[/yellow]")
            if figure.get("note"):
                notes.setdefault(str(figure["note"]), []).append(str(figure.get("label")))
            minimum = _steady(figure).get("min_s")
            cells = [source_text(str(figure.get("label"))), *([literal(figure.get("dtype"))] if len(dtypes) > 1 else [])]
            cells += [
                first_text(figure),
                compile_text(figure),
                time_text(figure),
                format_seconds(minimum) if minimum is not None else "–",
                spread,
                samples_text(figure),
                literal(throughput_text(figure)),
            ]
            rows.append(cells)
        if figures:
            console.print(fitted_table(columns, rows, title=_group_heading(name, group, dtypes)))
        else:
            console.print(_group_heading(name, group, dtypes))
        for note, labels in notes.items():
            where = ", ".join(labels) if len(labels) <= 2 else f"{len(labels)} rows"
            footnotes.append(f"[dim]{literal(where)}: {literal(note)}[/dim]")
        footnotes.extend(f"[yellow]⚠ {literal(warning)}[/yellow]" for warning in group.get("warnings") or [])
        for run in group.get("runs") or []:
            footnotes.extend(f"[dim]{literal(note)}[/dim]" for note in run.get("notes") or [])
            if run.get("status") == "error":
                footnotes.append(f"[red]{literal(name)} ({literal(run.get('dtype'))}) failed:[/red] "
                                 f"{literal(run.get('reason'))}")
        for line in dict.fromkeys(footnotes):  # a note shared by several rows once
            console.print(f"  {line}")
    totals = measurements.get("totals") or {}
    line = (
        f"{totals.get('figures', 0)} figures from {totals.get('groups_ok', 0)} group(s) in "
        f"{format_seconds(totals.get('wall_s'))}"
    )
    if totals.get("groups_skipped"):
        line += f", {totals['groups_skipped']} skipped"
    if totals.get("groups_failed"):
        line += f", [red]{totals['groups_failed']} failed[/red]"
    if totals.get("warnings"):
        line += f", [yellow]{totals['warnings']} warning(s)[/yellow] (spread > 10 % or too few samples)"
    if totals.get("interrupted"):
        line += ", [red]interrupted[/red]"
    machine = measurements.get("machine") or {}
    if machine.get("spread") is not None:
        colour = "yellow" if machine["spread"] > 0.10 else "dim"
        console.print(
            f"[{colour}]machine steadiness: a fixed reference workload varied ±{machine['spread']:.1%} over the run "
            f"(10–90 %, {machine['samples']} probes); each figure's uncertainty is at least that[/{colour}]"
        )
    if (totals.get("background_cores") or 0) > 0.25:
        line += f", [yellow]machine busy (up to {totals['background_cores']:.1f} cores used by other processes)[/yellow]"
    console.print(line)
    console.print("[dim]steady = median of calibrated samples; spread = MAD / median; first call is its own figure[/dim]")


def bench_markdown(record: RunRecord) -> str:
    """A GitHub-ready markdown table of every row, in the seed's style (Benchmark | time | ...)."""
    from nbscope.collect import fingerprint as fp

    settings = record.settings or {}
    lines = [
        f"**nbscope bench** `{record.target}` · {fp.summary(record.fingerprint)} · digest `{record.digest}` · "
        f"dtype {settings.get('dtype', '?')} · {record.started_at[:19].replace('T', ' ')} UTC",
        "",
        "| Benchmark | time | first call | compile | spread | samples | throughput | dtype |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    skipped = []
    groups = (record.measurements or {}).get("groups") or {}
    for name, group in groups.items():
        if group.get("status") == "skipped":
            skipped.append(f"{name} ({group.get('reason')})")
            continue
        for figure in group.get("figures") or []:
            label = str(figure.get("label")).replace("|", "\\|")
            if figure.get("warnings"):
                label += " ⚠"
            lines.append(
                f"| {label} | {time_text(figure, first_fallback=True)} | {first_text(figure)} | {compile_text(figure)} | "
                f"{spread_text(figure)} | {samples_text(figure)} | {throughput_text(figure)} | {figure.get('dtype')} |"
            )
        for run in group.get("runs") or []:
            if run.get("status") == "error":
                lines.append(f"| {name} ({run.get('dtype')}) failed: {run.get('reason')} | | | | | | | |")
    totals = (record.measurements or {}).get("totals") or {}
    lines.append("")
    lines.append(
        f"{totals.get('figures', 0)} figures in {format_seconds(totals.get('wall_s'))}; time = median of the "
        "steady-state samples (µs/iter: fitted slope); spread = MAD / median; ⚠ = spread > 10 % or too few samples; "
        "other load = cores kept busy by other processes while the group ran."
    )
    machine = (record.measurements or {}).get("machine") or {}
    if machine.get("spread") is not None:
        lines.append(
            f"Machine steadiness: a fixed reference workload varied ±{machine['spread']:.1%} over the run "
            f"(10–90 % range of {machine['samples']} probes); no figure is known better than that."
        )
    if skipped:
        lines.append("")
        lines.append("Skipped: " + "; ".join(skipped) + ".")
    lines += ["", "| Group | status | wall (fresh processes) | peak RSS | other load |", "|---|---|---:|---:|---:|"]
    for name, group in groups.items():
        status = str(group.get("status"))
        if group.get("reason"):
            status += f": {group['reason']}".replace("|", "\\|")
        rss = group.get("peak_rss_bytes")
        lines.append(
            f"| {name} | {status} | {format_seconds(group.get('wall_s'))} | {format_bytes(rss) if rss else '–'} | "
            f"{group.get('background_cores') or 0:.2f} cores |"
        )
    return "\n".join(lines) + "\n"
