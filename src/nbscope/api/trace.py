"""``nbscope trace -- COMMAND``: per-cell ledgers from tools that start kernels by name.

The command runs with a probe home on ``JUPYTER_PATH`` (kernelspec copies that load the probe) and
``NBSCOPE_PROBE_DIR`` set, so every IPython kernel it starts (jupyter-book, nbconvert, papermill,
jupyter execute) writes one JSON-lines file. Afterwards each file is matched to a notebook source by
its cells' hashes and stored as a run of kind ``trace``.

jupyter-book 2 (``jupyter book build --execute``) runs its kernels through a Jupyter server it starts:
as root nbscope lets that server run (``ServerApp.allow_root`` from a config folder of its own), and
every process the build started, server included, is stopped afterwards even when the build fails.
Pages it serves from its execution cache (``_build/execute``) run no kernel and are listed in
``TraceResult.cached_pages``; ``fresh=True`` sets that cache aside for the build and puts it back after.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope import _signals
from nbscope._errors import NbscopeError
from nbscope._processes import Cgroup, Descendants, end_holders, pipe_link, reap
from nbscope.api import jupyter_book2
from nbscope.api._saving import save_run
from nbscope.collect import fingerprint as fp
from nbscope.collect import notebook as notebook_module
from nbscope.collect import transport as transports
from nbscope.collect.inject import ProbeHome
from nbscope.collect.kernel_logs import (
    CellTimeout,
    CellWatchdog,
    KernelLog,
    cells_from_log,
    match,
    read_kernel_log,
    read_notebooks,
)
from nbscope.record.cells import target_name
from nbscope.record.run import RunRecord, check_label, default_label
from nbscope.record.store import Store
from nbscope.schema import process_environment
from nbscope.schema.build import totals

if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Findings
    from nbscope.schema.model import Cell

SKIP_DIRS = {"_build", ".nbscope", ".git", "node_modules", "__pycache__", ".ipynb_checkpoints", "_site"}
# Inherited by every process the traced command starts, kernels in their own sessions included.
TOKEN_VARIABLE = "NBSCOPE_TRACE_RUN"


@dataclass
class TraceResult:
    records: list[RunRecord]
    returncode: int
    output: str
    wall_s: float
    interrupted: bool = False  # a stop signal ended the command; the records hold what ran before it
    # (seconds from the start, line) for each line the command printed
    timed_output: list[tuple[float, str]] = field(default_factory=list)
    book2: jupyter_book2.BuildLog | None = None  # what a jupyter-book 2 build's log said, when it was one
    # When the store refused the runs after the command ran: one line, why, where they are kept and how to store them.
    not_stored: str | None = None

    @property
    def cached_pages(self) -> list[str]:
        """Pages a jupyter-book 2 build took from its execution cache: no kernel ran them."""
        return list(self.book2.cached) if self.book2 else []


def discover_sources(root: Path) -> list[Path]:
    """Notebook files under ``root`` (``.ipynb`` and MyST ``.md`` with a kernelspec), build folders skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_file():  # a FIFO or a device named like a notebook would block or never end
                continue
            if name.endswith(".ipynb") or (name.endswith(".md") and _looks_like_myst_notebook(path)):
                found.append(path)
    return sorted(found)


