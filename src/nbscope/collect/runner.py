"""Executing a notebook in a real Jupyter kernel (nbclient) with the probe loaded.

The runner adds what only it can see: kernel start and shutdown time, nbclient's busy→idle round trip
per cell, output volume, timeouts and dead kernels. It merges those with the probe's per-cell lines into
the cell records of docs/run-record.md, streaming each to a JSON-lines side file as it finishes.

Why its own cell loop rather than ``NotebookClient.execute()`` with nbclient's cell hooks
(``on_cell_start`` / ``on_cell_executed`` / ``on_cell_error``): nbclient's loop ends the whole run at the
first ``CellTimeoutError`` or ``DeadKernelError`` (they propagate out of ``execute``), so a timed-out
cell's elapsed time, the interrupt-then-continue of ``--on-error continue``, and the cells after it would
not be measured; nor could a Ctrl-C be told apart cell by cell (the interrupted cell's elapsed time and the
signal). The loop below uses nbclient for everything else: kernel set-up, ``execute_cell`` with its
timing metadata, outputs and errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nbscope import _signals
from nbscope._errors import NbscopeError, describe
from nbscope._processes import Descendants
from nbscope._redact import shorten
from nbscope.collect import oom
from nbscope.collect import transport as transports
from nbscope.collect._cells import (
    FINISHED_ANYWAY,
    interrupted_described,
    iso_seconds,
    merge_cell,
    merge_described,
    output_error,
    roundtrip,
)
from nbscope.collect._kernel import (
    KERNEL_TOKEN_VARIABLE,
    end_started,
    ensure_dead,
    interrupt_cell,
    kernel_family,
    kernel_process,
    shut_down,
)
from nbscope.collect._sidefiles import Discard, LineSink, ProbeReader
from nbscope.collect.inject import PROBE_ARGUMENT, ProbeHome
from nbscope.collect.notebook import CodeCell, Notebook, import_nbformat
from nbscope.schema.codec import decode
from nbscope.schema.notebook_cell import NotebookCell
from nbscope.schema.probe import ProbeCell, ProbePrograms, ProbeTimeline

if TYPE_CHECKING:
    import subprocess
    from contextlib import AbstractContextManager

    from nbclient import NotebookClient
    from nbformat import NotebookNode

    from nbscope.collect.program import ProgramCollector

__all__ = [
    "CellCallback",
    "NotebookExecution",
    "ExecutionOptions",
    "LineSink",
    "ProbeReader",
    "StartCallback",
    "execute",
    "merge_cell",
    "merge_described",
]

CellCallback = Callable[[dict[str, Any]], None]
StartCallback = Callable[[CodeCell], None]
# How long a timed-out cell may take to stop once interrupted before its kernel is stopped instead.
INTERRUPT_WAIT_S = 10.0
# After a stop signal: how long the running cell may take to stop at an interrupt, for the probe's line of it.
STOP_WAIT_S = 2.0


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
    # A trial's code run silently just before and after one code cell (its index): nbscope.collect.remedies.
    around: tuple[int, str, str] | None = None
    # A trial run through one code cell (its index): the cells after it do not run (``nbscope try --through-cell``).
    last_cell: int | None = None


@dataclass
class NotebookExecution:
    """What one execution of a notebook measured."""

    cells: list[dict[str, Any]]
    runner: dict[str, Any]
    kernel: dict[str, Any] | None
    status: str  # ok | partial
    executed_nb: NotebookNode | None = None
    interrupted: bool = False  # Ctrl-C: the caller saves what was measured, then stops
    programs: dict[str, Any] | None = None  # with ExecutionOptions.programs: the run's program table


def execute(
    notebook: Notebook,
    options: ExecutionOptions,
    *,
    live_sink: LineSink | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
) -> NotebookExecution:
    """Run every code cell in a fresh kernel; never raises for a failing cell, timeout or dead kernel."""
    home = ProbeHome()
    try:  # a full disk or a file size limit before the kernel starts: no probe home is left behind
        transport = home.use_transport(transports.choose({**os.environ, **options.env}))
        probe_out = home.root / "probe.jsonl"
        home.announce("profile", [notebook.path], [probe_out])  # for `nbscope runs --live`
        token = uuid.uuid4().hex
        env = _kernel_env(home, probe_out, options, token)
        programs = _program_collector(notebook, options, home.root, env)

        loop = _CellLoop(
            notebook,
            options,
            ProbeReader(probe_out),
            programs,
            live_sink if live_sink is not None else Discard(),
            on_cell_start,
            on_cell_done,
        )
        loop.runner["transport"] = transport
        started = time.perf_counter()
        kernel_log = open(home.root / "kernel.log", "wb")
    except BaseException as exc:
        raise home.abandon(exc) from None
    descendants = None
    try:
        # The kernel's own stdout/stderr (XLA's C++ logging, ipykernel warnings) go to a log, not to the user's terminal.
        client, context, restarts = _start_kernel(
            lambda: _client(notebook, options, transports.client_config(transport, home.ipc_dir or home.root)),
            env,
            kernel_log,
        )
        process = kernel_process(client)
        descendants = _track(process)
        loop.oom_counts = oom.read_counts(process.pid) if process is not None else None
        loop.runner["processes_tracked_by"] = descendants.tracked_by if descendants is not None else None
        if restarts:
            loop.runner["kernel_restarts"] = restarts
        loop.runner["kernel_start_s"] = time.perf_counter() - started
        execute_start = time.perf_counter()
        try:
            loop.run(client)
        finally:
            loop.runner["execute_s"] = time.perf_counter() - execute_start
            shutdown_started = time.perf_counter()
            try:
                shut_down(client, context, loop.runner)
            except KeyboardInterrupt:  # the cells are all measured: keep them, and let the caller stop
                loop.interrupted = True
            loop.runner["shutdown_s"] = time.perf_counter() - shutdown_started
    finally:
        with contextlib.suppress(Exception):  # a malformed probe line must not lose the cells already measured
            loop.reader.poll()
        kernel_log.close()
        if descendants is not None:
            descendants.end()
        end_started(token, os.path.realpath(home.root / "kernel.log"))
        _keep_log_tail(loop, home.root / "kernel.log")
        home.cleanup()
    loop.runner["total_s"] = time.perf_counter() - started
    return NotebookExecution(
        cells=loop.cells,
        runner=loop.runner,
        kernel=loop.reader.kernel,
        status=loop.status,
        executed_nb=notebook.nb,
        interrupted=loop.interrupted,
        programs=programs.finish() if programs is not None else None,
    )


def _client(notebook: Notebook, options: ExecutionOptions, config: Any) -> NotebookClient:
    """The nbclient that runs the notebook in a kernel started with the probe (a new one per start)."""
    import_nbformat()  # before nbclient, which imports nbformat: without jsonschema's grammar-building import
    from nbclient import NotebookClient

    return NotebookClient(
        notebook.nb,
        kernel_name=options.kernel_name or notebook.kernel_name,
        timeout=options.timeout,
        allow_errors=True,
        record_timing=True,
        shutdown_kernel="immediate",
        startup_timeout=int(options.startup_timeout),
        extra_arguments=[PROBE_ARGUMENT],
        resources={"metadata": {"path": str(notebook.path.parent.resolve())}},
        config=config,  # the kernel manager's transport (collect.transport)
    )


def _kernel_env(home: ProbeHome, probe_out: Path, options: ExecutionOptions, token: str) -> dict[str, str]:
    """The kernel's environment: the probe's, a trace folder with ``--timeline``, the user's ``--env`` and the run's
    token, which every process the kernel starts (daemons included) inherits."""
    timeline_dir = None
    if options.timeline:
        timeline_dir = options.keep_traces or home.root / "traces"
        Path(timeline_dir).mkdir(parents=True, exist_ok=True)
    env = home.env(out_file=probe_out, nvml=options.nvml, timeline_dir=timeline_dir)
    env.update(options.env)
    env[KERNEL_TOKEN_VARIABLE] = token
    return env


def _track(process: subprocess.Popen[bytes] | None) -> Descendants | None:
    """What will end every process the started kernel starts: its own cgroup where one can be made (the kernel
    has run none of the notebook yet), else its process tree sampled while it runs (:class:`Descendants`)."""
    if process is None or process.poll() is not None:
        return None
    descendants = Descendants(process.pid)
    descendants.start()
    return descendants


# jupyter_client's words for a start that may succeed the second time (nothing of the notebook ran yet).
_START_AGAIN = ("died before replying", "didn't respond")


def _start_kernel(
    new_client: Callable[[], NotebookClient], env: dict[str, str], log: IO[bytes]
) -> tuple[NotebookClient, AbstractContextManager[None], int]:
    """A client of ``new_client()``'s with its kernel started: ``(client, entered context, restarts)``. A
    failed or interrupted start leaves no kernel behind. A kernel that died before replying to its first
    request (seen twice in about 2,000 starts on a busy 2-core machine), or never replied within the start-up
    time (seen once in a Dask audit starting kernels in two processes at once: jupyter_client picks free ports
    by binding and releasing them, so parallel starts can race for one), before running anything, gets one
    more start; a kernel that cannot start fails both."""
    restarts = 0
    while True:
        client = new_client()
        context = client.setup_kernel(env=env, stdout=log, stderr=log)
        try:
            context.__enter__()
            return client, context, restarts
        except BaseException as exc:
            ensure_dead(client, kernel_family(client))
            if not isinstance(exc, Exception):
                raise
            if restarts == 0 and any(why in str(exc) for why in _START_AGAIN):
                restarts = 1
                continue
            raise NbscopeError(f"could not start kernel {client.kernel_name!r}: {describe(exc)}") from None


class _CellLoop:
    """The cells of one execution, one at a time, in a started kernel: each cell's record, streamed to the
    live file as it finishes, and what a failure means for the cells after it."""

    def __init__(
        self,
        notebook: Notebook,
        options: ExecutionOptions,
        reader: ProbeReader,
        programs: ProgramCollector | None,
        live: LineSink,
        on_cell_start: StartCallback | None,
        on_cell_done: CellCallback | None,
    ) -> None:
        self.notebook, self.options, self.reader, self.programs = notebook, options, reader, programs
        self.live, self.on_cell_start, self.on_cell_done = live, on_cell_start, on_cell_done
        self.cells: list[dict[str, object]] = []
        self.runner: dict[str, object] = {
            "pathway": "kernel",
            "kernel_start_s": None,
            "shutdown_s": None,
            "execute_s": None,
        }
        self.status = "ok"
        self.stopped = self.interrupted = self.kernel_written = False
        self.running: CodeCell | None = None  # the cell being executed, and since when (for an interrupt)
        self.cell_started = 0.0
        self.oom_counts: oom.OomCounts | None = None  # Linux's OOM kill counts over the kernel, at its start

    def run(self, client: NotebookClient) -> None:
        """Each cell in ``client``'s started kernel."""
        try:
            for code_cell in self.notebook.code_cells:
                if self.stopped:
                    self._keep(merge_cell(code_cell, None))
                else:
                    self._run_one(code_cell, client)
                    if self.options.last_cell is not None and code_cell.index >= self.options.last_cell:
                        self.stopped = True
        except KeyboardInterrupt as exc:
            # Ctrl-C, SIGTERM or SIGHUP (under the CLI): the running cell is recorded as interrupted, with
            # how long it had run and the signal; those after it did not run. What finished is returned,
            # and the caller saves it and stops.
            self.status, self.interrupted = "partial", True
            for code_cell in self.notebook.code_cells[len(self.cells) :]:
                if code_cell is self.running:
                    self._keep(self._stopped_by_signal(code_cell, client, stop_signal(exc)))
                else:
                    self._keep(merge_cell(code_cell, None))

    def _stopped_by_signal(self, code_cell: CodeCell, client: NotebookClient, signal_name: str) -> dict[str, object]:
        """The running cell when a stop signal came: how long it had run, and what the probe measured of it (its
        compiles, program data) where the kernel stops at an interrupt within ``STOP_WAIT_S``; a cell inside a
        long compile does not, and keeps its time only."""
        elapsed = time.perf_counter() - self.cell_started
        record = interrupted_described(code_cell.describe(), elapsed, signal_name)
        cell = self.notebook.nb.cells[code_cell.cell_index]
        try:
            probe = self.reader.take(code_cell.source_hash) if interrupt_cell(client, cell, STOP_WAIT_S) else None
            if probe is not None:
                measured = _cell_record(code_cell, cell, "ran", elapsed, probe, self.options, self.programs)
                measured.update(status="interrupted", error=record["error"], interrupted_by=signal_name)
                record = measured
        except Exception:  # the kernel or its channels already gone: the cell's time is what is known
            pass
        return record

    def _keep(self, record: dict[str, object]) -> None:
        self.cells.append(record)
        self.live.write(record)

    def _run_one(self, code_cell: CodeCell, client: NotebookClient) -> None:
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        cell = self.notebook.nb.cells[code_cell.cell_index]
        self.running, self.cell_started = code_cell, time.perf_counter()
        if self.on_cell_start is not None:
            self.on_cell_start(code_cell)
        around = self.options.around if self.options.around and self.options.around[0] == code_cell.index else None
        outcome = "ran"
        try:
            if around is not None:
                self._silent(client, around[1], "before")
            self.cell_started = time.perf_counter()
            client.execute_cell(cell, code_cell.cell_index)
        except CellTimeoutError:
            outcome = "timeout"
        except DeadKernelError:
            outcome = "kernel-died"
        elapsed = time.perf_counter() - self.cell_started
        if around is not None and outcome == "ran":
            self._silent(client, around[2], "after")
        # A timed-out cell that stops at the interrupt ends as any cell does: the probe's line has what it compiled
        # and ran until then.
        stopped = outcome == "timeout" and interrupt_cell(client, cell, wait_s=INTERRUPT_WAIT_S)
        self.running = None
        probe = self.reader.take(code_cell.source_hash) if outcome == "ran" or stopped else None
        record = _cell_record(code_cell, cell, outcome, elapsed, probe, self.options, self.programs)
        if outcome == "kernel-died":
            self._note_oom_kill(record)
        self.cells.append(record)
        if self.reader.kernel is not None and not self.kernel_written:
            # The probe's kernel header, and how long the kernel took to start: a recovered run names its kernel
            # and keeps its start.
            self.live.write({**self.reader.kernel, "kernel_start_s": self.runner["kernel_start_s"]})
            self.kernel_written = True
        self.live.write(record)
        if self.on_cell_done is not None:
            self.on_cell_done(record)
        self._after(code_cell, outcome, record, stopped)

    def _silent(self, client: NotebookClient, code: str, when: str) -> None:
        """Run ``code`` in the kernel as a silent request (no cell callbacks: the probe does not see it); an error
        it raised is kept in ``runner["trial_errors"]``."""
        from typing import cast

        from jupyter_client.asynchronous.client import AsyncKernelClient
        from nbclient.util import run_sync

        reply = run_sync(cast(AsyncKernelClient, client.kc).execute_interactive)(
            code, silent=True, store_history=False, timeout=self.options.timeout, output_hook=lambda message: None
        )
        if reply["content"]["status"] != "ok":
            error = f"{reply['content']['ename']}: {reply['content']['evalue']}"
            errors = self.runner.setdefault("trial_errors", {})
            if isinstance(errors, dict):
                errors[when] = shorten(error, 300)

    def _note_oom_kill(self, record: dict[str, object]) -> None:
        """Whether Linux counted an OOM kill where the kernel ran while it died: then it was killed for memory."""
        killed = oom.kill_between(self.oom_counts, oom.reread(self.oom_counts)) if self.oom_counts else None
        if killed is not None:
            self.runner["oom_kill"] = {"where": killed.where, "kills": killed.kills, "limit_bytes": killed.limit_bytes}
            _extend_error(record, f": {killed.text}")

    def _after(self, code_cell: CodeCell, outcome: str, record: dict[str, object], stopped: bool) -> None:
        """What a cell's outcome means for the run: partial, and whether the cells after it run (``stopped``: a
        timed-out cell stopped at the interrupt)."""
        if outcome == "kernel-died":
            self.status, self.stopped = "partial", True
        elif outcome == "timeout":
            self.status = "partial"
            if not stopped:
                # The cell ignores the interrupt: the kernel is still busy with it, so the next cell would
                # queue behind it and be blamed for the wait. The kernel is stopped instead.
                _extend_error(
                    record,
                    f"; it ignored the interrupt for {INTERRUPT_WAIT_S:g} s, so the kernel was stopped "
                    "and the cells after it did not run",
                )
                self.runner["interrupt_ignored"] = code_cell.index
                self.stopped = True
            else:
                self.stopped = self.options.on_error == "stop"
        elif record["status"] == "error" and self.options.on_error == "stop":
            self.status, self.stopped = "partial", True


