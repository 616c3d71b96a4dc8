"""Terminal views (rich tables) of fingerprints, run lists and records."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from nbscope import _units as units
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord, object_in
from nbscope.render._clean import for_terminal
from nbscope.render._rows import Column as Column  # the views build their tables with it
from nbscope.render._rows import Item, Rows


class SafeConsole(Console):
    """A rich console whose output carries no control or escape sequence from what it prints (a record's or a
    notebook's text; :mod:`nbscope.render._clean`): each segment's text is cleaned, rich's own styles and cursor
    controls (the progress display's) are kept. Every console of nbscope is one.

    Strings are cleaned before rich lays them out (a table measures and wraps what is printed, and a sequence cut
    by a wrap would no longer be recognised); the segments once more as they are written (Text built elsewhere).

    ``COLUMNS`` or ``LINES`` that is not a positive number (``COLUMNS=0``: rich would print nothing) is ignored."""

    def __init__(self, *, highlight: bool = False, stderr: bool = False) -> None:
        environ = {
            k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") or units.whole(v, 1) is not None
        }
        super().__init__(highlight=highlight, stderr=stderr, _environ=environ)

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(for_terminal(text), **options)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(for_terminal(segment.text), segment.style, segment.control)
            for segment in buffer
        )


# One width on a terminal and piped: the terminal's (or $COLUMNS), else rich's 80 columns. Every table fits it
# (fitted_table), so piped output reads as it does on an 80-column terminal.
console = SafeConsole(highlight=False)


def stderr_console() -> SafeConsole:
    """A console for progress and status lines on standard error."""
    return SafeConsole(stderr=True, highlight=False)


# Run kind -> "module:function" that prints its measurements; loaded only when needed.
RECORD_VIEWS: dict[str, str] = {
    "profile": "nbscope.render.ledger:print_every_cell",
    "trace": "nbscope.render.ledger:print_every_cell",
    "trial": "nbscope.render.ledger:print_every_cell",
    "bench": "nbscope.render.bench:print_bench",
    "pathways": "nbscope.render.pathways:print_pathways",
    "loops": "nbscope.render.loops:print_loops",
    "audit": "nbscope.render.audit:print_audit",
}


def literal(value: object) -> str:
    """``value`` as rich markup that prints exactly as written.

    Everything a record holds (sources, error messages, function names, paths, reasons) goes through
    this: ``y = x[i]`` would otherwise print as ``y = x`` in italics, and ``[/x]`` raise a MarkupError.
    """
    return escape(for_terminal(str(value)))


def source_text(text: str) -> Text:
    """A source line for a table cell: as written, on one line, cut with "…" where the column is narrow."""
    return Text(for_terminal(text), no_wrap=True, overflow="ellipsis")


def cell_columns(number: str = "cell") -> tuple[Column, Column, Column]:
    """The columns that say which cell a row is: its number, its line in a MyST file, its code as written."""
    return (
        Column(number, "right", "number"),
        Column("line", "right", "number", optional=True),
        Column("source", "left", "source", min_width=12),
    )


# A cell's time split, in the ledger's order.
TIME_COLUMNS = (
    Column("wall", "right", "number"),
    Column("compile", "right", "number"),
    Column("run", "right", "number"),
)


def _cell_width(value: object) -> int:
    return max((Text(line).cell_len for line in _plain(value).splitlines()), default=0)


def fitted_table(
    columns: Sequence[Column], rows: Sequence[Sequence[object]], *, title: str | None = None, width: int | None = None
) -> Table:
    """A table that fits ``width`` (default: the console's) and never cuts a figure.

    Number columns keep their full width. When a row is too wide, source columns shrink first (to their
    ``min_width``), then text, figure lists (``parts``) and names (``path``) wrap down to theirs; if that
    is not enough, each goes down to its header (a figure list to its longest figure). ``rows`` hold rich
    markup strings or Text.
    """
    width = width or console.width
    kept = [i for i, c in enumerate(columns) if not c.optional or any(_cell_width(row[i]) for row in rows)]
    if len(kept) < len(columns):
        columns = [columns[i] for i in kept]
        rows = [[row[i] for i in kept] for row in rows]
    natural = [max([len(c.header), *(_cell_width(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    widths = list(natural)
    # box.SIMPLE_HEAD without edges: a rule under the header, two spaces between columns (the divider and
    # a left padding).
    room = width - 2 * (len(columns) - 1)

    def excess() -> int:
        return sum(widths) - room

    # Last, when even those minimums do not fit, every column but the numbers goes down to its header, and a
    # list of figures down to its longest figure, so that none is split.
    passes = [(role, "min") for role in ("source", "text", "parts", "path")]
    passes += [(role, "hard") for role in ("source", "path", "text", "parts")]
    for role, floor in passes:
        # The widest column of a role gives way first: a long sentence wraps before a short value does.
        for i in sorted(range(len(columns)), key=lambda i: -widths[i]):
            column = columns[i]
            if column.role != role or excess() <= 0:
                continue
            if floor == "min":
                least = max(len(column.header), column.min_width)
            elif role == "parts":
                longest = max(
                    (len(part.rstrip()) for row in rows for part in _plain(row[i]).split(WRAP_AFTER[role])), default=0
                )
                least = max(len(column.header), longest + len(WRAP_AFTER[role].rstrip()))
            else:
                least = len(column.header)
            widths[i] = max(min(widths[i], least), widths[i] - excess())
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1)
    )
    for column, size in zip(columns, widths, strict=True):
        table.add_column(
            column.header,
            justify=column.justify,  # type: ignore[arg-type]
            width=size,
            no_wrap=column.role != "text",
            overflow="fold" if column.role == "text" else "ellipsis",
        )
    for row in rows:
        table.add_row(
            *(
                _wrap_after(cell, size, WRAP_AFTER[column.role])
                if column.role in WRAP_AFTER
                else cell
                if isinstance(cell, Text)
                else str(cell)
                for cell, column, size in zip(row, columns, widths, strict=True)
            )
        )
    return table


WRAP_AFTER = {"path": "/", "parts": " · "}


def _item(item: Item, column: Column) -> Text | str:
    style = " ".join(s for s in (item.style, "bold" if item.strong else "") if s)
    text = item.lead + item.text + item.tail
    if column.role == "source":
        return Text(text, style=style, no_wrap=True, overflow="ellipsis")
    return f"[{style}]{literal(text)}[/{style}]" if style else literal(text)


def terminal_table(rows: Rows, *, width: int | None = None) -> Table:
    """A view's rows as a rich table fitted to ``width`` (default: the console's)."""
    columns, items = rows.shown(markdown=False)
    return fitted_table(
        columns,
        [[_item(item, c) for item, c in zip(row, columns, strict=True)] for row in items],
        title=rows.title,
        width=width,
    )


def _plain(value: object) -> str:
    return value.plain if isinstance(value, Text) else Text.from_markup(str(value)).plain


def _wrap_after(value: object, width: int, separator: str) -> Text:
    """Text on as many lines as it needs, broken only after ``separator`` (a part longer than a line is
    folded): a path after "/", a list of figures after " · ", so that "1.23 s" is never split."""
    plain = _plain(value)
    lines: list[str] = []
    line = ""
    for part in plain.replace(separator, separator + "\0").split("\0"):
        if line and len(line.rstrip()) + len(part.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += part
        while len(line.rstrip()) > width:
            lines.append(line[:width])
            line = line[width:]
    lines.append(line.rstrip())
    return Text("\n".join(lines))


# Figures and fields as a reader names them, never as the record spells them ("wall", not "wall_s").
FIGURE_NAMES = {
    "wall_s": "wall",
    "compile_s": "compile",
    "run_s": "run",
    "kernel_start_s": "kernel start",
    "peak_rss_bytes": "peak RSS",
    "compiles": "JAX compiles",
    "user_compiles": "user compiles",
    "eager_compiles": "eager compiles",
    "numba_compiles": "Numba compiles",
    "cache_hits": "cache hits",
    "numba_compile_s": "Numba compile",
    "backend_s": "backend compile",
    "dispatch_s": "dispatch",
}
FIELD_NAMES = {
    "derived.cache_state": "cache at start",
    "derived.platform": "JAX backend",
    "derived.x64": "float64",
    "derived.pathway": "pathway",
    "target": "notebook",
    "tool_version": "nbscope version",
    "settings.jax_cache": "--jax-cache",
    "settings.jax_platform": "--jax-platform",
    "settings.pathway": "pathway",
    "settings.repeat": "--repeat",
    "settings.timeline": "--timeline",
    "settings.on_error": "--on-error",
    "settings.timeout": "--timeout",
    "settings.kernel": "--kernel",
    "settings.programs": "--programs",
    "cpu.load_average": "CPU load average",
    "cpu.model": "CPU",
    "cpu.logical_cores": "CPU threads",
    "cpu.physical_cores": "CPU cores",
    "cpu.affinity_cores": "usable cores",
    "cpu.max_mhz": "CPU clock (MHz)",
    "cpu.cgroup_cpu_limit": "container CPU limit",
    "host.os": "operating system",
    "environment": "environment variables",
    "digest": "environment digest",
}
_PREFIXES = {
    "cpu": "CPU",
    "gpu": "GPU",
    "blas": "BLAS",
    "memory": "memory",
    "versions": "",
    "host": "",
    "numba_threading": "Numba threading",
    "jax_runtime": "JAX",
}


def metric_name(key: str) -> str:
    """A figure as a reader says it: ``wall_s`` -> ``wall``, ``peak_rss_bytes`` -> ``peak RSS``."""
    return FIGURE_NAMES.get(key) or key.removesuffix("_s").removesuffix("_bytes").replace("_", " ")


def field_name(path: str) -> str:
    """A settings or fingerprint field as a reader knows it: the option that sets it (``settings.env.X`` ->
    ``--env X``), an environment variable as ``$NAME``, else its words (``memory.total_bytes`` -> ``memory total``)."""
    if path in FIELD_NAMES:
        return FIELD_NAMES[path]
    head, _, rest = path.partition(".")
    if head == "settings" and rest.startswith("env."):
        return f"--env {rest[4:]}"
    if head == "settings":
        return "--" + rest.replace("_", "-")
    if head == "environment":
        return f"${rest}"
    if head == "versions":
        return f"{rest} version"
    if head in _PREFIXES and rest:
        words = rest.removesuffix("_bytes").replace(".", " ").replace("_", " ")
        return f"{_PREFIXES[head]} {words}".strip()
    return path.replace("_", " ")


def format_value(value: object) -> str:
    """A fingerprint or settings value as rich markup (escaped)."""
    if fp.is_absent(value):
        return f"[dim]absent: {literal(value['absent'])}[/dim]"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return literal(json.dumps(value, default=str))
    return literal(value)


def format_bytes(value: object) -> str:
    text = units.size(value)
    return format_value(value) if text is None else text


format_seconds = units.seconds


def print_fingerprint(fingerprint: Mapping[str, object]) -> None:
    rows = []
    for path, value in fp.flatten(fingerprint).items():
        if path.startswith("blas.pools.") or path == "digest":
            continue
        shown = format_bytes(value) if path.endswith("_bytes") else format_value(value)
        rows.append([literal(path), shown])
    columns = [Column("field", "left", "path", min_width=20), Column("value", "left", "text", min_width=16)]
    console.print(fitted_table(columns, rows, title=f"nbscope fingerprint · digest {fingerprint.get('digest')}"))


def print_fingerprint_diff(rows: list[tuple[str, object, object]], name_a: str, name_b: str) -> None:
    if not rows:
        console.print("The fingerprints agree on every compared field.")
        return
    # The two sides are named above the table: a file's path as a header would squeeze the field names.
    console.print(f"A = {literal(name_a)}")
    console.print(f"B = {literal(name_b)}")
    columns = [
        Column("field", "left", "path", min_width=14),
        Column("A", "left", "text", min_width=10),
        Column("B", "left", "text", min_width=10),
    ]
    table_rows = [[literal(path), format_value(a), format_value(b)] for path, a, b in rows]
    title = "1 field differs" if len(rows) == 1 else f"{len(rows)} fields differ"
    console.print(fitted_table(columns, table_rows, title=title))


def headline_text(headline: Mapping[str, object]) -> str:
    """A run's headline figures as a reader says them: ``25 min 8 s · compile 3.10 s · 31 cells · 12 compiles``."""
    parts = []
    for key, value in headline.items():
        if key == "wall_s":
            parts.append(format_seconds(value))
        elif key.endswith("_s"):
            parts.append(f"{key[:-2].replace('_', ' ')} {format_seconds(value)}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            noun = key.replace("_", " ")
            parts.append(f"{value:g} {noun[:-1] if value == 1 and noun.endswith('s') else noun}")
        else:
            parts.append(f"{key.replace('_', ' ')} {value}")
    return " · ".join(parts)


RUN_LIST_COLUMNS = (
    Column("id", "right", "number"),
    Column("started (UTC)", "left", "number"),
    Column("kind", "left", "number"),
    Column("target", "left", "path", min_width=12),
    Column("backend", "left", "number", optional=True),
    Column("status", "left", "number"),
    Column("label", "left", "path", optional=True),
    Column("headline", "left", "parts", min_width=16),
)


def print_run_list(rows: list[dict[str, object]]) -> None:
    """``nbscope runs``: one row per run; figures in plain units, every column whole at 80 columns but the
    names (wrapped at "/") and the headline (wrapped at spaces). The environment digest shows from 100
    columns, the machine from 140."""
    if not rows:
        console.print("No runs stored yet.")
        return
    columns = list(RUN_LIST_COLUMNS)
    extra = {"digest": console.width >= 100, "machine": console.width >= 140}
    if console.width < 100:  # the year goes first: "11-30 07:44" (UTC)
        columns[1] = Column("started", "left", "number")
    if extra["digest"]:
        columns.insert(7, Column("digest", "left", "number"))
    if extra["machine"]:
        columns.insert(7, Column("machine", "left", "source", min_width=16))
    table_rows = []
    for row in rows:
        cells = [
            literal(row["id"]),
            literal(str(row["started_at"])[:16].replace("T", " ")[0 if extra["digest"] else 5 :]),
            literal(row["kind"]),
            literal(row["target"]),
            literal(row["backend"] or ""),  # store.runs gives every summary column and the backend
            literal(row["status"]),
            literal(row["label"] or ""),
            literal(headline_text(object_in(row, "headline"))),
        ]
        if extra["digest"]:
            cells.insert(7, literal(row["digest"]))
        if extra["machine"]:
            cells.insert(7, literal(row["machine"]))
        table_rows.append(cells)
    console.print(fitted_table(columns, table_rows))


def print_parts(markup: str, separator: str = " · ") -> None:
    """A line of parts (``total 1.53 s · compile 193 ms · kernel start 623 ms``) wrapped between parts, never
    inside one, so that a figure keeps its unit ("623" / "ms" was split at 80 columns)."""
    line = Text()
    for part in Text.from_markup(markup).split(separator):
        if line.plain and line.cell_len + len(separator) + part.cell_len > console.width:
            console.print(line)
            line = Text()
        elif line.plain:
            line.append(separator)
        line.append_text(part)
    console.print(line)


def print_record_header(record: RunRecord) -> None:
    run = f"run {record.run_id}" if record.run_id else "run"
    print_parts(
        f"[bold]{literal(run)}[/bold] · {literal(record.kind)} · {literal(record.target)} · {literal(record.status)} · "
        f"{literal(record.started_at[:19].replace('T', ' '))} UTC · {literal(record.machine().summary)} · "
        f"digest {literal(record.digest)}" + (f" · label {literal(record.label)}" if record.label else "")
    )
    settings = settings_text(record.settings or {})
    if settings:
        console.print(f"[dim]settings: {literal(settings)}[/dim]")


# Settings a run has unless told otherwise: left out of its description.
DEFAULT_SETTINGS = {"pathway": "kernel", "on_error": "continue", "jax_cache": "off", "repeat": 1}


def settings_text(settings: Mapping[str, object]) -> str:
    """A run's settings as the options that set them: ``--jax-cache warm · --repeat 3 · --timeline · --env
    XLA_FLAGS``. Unset, off and default ones are left out; an ``--env`` value is never shown."""
    parts = []
    for key, value in settings.items():
        if value in (None, [], {}, "", False) or key == "env_signed":
            continue
        if key in DEFAULT_SETTINGS and value == DEFAULT_SETTINGS[key]:
            continue
        if key == "env" and isinstance(value, Mapping):
            parts += [f"--env {name}" for name in value]
        elif key == "trial" and isinstance(value, Mapping) and {"of", "cell", "remedy", "side"} <= value.keys():
            side = "reference: JAX on the CPU" if value["side"] == "reference" else value["side"]
            of = f"run {value['of']}" if value["of"] is not None else "a run not in this store"
            parts.append(f"trial of {of}: cell {value['cell']}, {value['remedy']} ({side})")
        elif value is True:
            parts.append(field_name(f"settings.{key}"))
        else:
            parts.append(f"{field_name(f'settings.{key}')} {value}")
    return " · ".join(parts)


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
