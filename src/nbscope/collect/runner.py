"""Executing a notebook in a real Jupyter kernel (nbclient) with the probe loaded.

The runner adds what only it can see: kernel start and shutdown time, nbclient's busy→idle round trip
per cell, output volume, timeouts and dead kernels. It merges those with the probe's per-cell lines into
the cell records of docs/run-record.md, streaming each to a JSON-lines side file as it finishes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.collect.inject import PROBE_ARGUMENT, ProbeHome
from nbscope.collect.notebook import CodeCell, Notebook

CellCallback = Callable[[dict[str, Any]], None]
StartCallback = Callable[[CodeCell], None]


@dataclass
class ExecutionOptions:
    """How to run a notebook; the profile's ``settings`` are built from these."""

    timeout: float | None = None  # per cell, seconds
    on_error: str = "continue"  # or "stop"
    kernel_name: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # overrides for the kernel's environment
    nvml: bool = False  # read GPU memory through NVML in the kernel
    timeline: bool = False  # a jax.profiler trace per cell, summarised by nbscope.collect.timeline
    keep_traces: Path | None = None  # keep the raw traces here (for Perfetto)
    programs: bool = False  # program data per cell for the GPU forecast (nbscope.collect.program)
    startup_timeout: float = 120.0


@dataclass
class Execution:
    """What one execution of a notebook measured."""

    cells: list[dict[str, Any]]
    runner: dict[str, Any]
    kernel: dict[str, Any] | None
    status: str  # ok | partial
    executed_nb: Any = None
    interrupted: bool = False  # Ctrl-C: the caller saves what was measured, then stops
    programs: dict[str, Any] | None = None  # with ExecutionOptions.programs: the run's program table


class ProbeReader:
    """Reads the probe's JSON lines incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.kernel: dict[str, Any] | None = None
        self.cells: dict[int, dict[str, Any]] = {}
        self.started: dict[int, dict[str, Any]] = {}

    def poll(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        complete, _, _ = chunk.rpartition("\n")
        if not complete:
            return
        self.offset += len(complete.encode("utf-8")) + 1
        for line in complete.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = record.get("type")
            if kind == "kernel":
                self.kernel = record
            elif kind == "cell":
                self.cells[record["seq"]] = record
            elif kind == "start":
                self.started[record["seq"]] = record

    def take(self, source_hash: str) -> dict[str, Any] | None:
        """The latest finished probe record for a cell with this hash, removed from the pool."""
        self.poll()
        for seq in sorted(self.cells, reverse=True):
            if self.cells[seq]["hash"] == source_hash:
                return self.cells.pop(seq)
        return None


def _iso_seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _timing(cell: Any) -> dict[str, float | None]:
    """nbclient's kernel-clock timestamps for a cell, as Unix seconds."""
    timing = cell.get("metadata", {}).get("execution", {})
    return {key: _iso_seconds(timing.get(key)) for key in ("iopub.status.busy", "iopub.status.idle")}


def _roundtrip(cell: Any) -> float | None:
    timing = _timing(cell)
    busy, idle = timing["iopub.status.busy"], timing["iopub.status.idle"]
    return idle - busy if busy is not None and idle is not None else None


def _output_error(cell: Any) -> dict[str, str] | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return {"name": output.get("ename", ""), "message": str(output.get("evalue", ""))[:500]}
    return None


def merge_cell(code_cell: CodeCell, probe: dict[str, Any] | None, **runner_fields: Any) -> dict[str, Any]:
    """One cell record from the notebook's cell, the probe's line and the runner's observations."""
    return merge_described(code_cell.describe(), probe, **runner_fields)


def merge_described(description: dict[str, Any], probe: dict[str, Any] | None, **runner_fields: Any) -> dict[str, Any]:
    """:func:`merge_cell` from a cell's description (``CodeCell.describe()``), e.g. one kept in a live file."""
    record = dict(description)
    record.update(
        execution_count=None,
        status="not-run",
        error=None,
        wall_s=None,
        roundtrip_s=None,
        code_s=None,
        compile_s=None,
        run_s=None,
        overhead_s=None,
        compile_share=None,
        jax=None,
        numba=None,
        alarms=[],
        rss=None,
        gpu_memory=None,
        output_bytes=0,
    )
    if probe is not None:
        for key in ("execution_count", "status", "error", "wall_s", "code_s", "started_unix", "jax", "numba", "alarms", "rss", "gpu_memory"):
            record[key] = probe.get(key)
    record.update({k: v for k, v in runner_fields.items() if v is not None or k not in record})
    if record["wall_s"] is None and record["roundtrip_s"] is not None:
        record["wall_s"] = record["roundtrip_s"]
    return record  # compile_s, run_s, overhead_s: derived by the cell model (nbscope.record.cells)


