"""Linux's OOM kill counts (``collect.oom``): which kill is the kernel's, and the limit that applied. The counters
are files written here as the kernel writes them (v2 ``memory.events``, v1 ``memory.oom_control``); the real kill
under a memory cgroup's limit is in tests/test_attribution.py."""

from __future__ import annotations

import os
from pathlib import Path

from nbscope.collect import oom


def _v2(folder: Path, kills: int, limit: str = "max") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {kills}\noom_group_kill 0\n")
    (folder / "memory.max").write_text(f"{limit}\n")
    return folder


def _v1(folder: Path, kills: int, limit: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
    return folder


def test_a_kill_counted_in_a_cgroup_above_the_kernels_is_the_kernels(tmp_path: Path) -> None:
    own, job = _v2(tmp_path / "job" / "kernel", 0), _v2(tmp_path / "job", 4, "2147483648")
    before = oom.OomCounts(machine=10, cgroups=((str(own), 0), (str(job), 4)), limit_bytes=2147483648)
    assert oom.kill_between(before, oom.reread(before)) is None  # nothing counted since the kernel started
    _v2(job, 5, "2147483648")
    killed = oom.kill_between(before, oom.reread(before))
    assert killed is not None and killed.where == str(job) and killed.kills == 1 and killed.limit_bytes == 2147483648
    assert "out-of-memory killer" in killed.text and "1 OOM kill)" in killed.text


def test_the_machines_count_is_read_only_where_no_cgroup_counts(tmp_path: Path) -> None:
    own = _v1(tmp_path / "memory" / "job", 0, 1 << 62)  # v1's "no limit"
    with_cgroup = oom.OomCounts(machine=10, cgroups=((str(own), 0),), limit_bytes=None)
    machine_only = oom.OomCounts(machine=10, cgroups=(), limit_bytes=None)
    later = oom.OomCounts(machine=12, cgroups=((str(own), 0),), limit_bytes=None)
    assert oom.kill_between(with_cgroup, later) is None  # another job's kill elsewhere on the machine
    killed = oom.kill_between(machine_only, oom.OomCounts(machine=12, cgroups=(), limit_bytes=None))
    assert killed is not None and killed.where == "the machine" and killed.kills == 2
    assert "the machine's OOM killer counted 2 OOM kills" in killed.text


def test_limits_and_counts_are_read_from_v1_and_v2_files(tmp_path: Path) -> None:
    assert oom._cgroup_limit(_v1(tmp_path / "a", 3, 805306368)) == 805306368
    assert oom._cgroup_limit(_v1(tmp_path / "b", 3, 9223372036854771712)) is None
    assert oom._cgroup_limit(_v2(tmp_path / "c", 2)) is None and oom._cgroup_kills(tmp_path / "c") == 2
    assert oom._cgroup_kills(tmp_path / "a") == 3 and oom._cgroup_kills(tmp_path / "missing") is None


def test_this_process_reads_without_error() -> None:
    # Whatever this machine has (a memory cgroup, or none, or no /proc): a reading, never an exception.
    counts = oom.read_counts(os.getpid())
    assert isinstance(counts.cgroups, tuple)
    assert oom.kill_between(counts, oom.reread(counts)) is None
