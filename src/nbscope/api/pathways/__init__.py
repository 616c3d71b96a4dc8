"""``nbscope pathways``: one notebook through a script, a Jupyter kernel and jupyter-book, side by side.

Answers "is Jupyter (or the book) the cause?": each pathway runs the same code cells with the same
probe, cells are paired by source hash, and each pathway's fixed costs (process start, kernel start,
the book's build outside execution) are kept apart from the cells. The result is a run record of
kind ``pathways`` (format in docs/run-record.md and below).

Pathways:
  script  a fresh Python process without Jupyter; an in-process IPython shell runs each cell
  kernel  ``nbscope profile``: nbclient and a fresh IPython kernel
  book    a jupyter-book 1 build of a temporary book holding the notebook (the book's own execution)
  book2   a jupyter-book 2 (mystmd) build of a temporary MyST project holding the notebook; skipped,
          with the reason, where jupyter-book 2 is not installed (``nbscope book2-env --install``)

Measurements (other readers, e.g. the HTML report, rely on these names)::

  totals    cells, cells_paired, cells_compared, cells_differing, pathways, pathways_ran,
            pathways_skipped, wall_s (the whole run), cells_wall_s {pathway: s}, max_spread,
            max_load_average, cpus, interrupted
  pathways  {name: {status, totals (as a profile's, plus process_start_s / book_build_s /
            book_executed_s), runner, overheads {process_start_s | kernel_start_s |
            book_outside_execution_s, book_build_s, book_executed_s, execution_outside_cells_s,
            server_start_s (book2), shutdown_s}, skipped (reason or null), error?, repeats, elapsed_s,
            overhead_samples?}}
  cells     [{source_hash, index, line, first_line, by_pathway {name: {wall_s, compile_s, run_s,
            status, compiles, error?, skip_reason?, samples?, spread?}}, paired, compared, differs,
            delta_s?, tolerance_s?, slowest?, fastest?, ran_differently}]
  verdict   one line
  notebook  the notebook's description (as in a profile)
  figures   (``nbscope bench --pathway`` only) [{key, label, group, dtype, by_pathway {name:
            {median_s, spread, first_s, samples}}, differs, ratio, slowest?}]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope.api.pathways._common import PathwayOptions, PathwayResult
from nbscope.api.runs import store_then_stop
from nbscope.record.cells import target_name
from nbscope.record.run import RunRecord, check_label, default_label
from nbscope.record.secrets import command_for_record, env_for_record
from nbscope.schema.codec import decode, encode
from nbscope.schema.model import Cell, Totals
from nbscope.schema.pathways import PathwayEntry, PathwayRunner, PathwaysRun, PathwaysTotals
from nbscope.schema.progress import PathwayProgress

if TYPE_CHECKING:
    from nbscope.collect.notebook import Notebook
    from nbscope.record.store import Store

__all__ = [
    "DEFAULT_VIA",
    "PATHWAYS",
    "PathwayOptions",
    "PathwayResult",
    "PathwaysOutcome",
    "parse_via",
    "pathways_command",
    "run_bench_pathways",
    "run_pathways",
]

PATHWAYS = ("script", "kernel", "book", "book2")
DEFAULT_VIA = ("script", "kernel", "book")

# Called before each run of a pathway and after it.
ProgressCallback = Callable[[PathwayProgress], None]
# Extra environment for one run of one pathway (name, repeat): lets a caller tell runs apart.
EnvHook = Callable[[str, int], dict[str, str]]


def parse_via(via: str | Iterable[str] | None) -> list[str]:
    """Pathway names from ``script,kernel`` or a list; one-line error for an unknown name."""
    if via is None:
        return list(DEFAULT_VIA)
    values = [via] if isinstance(via, str) else list(via)
    names: list[str] = []
    for value in values:
        for raw in str(value).split(","):
            name = raw.strip().lower()
            if name in ("jupyter-book", "jb", "book1"):
                name = "book"
            if not name:
                continue
            if name not in PATHWAYS:
                raise NbscopeError(f"unknown pathway {raw.strip()!r} for --via; choose from {', '.join(PATHWAYS)}")
            if name not in names:
                names.append(name)
    if not names:
        raise NbscopeError(f"--via names no pathway; choose from {', '.join(PATHWAYS)}")
    return names


def _run_one(
    name: str, notebook: Notebook, options: PathwayOptions, fingerprint: dict[str, object], live_dir: Path
) -> PathwayResult:
    if name == "script":
        from nbscope.api.pathways._script import run_script

        return run_script(notebook, options)
    if name == "kernel":
        from nbscope.api.pathways._kernel import run_kernel

        return run_kernel(notebook.path, options, fingerprint=fingerprint, live_path=live_dir / "kernel.jsonl")
    if name == "book":
        from nbscope.api.pathways._book import run_book

        return run_book(notebook, options, fingerprint=fingerprint)
    from nbscope.api.pathways._book2 import run_book2

    return run_book2(notebook, options, fingerprint=fingerprint)


@dataclass(frozen=True)
class PathwaysOutcome:
    """What ``nbscope pathways`` made: the record (stored), its measurements typed for the views, and the store."""

    record: RunRecord
    run: PathwaysRun
    store: Store

    @property
    def exit_status(self) -> int:
        """1 when no pathway measured the notebook, else 0."""
        return 1 if self.record.status == "error" else 0


def pathways_command(
    path: str | Path,
    via: Sequence[str],
    repeat: int,
    store: Store,
    *,
    timeout: float | None = None,
    kernel: str | None = None,
    env: dict[str, str] | None = None,
    jax_platform: str | None = None,
    label: str | None = None,
    progress: ProgressCallback | None = None,
) -> PathwaysOutcome:
    """``nbscope pathways``: the notebook run through each pathway (``via``: :func:`parse_via`'s) under ``label``,
    stored, and returned typed."""
    record = run_pathways(
        path,
        via,
        repeat,
        store,
        timeout=timeout,
        kernel=kernel,
        env=env,
        jax_platform=jax_platform,
        progress=progress,
        label=check_label(label),
    )
    return PathwaysOutcome(record=record, run=decode(PathwaysRun, record.measurements), store=store)


def run_pathways(
    path: str | Path,
    via: str | Iterable[str] | None = DEFAULT_VIA,
    repeat: int = 1,
    store: Store | None = None,
    *,
    timeout: float | None = None,
    kernel: str | None = None,
    env: dict[str, str] | None = None,
    jax_platform: str | None = None,
    fingerprint: dict[str, object] | None = None,
    progress: ProgressCallback | None = None,
    env_hook: EnvHook | None = None,
    target: str | None = None,
    label: str | None = None,
) -> RunRecord:
    """Run a notebook through each pathway ``repeat`` times and return the ``pathways`` record (the options:
    those of :func:`pathways_until_stopped`).

    Repeats are interleaved, each starting with the next pathway (script, kernel, book, then kernel,
    book, script, ...), so that a drift in the machine's speed and the first run's cold file cache fall
    on every pathway alike. A pathway that fails or cannot run is reported, never raised; bad
    input (no such notebook, an unknown pathway) raises :class:`NbscopeError`. Saved in ``store`` when
    given. Ctrl-C (or SIGTERM / SIGHUP under the CLI) keeps every run so far, the one cut short included,
    saves the record (status ``partial``), then re-raises KeyboardInterrupt.
    """
    # --env values hidden under the store's key, so that they compare within it
    record, _, interrupted = pathways_until_stopped(
        path,
        via,
        repeat,
        timeout=timeout,
        kernel=kernel,
        env=env,
        jax_platform=jax_platform,
        fingerprint=fingerprint,
        progress=progress,
        env_hook=env_hook,
        target=target,
        env_key=store.env_key() if store is not None else None,
        label=label,
    )
    store_then_stop(record, store, interrupted)
    return record


def _run_all(
    names: list[str],
    repeat: int,
    notebook: Notebook,
    options: PathwayOptions,
    fingerprint: dict[str, object],
    env_hook: EnvHook | None,
    progress: ProgressCallback | None,
) -> tuple[dict[str, list[PathwayResult]], bool]:
    """Each pathway ``repeat`` times (until it is skipped or fails); the results by pathway, and whether a stop
    signal ended them (the cells measured so far are kept)."""
    results: dict[str, list[PathwayResult]] = {name: [] for name in names}
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="nbscope-pathways-") as live:
        try:
            for number in range(repeat):
                # Rotate the order on each repeat: the first pathway of a run reads the packages from a
                # cold file cache and would otherwise always pay for that.
                for name in names[number % len(names) :] + names[: number % len(names)]:
                    if results[name] and results[name][-1].status in ("skipped", "error"):
                        continue  # it will not do better the next time
                    run_options = options
                    if env_hook is not None:
                        run_options = replace(options, env={**options.env, **env_hook(name, number)})
                    if progress:
                        progress(PathwayProgress("start", name, number))
                    load_before = _load_average()
                    result = _run_one(name, notebook, run_options, fingerprint, Path(live))
                    result.runner["load_average"] = [load_before, _load_average()]
                    results[name].append(result)
                    if result.interrupted:
                        raise KeyboardInterrupt  # its cells so far are kept; no other pathway starts
                    if progress:
                        progress(
                            PathwayProgress(
                                "done", name, number, status=result.status, reason=result.skipped or result.error
                            )
                        )
        except KeyboardInterrupt:
            interrupted = True
    return results, interrupted


def pathways_until_stopped(
    path: str | Path,
    via: str | Iterable[str] | None = DEFAULT_VIA,
    repeat: int = 1,
    *,
    timeout: float | None = None,
    kernel: str | None = None,
    env: dict[str, str] | None = None,
    jax_platform: str | None = None,
    fingerprint: dict[str, object] | None = None,
    progress: ProgressCallback | None = None,
    env_hook: EnvHook | None = None,
    target: str | None = None,
    env_key: bytes | None = None,
    label: str | None = None,
) -> tuple[RunRecord, PathwaysRun, bool]:
    """:func:`run_pathways` without storing: ``(record, its measurements typed, interrupted)``; ``--env`` values
    hidden under ``env_key`` (the store's; None: this process's); the run labelled ``label`` (None:
    ``$NBSCOPE_LABEL``)."""
    from nbscope.collect import fingerprint as fp
    from nbscope.collect import notebook as notebook_module

    names = parse_via(via)
    if repeat < 1:
        raise NbscopeError("--repeat must be at least 1")
    from nbscope.api.profile import check_timeout

    check_timeout(timeout)
    notebook = notebook_module.read(path)
    fingerprint = fingerprint or fp.collect()
    label = label if label is not None else default_label()
    options = PathwayOptions(
        timeout=timeout, kernel=kernel, env=dict(env or {}), jax_platform=jax_platform, label=label
    )
    record = RunRecord(
        kind="pathways",
        label=label,
        target=target or target_name(notebook.path),
        fingerprint=fingerprint,
        settings={
            "via": names,
            "repeat": repeat,
            "timeout": timeout,
            "kernel": kernel,
            "env": env_for_record(env or {}, key=env_key),  # values that may be secrets are kept as hashes
            "jax_platform": jax_platform,
        },
        command=command_for_record(sys.argv, env_key),
    )
    started = time.perf_counter()
    results, interrupted = _run_all(names, repeat, notebook, options, fingerprint, env_hook, progress)
    run = measurements(notebook, results, time.perf_counter() - started, repeat=repeat, interrupted=interrupted)
    record.measurements = encode(run)
    entries = run.pathways.values()
    if not any(entry.ran for entry in entries):
        record.finish("error")
    elif interrupted or any(entry.status not in ("ok", "skipped") for entry in entries):
        record.finish("partial")
    else:
        record.finish("ok")
    return record, run, interrupted


def _combine(name: str, runs: list[PathwayResult], cell_count: int) -> tuple[PathwayEntry, PathwayResult | None]:
    """One pathway's entry over its repeats, and the result whose cells stand for it."""
    from nbscope.analyse.pathways import combine_overheads
    from nbscope.schema.build import combine_repeats, totals

    if not runs:
        return PathwayEntry(status="not-run", totals={}, runner={}, overheads={}, skipped="interrupted"), None
    last = runs[-1]
    if last.status == "skipped":
        return PathwayEntry(status="skipped", totals={}, runner=last.runner, overheads={}, skipped=last.skipped), None
    complete = [r for r in runs if r.cells and len(r.cells) == cell_count]
    if not complete:
        return PathwayEntry(
            status="error",
            totals={},
            runner=last.runner,
            overheads={},
            skipped=None,
            error=last.error or "no cell records",
        ), None
    combined = PathwayResult(name, last.status, runner=dict(complete[-1].runner))
    combined.cells = combine_repeats([r.cells for r in complete]) if len(complete) > 1 else complete[-1].cells
    result_totals = dict(complete[-1].totals)
    cache_state = decode(Totals, result_totals).cache_state or "off"
    result_totals.update(totals(combined.cells, combined.runner, cache_state))
    overheads, samples = combine_overheads(complete)
    for key, value in overheads.items():
        if key in result_totals or key.startswith("book_"):
            result_totals[key] = value
    statuses = {r.status for r in runs}
    elapsed = [e for e in (decode(PathwayRunner, r.runner).elapsed for r in complete) if e is not None]
    errors = [r.error for r in runs if r.error]
    entry = PathwayEntry(
        status="ok" if statuses == {"ok"} else "error" if statuses == {"error"} else "partial",
        totals=result_totals,
        runner=combined.runner,
        overheads=overheads,
        skipped=None,
        repeats=len(runs),
        elapsed_s=statistics.median(elapsed) if elapsed else None,  # spawn (or build command) to exit, median
        overhead_samples=samples or None,
        repeat_runners=tuple(r.runner for r in runs) if samples else None,
        error=errors[-1] if errors else None,
    )
    return entry, combined


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def measurements(
    notebook: Notebook,
    results: dict[str, list[PathwayResult]],
    wall_s: float,
    *,
    repeat: int = 1,
    interrupted: bool = False,
) -> PathwaysRun:
    """The ``pathways`` record's measurements from each pathway's runs."""
    from nbscope.analyse.pathways import pair_cells, verdict
    from nbscope.collect.runner import merge_cell

    cell_count = len(notebook.code_cells)
    pathways: dict[str, PathwayEntry] = {}
    combined: dict[str, PathwayResult] = {}
    for name, runs in results.items():
        entry, result = _combine(name, runs, cell_count)
        pathways[name] = entry
        if result is not None:
            combined[name] = result
    reference = [merge_cell(c, None) for c in notebook.code_cells]
    rows = pair_cells(reference, combined)
    execution = {n: sum(decode(Cell, c).wall_s or 0.0 for c in combined[n].cells) for n in combined}
    loads = [v for runs in results.values() for r in runs for v in decode(PathwayRunner, r.runner).load_average]
    max_load = max(loads, default=None)
    cpus = _cpus()
    return PathwaysRun(
        notebook=notebook.describe(),
        totals=PathwaysTotals(
            cells=cell_count,
            cells_paired=sum(1 for r in rows if r.paired),
            cells_compared=sum(1 for r in rows if r.compared),
            cells_differing=sum(1 for r in rows if r.compared and r.differs),
            pathways=len(pathways),
            pathways_ran=sum(1 for e in pathways.values() if e.ran),
            pathways_skipped=sum(1 for e in pathways.values() if e.status == "skipped"),
            wall_s=wall_s,
            cells_wall_s=execution,
            max_spread=max(
                (e.spread for r in rows for e in r.by_pathway.values() if e.spread is not None), default=None
            ),
            max_load_average=max_load,
            cpus=cpus,
            interrupted=interrupted,
        ),
        pathways=pathways,
        cells=tuple(rows),
        verdict=verdict(
            rows, pathways, repeat=repeat, busy=(max_load, cpus) if max_load is not None and max_load > cpus else None
        ),
    )


def run_bench_pathways(**kwargs: Any) -> RunRecord:
    """The bench suite's workloads through the pathways (see ``nbscope.api.pathways._bench``)."""
    from nbscope.api.pathways._bench import run_bench_pathways as run

    return run(**kwargs)