def _looks_like_myst_notebook(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return "{code-cell}" in head or ("kernelspec:" in head and head.startswith("---"))


def run_traced(
    command: list[str],
    *,
    sources: list[Path] | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    echo: bool = True,
    store: Store | None = None,
    fingerprint: dict[str, object] | None = None,
    timeout: float | None = None,
    fresh: bool = False,
    forecast: list[str] | None = None,
    cell_timeout: float | None = None,
    theme_stand_in: bool = False,
    label: str | None = None,
) -> TraceResult:
    """Run ``command`` with the probe injected into every IPython kernel it starts; its runs carry ``label``.

    ``theme_stand_in``: a mystmd / jupyter-book 2 project without a site theme in its build folder gets the
    local stand-in for this build (so it builds offline), removed afterwards.

    ``cell_timeout``: a cell of any kernel that runs longer is stopped (:class:`CellWatchdog`) and recorded
    as ``timeout``; what the builder does next is its own affair (it usually halts that notebook).

    ``fresh``: a jupyter-book 2 project's execution cache (``_build/execute`` beside ``myst.yml``) is
    set aside while the command runs, so every page executes, and put back afterwards. ``forecast``
    (GPU keys): every kernel records program data as ``profile --forecast`` does, read per notebook,
    so the runs can be forecast without running a notebook twice.
    """
    if not command:
        raise NbscopeError("nothing to trace: give a command after --, e.g. nbscope trace -- jupyter-book build book/")
    cwd = Path(cwd or Path.cwd())
    fingerprint = fingerprint or fp.collect()
    with _programs_folder(forecast is not None) as programs_dir:
        ran = _run_probed(
            command,
            cwd=cwd,
            env=env,
            echo=echo,
            timeout=timeout,
            fresh=fresh,
            programs_dir=programs_dir,
            cell_timeout=cell_timeout,
            sources=sources if sources else discover_sources(cwd),
            theme_stand_in=theme_stand_in,
        )
        notebooks = read_notebooks(sources if sources else discover_sources(cwd))  # pages the build wrote too
        records = [
            _record_of(
                log,
                nb,
                ran,
                command=command,
                cwd=cwd,
                fingerprint=fingerprint,
                forecast=forecast,
                label=label,
                store=store.path if store is not None else None,
            )
            for log in ran.logs
            # a kernel that ran no notebook of the book (e.g. a helper kernel) makes no run
            if (nb := match(log, notebooks)) is not None
        ]
    not_stored = _store_all(records, store, ran.interrupted)
    return TraceResult(
        records=records,
        returncode=ran.returncode,
        output=ran.output,
        wall_s=ran.wall_s,
        interrupted=ran.interrupted,
        timed_output=ran.timed,
        book2=ran.book2 if ran.book2.is_jupyter_book2 else None,
        not_stored=not_stored,
    )


def _programs_folder(wanted: bool) -> contextlib.AbstractContextManager[str | None]:
    """A folder the kernels write program data to (``--forecast``), outside the probe home, which is gone before
    the data is read; removed afterwards. None: not wanted."""
    if not wanted:
        return contextlib.nullcontext()
    return tempfile.TemporaryDirectory(prefix="nbscope-programs-", ignore_cleanup_errors=True)


@dataclass
class _ProbedRun:
    """What running a command with the probe injected left: its outcome and every kernel's log."""

    returncode: int
    output: str
    interrupted: bool
    timed: Any
    stopped_unix: float  # when the command stopped (an interrupt's wind-down included)
    wall_s: float
    book2: Any
    logs: list[KernelLog]
    timeouts: dict[str, dict[int, CellTimeout]] = field(default_factory=dict)  # kernel log name → seq → stop
    cell_timeout: float | None = None
    transport: str = "tcp"  # how its kernels talked to the tool that started them (collect.transport)


def _run_probed(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None,
    echo: bool,
    timeout: float | None,
    fresh: bool,
    programs_dir: str | None,
    cell_timeout: float | None = None,
    sources: list[Path] | None = None,
    theme_stand_in: bool = False,
) -> _ProbedRun:
    """Run ``command`` with every IPython kernel it starts probed; the probe home is gone when this returns.
    ``sources``: the notebooks ``nbscope runs --live`` names the running cells from."""
    home = ProbeHome()
    try:
        home.use_transport(transports.choose({**os.environ, **(env or {})}))
        home.override_kernelspecs()
        probe_dir = home.root / "kernels-out"
        home.announce("trace", sources or [], [probe_dir], command=command)
        run_env = home.env(out_dir=probe_dir, base={**os.environ, **(env or {})}, kernelspecs=True)
        token = uuid.uuid4().hex
        run_env[TOKEN_VARIABLE] = token
        # A Jupyter server (jupyter-book 2 starts one) refuses to run as root unless told it may.
        run_env.update(jupyter_book2.server_config_for_root(home.root / "jupyter-config"))
        if programs_dir is not None:
            run_env["NBSCOPE_PROBE_PROGRAMS"] = programs_dir
        set_aside = _set_cache_aside(cwd, token) if fresh else None
        stand_in = _write_theme_stand_in(cwd) if theme_stand_in else []
        watchdog = CellWatchdog(probe_dir, cell_timeout) if cell_timeout else None
        started_at = time.perf_counter()
        try:
            if watchdog is not None:
                watchdog.start()
            returncode, output, interrupted, timed = _run_command(
                command, cwd=cwd, env=run_env, echo=echo, timeout=timeout, end_left=lambda: reap(TOKEN_VARIABLE, token)
            )
            stopped_unix = time.time()  # when an interrupt stopped the command (within its wind-down)
        finally:
            if watchdog is not None:
                watchdog.finish()
            # Kernels run in sessions of their own, outside the command's process group: whatever the
            # command left running (all of it, after a signal) is found by the token they inherited.
            reap(TOKEN_VARIABLE, token)
            if set_aside is not None:
                _put_cache_back(*set_aside)
            _remove_made(stand_in)
        wall = time.perf_counter() - started_at
        logs = [read_kernel_log(p) for p in sorted(probe_dir.glob("*.jsonl"))] if probe_dir.exists() else []
        return _ProbedRun(
            returncode=returncode,
            output=output,
            interrupted=interrupted,
            timed=timed,
            stopped_unix=stopped_unix,
            wall_s=wall,
            book2=jupyter_book2.read_build_log(timed),
            logs=logs,
            timeouts=watchdog.stopped if watchdog is not None else {},
            cell_timeout=cell_timeout,
            transport=home.transport,
        )
    finally:
        home.cleanup()


def _record_of(
    log: KernelLog,
    nb: notebook_module.Notebook,
    ran: _ProbedRun,
    *,
    command: list[str],
    cwd: Path,
    fingerprint: dict[str, object],
    forecast: list[str] | None,
    label: str | None,
    store: Path | None = None,
) -> RunRecord:
    """The run record of one notebook a traced command executed, from its kernel's log (named for ``store``:
    :func:`nbscope.record.cells.target_name`)."""
    collector = None
    if forecast is not None:
        from nbscope.collect.program import ProgramCollector

        collector = ProgramCollector(nb.code_cells)
    signum = _signals.received()
    cells, status = cells_from_log(
        nb,
        log,
        stopped=ran.interrupted,
        stopped_unix=ran.stopped_unix,
        signal_name=_signals.signal_name(signum) if signum else "SIGINT",
        programs=collector,
        timeouts=ran.timeouts.get(log.path.name),
    )
    settings: dict[str, object] = {"pathway": "trace", "traced_command": command}
    if ran.cell_timeout:
        settings["cell_timeout"] = ran.cell_timeout
    if forecast is not None:
        settings.update(programs=True, forecast=list(forecast))
    record = RunRecord(
        kind="trace",
        target=target_name(nb.path, cwd, store),
        fingerprint=fingerprint,
        settings=settings,
        label=label if label is not None else default_label(),
    )
    runner: dict[str, object] = {
        "pathway": "trace",
        "transport": ran.transport,
        "command": command,
        "command_wall_s": ran.wall_s,
        "returncode": ran.returncode,
    }
    if ran.book2.is_jupyter_book2:
        runner["jupyter_book2"] = {
            "server_start_s": ran.book2.server_start_s,
            "page_built_s": ran.book2.page_built_s.get(record.target),
            "halted_at_error": record.target in ran.book2.halted,
        }
    if ran.interrupted:
        runner["interrupted"] = _signals.signal_name(signum) if signum else "KeyboardInterrupt"
    record.measurements = {
        "notebook": nb.describe(),
        "runner": runner,
        "kernel": log.header.document if log.header is not None else None,
        # "cold" becomes "warm" in totals() when the run saw cache hits.
        "totals": totals(cells, runner, "cold" if log.header is not None and log.header.jax_cache_dir else "off"),
        "cells": cells,
        "repeats": 1,
    }
    if collector is not None:
        record.measurements["programs"] = collector.finish()
    return record.finish("partial" if ran.interrupted else status)


def _store_all(records: list[RunRecord], store: Store | None, interrupted: bool) -> str | None:
    """Store the traced runs; when the store refuses them, those not stored are kept in run files
    (:func:`nbscope.record.live.save_or_keep`) and its line is returned."""
    from nbscope.record.live import NotStored, save_or_keep

    try:
        if store is not None:
            save_or_keep(store, records, "the traced runs")
    except NotStored as exc:
        return str(exc)
    for record in records if interrupted and store is not None else []:
        _signals.note_saved(f"partial run {record.run_id} ({record.target})")
    return None


EXECUTION_CACHE = Path("_build") / "execute"


def _book2_project(cwd: Path) -> Path | None:
    """The jupyter-book 2 project a command run in ``cwd`` builds: the nearest folder with ``myst.yml``."""
    for folder in (cwd, *cwd.parents):
        if (folder / "myst.yml").is_file():
            return folder
    return None


def _set_cache_aside(cwd: Path, token: str) -> tuple[Path, Path] | None:
    """Move a jupyter-book 2 execution cache out of the build's way; ``(cache, where it went)``."""
    project = _book2_project(cwd)
    if project is None:
        return None
    cache = project / EXECUTION_CACHE
    for left in sorted(cache.parent.glob("execute.nbscope-set-aside-*")):
        _put_cache_back(cache, left)  # from a run killed outright before it could put its cache back
    if not cache.is_dir():
        return None
    aside = cache.with_name(f"execute.nbscope-set-aside-{token[:12]}")
    cache.rename(aside)
    return cache, aside


def _write_theme_stand_in(cwd: Path) -> list[Path]:
    """The site theme's local stand-in in the project's build folder, unless a theme is there already; returns
    what was made (the file, then each folder that did not exist), for :func:`_remove_made`."""
    project = _book2_project(cwd)
    if project is None or (project / jupyter_book2.THEME_FOLDER).exists():
        return []
    missing = []
    folder = project / jupyter_book2.THEME_FOLDER
    while folder != project and not folder.exists():
        missing.append(folder)
        folder = folder.parent
    written = jupyter_book2.write_theme_stand_in(project) / "template.yml"
    return [written, *missing]


def _remove_made(made: list[Path]) -> None:
    """Remove what :func:`_write_theme_stand_in` made: its file, then each folder it made that is empty now."""
    for path in made:
        try:
            if path.is_dir():
                path.rmdir()  # only when empty: what the build wrote there stays
            else:
                path.unlink(missing_ok=True)
        except OSError:
            return


def _put_cache_back(cache: Path, aside: Path) -> None:
    """Return the set-aside entries; where the build wrote an entry under the same key, the user's own
    entry wins (the cache ends as it was, plus the keys this build added)."""
    if not aside.is_dir():
        return
    cache.mkdir(parents=True, exist_ok=True)
    for entry in aside.iterdir():
        target = cache / entry.name
        if target.exists() and not target.is_dir():
            target.unlink()  # written by the traced build just now
        entry.replace(target)
    try:
        aside.rmdir()
    except OSError:
        pass


def _run_command(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    echo: bool,
    timeout: float | None = None,
    end_left: Callable[[], object] | None = None,
) -> tuple[int, str, bool, list[tuple[float, str]]]:
    """``(returncode, output, interrupted, timed lines)``: on Ctrl-C, SIGTERM or SIGHUP the command's
    process group is stopped and what it printed so far is kept. Each line comes with the time (seconds
    from the start) it arrived, which is how a build's phases that it does not time get a duration.

    The command's end, not the end of its output, ends the run: a process it left behind (a daemon in a
    session of its own) may hold the output pipe open for ever. Once the command has ended, what is left in
    its process group, what ``end_left`` finds (the processes carrying the run's token) and every process
    still holding the output pipe are stopped, and the output is read for at most ``DRAIN_S`` more."""
    # Where it can be, the command runs in a cgroup of its own from its start: every process it starts is ended.
    found = shutil.which(command[0], path=process_environment.read(env).path) if command else None
    cgroup = Cgroup.make() if found else None
    try:
        # Its own process group, so a timeout or a signal ends the command and its children together.
        process = subprocess.Popen(
            cgroup.wrap(command) if cgroup is not None else command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except BaseException as exc:
        if cgroup is not None:
            cgroup.end()
        if isinstance(exc, FileNotFoundError):
            raise NbscopeError(f"command not found: {command[0]}") from None
        if isinstance(exc, OSError):  # not executable, a folder, not a program this machine runs (ENOEXEC)
            raise NbscopeError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        raise
    assert process.stdout is not None
    reader = _OutputReader(process.stdout.fileno(), echo=echo)
    reader.start()
    descendants = Descendants(process.pid, cgroup=cgroup)
    descendants.start()
    timer = threading.Timer(timeout, _kill_group, (process,)) if timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    interrupted = False
    try:
        returncode = process.wait()
    except KeyboardInterrupt:
        interrupted = True
        _kill_group(process)
        returncode = process.wait()
    except BaseException:
        _kill_group(process)
        reader.stop()
        descendants.end()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    try:
        _end_what_is_left(process, end_left, descendants, reader)
    except KeyboardInterrupt:  # a signal after the command ended: the run is complete, finish ending the rest
        _end_what_is_left(process, end_left, descendants, reader)
    process.stdout.close()
    chunks = [line for _, line in reader.timed]
    if timeout and returncode == -signal.SIGKILL and not interrupted:
        chunks.append(f"nbscope: the command ran past its {timeout:g} s limit and was stopped\n")
    return returncode, "".join(chunks), interrupted, reader.timed


# Kept of one output line (a base64 blob or a progress bar can be megabytes without a newline); the rest is
# counted, not kept, and the echo still shows all of it.
MAX_LINE_BYTES = 16_384
# How long output still in the pipe is read after the command and what it left running have ended.
DRAIN_S = 2.0
LINE_ENDS = re.compile(rb"\r\n?|\n")  # one fixed-width alternative per position: no backtracking


class _OutputReader(threading.Thread):
    """Reads a command's output in a thread of its own, in time linear in its length and memory bounded
    per line: ``timed`` holds ``(seconds from the start, line)``; a line cut at ``MAX_LINE_BYTES`` ends
    with how many bytes were cut, and a last line without a newline is kept too."""

    def __init__(self, fd: int, *, echo: bool) -> None:
        super().__init__(daemon=True)
        self.fd, self.echo = fd, echo
        self.timed: list[tuple[float, str]] = []
        self._stop_reading = threading.Event()
        self._began = time.perf_counter()
        self._line = bytearray()
        self._cut = 0  # bytes of the current line not kept
        self._after_cr = False
        self._echo_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def stop(self) -> None:
        self._stop_reading.set()

    def run(self) -> None:
        import select

        try:
            while not self._stop_reading.is_set():
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                if self.echo:
                    _echo(self._echo_decoder.decode(chunk))
                self._take(chunk)
        except (OSError, ValueError):  # the pipe was closed under us
            pass
        if self._line or self._cut:
            self._end_line(newline=False)  # a last line without a newline

    def _take(self, chunk: bytes) -> None:
        # Lines end as Python's text mode ends them (\n, \r\n, or a progress bar's lone \r), each as \n.
        start = 0
        if self._after_cr and chunk.startswith(b"\n"):
            start = 1  # the \n of a \r\n split between two reads
        for ending in LINE_ENDS.finditer(chunk, start):
            self._keep(chunk[start : ending.start()])
            self._end_line()
            start = ending.end()
        self._keep(chunk[start:])
        self._after_cr = chunk.endswith(b"\r")

    def _keep(self, piece: bytes) -> None:
        room = MAX_LINE_BYTES - len(self._line)
        self._line += piece[: max(room, 0)]
        self._cut += max(len(piece) - max(room, 0), 0)

    def _end_line(self, newline: bool = True) -> None:
        text = bytes(self._line).decode("utf-8", errors="replace")
        if self._cut:
            text += f" [nbscope: {self._cut} more bytes of this line not kept]"
        self.timed.append((time.perf_counter() - self._began, text + ("\n" if newline else "")))
        self._line.clear()
        self._cut = 0


def _end_what_is_left(
    process: subprocess.Popen[bytes],
    end_left: Callable[[], object] | None,
    descendants: Descendants,
    reader: _OutputReader,
) -> None:
    """After the command ended: stop what it left in its group, what ``end_left`` finds, every descendant
    seen while it ran and whatever still holds its output pipe, then read what remains in the pipe (for at
    most ``DRAIN_S``)."""
    _kill_group(process)
    if end_left is not None:
        end_left()
    descendants.end()
    assert process.stdout is not None
    try:
        end_holders(pipe_link(process.stdout.fileno()))  # only the command was given the pipe's write end
    except OSError:
        pass
    reader.join(DRAIN_S)
    reader.stop()
    reader.join(1.0)


def _echo(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # a terminal closed by SIGHUP: keep reading the command's output
        pass


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def command_exit_code(returncode: int) -> int:
    """What trace exits with for the traced command's status: its own, or 128 + the signal that ended it."""
    return returncode if returncode >= 0 else 128 - returncode


def cached_pages_note(result: TraceResult) -> str | None:
    """One line saying which pages jupyter-book 2 did not execute because its cache had them."""
    pages = result.cached_pages
    if not pages:
        return None
    shown = ", ".join(pages[:5]) + (f" and {len(pages) - 5} more" if len(pages) > 5 else "")
    return (
        f"jupyter-book 2 (mystmd) took {len(pages)} page(s) from its execution cache without running them, so nothing was "
        f"measured for them: {shown}; trace with --fresh to execute every page (the cache is put back after)"
    )


def theme_note(result: TraceResult) -> str | None:
    """One line when a jupyter-book 2 build failed only because it could not download its site theme."""
    if not (result.book2 and result.book2.theme_unreachable and result.returncode):
        return None
    return (
        "jupyter-book 2 (mystmd) could not download its site theme (no network?), so the build failed after "
        "executing; the executed pages were measured. Offline, build with --md or give the book a local theme "
        "(docs/trace.md)"
    )


def _check_runnable(command: list[str], path: str) -> None:
    """Refuse, before anything runs or is stored, a command that is no program: a file that is not executable, a
    folder, a name found nowhere on PATH."""
    if not command:
        return
    program = command[0]
    if os.sep in program:
        if os.path.isdir(program):
            raise NbscopeError(f"cannot run {program!r}: it is a folder, not a program")
        if not os.path.isfile(program):
            raise NbscopeError(f"cannot run {program!r}: no such file")
        if not os.access(program, os.X_OK):
            raise NbscopeError(
                f"cannot run {program!r}: it is not executable (chmod +x it, or run it with its interpreter)"
            )
    elif shutil.which(program, path=path) is None:
        raise NbscopeError(f"command not found: {program}")


def _command_env(command: list[str], jupyter_book2_first: bool) -> dict[str, str] | None:
    """The variables the command gets besides this process's: only a PATH with a command put first (None: none)."""
    env = None
    path = process_environment.read().path
    if jupyter_book2_first:
        found = jupyter_book2.find()
        if not found.usable or found.path_folder is None:
            raise NbscopeError(found.problem or "jupyter-book 2 is not available")
        path = os.pathsep.join([str(found.path_folder), path])
        env = {"PATH": path}
    if command and command[0] == "myst" and shutil.which("myst", path=path) is None:
        myst = jupyter_book2.find_myst()  # nbscope's own mystmd (`book2-env --install`)
        if not myst.usable or myst.path_folder is None:
            raise NbscopeError(myst.problem or "mystmd is not available")
        env = {"PATH": os.pathsep.join([str(myst.path_folder), path])}
    return env


def _nothing_traced(command: list[str], result: TraceResult, timeout: float | None) -> NbscopeError:
    """Why no run came of the command, in one line; it exits with the command's own failure first."""
    note = cached_pages_note(result)
    if note:
        return NbscopeError(f"no kernel ran: {note}")
    hint = ""
    if timeout and result.returncode == -signal.SIGKILL:
        hint = f"; the command ran past its --command-timeout {timeout:g} s and was stopped"
    elif result.returncode > 0:
        hint = f"; the command exited {result.returncode}"
    elif result.returncode < 0:
        hint = f"; the command was ended by signal {-result.returncode}"
    error = NbscopeError(f"no IPython kernel started by {' '.join(command)!r} ran cells of a known notebook{hint}")
    if result.returncode:
        error.exit_code = command_exit_code(result.returncode)
    return error


@dataclass(frozen=True)
class TraceOutcome:
    """What ``nbscope trace`` did: the traced command's result (its runs, stored), each run's findings (or why it
    has none, ``--no-diagnose`` included), the notes to show, the runs' failed cells, and the store."""

    result: TraceResult
    diagnoses: tuple[tuple[Findings | None, str | None], ...]
    notes: tuple[str, ...]
    failed: tuple[tuple[RunRecord, Cell], ...]
    store: Store
    diagnosed: bool = True

    @property
    def records(self) -> list[RunRecord]:
        return self.result.records

    @property
    def not_stored(self) -> str | None:
        """One line when the store refused the runs: where they are kept, and how to store them."""
        return self.result.not_stored

    @property
    def command_exit_code(self) -> int:
        """The traced command's failure as trace exits with it (0: it succeeded)."""
        return command_exit_code(self.result.returncode) if self.result.returncode else 0


def trace(
    command: list[str],
    db: Path | None,
    *,
    on_skip: Callable[[str], None] | None = None,
    label: str | None = None,
    forecast: str | None = None,
    diagnose: bool = True,
    sources: list[Path] | None = None,
    timeout: float | None = None,
    fresh: bool = False,
    jupyter_book2_first: bool = False,
    cell_timeout: float | None = None,
    theme_stand_in: bool = False,
) -> TraceOutcome:
    """``nbscope trace -- COMMAND``: the forecast's GPUs checked (an unknown one refused first), the store at ``db``
    opened, the command traced with its kernels' runs labelled ``label`` and stored, then each run diagnosed
    (unless not ``diagnose``). Fails with one line when nothing was traced.

    ``jupyter_book2_first``: the jupyter-book 2 that ``nbscope book2-env`` finds goes first on PATH, so
    that ``jupyter book ...`` runs it on a machine that has jupyter-book 1 too.
    """
    from nbscope.api.profile import check_store, check_timeout, diagnosis_of, failures, forecast_devices
    from nbscope.api.runs import open_store

    gpus = forecast_devices(forecast, None) or None
    store = open_store(db, on_skip=on_skip)
    label = check_label(label)
    check_timeout(timeout, "--command-timeout")  # NaN, infinities, 0 and negative numbers are no limit
    check_timeout(cell_timeout, "--cell-timeout")
    check_store(store)  # a store the runs could not be saved in is refused before the command runs
    env = _command_env(command, jupyter_book2_first)
    _check_runnable(command, env["PATH"] if env is not None else process_environment.read().path)
    result = run_traced(
        command,
        sources=sources,
        store=store,
        timeout=timeout,
        fresh=fresh,
        env=env,
        forecast=gpus,
        cell_timeout=cell_timeout,
        theme_stand_in=theme_stand_in,
        label=label,
    )
    if result.interrupted:
        if result.not_stored is not None:
            raise NbscopeError(result.not_stored)  # the CLI still exits 128 + the signal
        raise KeyboardInterrupt  # the partial runs are stored; the CLI exits 128 + the signal
    if not result.records:
        raise _nothing_traced(command, result, timeout)
    notes = tuple(note for note in (cached_pages_note(result), theme_note(result)) if note)
    diagnoses = tuple(diagnosis_of(r) if diagnose else (None, "--no-diagnose") for r in result.records)
    not_kept: list[str] = []
    for record, (found, _) in zip(result.records, diagnoses, strict=True):
        if record.run_id is not None:  # else the store refused it: it is kept in a run file
            save_run(store, record, findings=found, diagnose=diagnose, notes=not_kept)
    notes += tuple(not_kept)
    return TraceOutcome(result, diagnoses, notes, failures(result.records), store, diagnose)
