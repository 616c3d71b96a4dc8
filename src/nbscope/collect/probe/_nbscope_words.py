"""A text cut to a length between two words, never inside one: the in-kernel probe's shortener (the kernel cannot
import nbscope's, :func:`nbscope._redact.shorten`). nbscope redacts the record whole once it has it, and a credential
cut in two (a token shorter than its form, a URL's password before its '@') would be one it no longer knows.
Standard library only: copied beside the probe into every kernel."""

from __future__ import annotations

import re


def whole_words(text: str, limit: int) -> str:
    """``text``, or as many of its first words as fit in ``limit`` characters with `` …``; a first word longer than
    ``limit`` goes whole."""
    if len(text) <= limit:
        return text
    kept = re.match(rf"[\s\S]{{0,{limit - 2}}}(?=\s)", text)
    return kept.group().rstrip() + " …" if kept and kept.group().strip() else "…"