def _extend_error(record: dict[str, object], text: str) -> None:
    """``text`` added to the message of the cell's error (a cell that timed out or died has one)."""
    error = record["error"]
    if isinstance(error, dict):
        error["message"] += text


def _cell_record(
    code_cell: CodeCell,
    cell: NotebookNode,
    outcome: str,
    elapsed: float,
    probe: ProbeCell | None,
    options: ExecutionOptions,
    programs: ProgramCollector | None,
) -> dict[str, object]:
    """One cell's record from how its request ended (``ran``, ``timeout``, ``kernel-died``), the runner's
    clock, what nbclient wrote into the cell and the probe's line."""
    error = None
    executed = decode(NotebookCell, cell)
    runner_fields: dict[str, object] = {
        "roundtrip_s": roundtrip(executed.metadata.execution) if outcome == "ran" else None,
        "busy_unix": iso_seconds(executed.metadata.execution.busy) if outcome == "ran" else None,
        "output_bytes": len(json.dumps(cell.get("outputs", []))),
    }
    if outcome == "ran" and probe is None:
        skipped = not cell.source.strip() or "skip-execution" in code_cell.tags
        runner_fields["status"] = "skipped" if skipped else "ok"
        if not skipped:  # probe missing (a kernel without IPython events): runner figures only
            runner_fields["wall_s"] = runner_fields["roundtrip_s"] or elapsed
            error = output_error(executed)
    elif outcome != "ran":
        # With the probe's line (a timed-out cell stopped at the interrupt), its wall is the cell's time in the kernel
        # until the interrupt took effect: a compile runs on past the timeout, as it does past a Ctrl-C.
        runner_fields.update(status=outcome, wall_s=elapsed if probe is None else probe.wall_s)
        error = {
            "name": "CellTimeoutError" if outcome == "timeout" else "DeadKernelError",
            "message": f"cell exceeded --timeout {options.timeout:g} s"
            if outcome == "timeout"
            else "the kernel died while running this cell",
        }
        if probe is not None and probe.status == "ok":
            error["message"] += FINISHED_ANYWAY
    record = merge_cell(code_cell, probe, **runner_fields)
    if programs is not None and probe is not None and probe.programs is not None:
        record["programs"] = _collect_programs(programs, probe.programs, record)
    if probe is not None and probe.timeline_trace is not None:
        record["timeline"] = _summarise_timeline(probe.timeline_trace, record)
    if error is not None:
        record["error"] = error
        if record["status"] == "ok":
            record["status"] = "error"
    if record["status"] == "error" and "raises-exception" in code_cell.tags:
        record["status"] = "expected-error"
    return record


