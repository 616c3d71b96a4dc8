"""What ``nbscope book2-env`` prints: the folder to put first on PATH (standard output), what was found (standard
error), or all of it as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol


class FoundCommand(Protocol):
    """A builder's command as :mod:`nbscope.api.jupyter_book2` finds it, or why there is none."""

    command: list[str]
    version: str | None
    origin: str
    problem: str | None

    @property
    def usable(self) -> bool: ...

    @property
    def path_folder(self) -> Path | None: ...


class Book2Env(Protocol):
    """What ``nbscope book2-env`` found (:class:`nbscope.api.jupyter_book2.Book2Env`)."""

    @property
    def book(self) -> FoundCommand: ...

    @property
    def myst(self) -> FoundCommand: ...

    @property
    def environment(self) -> Path: ...

    @property
    def myst_folder(self) -> Path: ...


def book2_env_json(env: Book2Env) -> str:
    found, myst = env.book, env.myst
    return json.dumps(
        {
            "command": found.command,
            "path_folder": str(found.path_folder or "") or None,
            "version": found.version,
            "origin": found.origin,
            "problem": found.problem,
            "environment": str(env.environment),
            "myst": {
                "command": myst.command,
                "version": myst.version,
                "origin": myst.origin,
                "problem": myst.problem,
                "folder": str(env.myst_folder),
            },
        },
        indent=1,
    )


def book2_env_found(env: Book2Env) -> list[str]:
    """The lines on standard error beside the folder: which jupyter-book 2 and which mystmd (or why none)."""
    found, myst = env.book, env.myst
    return [
        f"jupyter-book {found.version} from {found.origin}: {' '.join(found.command)}",
        f"mystmd {myst.version} from {myst.origin}: {' '.join(myst.command)}"
        if myst.usable
        else f"mystmd: {myst.problem}",
    ]
