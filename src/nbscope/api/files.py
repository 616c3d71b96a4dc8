"""The rules for the files a command reads and writes, as the command line applies them: one home for them,
:mod:`nbscope._files` (and :mod:`nbscope._redact` for what a written file may hold); the CLI reaches them here,
through the API, as everything else below it."""

from __future__ import annotations

from nbscope._files import (
    check_target,
    forget_inputs,
    is_stdout,
    machine_limit,
    note_input,
    refuse_input,
    write_text,
    written_to,
)
from nbscope._redact import redact

__all__ = [
    "check_target",
    "forget_inputs",
    "is_stdout",
    "machine_limit",
    "note_input",
    "redact",
    "refuse_input",
    "write_text",
    "written_to",
]
