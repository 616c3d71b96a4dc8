"""The script pathway: the notebook's code cells in a fresh Python process, without Jupyter.

The worker (``nbscope/collect/script_worker.py``) runs the cells in an in-process IPython shell with the same probe
a kernel gets; this side starts it, enforces the per-cell timeout, and turns the probe's lines into
cell records of the same schema as ``nbscope profile``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nbscope._redact import shorten
from nbscope.api.pathways._common import PathwayOptions, PathwayResult, one_line, reap
from nbscope.collect.inject import ProbeHome
from nbscope.collect.notebook import CodeCell, Notebook
from nbscope.collect.runner import STOP_WAIT_S, ProbeReader, merge_cell
from nbscope.schema import process_environment
from nbscope.schema.build import derive, totals
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell
from nbscope.schema.script_events import ScriptEvent

WORKER_FILE = Path(__file__).parents[2] / "collect" / "script_worker.py"
WORKER_MODULE = "_nbscope_script_worker"
POLL_S = 0.05


def kernel_python(kernel_name: str) -> tuple[str, dict[str, str]]:
    """The interpreter (and extra environment) the notebook's kernelspec would use.

    The script must run in the same environment as the kernel, or a difference could come from the
    packages rather than from the pathway. jupyter_client maps a bare ``python`` to its own
    interpreter; so do we.
    """
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except Exception:
        return sys.executable, {}
    argv0 = spec.argv[0] if spec.argv else "python"
    env = {k: str(v) for k, v in (spec.env or {}).items()}
    if argv0 in ("python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        return sys.executable, env
    if os.path.isabs(argv0):
        return (argv0 if os.path.exists(argv0) else sys.executable), env
    return shutil.which(argv0) or sys.executable, env


def _skip_reason(cell: CodeCell) -> str | None:
    if not cell.source.strip():
        return "empty cell"
    if "skip-execution" in cell.tags:
        return "tagged skip-execution"  # nbclient and jupyter-book skip these too
    return None


def _read_events(path: Path) -> list[ScriptEvent]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            events.append(decode(ScriptEvent, json.loads(line)))
        except json.JSONDecodeError:
            continue  # a worker killed mid-write leaves a partial last line
    return events


def run_script(notebook: Notebook, options: PathwayOptions) -> PathwayResult:
    """Run the notebook's code cells once in a fresh interpreter; never raises for a failing cell."""
    home = ProbeHome()
    try:
        return _run(notebook, options, home)
    finally:
        reap(options.token)
        home.cleanup()


def _write_cells(path: Path, notebook: Notebook) -> None:
    """The code cells the worker runs, in order (a cell it must skip says why)."""
    cells = [
        {"index": c.index, "source": c.source, "hash": c.source_hash, "skip": _skip_reason(c)}
        for c in notebook.code_cells
    ]
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")


def _process_times(
    cells: list[dict[str, object]],
    worker: ScriptEvent,
    done: ScriptEvent | None,
    spawned_unix: float,
    exited_unix: float,
) -> dict[str, object]:
    """Spawn to the first cell (interpreter start, IPython import and shell, probe: a kernel's start), the cells,
    and the shutdown, from the worker's events."""
    ran = [decode(Cell, c) for c in cells]
    last_end = max((c.started_unix + c.wall_s for c in ran if c.started_unix and c.wall_s), default=None)
    return {
        "process_start_s": worker.ready_unix - spawned_unix,
        "interpreter_start_s": worker.started_unix - spawned_unix,
        "ipython_setup_s": worker.ready_unix - worker.imported_unix,
        "execute_s": (done.unix if done else (last_end or exited_unix)) - worker.ready_unix,
        "shutdown_s": exited_unix - done.unix if done else None,
        "matplotlib_backend": worker.matplotlib_backend,
    }


