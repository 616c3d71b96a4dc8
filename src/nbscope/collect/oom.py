"""Whether the system's out-of-memory killer ended a kernel, from the counts Linux keeps of its kills.

A kernel that dies leaves only a signal (SIGKILL, as ``kill -9`` would). Linux counts every OOM kill
machine-wide (``/proc/vmstat`` ``oom_kill``, since 4.13) and per memory cgroup (v2 ``memory.events``,
v1 ``memory.oom_control``; a container's or a CI job's memory limit is one of these). The counts of the
kernel's cgroup and of each cgroup above it are read when the kernel starts and again when it died: a kill
counted where the kernel lives, while it died, is the OOM killer's. The memory limit is the lowest of those
cgroups' limits, which can be far below the machine's memory (a 2 GiB container on a 64 GiB host).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

VMSTAT = Path("/proc/vmstat")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What a v1 memory cgroup says for "no limit" (PAGE_COUNTER_MAX pages, rounded): anything this high is none.
NO_LIMIT_ABOVE = 1 << 60


@dataclass(frozen=True, slots=True)
class OomCounts:
    """The OOM kill counts that cover one process, read at one moment; None: not readable here."""

    machine: int | None
    cgroups: tuple[tuple[str, int], ...]  # (memory cgroup folder, its kill count), the process's own first
    limit_bytes: int | None  # the lowest memory limit over those cgroups; None: none set or not readable


@dataclass(frozen=True, slots=True)
class OomKill:
    """OOM kills counted while a kernel died: where, and the memory limit that applied."""

    where: str  # the memory cgroup that counted the kill, or "the machine"
    kills: int
    limit_bytes: int | None

    @property
    def text(self) -> str:
        counted = (
            "the machine's OOM killer counted" if self.where == "the machine" else f"memory cgroup {self.where} counted"
        )
        return f"killed by the out-of-memory killer ({counted} {self.kills} OOM kill{'s' * (self.kills != 1)})"


def read_counts(pid: int) -> OomCounts:
    """The counts that cover process ``pid`` now (it must be alive: its cgroups are read from /proc)."""
    folders = _memory_cgroups(pid)
    limits = [limit for folder in folders if (limit := _cgroup_limit(folder)) is not None]
    return _counts(folders, min(limits, default=None))


def kill_between(before: OomCounts, after: OomCounts) -> OomKill | None:
    """The OOM kill counted between two readings, nearest the process first; None when none was counted."""
    earlier = dict(before.cgroups)
    for folder, count in after.cgroups:
        if folder in earlier and count > earlier[folder]:
            return OomKill(folder, count - earlier[folder], before.limit_bytes)
    if (
        not before.cgroups
        and before.machine is not None
        and after.machine is not None
        and after.machine > before.machine
    ):
        # No memory cgroup to read: the machine's count is the only evidence (on a machine running other
        # jobs a kill of theirs could coincide, so it is read only where nothing nearer can be).
        return OomKill("the machine", after.machine - before.machine, before.limit_bytes)
    return None


def reread(before: OomCounts) -> OomCounts:
    """The same counters read again (the process may be gone: its cgroup folders are those read before)."""
    return _counts([Path(folder) for folder, _ in before.cgroups], before.limit_bytes)


def _counts(folders: list[Path], limit_bytes: int | None) -> OomCounts:
    counted = [(str(folder), count) for folder in folders if (count := _cgroup_kills(folder)) is not None]
    return OomCounts(_field(VMSTAT, "oom_kill"), tuple(counted), limit_bytes)


def _memory_cgroups(pid: int) -> list[Path]:
    """The folders of ``pid``'s memory cgroup and of each above it (v2 unified, else v1 memory)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if number == "0" and not controllers:
            base = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "unified"
            if (base / "cgroup.controllers").exists() and "memory" in _words(base / "cgroup.controllers"):
                return _chain(base, relative)
        elif "memory" in controllers.split(","):
            return _chain(CGROUP_ROOT / "memory", relative)
    return []


def _chain(base: Path, relative: str) -> list[Path]:
    parts = [part for part in relative.strip().split("/") if part and part not in (".", "..")]
    folders = [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [folder for folder in folders if folder.is_dir()]


def _cgroup_kills(folder: Path) -> int | None:
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        count = _field(folder / name, "oom_kill")
        if count is not None:
            return count
    return None


def _cgroup_limit(folder: Path) -> int | None:
    for name in ("memory.max", "memory.limit_in_bytes"):  # v2, v1
        try:
            text = (folder / name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and int(text) < NO_LIMIT_ABOVE:
            return int(text)
        return None  # "max", or v1's "no limit"
    return None


def _field(path: Path, key: str) -> int | None:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value.strip())
    return None


def _words(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return []
