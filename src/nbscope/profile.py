"""``nbscope profile``: a per-cell ledger of a notebook, measured inside a real Jupyter kernel."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope import fingerprint as fp
from nbscope import notebook as notebook_module
from nbscope._errors import NbscopeError
from nbscope.record import RunRecord
from nbscope.runner import CellCallback, Execution, ExecutionOptions, StartCallback, execute, merge_cell

JAX_CACHE_MODES = ("off", "cold", "warm")


@dataclass
class ProfileOptions:
    """Everything that shapes a profile; stored as the record's ``settings``."""

    timeout: float | None = None
    on_error: str = "continue"
    kernel: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    jax_platform: str | None = None
    jax_cache: str = "off"  # off | cold | warm | a folder
    repeat: int = 1
    cache_root: Path | None = None  # where "cold"/"warm" keep their cache; default beside the store
    timeline: bool = False  # per-cell jax.profiler trace summaries (opt-in: it costs time)
    keep_traces: Path | None = None
    programs: bool = False  # per-cell program data for the GPU forecast (implied by ``forecast``)
    forecast: list[str] = field(default_factory=list)  # GPUs to forecast for (nbscope.analyse.forecast)

    @property
    def collects_programs(self) -> bool:
        return self.programs or bool(self.forecast)

    def validate(self) -> None:
        if self.on_error not in ("continue", "stop"):
            raise NbscopeError(f"--on-error must be 'continue' or 'stop', not {self.on_error!r}")
        if self.repeat < 1:
            raise NbscopeError("--repeat must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise NbscopeError("--timeout must be a positive number of seconds")
        if self.jax_cache not in JAX_CACHE_MODES:
            folder = Path(self.jax_cache).expanduser()
            looks_like_path = os.sep in self.jax_cache or self.jax_cache.startswith((".", "~"))
            if not (folder.is_dir() or looks_like_path):
                raise NbscopeError(
                    f"--jax-cache must be off, cold, warm or a folder (an existing one, or a path with "
                    f"'{os.sep}'), not {self.jax_cache!r}"
                )

    def settings(self) -> dict[str, Any]:
        return {
            "pathway": "kernel",
            "kernel": self.kernel,
            "timeout": self.timeout,
            "on_error": self.on_error,
            "jax_platform": self.jax_platform,
            "jax_cache": self.jax_cache,
            "env": self.env,
            "repeat": self.repeat,
            "timeline": self.timeline,
            "programs": self.collects_programs,
            "forecast": list(self.forecast),
        }


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict, with a one-line error for a malformed pair."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise NbscopeError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key.strip()] = value
    return env


def jax_cache_env(mode: str, cache_root: Path) -> tuple[dict[str, str], str]:
    """Environment for a JAX persistent-cache mode, and the cache state it starts in."""
    if mode == "off":
        return {}, "off"
    if mode == "cold":
        folder = cache_root
        shutil.rmtree(folder, ignore_errors=True)
    elif mode == "warm":
        folder = cache_root
    else:
        folder = Path(mode)
        if folder.exists() and not folder.is_dir():
            raise NbscopeError(f"--jax-cache {mode}: not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    state = "warm" if any(folder.iterdir()) else "cold"
    env = {
        "JAX_COMPILATION_CACHE_DIR": str(folder.resolve()),
        # JAX caches only compiles over 1 s by default: a notebook's many small compiles would be missed.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    return env, state


def _gpus_present(fingerprint: dict[str, Any]) -> bool:
    devices = fingerprint.get("gpu", {}).get("devices")
    return isinstance(devices, list) and bool(devices)


def totals(cells: list[dict[str, Any]], runner: dict[str, Any], cache_state: str) -> dict[str, Any]:
    """Per-notebook figures from cell records."""

    def total(key: str, sub: str | None = None) -> float:
        values = [((c.get(sub) or {}).get(key) if sub else c.get(key)) for c in cells]
        return sum(v for v in values if isinstance(v, (int, float)))

    peaks = [(c.get("rss") or {}).get("peak_bytes") for c in cells]
    hits = int(total("cache_hits", "jax"))
    if cache_state == "cold" and hits:
        cache_state = "warm"  # a cold cache that still hit: the notebook compiled the same thing twice
    return {
        "cells": len(cells),
        "cells_run": sum(1 for c in cells if c.get("status") not in ("not-run", "skipped")),
        "cells_ok": sum(1 for c in cells if c.get("status") in ("ok", "expected-error")),
        "cells_failed": sum(1 for c in cells if c.get("status") in ("error", "timeout", "kernel-died")),
        "wall_s": total("wall_s"),
        "compile_s": total("compile_s"),
        "run_s": total("run_s"),
        "compiles": int(total("compiles", "jax")),
        "user_compiles": int(total("user_compiles", "jax")),
        "eager_compiles": int(total("eager_compiles", "jax")),
        "library_compiles": int(total("library_compiles", "jax")),
        "numba_compiles": int(total("compiles", "numba")),
        "numba_compile_s": total("compile_s", "numba"),
        "cache_state": cache_state,
        "cache_hits": hits,
        "cache_misses": int(total("cache_misses", "jax")),
        "cache_retrieval_s": total("cache_retrieval_s", "jax"),
        "kernel_start_s": runner.get("kernel_start_s"),
        "execute_s": runner.get("execute_s"),
        "peak_rss_bytes": max((p for p in peaks if isinstance(p, int)), default=None),
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def combine_repeats(executions: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One record per cell with medians over repeats; ``samples`` keeps each repeat's figures."""
    combined = []
    for cells in zip(*executions, strict=True):
        base = dict(cells[-1])  # the last repeat's details (compiles, status) stand for the cell
        walls = [c["wall_s"] for c in cells if isinstance(c.get("wall_s"), (int, float))]
        compiles = [c["compile_s"] for c in cells if isinstance(c.get("compile_s"), (int, float))]
        base["samples"] = {"wall_s": walls, "compile_s": compiles, "status": [c.get("status") for c in cells]}
        if walls:
            median = statistics.median(walls)
            base["wall_s"] = median
            base["spread"] = statistics.median(abs(w - median) for w in walls) / median if median > 0 else 0.0
            base["compile_s"] = _median(compiles)
            base["run_s"] = max(0.0, median - (base["compile_s"] or 0.0))
            base["compile_share"] = min(1.0, (base["compile_s"] or 0.0) / median) if median > 0 else 0.0
        if any(c.get("status") not in ("ok", "expected-error", "skipped") for c in cells):
            worst = next(c for c in cells if c.get("status") not in ("ok", "expected-error", "skipped"))
            base["status"], base["error"] = worst.get("status"), worst.get("error")
        combined.append(base)
    return combined


def default_live_path(store_path: Path | None) -> Path:
    root = store_path.parent if store_path is not None else Path(".nbscope")
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return root / "live" / f"{stamp}-{os.getpid()}.jsonl"


def profile(
    path: str | Path,
    options: ProfileOptions | None = None,
    *,
    store: Any = None,
    live_path: Path | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> RunRecord:
    """Profile a notebook per cell; saves the run in ``store`` (a :class:`nbscope.Store`) when given.

    A failing cell, a timeout or a dead kernel never raises: the record says so (status ``partial``)
    and keeps everything measured before it. Ctrl-C saves the run, then re-raises KeyboardInterrupt.
    """
    options = options or ProfileOptions()
    options.validate()
    notebook = notebook_module.read(path)
    fingerprint = fingerprint or fp.collect()
    env = dict(options.env)
    if options.jax_platform:
        env["JAX_PLATFORMS"] = options.jax_platform
    store_path = getattr(store, "path", None)
    cache_root = options.cache_root or (
        (store_path.parent if store_path is not None else Path(".nbscope")) / "jax-cache"
    )
    record = RunRecord(
        kind="profile",
        target=target_name(notebook.path),
        fingerprint=fingerprint,
        settings=options.settings(),
    )
    if live_path is None:
        live_path = default_live_path(store_path)
    executions: list[Execution] = []
    cache_state = "off"
    try:
        for _ in range(options.repeat):
            # "cold" empties the cache before every repeat, so medians over repeats stay cold ones.
            cache_env, cache_state = jax_cache_env(options.jax_cache, cache_root)
            execution = execute(
                notebook_module.read(path) if executions else notebook,  # a fresh copy per repeat
                ExecutionOptions(
                    timeout=options.timeout,
                    on_error=options.on_error,
                    kernel_name=options.kernel,
                    env={**cache_env, **env},
                    nvml=_gpus_present(fingerprint),
                    timeline=options.timeline,
                    keep_traces=options.keep_traces,
                    programs=options.collects_programs,
                ),
                live_path=live_path,
                on_cell_start=on_cell_start,
                on_cell_done=on_cell_done,
            )
            executions.append(execution)
            if execution.interrupted or execution.status != "ok":
                break
    finally:
        _fill(record, notebook, executions, cache_state, live_path)
        if store is not None:
            _cache_saving(record, store)
            store.save(record)
    if executions and executions[-1].interrupted:
        raise KeyboardInterrupt
    return record


def _fill(
    record: RunRecord, notebook: notebook_module.Notebook, executions: list[Execution], cache_state: str, live: Path
) -> None:
    if not executions:
        cells = [merge_cell(c, None) for c in notebook.code_cells]
        runner: dict[str, Any] = {"pathway": "kernel"}
        status, kernel = "partial", None
    else:
        complete = [e for e in executions if len(e.cells) == len(notebook.code_cells)]
        cells = combine_repeats([e.cells for e in complete]) if len(complete) > 1 else executions[-1].cells
        runner = dict(executions[-1].runner)
        status = "ok" if all(e.status == "ok" for e in executions) else "partial"
        kernel = executions[-1].kernel
    record.measurements = {
        "notebook": notebook.describe(),
        "runner": runner,
        "kernel": kernel,
        "totals": totals(cells, runner, cache_state),
        "cells": cells,
        "repeats": len(executions),
        "repeat_runners": [e.runner for e in executions] if len(executions) > 1 else None,
        "live_file": str(live),
    }
    if executions and executions[-1].programs is not None:
        record.measurements["programs"] = executions[-1].programs
    record.finish(status)


def _cache_saving(record: RunRecord, store: Any) -> None:
    """For a warm-cache run: compile time saved against the latest cold run of the same notebook and
    environment (measured cold vs warm: JAX's own compile_time_saved is wrong under 1 s)."""
    totals_ = record.measurements["totals"]
    if totals_.get("cache_state") != "warm":
        return
    for row in store.list(kind="profile", target=record.target, digest=record.digest, limit=50):
        earlier = store.get(row["id"])
        if earlier.measurements.get("totals", {}).get("cache_state") == "cold":
            cold = earlier.measurements["totals"]
            totals_["cache_baseline_run"] = row["id"]
            totals_["cache_saving_s"] = (cold.get("compile_s") or 0.0) - (totals_.get("compile_s") or 0.0)
            totals_["cold_compiles"] = cold.get("compiles")
            return


def target_name(path: Path, root: Path | None = None) -> str:
    """A notebook's name in the store: its path relative to ``root`` (default: the working directory)
    when inside it, else absolute; the same notebook gets the same name from every command."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return str(resolved)


