"""A notebook kernel's lifecycle under nbclient: interrupting a cell, shutting down, and making sure the
kernel and every process it started are gone."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from nbscope._errors import describe
from nbscope.schema.codec import decode
from nbscope.schema.notebook_cell import NotebookCell

if TYPE_CHECKING:
    import psutil
    from nbclient import NotebookClient

# A kernel's process group (when it leads one) and the processes it started (``kernel_family``).
Family = tuple[int | None, list["psutil.Process"]]

# Set in each kernel's environment to a token of its run: every process the kernel starts inherits it,
# a double-forked daemon in a session of its own included, which :func:`end_started` then finds.
KERNEL_TOKEN_VARIABLE = "NBSCOPE_KERNEL_TOKEN"


def interrupt_cell(client: NotebookClient, cell: Mapping[str, object], wait_s: float = 5.0) -> bool:
    """Stop the timed-out cell so the next one can run (the kernel manager is async under nbclient); whether
    the kernel went idle within ``wait_s`` (False: the cell ignores the interrupt, the kernel is still busy).

    nbclient leaves the timed-out cell's IOPub reader task running; until it has read that cell's
    ``idle`` status it takes (and drops) the next cell's messages, which loses that cell's busy/idle
    timestamps or stalls it for ``iopub_timeout``. Run the event loop until it is done.
    """
    import asyncio

    from nbclient.util import run_sync

    manager: Any = client.km  # nbclient's annotation names the sync KernelManager; it runs an async one
    try:
        run_sync(manager.interrupt_kernel)()
    except Exception:
        return False

    def idle() -> bool:  # read afresh each time: nbclient's reader task writes the cell as messages arrive
        return decode(NotebookCell, cell).metadata.execution.idle is not None

    deadline = time.monotonic() + wait_s
    while not idle() and time.monotonic() < deadline:
        run_sync(asyncio.sleep)(0.01)
    return idle()


def shut_down(client: NotebookClient, context: AbstractContextManager[None], runner: dict[str, object]) -> None:
    """Stop the kernel and everything it started; a failing shutdown is noted, never raised, so the
    cells measured are still returned."""
    family = kernel_family(client)
    try:
        context.__exit__(None, None, None)
    except Exception as exc:
        runner["shutdown_error"] = describe(exc)
    finally:
        ensure_dead(client, family)


def kernel_process(client: NotebookClient) -> subprocess.Popen[bytes] | None:
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    return getattr(provisioner, "process", None)


def kernel_family(client: NotebookClient) -> Family:
    """The kernel's process group (when it leads one: jupyter_client starts each kernel in a session of
    its own) and its descendants (processes a notebook started), found while the kernel still lives:
    once it is gone they belong to init and can no longer be told apart."""
    process = kernel_process(client)
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


def ensure_dead(client: NotebookClient, family: Family = (None, [])) -> None:
    """A kernel that ignored shutdown must not outlive the run, nor any process it started."""
    import signal

    process = kernel_process(client)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    group, children = family
    if group is not None:
        with contextlib.suppress(OSError):  # OSError: empty, nothing left in it
            os.killpg(group, signal.SIGKILL)  # a group keeps its id while any member lives
    for child in children:
        with contextlib.suppress(Exception):  # already gone
            child.kill()
    if client.km is not None:  # a stop during the shutdown left it: it holds the kernel's key and ports
        with contextlib.suppress(Exception):
            client.km.cleanup_connection_file()


def end_started(token: str, kernel_log: str | os.PathLike[str] | None = None) -> None:
    """Stop every process a kernel started that still runs after the kernel's end: those carrying its token
    (:data:`KERNEL_TOKEN_VARIABLE`) and, for one that cleared its environment, those still holding the
    kernel's output log (``kernel_log``) open. A second stop signal meanwhile does not cut this short."""
    from nbscope._processes import end_holders, reap

    for attempt in range(2):
        try:
            reap(KERNEL_TOKEN_VARIABLE, token)
            if kernel_log is not None:
                end_holders(str(kernel_log))
            return
        except KeyboardInterrupt:
            if attempt:
                raise
