"""Attribution (``analyse.attribution``): each change between two stored runs and each failure is named for what
it is, from real runs: an edited cell, a cold cache, a kernel that died, a kernel the OOM killer ended under a
memory cgroup's limit, a runner stopped by SIGTERM; and a package change whose compiled programs hash the same (the
hashes the probe records per cell, written into a real record with a jaxlib version edited)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from diag_support import RECORDS, profile_notebook
from nbscope.analyse.attribution import attribute, classify_failure
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record import run as record_module
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from test_signals import NOTEBOOK as SLEEPING_NOTEBOOK
from test_signals import marker, start_nbscope, stop, wait_until_cell_runs  # noqa: F401 (marker: a fixture)


def _notebook(path: Path, second_cell: str) -> Path:
    nbformat.write(new_notebook(cells=[new_code_cell("a = 1"), new_code_cell(second_cell)]), path)
    return path


def _profiled(path: Path) -> RunRecord:
    return profile(
        path,
        ProfileOptions(jax_platform="cpu", cache_root=path.parent / "jax-cache"),
        live_path=path.with_suffix(".jsonl"),
    )


@pytest.fixture(scope="module")
def edited_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    folder = tmp_path_factory.mktemp("attribution")
    path = _notebook(folder / "lecture.ipynb", "b = sum(range(10))")
    first, same = _profiled(path), _profiled(path)
    edited = _profiled(_notebook(path, "b = sum(range(20))"))
    return {"first": first, "same": same, "edited": edited}


@pytest.mark.slow
def test_an_edited_cell_is_named_and_nothing_else(edited_runs: dict[str, RunRecord]) -> None:
    why = attribute(edited_runs["same"], edited_runs["edited"])
    assert why.kinds == ("code",), why.text
    assert "code: 1 cell edited (cell 2" in why.text and why.failure is None
    unchanged = attribute(edited_runs["first"], edited_runs["same"])
    assert unchanged.kinds == () and unchanged.text.startswith("nothing recorded changed")


@pytest.mark.slow
def test_a_cold_cache_is_named(profiled: Any) -> None:
    warm = profiled("diag_cold_cache", jax_cache="warm")
    cold = profiled("diag_cold_cache", jax_cache="cold")
    why = attribute(warm, cold)
    assert why.kinds == ("cache",), why.text
    assert "cache: warm → cold" in why.text
    assert attribute(cold, warm).changes[0].text.startswith("cache: cold → warm")


@pytest.mark.slow
def test_a_dead_kernel_is_killed_and_out_of_memory_only_near_the_memory(tmp_path: Path) -> None:
    died = profile_notebook("kernel_dies", tmp_path)
    failure = classify_failure(died)
    assert failure is not None and failure.kind == "kernel-killed" and failure.cell == 2, failure
    peak = died.notebook_run().totals.peak_rss_bytes
    assert peak, "the cells before the kernel died recorded its memory"
    # The same run on a machine (or in a container) whose memory its kernel had nearly filled.
    document = copy.deepcopy(died.to_dict())
    document["fingerprint"]["memory"] = {"total_bytes": int(peak / 0.9)}
    full = classify_failure(RunRecord.from_dict(document))
    assert full is not None and full.kind == "out-of-memory" and "out of memory" in full.text, full
    # The site names both: the status `died`, the error the failure's line.
    document["target"] = "oom.ipynb"
    store = Store(tmp_path / "db" / "nbscope.db")
    store.add_many([died, RunRecord.from_dict(document)])
    status = _published_status(store, tmp_path / "site")
    assert status[died.target]["status"] == status["oom.ipynb"]["status"] == "died"
    assert "a signal ended it" in status[died.target]["error"] and "out of memory" in status["oom.ipynb"]["error"]


MEMORY_LIMIT = 768 * 1024**2  # the nbscope process and an idle kernel fit; a cell writing 3 GiB does not


def _memory_limited_cgroup(limit: int) -> Path:
    """A new memory cgroup with ``limit`` under this process's own (v1 memory, or v2 where its memory controller
    is delegated); skips where none can be made here."""
    lines = Path("/proc/self/cgroup").read_text().splitlines() if Path("/proc/self/cgroup").exists() else []
    for line in lines:
        _, controllers, relative = line.split(":", 2)
        if "memory" in controllers.split(","):
            base, limit_file = Path("/sys/fs/cgroup/memory") / relative.lstrip("/"), "memory.limit_in_bytes"
        elif not controllers and "memory" in _read(
            Path("/sys/fs/cgroup") / relative.lstrip("/") / "cgroup.subtree_control"
        ):
            base, limit_file = Path("/sys/fs/cgroup") / relative.lstrip("/"), "memory.max"
        else:
            continue
        folder = base / f"nbscope-test-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir()
            (folder / limit_file).write_text(str(limit))
        except OSError as exc:
            if folder.exists():
                folder.rmdir()
            pytest.skip(f"no memory cgroup with a limit can be made here: {exc}")
        return folder
    pytest.skip("no memory cgroup (v1 memory, or v2 with its memory controller delegated) to make a limit in")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_a_kernel_the_oom_killer_ended_under_a_memory_limit_is_out_of_memory(tmp_path: Path) -> None:
    # A real kill: nbscope and its kernel run in a memory cgroup of 768 MiB (a container's or a CI job's limit,
    # far below the machine's memory), and the second cell writes 3 GiB.
    group = _memory_limited_cgroup(MEMORY_LIMIT)
    notebook = tmp_path / "hog.ipynb"
    nbformat.write(
        new_notebook(
            cells=[new_code_cell("a = 1"), new_code_cell("hog = bytearray(b'x') * 3 * 1024**3"), new_code_cell("b = 2")]
        ),
        notebook,
    )
    db = tmp_path / "db" / "nbscope.db"
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    try:
        done = subprocess.run(
            [
                "sh",
                "-c",
                f'echo $$ > "{group}/cgroup.procs" && exec "$0" -m nbscope profile "$1" --db "$2"',
                sys.executable,
                str(notebook),
                str(db),
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for leftover in _read(group / "cgroup.procs").split():  # nothing should be left; never leave a process
            os.kill(int(leftover), signal.SIGKILL)
        group.rmdir()
    assert done.returncode != 0, done.stdout[-2000:]
    [record] = Store(db).records(kind="profile")
    died = record.notebook_run()
    assert [c.status for c in died.cells] == ["ok", "kernel-died", "not-run"], done.stderr[-2000:]
    assert died.runner.oom_kill is not None and died.runner.oom_kill.limit_bytes == MEMORY_LIMIT
    assert died.cells[1].error is not None and "out-of-memory killer" in died.cells[1].error.message
    failure = classify_failure(record)
    assert failure is not None and failure.kind == "out-of-memory" and failure.cell == 1, failure
    assert "OOM killer ended it, under a memory limit of" in failure.text, failure.text
    [status] = _published_status(Store(db), tmp_path / "site").values()
    assert status["status"] == "died" and "out of memory" in status["error"], status


@pytest.mark.slow
def test_a_sigterm_to_the_runner_is_named_as_the_runner_stopping(tmp_path: Path, marker: str) -> None:  # noqa: F811
    db = tmp_path / "db" / "nbscope.db"
    started = tmp_path / "started"
    process = start_nbscope(
        ["profile", str(SLEEPING_NOTEBOOK), "--db", str(db)], cwd=tmp_path, marker=marker, started=started
    )
    wait_until_cell_runs(process, started)
    stop(process, signal.SIGTERM)
    [record] = Store(db).records(kind="profile")
    failure = classify_failure(record)
    assert failure is not None and failure.kind == "runner-stopped" and "SIGTERM" in failure.text, failure
    assert failure.cell == 1
    [status] = _published_status(Store(db), tmp_path / "site").values()
    assert status["status"] == "stopped" and "runner stopped: nbscope got SIGTERM" in status["error"], status


def _published_status(store: Store, folder: Path) -> dict[str, dict[str, Any]]:
    """``nbscope publish``'s status.json entries of ``store``, by notebook."""
    from nbscope.api.publish import publish
    from nbscope.render import site

    publish(store.path, folder, site=site)
    return {entry["file"]: entry for entry in json.loads((folder / "status.json").read_text())["notebooks"]}


