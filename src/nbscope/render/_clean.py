"""What a terminal is given: text from a notebook or a record never carries a control or escape sequence.

A record imported from elsewhere, a notebook's path, a label, a cell's source or an exception message may hold
escape sequences that a terminal obeys: clear the screen (CSI), write the clipboard (OSC 52), show a link
that goes elsewhere (OSC 8), set the title, or C0/C1 controls that move the cursor over what was printed.
:func:`for_terminal` removes them (newline and tab kept) and redacts credentials of URLs
(:func:`nbscope._redact.redact`). It is applied in one place per path to the terminal:

- rich output, in :class:`nbscope.render.terminal.SafeConsole` (the content of each segment; rich's own styles
  and cursor controls, for the progress display, are kept);
- every other write to standard output and standard error, through :class:`CleanStream`, which the command line
  puts in front of both (plain ``print``, one-line errors, JSON and markdown printed).

Markdown and HTML files escape what they show themselves (``render._markdown``, ``html.escape``).
"""

from __future__ import annotations

import re
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


def for_terminal(text: str) -> str:
    """``text`` without control or escape sequences (newline and tab kept) and without URL credentials."""
    if not text.isprintable():
        text = _CONTROLS.sub("", _SEQUENCES.sub("", text))
    return redact(text)


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
    import sys

    before = sys.stdout, sys.stderr
    if sys.stdout is not None and not isinstance(sys.stdout, CleanStream):
        sys.stdout = CleanStream(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, CleanStream):
        sys.stderr = CleanStream(sys.stderr)
    return before


def restore_streams(before: tuple[TextIO, TextIO]) -> None:
    """The streams before :func:`clean_streams`, where a command left its cleaned ones."""
    import sys

    if isinstance(sys.stdout, CleanStream):
        sys.stdout = before[0]
    if isinstance(sys.stderr, CleanStream):
        sys.stderr = before[1]
