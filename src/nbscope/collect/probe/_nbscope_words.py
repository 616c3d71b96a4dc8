"""A text cut to a length between two words, never inside one: how the in-kernel probe shortens a message (a cell's
exception, an error of its own tracing). nbscope redacts the record whole once it has it (the kernel cannot import
nbscope: :func:`nbscope._redact.shorten` is the host's one shortener), and a credential cut in two (a token
shorter than its form, a URL's password before its '@') is one it would no longer know.

Standard library only: copied beside the probe into every kernel (imported there as ``_nbscope_words``).
"""

from __future__ import annotations

import re


def whole_words(text: str, limit: int) -> str:
    """``text``, or as many of its first words as fit in ``limit`` characters with `` …``; a first word longer than
    ``limit`` goes whole."""
    if len(text) <= limit:
        return text
    kept = re.match(rf"[\s\S]{{0,{limit - 2}}}(?=\s)", text)
    return kept.group().rstrip() + " …" if kept and kept.group().strip() else "…"
