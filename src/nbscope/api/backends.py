"""The job behind ``nbscope profile --backends``: one run per JAX backend, compared, diagnosed, and a
recommendation of where each cell should run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from nbscope._errors import NbscopeError
from nbscope._redact import shorten
from nbscope.analyse import compare as compare_module
from nbscope.analyse.diagnose import Findings, diagnose
from nbscope.analyse.recommend import Recommendation, recommend
from nbscope.api import profile as profile_job
from nbscope.collect import fingerprint as fp
from nbscope.collect.platforms import BACKENDS, check_platforms, parse_backends
from nbscope.record.run import RunRecord

if TYPE_CHECKING:
    from nbscope.record.store import Store
    from nbscope.schema.model import Cell

# Errors that say a JAX backend cannot start (jax 0.10 on a machine without CUDA raises a bare
# AssertionError instead, which the "no JAX work ran" test below catches).
UNAVAILABLE_MARKERS = (
    "Unable to initialize backend",
    "not in the list of known backends",
    "No visible GPU",
    "no supported devices",
    "CUDA_ERROR_NO_DEVICE",
    "Unknown backend",
)


def backend_unavailable(record: RunRecord) -> str | None:
    """Why a run shows its JAX backend could not start, or None when JAX work ran."""
    run = record.notebook_run()
    for cell in run.cells:
        message = f"{cell.error.name if cell.error else ''}: {cell.error.message if cell.error else ''}"
        if any(marker in message for marker in UNAVAILABLE_MARKERS):
            return f"cell {cell.index + 1}: {shorten(message.strip(), 200)}"
    jax_cells = [c for c in run.cells if c.jax is not None and c.ran]
    failed = [c for c in jax_cells if c.status in ("error", "kernel-died")]
    if failed and not run.totals.compiles:
        # JAX was imported but not one operation compiled, and cells failed: the backend never came up.
        first = failed[0].error
        parts = (first.name, first.message) if first else ()
        error = " ".join(part.strip() for part in parts if part.strip())
        return (
            f"no JAX operation ran: {len(failed)} of {len(jax_cells)} cells after `import jax` failed "
            f"(first: cell {failed[0].index + 1}" + (f" {error}" if error else "") + ")"
        )
    return None


def _ran_jax(record: RunRecord) -> bool:
    return any(c.jax is not None for c in record.notebook_run().cells)


class BackendRun(TypedDict):
    """A backend's run, or why it could not run (``status``: only when it ran)."""

    backend: str
    run_id: int | None
    available: bool
    reason: str | None
    record: RunRecord | None
    status: NotRequired[str]


@dataclass
class BackendsResult:
    """Each backend's run (or why it could not run), their comparison, the recommendation and findings."""

    # Each backend's ``backend``, ``run_id``, ``available``, ``reason``, ``record`` and (when it ran) ``status``:
    # ``nbscope profile --backends`` reads these entries by key.
    runs: list[BackendRun] = field(default_factory=list)
    comparison: compare_module.Comparison | None = None
    recommendation: Recommendation | None = None
    findings: dict[str, Findings] = field(default_factory=dict)

    @property
    def available(self) -> list[BackendRun]:
        return [r for r in self.runs if r["available"]]

    @property
    def unavailable(self) -> list[BackendRun]:
        return [r for r in self.runs if not r["available"]]

    def record_of(self, backend: str) -> RunRecord | None:
        return next(r["record"] for r in self.runs if r["backend"] == backend)

    def to_dict(self) -> dict[str, object]:
        return {
            "backends": [{k: v for k, v in r.items() if k != "record"} for r in self.runs],
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "recommendation": self.recommendation.to_dict() if self.recommendation is not None else None,
            "diagnosis": {k: v.to_dict() for k, v in self.findings.items()},
        }


def profile_backends(
    path: str | Path,
    options: profile_job.RunSpec,
    backends: str | list[str],
    *,
    store: Store | None = None,
    on_backend: Callable[[str], None] | None = None,
) -> BackendsResult:
    """Profile a notebook once per JAX backend, then compare the runs and recommend a backend.

    A backend this machine has no device for is refused (NbscopeError) before anything runs; one whose JAX
    cannot start (a GPU without JAX's CUDA plugin) is reported, not fatal.
    """
    names = parse_backends(backends, at_least=2) if isinstance(backends, str) else backends
    fingerprint = fp.collect()
    # Before anything runs: a backend this machine lacks, a bad option or store.
    check_platforms(",".join(names), fingerprint)
    profile_job.preflight(path, options, store, fingerprint)
    result = BackendsResult()
    for backend in names:
        if on_backend is not None:
            on_backend(backend)
        try:
            record = profile_job.profile(
                path, dataclasses.replace(options, jax_platform=backend), store=store, fingerprint=fingerprint
            )
        except profile_job.RunNotStored:
            raise
        except NbscopeError as exc:  # the kernel would not start under this backend's settings
            result.runs.append(
                {"backend": backend, "run_id": None, "available": False, "reason": str(exc), "record": None}
            )
            continue
        reason = backend_unavailable(record)
        if reason is None and BACKENDS[backend] != "cpu" and not _ran_jax(record):
            # JAX_PLATFORMS changes only what JAX runs: this run says nothing about the backend.
            reason = f"the notebook ran no JAX code, so JAX_PLATFORMS={backend} changed nothing it measured"
        result.runs.append(
            {
                "backend": backend,
                "run_id": record.run_id,
                "available": reason is None,
                "reason": reason,
                "record": record,
                "status": record.status,
            }
        )
    available = [(r["backend"], r["record"]) for r in result.available if r["record"] is not None]
    if len(available) >= 2:
        (_, first), (_, second) = available[:2]
        result.comparison = compare_module.compare(first, second)
        result.recommendation = recommend(first, second)
        for (backend, record), other in ((available[0], second), (available[1], first)):
            result.findings[backend] = diagnose(record, other=other)
    elif len(available) == 1:
        backend, record = available[0]
        result.findings[backend] = diagnose(record)
    return result


@dataclass(frozen=True)
class BackendsOutcome:
    """What ``nbscope profile --backends`` found: each backend's run and their comparison, the cells that failed
    the runs of the backends that started, and for each backend that ran, the command that shows its findings."""

    result: BackendsResult
    failed: tuple[tuple[RunRecord, Cell], ...]
    diagnose_commands: Mapping[str, str]


def run_backends(
    path: str | Path,
    options: profile_job.RunSpec,
    backends: str,
    store: Store,
    *,
    on_backend: Callable[[str], None] | None = None,
) -> BackendsOutcome:
    """``nbscope profile --backends``: ``backends`` (comma-separated, two at least) checked, the notebook profiled
    once per backend (:func:`profile_backends`). A backend JAX could not start is reported, not counted as the
    notebook failing."""
    result = profile_backends(path, options, parse_backends(backends, at_least=2), store=store, on_backend=on_backend)
    started = [r["record"] for r in result.runs if r["record"] is not None and r["available"]]
    commands = {
        r["backend"]: profile_job.diagnose_command(r["record"], store)
        for r in result.runs
        if r["run_id"] and r["record"] is not None
    }
    return BackendsOutcome(result, profile_job.failures(started), commands)
