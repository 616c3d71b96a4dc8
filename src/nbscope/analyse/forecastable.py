"""Whether a run can be forecast for a GPU, told without importing the forecast itself (a diagnosis of a
run without program data then never pays for it)."""

from __future__ import annotations

from typing import Any

RECORDED_BY = "nbscope profile NOTEBOOK --forecast t4"


def uses_jax(record: Any) -> bool:
    """Whether any cell of the run did JAX work."""
    return any(c.get("jax") for c in record.measurements.get("cells") or [])


def forecast_unavailable(record: Any, platform: str | None) -> str | None:
    """Why a run cannot be forecast for a GPU (None when it can): it ran on an accelerator, or it holds
    no program data."""
    if platform not in (None, "cpu"):
        return f"the run used the {platform} backend: its GPU figures are measured, not forecast"
    if not uses_jax(record):
        return "the run has no JAX work: a GPU changes nothing in it"
    if not (record.measurements or {}).get("programs"):
        return f"the run was recorded without program data; profile the notebook with `{RECORDED_BY}`"
    return None
