"""Finding and stopping every process a run started, even those in sessions of their own.

Where the machine lets nbscope make a cgroup (v2) under its own, a kernel or a traced command is moved into
one of its own as soon as it starts (:class:`Descendants`): every process it starts later is in it, whatever
it does (a double fork with ``setsid``, a cleared environment, every file closed), and at the end the cgroup's
``cgroup.procs`` lists exactly what to stop. Elsewhere (no cgroup v2, no permission, ``NBSCOPE_CGROUP=off``),
silently, the other ways below do what they can.

A command nbscope runs (a traced ``jupyter-book build``, a pathway) gets an environment variable with a
per-run token; every process it starts inherits it, including kernels that jupyter_client starts in
their own sessions (outside the command's process group) and processes re-parented to init after
their parent died. :func:`reap` stops them all. A process that cleared its environment is still found
by a file or pipe it holds open that only the run gave out (:func:`end_holders`), or, while its parent
still ran, as a descendant of the command (:class:`Descendants`, sampling its process tree).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from nbscope._redact import shorten

# "off": never make a cgroup (the process tree, the token and the pipe only), e.g. where cgroups are managed.
CGROUP_SWITCH = "NBSCOPE_CGROUP"


def reap(variable: str, token: str, *, grace_s: float = 3.0) -> list[dict[str, object]]:
    """Stop (SIGTERM, then SIGKILL after ``grace_s``) every process whose environment has
    ``variable=token``; returns what was found (pid, name, command line)."""
    import psutil

    own = os.getpid()
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] == own:
            continue
        # Gone, or another user's process whose environment we may not read: passed over.
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(variable) != token:
                continue
            found.append(process)
    if not found:
        return []
    described = []
    for process in found:
        with contextlib.suppress(psutil.Error):
            described.append(
                {"pid": process.pid, "name": process.name(), "cmdline": shorten(" ".join(process.cmdline()), 200)}
            )
            process.terminate()
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return described


def end_holders(link: str) -> list[int]:
    """SIGKILL every process other than this one with a descriptor open on ``link`` (what
    ``/proc/PID/fd/N`` points to: ``pipe:[INODE]`` or a file's path); returns their pids. Linux only:
    elsewhere none are found."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    own, found = os.getpid(), []
    for pid in pids:
        if pid != own and _holds(pid, link):
            found.append(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
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
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") == link:
                return True
    return False


class Cgroup:
    """A cgroup (v2) of nbscope's own, made under the one this process is in: the processes moved into it and
    every process they start after. :meth:`end` SIGKILLs all of them (``cgroup.kill``, or each pid it lists)
    and removes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls) -> Cgroup | None:
        """A new empty cgroup, or None where none can be made (no cgroup v2, not writable, switched off)."""
        if os.environ.get(CGROUP_SWITCH, "").strip().lower() in ("off", "0", "no", "false"):
            return None
        parent = own_cgroup()
        if parent is None:
            return None
        _remove_stale(parent)
        path = parent / f"nbscope-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def add(self, pid: int) -> bool:
        """Move ``pid`` into the cgroup; whether it could be (the kernel refuses, e.g., across delegations)."""
        return _write(self.path / "cgroup.procs", str(pid))

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` run so that it is in the cgroup from its first instruction: a shell moves itself into
        it, then becomes the command (moving a started process races with what it forks first)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" 2>/dev/null; exec "$@"', str(self.path / "cgroup.procs"), *command]

    def pids(self) -> list[int]:
        try:
            with open(self.path / "cgroup.procs", encoding="ascii") as procs:
                return [int(line) for line in procs.read().split()]
        except (OSError, ValueError):
            return []

    def end(self, grace_s: float = 3.0) -> list[int]:
        """SIGKILL every process in the cgroup (again, for one forked meanwhile) until it is empty or
        ``grace_s`` passed, then remove it; the pids found."""
        found = self.pids()
        deadline = time.monotonic() + grace_s
        while pids := self.pids():
            found += [pid for pid in pids if pid not in found]
            if not _write(self.path / "cgroup.kill", "1"):  # Linux < 5.14: one pid at a time
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        # Not removed while still populated (a process in uninterruptible sleep): the kernel removes nothing itself.
        with contextlib.suppress(OSError):
            self.path.rmdir()
        return found


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups an nbscope killed outright (SIGKILL) left: named as :meth:`Cgroup.make` names
    them, for a pid that no longer runs. A cgroup that still holds a process is never removed (the kernel refuses)."""
    try:
        names = [entry.name for entry in os.scandir(parent) if entry.name.startswith("nbscope-")]
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) == 3 and parts[1].isdigit() and len(parts[2]) == 8 and not _running(int(parts[1])):
            with contextlib.suppress(OSError):
                (parent / name).rmdir()


def _write(path: Path, text: str) -> bool:
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(text)
        return True
    except OSError:
        return False


def own_cgroup() -> Path | None:
    """The folder of this process's cgroup v2 where it is mounted and writable (Linux), else None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as listed:
            relative = next((line[3:].strip() for line in listed if line.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
            fields = [line.split() for line in mounts]
    except OSError:
        return None
    if relative is None or relative.endswith("(deleted)"):
        return None
    for field in fields:
        if "-" in field and field[field.index("-") + 1 :][:1] == ["cgroup2"]:
            root, mount_point = (_unescape(part) for part in field[3:5])
            if not relative.startswith(root):
                continue
            folder = Path(mount_point) / os.path.relpath(relative, root)
            if os.access(folder / "cgroup.procs", os.W_OK) and os.access(folder, os.W_OK):
                return folder
    return None


def _unescape(part: str) -> str:
    """A mountinfo field, with its octal escapes (``\\040`` for a space) read."""
    return part.encode("ascii", "backslashreplace").decode("unicode_escape") if "\\" in part else part


class Descendants(threading.Thread):
    """Every process descended from ``pid``, ended by :meth:`end`.

    Where a cgroup can be made (:class:`Cgroup`), ``pid`` and what it started so far are moved into one of
    their own at once (``tracked_by`` "cgroup"): every later process is in it, and nothing is sampled.
    Elsewhere (``tracked_by`` "process tree") the tree is sampled every ``interval_s``: one that leaves its
    parent's session and clears its environment is still seen here before its parent ends; :meth:`end` stops
    those still running (psutil refuses a pid that was reused meanwhile). On Linux a sample reads only the
    tree's own ``/proc/PID/task/TID/children`` (a walk of every process costs tens of ms on a loaded
    machine, time the measured notebook would share)."""

    def __init__(self, pid: int, interval_s: float = 0.5, *, cgroup: Cgroup | None = None) -> None:
        """``cgroup``: one ``pid`` was started in (:meth:`Cgroup.wrap`); else one is made and ``pid`` moved."""
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.seen: dict[int, Any] = {}
        self._done = threading.Event()
        if cgroup is not None:
            self.cgroup: Cgroup | None = cgroup if _joins(cgroup, pid) else None
        else:
            self.cgroup = Cgroup.make()
            if self.cgroup is not None and not self._move_tree(self.cgroup):
                self.cgroup.end()
                self.cgroup = None
        self.tracked_by = "cgroup" if self.cgroup is not None else "process tree"

    def _move_tree(self, cgroup: Cgroup) -> bool:
        """``pid``, then what it started before it was moved (until no new one appears)."""
        if not cgroup.add(self.pid):
            return False
        moved = {self.pid}
        while new := [child for child in _tree(self.pid) if child not in moved]:
            for child in new:
                cgroup.add(child)
                moved.add(child)
        return True

    def start(self) -> None:
        if self.cgroup is None:  # a cgroup needs no sampling
            super().start()

    def run(self) -> None:
        while not self._done.is_set():
            for pid in _tree(self.pid):
                if pid not in self.seen:
                    self._remember(pid)
            self._done.wait(self.interval_s)

    def _remember(self, pid: int) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            self.seen[pid] = psutil.Process(pid)  # keeps its start time: a reused pid is never killed

    def end(self, grace_s: float = 3.0) -> list[int]:
        """Stop sampling and SIGKILL every process seen that still runs; their pids."""
        import psutil

        self._done.set()
        if self.is_alive():
            self.join(5.0)
        ended = self.cgroup.end(grace_s) if self.cgroup is not None else []
        for process in list(self.seen.values()):
            with contextlib.suppress(psutil.Error):
                process.kill()
                ended.append(process.pid)
        psutil.wait_procs(list(self.seen.values()), timeout=grace_s)
        return ended


def _joins(cgroup: Cgroup, pid: int, wait_s: float = 2.0) -> bool:
    """Whether ``pid``, started by :meth:`Cgroup.wrap`, moved itself into ``cgroup`` (within ``wait_s``); if not
    (or it ended first), the cgroup is removed and the caller samples the tree instead."""
    deadline = time.monotonic() + wait_s
    while pid not in (pids := cgroup.pids()):
        if pids or not _running(pid):  # it moved and has ended already: what it left is in the cgroup
            return True
        if time.monotonic() > deadline:
            cgroup.end()
            return False
        time.sleep(0.005)
    return True


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is no zombie (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return False


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