def stop_signal(exc: BaseException) -> str:
    """The name of the signal behind an interrupt: SIGTERM or SIGHUP under the CLI, else SIGINT (Ctrl-C)."""
    signum = getattr(exc, "signum", None) or _signals.received()
    return _signals.signal_name(signum) if signum else "SIGINT"


def _program_collector(
    notebook: Notebook, options: ExecutionOptions, root: Path, env: dict[str, str]
) -> ProgramCollector | None:
    """With ``programs``: where the probe writes program data, and the collector that reads it."""
    if not options.programs:
        return None
    from nbscope.collect.program import ProgramCollector

    env["NBSCOPE_PROBE_PROGRAMS"] = str(root / "programs")
    return ProgramCollector(notebook.code_cells)


def _collect_programs(
    collector: ProgramCollector, probe_programs: ProbePrograms, record: dict[str, object]
) -> dict[str, object]:
    """A cell's program data, read outside the kernel so it never adds to the cell's time."""
    try:
        return collector.cell(probe_programs, record)
    except Exception as exc:  # broken program data must not lose the cell's other figures
        return {"error": shorten(f"{type(exc).__name__}: {exc}", 300)}


def _summarise_timeline(trace: ProbeTimeline, record: dict[str, object]) -> dict[str, object] | None:
    """Read a cell's jax.profiler trace outside the kernel, so summarising never adds to its wall time."""
    from nbscope.collect.timeline import summarise_cell

    try:
        return summarise_cell(trace, record)
    except Exception as exc:  # a broken trace must not lose the cell's other figures
        return {"error": f"{type(exc).__name__}: {exc}"}


def _keep_log_tail(loop: _CellLoop, path: Path) -> None:
    """The kernel log's tail, kept for a run that did not end ok; a dead kernel's last words in it (glog's fatal line,
    ``F1208 … ] Unknown flag in XLA_FLAGS: --xla_foo``, or ``Fatal Python error: …``) end its cell's message."""
    import re

    tail = loop.runner["kernel_log_tail"] = _log_tail(path) if loop.status != "ok" else None
    found: list[str] = re.findall(r"^(?:F\d{4} [^\]\n]*\] |Fatal Python error: )(.+)$", tail or "", re.MULTILINE)
    for cell in loop.cells if found else []:
        error = cell.get("error")
        if cell.get("status") == "kernel-died" and isinstance(error, dict):
            error["message"] = f"{error.get('message', '')}: {found[-1].strip()}"


def _log_tail(path: Path, limit: int = 2000) -> str | None:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return None
    return data.decode("utf-8", errors="replace") or None
