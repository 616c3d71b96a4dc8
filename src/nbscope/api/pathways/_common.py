"""What every pathway returns, the options they share, and the clean-up that leaves no process behind."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nbscope._redact import shorten
from nbscope.api.profile import RunSpec

if TYPE_CHECKING:
    from nbscope.schema.model import NotebookRun

# Every process a pathway starts inherits this variable (with a per-run value), so a leftover can be
# found afterwards even when it was re-parented to init, as jupyter_server processes are after a
# failed jupyter-book 2 build.
TOKEN_VARIABLE = "NBSCOPE_PATHWAYS_RUN"


@dataclass(frozen=True)
class PathwayOptions(RunSpec):
    """The run spec every pathway honours (``timeout`` per cell, ``kernel``, ``env`` for the notebook's process,
    ``jax_platform``), with the token that marks every process this run starts."""

    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def process_env(self) -> dict[str, str]:
        """Overrides for every process a pathway starts (never applied to this process)."""
        return {**super().process_env(), TOKEN_VARIABLE: self.token}


@dataclass
class PathwayResult:
    """One run of a notebook through one pathway."""

    name: str
    status: str  # ok | partial | error | skipped
    cells: list[dict[str, object]] = field(default_factory=list)
    totals: dict[str, object] = field(default_factory=dict)
    runner: dict[str, object] = field(default_factory=dict)
    overheads: dict[str, object] = field(default_factory=dict)
    skipped: str | None = None  # why the pathway did not run
    error: str | None = None  # one line, when status is "error"
    interrupted: bool = False  # a stop signal cut this run short: keep it, run nothing more


def kernel_described(run: NotebookRun) -> dict[str, object]:
    """Which kernel ran the cells (its pid, folder, interpreter and start), as the probe described it; each
    None when it never did."""
    kernel = run.kernel
    if kernel is None:
        return dict.fromkeys(("pid", "cwd", "executable", "started_unix"))
    return {"pid": kernel.pid, "cwd": kernel.cwd, "executable": kernel.executable, "started_unix": kernel.started_unix}


def skipped(name: str, reason: str) -> PathwayResult:
    return PathwayResult(name=name, status="skipped", skipped=reason, runner={"pathway": name})


def reap(token: str, *, grace_s: float = 3.0) -> list[dict[str, object]]:
    """Kill every process that still carries this run's token; returns what was found (pid, name)."""
    from nbscope._processes import reap as reap_marked

    return reap_marked(TOKEN_VARIABLE, token, grace_s=grace_s)


def one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return shorten(lines[-1] if lines else "", limit)