class LiveFile:
    """The side file to which cell records stream as each finishes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str) + "\n")


def execute(
    notebook: Notebook,
    options: ExecutionOptions,
    *,
    live_path: Path | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
) -> Execution:
    """Run every code cell in a fresh kernel; never raises for a failing cell, timeout or dead kernel."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    home = ProbeHome()
    probe_out = home.root / "probe.jsonl"
    reader = ProbeReader(probe_out)
    live = LiveFile(live_path)
    timeline_dir = None
    if options.timeline:
        timeline_dir = options.keep_traces or home.root / "traces"
        Path(timeline_dir).mkdir(parents=True, exist_ok=True)
    env = home.env(out_file=probe_out, nvml=options.nvml, timeline_dir=timeline_dir)
    env.update(options.env)
    programs = _program_collector(notebook, options, home.root, env)
    nb = notebook.nb
    client = NotebookClient(
        nb,
        kernel_name=options.kernel_name or notebook.kernel_name,
        timeout=options.timeout,
        allow_errors=True,
        record_timing=True,
        shutdown_kernel="immediate",
        startup_timeout=int(options.startup_timeout),
        extra_arguments=[PROBE_ARGUMENT],
        resources={"metadata": {"path": str(notebook.path.parent.resolve())}},
    )
    cells: list[dict[str, Any]] = []
    runner: dict[str, Any] = {"pathway": "kernel", "kernel_start_s": None, "shutdown_s": None, "execute_s": None}
    status = "ok"
    stopped = interrupted = kernel_written = False
    started = time.perf_counter()
    kernel_log = open(home.root / "kernel.log", "wb")
    try:
        # The kernel's own stdout/stderr (XLA's C++ logging, ipykernel warnings) go to a log, not to the
        # user's terminal.
        context = client.setup_kernel(env=env, stdout=kernel_log, stderr=kernel_log)
        try:
            context.__enter__()
        except BaseException as exc:  # a failed or interrupted start must not leave a kernel behind
            _ensure_dead(client, _kernel_family(client))
            if isinstance(exc, Exception):
                raise NbscopeError(f"could not start kernel {client.kernel_name!r}: {_one_line(exc)}") from None
            raise
        runner["kernel_start_s"] = time.perf_counter() - started
        execute_start = time.perf_counter()
        try:
            for code_cell in notebook.code_cells:
                if stopped:
                    record = merge_cell(code_cell, None)
                    cells.append(record)
                    live.write(record)
                    continue
                cell = nb.cells[code_cell.cell_index]
                if on_cell_start is not None:
                    on_cell_start(code_cell)
                cell_started = time.perf_counter()
                outcome, error = "ran", None
                try:
                    client.execute_cell(cell, code_cell.cell_index)
                except CellTimeoutError:
                    outcome = "timeout"
                except DeadKernelError:
                    outcome = "kernel-died"
                elapsed = time.perf_counter() - cell_started
                probe = reader.take(code_cell.source_hash) if outcome == "ran" else None
                runner_fields: dict[str, Any] = {
                    "roundtrip_s": _roundtrip(cell) if outcome == "ran" else None,
                    "busy_unix": _timing(cell)["iopub.status.busy"] if outcome == "ran" else None,
                    "output_bytes": len(json.dumps(cell.get("outputs", []))),
                }
                if outcome == "ran" and probe is None:
                    skipped = not cell.source.strip() or "skip-execution" in code_cell.tags
                    runner_fields["status"] = "skipped" if skipped else "ok"
                    if not skipped:  # probe missing (a kernel without IPython events): runner figures only
                        runner_fields["wall_s"] = runner_fields["roundtrip_s"] or elapsed
                        error = _output_error(cell)
                elif outcome != "ran":
                    runner_fields.update(status=outcome, wall_s=elapsed)
                    error = {"name": "CellTimeoutError" if outcome == "timeout" else "DeadKernelError",
                             "message": f"cell exceeded --timeout {options.timeout:g} s" if outcome == "timeout"
                             else "the kernel died while running this cell"}
                record = merge_cell(code_cell, probe, **runner_fields)
                if programs is not None and probe is not None and probe.get("programs"):
                    record["programs"] = _collect_programs(programs, probe["programs"], record)
                if probe is not None and probe.get("timeline_trace"):
                    record["timeline"] = _summarise_timeline(probe["timeline_trace"], record)
                if error is not None:
                    record["error"] = error
                    if record["status"] == "ok":
                        record["status"] = "error"
                if record["status"] == "error" and "raises-exception" in code_cell.tags:
                    record["status"] = "expected-error"
                cells.append(record)
                if reader.kernel is not None and not kernel_written:
                    live.write(reader.kernel)  # the probe's kernel header: a recovered run names its kernel
                    kernel_written = True
                live.write(record)
                if on_cell_done is not None:
                    on_cell_done(record)
                if outcome == "kernel-died":
                    status, stopped = "partial", True
                elif outcome == "timeout":
                    status = "partial"
                    _interrupt(client, cell)
                    stopped = options.on_error == "stop"
                elif record["status"] == "error" and options.on_error == "stop":
                    status, stopped = "partial", True
        except KeyboardInterrupt:
            # Ctrl-C, SIGTERM or SIGHUP (under the CLI): the running cell and those after it did not run;
            # what finished is returned, and the caller saves it and stops.
            status, interrupted = "partial", True
            for code_cell in notebook.code_cells[len(cells):]:
                record = merge_cell(code_cell, None)
                cells.append(record)
                live.write(record)
        finally:
            runner["execute_s"] = time.perf_counter() - execute_start
            shutdown_started = time.perf_counter()
            try:
                _shut_down(client, context, runner)
            except KeyboardInterrupt:  # the cells are all measured: keep them, and let the caller stop
                interrupted = True
            runner["shutdown_s"] = time.perf_counter() - shutdown_started
    finally:
        try:
            reader.poll()
        except Exception:  # a malformed probe line must not lose the cells already measured
            pass
        kernel_log.close()
        runner["kernel_log_tail"] = _log_tail(home.root / "kernel.log") if status != "ok" else None
        home.cleanup()
    runner["total_s"] = time.perf_counter() - started
    return Execution(
        cells=cells, runner=runner, kernel=reader.kernel, status=status, executed_nb=nb, interrupted=interrupted,
        programs=programs.finish() if programs is not None else None,
    )