def _with_programs(record: RunRecord, hashes: list[str] | None, jaxlib: str) -> RunRecord:
    document = copy.deepcopy(record.to_dict())
    document["fingerprint"].setdefault("versions", {})["jaxlib"] = jaxlib
    if hashes is not None:
        document["measurements"]["programs"] = {
            "programs": {f"jit_f#{n}": {"key": f"jit_f#{n}", "program_hash": value} for n, value in enumerate(hashes)}
        }
    return RunRecord.from_dict(document)


def test_a_package_change_with_the_same_programs_is_a_backend_change() -> None:
    recorded = record_module.load(RECORDS / "cpu_x64.json")
    before = _with_programs(recorded, ["9f1c", "07ab"], "0.4.30")
    same = attribute(before, _with_programs(recorded, ["07ab", "9f1c"], "0.4.31"))
    assert same.kinds == ("packages",) and same.program == "unchanged"
    assert "jaxlib 0.4.30 → 0.4.31" in same.text and "program unchanged" in same.text and "bisect" in same.text
    other = attribute(before, _with_programs(recorded, ["07ab", "55aa"], "0.4.31"))
    assert other.program == "changed" and "program unchanged" not in other.text
    unknown = attribute(_with_programs(recorded, None, "0.4.30"), _with_programs(recorded, None, "0.4.31"))
    assert unknown.program == "not recorded" and "program unchanged" not in unknown.text


