"""Finding and stopping every process a run started, even those in sessions of their own.

A command nbscope runs (a traced ``jupyter-book build``, a pathway) gets an environment variable with a
per-run token; every process it starts inherits it, including kernels that jupyter_client starts in
their own sessions (outside the command's process group) and processes re-parented to init after
their parent died. :func:`reap` stops them all. A process that cleared its environment is still found
by a file or pipe it holds open that only the run gave out (:func:`end_holders`), or, while its parent
still ran, as a descendant of the command (:class:`Descendants`).
"""

from __future__ import annotations

import os
import threading
from typing import Any


def reap(variable: str, token: str, *, grace_s: float = 3.0) -> list[dict[str, Any]]:
    """Stop (SIGTERM, then SIGKILL after ``grace_s``) every process whose environment has
    ``variable=token``; returns what was found (pid, name, command line)."""
    import psutil

    own = os.getpid()
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] == own:
            continue
        try:
            if process.environ().get(variable) != token:
                continue
            found.append(process)
        except (psutil.Error, OSError):
            continue  # gone, or another user's process whose environment we may not read
    if not found:
        return []
    described = []
    for process in found:
        try:
            described.append({"pid": process.pid, "name": process.name(), "cmdline": " ".join(process.cmdline())[:200]})
            process.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return described


def end_holders(link: str) -> list[int]:
    """SIGKILL every process other than this one with a descriptor open on ``link`` (what
    ``/proc/PID/fd/N`` points to: ``pipe:[INODE]`` or a file's path); returns their pids. Linux only:
    elsewhere none are found."""
    import signal

    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    own, found = os.getpid(), []
    for pid in pids:
        if pid != own and _holds(pid, link):
            found.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return found


def pipe_link(fd: int) -> str:
    """What ``/proc/PID/fd/N`` shows for a descriptor on the same pipe as ``fd``."""
    return f"pipe:[{os.fstat(fd).st_ino}]"


def _holds(pid: int, link: str) -> bool:
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False  # gone, or another user's
    for descriptor in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") == link:
                return True
        except OSError:
            continue
    return False


class Descendants(threading.Thread):
    """Every process descended from ``pid`` while it runs, sampled every ``interval_s``: one that leaves
    its parent's session and clears its environment is still seen here before its parent ends.
    :meth:`end` stops those still running (psutil refuses a pid that was reused meanwhile). On Linux a
    sample reads only the tree's own ``/proc/PID/task/TID/children`` (a walk of every process costs tens of
    ms on a loaded machine, time the measured notebook would share)."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.seen: dict[int, Any] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for pid in _tree(self.pid):
                if pid not in self.seen:
                    self._remember(pid)
            self._done.wait(self.interval_s)

    def _remember(self, pid: int) -> None:
        import psutil

        try:
            self.seen[pid] = psutil.Process(pid)  # keeps its start time: a reused pid is never killed
        except psutil.Error:
            pass

    def end(self, grace_s: float = 3.0) -> list[int]:
        """Stop sampling and SIGKILL every process seen that still runs; their pids."""
        import psutil

        self._done.set()
        self.join(5.0)
        ended = []
        for process in list(self.seen.values()):
            try:
                process.kill()
                ended.append(process.pid)
            except psutil.Error:
                continue
        psutil.wait_procs([p for p in self.seen.values()], timeout=grace_s)
        return ended


def _tree(pid: int) -> list[int]:
    """The pids descended from ``pid`` now (Linux: from ``/proc``, else through psutil)."""
    if not os.path.isdir(f"/proc/{pid}/task"):
        import psutil

        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    found: list[int] = []
    waiting = [pid]
    while waiting:
        parent = waiting.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children", encoding="ascii") as listed:
                    children = [int(child) for child in listed.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            waiting += children
    return found
