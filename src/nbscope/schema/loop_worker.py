"""What the loop-sweep worker (``python -m nbscope.collect.loops``) writes for its parent: the sweep's result
document, or ``{"error": why}`` when the sweep could not run (a bad target, no such device). Decoded once where
the parent reads the file (``collect.loops.run_worker``); the result itself is kept as written.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    error: str | None  # None (or empty): the document is the sweep's result