def _run(notebook: Notebook, options: PathwayOptions, home: ProbeHome) -> PathwayResult:
    shutil.copyfile(WORKER_FILE, home.lib / f"{WORKER_MODULE}.py")
    cells_file, events_file = home.root / "cells.json", home.root / "events.jsonl"
    probe_file, log_file = home.root / "probe.jsonl", home.root / "output.log"
    _write_cells(cells_file, notebook)
    python, spec_env = kernel_python(options.kernel or notebook.kernel_name)
    env = home.env(out_file=probe_file, base={**os.environ, **spec_env, **options.process_env()})
    env["PYTHONUNBUFFERED"] = "1"  # the output log stays current if the process is killed
    runner: dict[str, object] = {"pathway": "script", "python": python}
    reader = ProbeReader(probe_file)
    timed_out: int | None = None  # index of the cell that ran past --timeout
    spawned_unix = time.time()
    started = time.perf_counter()
    with open(log_file, "wb") as log:
        try:
            process = subprocess.Popen(
                [python, "-m", WORKER_MODULE, str(cells_file), str(events_file)],
                # As nbclient does for a kernel: the notebook's folder is the working directory.
                cwd=notebook.path.parent.resolve(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its children (``!`` lines) die with it on a timeout
            )
        except OSError as exc:
            return PathwayResult("script", "error", runner=runner, error=f"could not start {python}: {exc}")
        interrupted = False
        try:
            timed_out = _wait(process, events_file, reader, options.timeout)
        except KeyboardInterrupt:  # keep the cells that finished, as the other pathways do
            _kill(process)
            interrupted = True
        except BaseException:
            _kill(process)
            raise
    exited_unix = time.time()
    runner["total_s"] = time.perf_counter() - started
    runner["returncode"] = process.returncode
    reader.poll()
    events = _read_events(events_file)
    worker = next((e for e in events if e.type == "worker"), None)
    done = next((e for e in events if e.type == "done"), None)
    output = log_file.read_text(encoding="utf-8", errors="replace")
    if worker is None:
        return PathwayResult(
            "script",
            "error",
            runner=runner,
            interrupted=interrupted,
            error="stopped before the script process ran a cell"
            if interrupted
            else f"the script process exited with code {process.returncode} before running a cell: {one_line(output)}",
        )
    cells = _cells(
        notebook, events, reader, timed_out, options.timeout, process.returncode, exited_unix, interrupted=interrupted
    )
    runner.update(_process_times(cells, worker, done, spawned_unix, exited_unix))
    status = (
        "ok" if done is not None and process.returncode == 0 and timed_out is None and not interrupted else "partial"
    )
    if status != "ok":
        runner["output_tail"] = shorten(output, 2000, keep_end=True) or None
    cache_state = "cold" if process_environment.read(env).jax_compilation_cache_dir else "off"
    result_totals = totals(cells, runner, cache_state)
    result_totals["process_start_s"] = runner["process_start_s"]
    return PathwayResult(
        "script",
        status,
        cells=cells,
        totals=result_totals,
        runner=runner,
        overheads={"process_start_s": runner["process_start_s"], "shutdown_s": runner["shutdown_s"]},
        interrupted=interrupted,
    )


def _wait(
    process: subprocess.Popen[bytes], events_file: Path, reader: ProbeReader, timeout: float | None
) -> int | None:
    """Wait for the worker; kill it when a cell runs past ``timeout``. Returns that cell's index."""
    while True:
        try:
            process.wait(timeout=POLL_S if timeout else None)
            return None
        except subprocess.TimeoutExpired:
            pass
        runs = [e for e in _read_events(events_file) if e.type == "run"]
        reader.poll()
        if runs and len(runs) > len(reader.cells) and time.time() - runs[-1].unix > (timeout or 0):
            _stop(process, reader, len(runs))
            return runs[-1].index


def _stop(process: subprocess.Popen[bytes], reader: ProbeReader, ran: int) -> None:
    """Stop the worker at a cell past its timeout: SIGINT, which ends the cell as a KeyboardInterrupt (the probe
    writes its line: what it compiled and ran until then). Sent again every half second until the cell's line is
    there (one SIGINT was once seen not to stop such a cell), then the worker is killed; at the latest after
    ``STOP_WAIT_S`` (a compile does not see the interrupt until it returns)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while process.poll() is None and time.monotonic() < deadline:
        reader.poll()
        if len(reader.cells) >= ran:
            break  # the cell's line is there: the rest of the worker's life measures nothing
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
    _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _cells(
    notebook: Notebook,
    events: list[ScriptEvent],
    reader: ProbeReader,
    timed_out: int | None,
    timeout: float | None,
    returncode: int | None,
    exited_unix: float,
    *,
    interrupted: bool = False,
) -> list[dict[str, object]]:
    skips = {e.index: e.reason for e in events if e.type == "skip"}
    runs = {e.index: (seq, e) for seq, e in enumerate((e for e in events if e.type == "run"), start=1)}
    cells = []
    for code_cell in notebook.code_cells:
        if code_cell.index in skips:
            record = merge_cell(code_cell, None, status="skipped")
            record["skip_reason"] = skips[code_cell.index]
        elif code_cell.index in runs:
            seq, run = runs[code_cell.index]
            # The probe numbers cells in run order, so the n-th run is its n-th cell.
            probe = reader.cells.get(seq)
            if probe is None or probe.hash != code_cell.source_hash:
                probe = reader.take(code_cell.source_hash)
            if code_cell.index == timed_out:  # with the probe's line when the cell stopped at the interrupt
                record = merge_cell(
                    code_cell, probe, status="timeout", wall_s=None if probe else exited_unix - run.unix
                )
                record["error"] = {"name": "CellTimeoutError", "message": f"cell exceeded --timeout {timeout:g} s"}
            elif probe is not None:
                record = merge_cell(code_cell, probe)
                if record["status"] == "error" and "raises-exception" in code_cell.tags:
                    record["status"] = "expected-error"
            elif interrupted:
                record = merge_cell(code_cell, None, status="not-run")  # stopped by nbscope, as `profile` records it
            else:
                record = merge_cell(code_cell, None, status="kernel-died", wall_s=exited_unix - run.unix)
                record["error"] = {
                    "name": "ProcessDied",
                    "message": f"the script process exited with code {returncode} while running this cell",
                }
        else:
            record = merge_cell(code_cell, None)  # not-run: after a timeout or a dead process
        cells.append(derive(record))
    return cells
