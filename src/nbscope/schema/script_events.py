"""The events the script pathway's worker (``collect.script_worker``) writes, one JSON object a line: ``worker``
(its interpreter ready to run cells), ``skip`` and ``run`` (each code cell, in order), ``done``. Read once,
where the file is read; each kind always carries its own fields, so those read as 0 only on another kind."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ScriptEvent"]


@dataclass(frozen=True, slots=True)
class ScriptEvent:
    type: str | None  # worker, skip, run, done
    index: int  # skip, run: the code cell's index
    reason: str | None  # skip: why the cell cannot run outside a kernel
    unix: float  # run, done: when
    started_unix: float  # worker: the interpreter's start
    imported_unix: float  # worker: its imports done
    ready_unix: float  # worker: the shell and probe ready
    matplotlib_backend: str | None  # worker: MPLBACKEND as it ran