def _program_collector(notebook: Notebook, options: ExecutionOptions, root: Path, env: dict[str, str]) -> Any:
    """With ``programs``: where the probe writes program data, and the collector that reads it."""
    if not options.programs:
        return None
    from nbscope.collect.program import ProgramCollector

    env["NBSCOPE_PROBE_PROGRAMS"] = str(root / "programs")
    return ProgramCollector(notebook.code_cells)


def _collect_programs(collector: Any, probe_programs: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A cell's program data, read outside the kernel so it never adds to the cell's time."""
    try:
        return collector.cell(probe_programs, record)
    except Exception as exc:  # broken program data must not lose the cell's other figures
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _summarise_timeline(trace: Any, record: dict[str, Any]) -> dict[str, Any] | None:
    """Read a cell's jax.profiler trace outside the kernel, so summarising never adds to its wall time."""
    from nbscope.collect.timeline import summarise_cell

    try:
        return summarise_cell(trace, record)
    except Exception as exc:  # a broken trace must not lose the cell's other figures
        return {"error": f"{type(exc).__name__}: {exc}"}


def _interrupt(client: Any, cell: Any, wait_s: float = 5.0) -> None:
    """Stop the timed-out cell so the next one can run (the kernel manager is async under nbclient).

    nbclient leaves the timed-out cell's IOPub reader task running; until it has read that cell's
    ``idle`` status it takes (and drops) the next cell's messages, which loses that cell's busy/idle
    timestamps or stalls it for ``iopub_timeout``. Run the event loop until it is done.
    """
    import asyncio

    from nbclient.util import run_sync

    try:
        run_sync(client.km.interrupt_kernel)()
    except Exception:
        return
    timing = cell.get("metadata", {}).get("execution", {})
    deadline = time.monotonic() + wait_s
    while "iopub.status.idle" not in timing and time.monotonic() < deadline:
        run_sync(asyncio.sleep)(0.01)


def _shut_down(client: Any, context: Any, runner: dict[str, Any]) -> None:
    """Stop the kernel and everything it started; a failing shutdown is noted, never raised, so the
    cells measured are still returned."""
    family = _kernel_family(client)
    try:
        context.__exit__(None, None, None)
    except Exception as exc:
        runner["shutdown_error"] = _one_line(exc)
    finally:
        _ensure_dead(client, family)


def _kernel_process(client: Any) -> Any:
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    return getattr(provisioner, "process", None)


def _kernel_family(client: Any) -> tuple[int | None, list[Any]]:
    """The kernel's process group (when it leads one: jupyter_client starts each kernel in a session of
    its own) and its descendants (processes a notebook started), found while the kernel still lives:
    once it is gone they belong to init and can no longer be told apart."""
    import os

    process = _kernel_process(client)
    if process is None or process.poll() is not None:
        return None, []
    try:
        group = process.pid if os.getpgid(process.pid) == process.pid else None
    except OSError:
        group = None
    try:
        import psutil

        return group, list(psutil.Process(process.pid).children(recursive=True))
    except Exception:
        return group, []


def _ensure_dead(client: Any, family: tuple[int | None, list[Any]] = (None, [])) -> None:
    """A kernel that ignored shutdown must not outlive the run, nor any process it started."""
    import os
    import signal

    process = _kernel_process(client)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    group, children = family
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)  # a group keeps its id while any member lives
        except OSError:  # empty: nothing left in it
            pass
    for child in children:
        try:
            child.kill()
        except Exception:  # already gone
            pass


def _log_tail(path: Path, limit: int = 2000) -> str | None:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return None
    return data.decode("utf-8", errors="replace") or None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"
