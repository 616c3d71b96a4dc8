"""Whether a run can be forecast for a GPU, told without importing the forecast itself (a diagnosis of a
run without program data then never pays for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbscope.schema.model import NotebookRun

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord

RECORDED_BY = "nbscope profile NOTEBOOK --forecast t4"


def uses_jax(record: RunRecord) -> bool:
    """Whether any cell of the run did JAX work."""
    return runs_jax(record.notebook_run())


def runs_jax(run: NotebookRun) -> bool:
    """Whether any cell of a run (typed) did JAX work."""
    return any(c.jax is not None for c in run.cells)


def forecast_unavailable(record: RunRecord, platform: str | None) -> str | None:
    """Why a run cannot be forecast for a GPU (None when it can): it ran on an accelerator, or it holds
    no program data."""
    if platform not in (None, "cpu"):
        return f"the run used the {platform} backend: its GPU figures are measured, not forecast"
    run = record.notebook_run()
    if not runs_jax(run):
        return "the run has no JAX work: a GPU changes nothing in it"
    if run.program_data is None:
        return f"the run was recorded without program data; profile the notebook with `{RECORDED_BY}`"
    return None
