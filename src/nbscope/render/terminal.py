"""Terminal views (rich tables) of fingerprints, run lists and records."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from nbscope import _units as units
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord

console = Console(highlight=False)
if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = 140  # piped into a file or CI log: rich's 80 columns would wrap every table row

# Run kind -> "module:function" that prints its measurements; loaded only when needed.
RECORD_VIEWS: dict[str, str] = {
    "profile": "nbscope.render.ledger:print_profile",
    "trace": "nbscope.render.ledger:print_profile",
    "bench": "nbscope.render.bench:print_bench",
    "pathways": "nbscope.render.pathways:print_pathways",
    "loops": "nbscope.render.loops:print_loops",
    "audit": "nbscope.render.audit:print_audit",
}


def literal(value: Any) -> str:
    """``value`` as rich markup that prints exactly as written.

    Everything a record holds (sources, error messages, function names, paths, reasons) goes through
    this: ``y = x[i]`` would otherwise print as ``y = x`` in italics, and ``[/x]`` raise a MarkupError.
    """
    return escape(str(value))


def source_text(text: str) -> Text:
    """A source line for a table cell: as written, on one line, cut with "…" where the column is narrow."""
    return Text(text, no_wrap=True, overflow="ellipsis")


def format_value(value: Any) -> str:
    """A fingerprint or settings value as rich markup (escaped)."""
    if fp.is_absent(value):
        return f"[dim]absent: {literal(value['absent'])}[/dim]"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return literal(json.dumps(value, default=str))
    return literal(value)


def format_bytes(value: Any) -> str:
    text = units.size(value)
    return format_value(value) if text is None else text


def format_seconds(value: Any) -> str:
    return units.seconds(value)


def print_fingerprint(fingerprint: Mapping[str, Any]) -> None:
    table = Table(title=f"nbscope fingerprint · digest {fingerprint.get('digest')}", show_lines=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for path, value in fp.flatten(fingerprint).items():
        if path.startswith("blas.pools.") or path == "digest":
            continue
        shown = format_bytes(value) if path.endswith("_bytes") else format_value(value)
        table.add_row(literal(path), shown)
    console.print(table)


def print_fingerprint_diff(rows: list[tuple[str, Any, Any]], name_a: str, name_b: str) -> None:
    if not rows:
        console.print("The fingerprints agree on every compared field.")
        return
    table = Table(title=f"{len(rows)} field(s) differ")
    table.add_column("field", style="bold")
    table.add_column(name_a)
    table.add_column(name_b)
    for path, a, b in rows:
        table.add_row(literal(path), format_value(a), format_value(b))
    console.print(table)


def print_run_list(rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print("No runs stored yet.")
        return
    table = Table()
    for column in ("id", "started (UTC)", "kind", "target", "status", "machine", "digest", "headline"):
        table.add_column(column, overflow="fold")
    for row in rows:
        headline = ", ".join(
            f"{k}={format_seconds(v) if k.endswith('_s') else v}" for k, v in row["headline"].items()
        )
        table.add_row(
            literal(row["id"]),
            literal(str(row["started_at"])[:19].replace("T", " ")),
            literal(row["kind"]),
            literal(row["target"]),
            literal(row["status"]),
            literal(row["machine"]),
            literal(row["digest"]),
            literal(headline),
        )
    console.print(table)


def print_record_header(record: RunRecord) -> None:
    run = f"run {record.run_id}" if record.run_id else "run"
    console.print(
        f"[bold]{literal(run)}[/bold] · {literal(record.kind)} · {literal(record.target)} · {literal(record.status)} · "
        f"{literal(record.started_at[:19].replace('T', ' '))} UTC · {literal(fp.summary(record.fingerprint))} · "
        f"digest {literal(record.digest)}"
    )
    if record.settings:
        settings = ", ".join(f"{k}={v}" for k, v in record.settings.items() if v not in (None, [], {}, ""))
        if settings:
            console.print(f"[dim]settings: {literal(settings)}[/dim]")


def _view(kind: str) -> Callable[[RunRecord], None] | None:
    target = RECORD_VIEWS.get(kind)
    if target is None:
        return None
    module_name, _, function = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    return getattr(module, function, None)


def print_record(record: RunRecord) -> None:
    view = _view(record.kind)
    if view is not None:
        view(record)
        return
    print_record_header(record)
    console.print_json(json.dumps(record.measurements, default=str))
