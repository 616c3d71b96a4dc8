"""What ``nbscope book2-env`` prints: the folder to put first on PATH (standard output), what was found (standard
error), or all of it as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbscope.api.jupyter_book2 import Book2Env


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