def _with_cell_hashes(record: RunRecord, hashes: list[str], jaxlib: str) -> RunRecord:
    """The record as a probe that hashes programs writes it: each cell's ``programs_hash``, [{name, hash}]."""
    document = copy.deepcopy(record.to_dict())
    document["fingerprint"].setdefault("versions", {})["jaxlib"] = jaxlib
    for cell, value in zip(document["measurements"]["cells"], hashes, strict=False):
        cell["programs_hash"] = [{"name": "jit_f", "hash": value}]
    return RunRecord.from_dict(document)


def test_the_cells_program_hashes_say_program_unchanged_across_a_package_change(tmp_path: Path) -> None:
    recorded = record_module.load(RECORDS / "cpu_x64.json")
    before = _with_cell_hashes(recorded, ["9f1c", "07ab"], "0.4.30")
    after = _with_cell_hashes(recorded, ["9f1c", "07ab"], "0.4.31")
    same = attribute(before, after)
    assert same.kinds == ("packages",) and same.program == "unchanged" and "program unchanged" in same.text
    assert attribute(before, _with_cell_hashes(recorded, ["9f1c", "55aa"], "0.4.31")).program == "changed"
    # The store keeps the same programs hash for both, and another for other programs.
    store = Store(tmp_path / "nbscope.db")
    store.add_many([before, after, _with_cell_hashes(recorded, ["9f1c", "55aa"], "0.4.31")])
    rows = sorted(store.summaries(("programs_hash", "packages_hash")), key=lambda row: row["id"])
    assert rows[0]["programs_hash"] == rows[1]["programs_hash"] != rows[2]["programs_hash"]
    assert rows[0]["packages_hash"] != rows[1]["packages_hash"] == rows[2]["packages_hash"]


@pytest.mark.slow
def test_a_cell_error_and_a_timeout_are_named(tmp_path: Path) -> None:
    error = classify_failure(profile_notebook("error", tmp_path / "error"))
    assert error is not None and error.kind == "cell-error" and "ValueError in cell 2" in error.text, error
    timed_out = classify_failure(profile_notebook("timeout", tmp_path / "timeout", timeout=2))
    assert timed_out is not None and timed_out.kind == "timeout" and "--timeout 2 s" in timed_out.text, timed_out
    assert classify_failure(record_module.load(RECORDS / "cpu_x64.json")) is None


def test_recording_program_data_is_a_settings_change() -> None:
    """A run recorded with --programs (the probe records each compiled program, which costs time) against one
    without: named as a settings change, and nothing else."""
    recorded = record_module.load(RECORDS / "cpu_x64.json")
    document = copy.deepcopy(recorded.to_dict())
    document["settings"] = {**document.get("settings", {}), "programs": False}
    without = RunRecord.from_dict(copy.deepcopy(document))
    document["settings"]["programs"] = True
    why = attribute(without, RunRecord.from_dict(document))
    assert why.kinds == ("settings",) and why.text.endswith("· --programs"), why.text
