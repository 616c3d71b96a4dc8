"""One escaper per output format, for every text from a notebook or a record (a notebook's name, a label, a
cell's source, an exception message): each first drops control and escape sequences (:func:`visible`), which a
terminal obeys (clear the screen, write the clipboard with OSC 52, show a link that goes elsewhere with OSC 8,
set the title, move the cursor over what was printed) and which make a page or a summary read otherwise than it
is stored (U+202E reverses the text after it, BEL and ESC are no text).

- terminal: :func:`for_terminal`, credentials redacted too (:func:`nbscope._redact.redact`); applied in one place
  per path: rich output in :class:`nbscope.render.terminal.SafeConsole` (the content of each segment; rich's own
  styles and cursor controls, for the progress display, are kept), every other write to standard output and
  standard error through :class:`CleanStream`, which the command line puts in front of both.
- HTML (the report, the audit page, the site's pages, SVG plots): :func:`for_html`.
- markdown (``--markdown``, ``gate --summary``, ``status.md``): :func:`markdown_text` for prose, where nothing is
  read as markup (no link, image, HTML, entity, emphasis or table break), and :func:`markdown_code` inside a code
  span (:func:`code_span`), where notebook text (a cell's source) goes: nothing in a code span is live.
- JSON: ``json.dumps``, whose ``\\uXXXX`` escapes keep every control character as data.

Every written file is redacted once more where it is written (:func:`nbscope._files.write_text`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from nbscope._redact import redact

_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (cursor, erase, colours ...), also cut short
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC (title, 8: link, 52: clipboard), DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # any other escape (ESC c resets the terminal), a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # 8-bit OSC, DCS, SOS, PM, APC
)
# C0 and C1 controls but newline and tab (a carriage return or backspace overwrites what was printed), the
# bidirectional overrides, isolates and marks that make text read otherwise than it is stored, and the line and
# paragraph separators some terminals take as a new line.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: object) -> str:
    """``text`` (any value; None is empty) without control or escape sequences (newline and tab kept)."""
    return _without_sequences("" if text is None else str(text))


def _without_sequences(text: str) -> str:
    if not text.isprintable():  # (bytes, which click may write to a stream, have no isprintable: refused)
        text = _CONTROLS.sub("", _SEQUENCES.sub("", text))
    return text


def for_terminal(text: str) -> str:
    """``text`` without control or escape sequences (newline and tab kept) and without URL credentials."""
    return redact(_without_sequences(text))


_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})


def for_html(value: object) -> str:
    """HTML text (an element's content or an attribute's value) that shows ``value`` as it is, without
    sequences or credentials: what ``html.escape(text, quote=True)`` gives (``html`` itself is not imported: it reads a table
    of every named entity, which a publish does not need)."""
    return redact(visible(value)).translate(_HTML)  # redacted before it is escaped: ``&quot;`` ends no secret


# Prose in markdown: the characters that open HTML, an entity, emphasis, a link or an image, code, or end a
# table's cell, each shown as itself.
_MARKDOWN = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "`": "\\`"}
    | {"|": "\\|", "\n": " "}
)


def markdown_text(text: object) -> str:
    """``text`` as markdown prose (a line or a table's cell) that shows exactly as written: on one line, with no
    HTML, entity, emphasis, link, image, code or table break read."""
    return visible(text).translate(_MARKDOWN)


def markdown_code(text: object) -> str:
    """``text`` for the inside of a code span in a table's cell or a line: on one line, no backtick that would
    end the span (shown as ``'``), no ``|`` that would end the cell (GitHub reads ``\\|`` in a span as ``|``)."""
    return visible(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def markdown_with_code(text: object) -> str:
    """Prose whose backtick spans are code (a finding's sentence naming a cell's code): each span a
    :func:`code_span`, the rest :func:`markdown_text`; a stray backtick is shown as ``\\```."""
    parts = re.split(r"(`[^`\n]*`)", visible(text))
    return "".join(code_span(part[1:-1]) if n % 2 else markdown_text(part) for n, part in enumerate(parts))


def code_span(text: object) -> str:
    """Notebook text (a cell's source line, a notebook's name) as a markdown code span: nothing in it is live."""
    shown = markdown_code(text)
    return f"`{shown}`" if shown.strip() else shown


class CleanStream:
    """A text stream that writes :func:`for_terminal` of what it is given to ``raw``; everything else (fileno,
    isatty, encoding, flush ...) is ``raw``'s. rich writes to ``raw`` itself (``rich_proxied_file``): its
    consoles clean their own content (``SafeConsole``) and keep their styles."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        self.rich_proxied_file = raw

    def write(self, text: str) -> int:
        self.raw.write(for_terminal(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def clean_streams() -> tuple[TextIO, TextIO]:
    """Put a :class:`CleanStream` in front of standard output and standard error (once); the streams before."""
    before = sys.stdout, sys.stderr
    if sys.stdout is not None and not isinstance(sys.stdout, CleanStream):
        sys.stdout = CleanStream(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, CleanStream):
        sys.stderr = CleanStream(sys.stderr)
    return before


def restore_streams(before: tuple[TextIO, TextIO]) -> None:
    """The streams before :func:`clean_streams`, where a command left its cleaned ones."""
    if isinstance(sys.stdout, CleanStream):
        sys.stdout = before[0]
    if isinstance(sys.stderr, CleanStream):
        sys.stderr = before[1]
