"""Finding and stopping every process a run started, even those in sessions of their own.

A command nbscope runs (a traced ``jupyter-book build``, a pathway) gets an environment variable with a
per-run token; every process it starts inherits it, including kernels that jupyter_client starts in
their own sessions (outside the command's process group) and processes re-parented to init after
their parent died. :func:`reap` stops them all.
"""

from __future__ import annotations

import os
from typing import Any


def reap(variable: str, token: str, *, grace_s: float = 3.0) -> list[dict[str, Any]]:
    """Stop (SIGTERM, then SIGKILL after ``grace_s``) every process whose environment has
    ``variable=token``; returns what was found (pid, name, command line)."""
    import psutil

    own = os.getpid()
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] == own:
            continue
        try:
            if process.environ().get(variable) != token:
                continue
            found.append(process)
        except (psutil.Error, OSError):
            continue  # gone, or another user's process whose environment we may not read
    if not found:
        return []
    described = []
    for process in found:
        try:
            described.append({"pid": process.pid, "name": process.name(), "cmdline": " ".join(process.cmdline())[:200]})
            process.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return described
