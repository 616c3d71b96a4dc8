"""nbscope audit end to end: real kernels on the small test book, a Dask LocalCluster, a killed audit,
shards and merge, and (slow) the two corpus lectures."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from audit_support import BOOK, LECTURES, audit_env, audit_file, nbscope
from nbscope.record.store import Store

NOTEBOOKS = {
    "sleep_numpy.ipynb",
    "numpy_stats.md",
    "chapters/pure_python.md",
    "jax_small.md",
    "numba_small.ipynb",
    "error_cell.ipynb",
}

pytestmark = pytest.mark.slow


def problems(document: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Entries that did not run cleanly, with their errors: the message of a failed assertion."""
    return [
        (e["path"], e["status"], e.get("error"))
        for e in document["measurements"]["notebooks"]
        if e["status"] not in ("ok", "unavailable")
    ]


def cells_by_notebook(document: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Per notebook on cpu: (source hash, status) of every cell, from the runs the audit file embeds."""
    runs = document["runs"]
    result = {}
    for entry in document["measurements"]["notebooks"]:
        if entry["backend"] == "cpu" and entry["run_id"] is not None:
            run = runs[str(entry["run_id"])]
            result[entry["path"]] = [(c["source_hash"], c["status"]) for c in run["measurements"]["cells"]]
    return result


@pytest.fixture(scope="module")
def local_audit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The small book audited on this machine with two workers, asking for cpu and cuda."""
    folder = tmp_path_factory.mktemp("local")
    started = time.perf_counter()
    document = audit_file(
        BOOK, "--backends", "cpu,cuda", "--workers", "2", "--html", folder / "a.html", cwd=folder, name="local"
    )
    document["_wall_s"] = time.perf_counter() - started
    document["_folder"] = folder
    return document


def test_local_audit_profiles_every_notebook_and_reports_cuda_unavailable(local_audit: dict[str, Any]) -> None:
    m = local_audit["measurements"]
    assert local_audit["kind"] == "audit" and local_audit["status"] == "ok", problems(local_audit)
    cpu = {e["path"]: e for e in m["notebooks"] if e["backend"] == "cpu"}
    assert set(cpu) == NOTEBOOKS
    assert all(e["status"] == "ok" and e["wall_s"] > 0.5 and not e["reused"] for e in cpu.values())
    assert cpu["error_cell.ipynb"]["cells_failed"] == 1
    assert m["totals"]["notebooks"] == 6 and m["totals"]["profiled"] == 6
    assert len(local_audit["runs"]) == 6
    cuda = [e for e in m["notebooks"] if e["backend"] == "cuda"]
    assert all(e["status"] == "unavailable" for e in cuda) and len(cuda) == 6
    assert "no GPU devices" in m["backends"]["cuda"]["reason"] and "NBSCOPE_NVML=off" in m["backends"]["cuda"]["reason"]
    assert m["summary"].startswith("0 of 6 lectures could be compared on cpu and cuda: cuda unavailable")
    html = (local_audit["_folder"] / "a.html").read_text()
    assert "jax_small.md" in html and "<table>" in html


def test_second_audit_reuses_every_notebook(local_audit: dict[str, Any]) -> None:
    folder = local_audit["_folder"]
    result = nbscope("audit", BOOK, "--db", folder / "local.db", "--json", cwd=folder)
    assert result.returncode == 0, result.stderr
    totals = json.loads(result.stdout)["measurements"]["totals"]
    assert (totals["reused"], totals["profiled"]) == (6, 0), problems(local_audit)


def test_dask_local_cluster_gives_the_same_notebook_records(
    local_audit: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("NBSCOPE_NVML", "off")  # as in the other audits here (the workers inherit it)
    from nbscope.api.audit import AuditOptions, audit, export_audit

    store = Store(tmp_path / "dask.db")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, resources={"CPU": 1}
    ) as cluster:
        record = audit(BOOK, AuditOptions(backends=["cpu", "cuda"], dask=cluster.scheduler_address), store=store)
    document = json.loads(export_audit(record, tmp_path / "dask.json", store=store).read_text())
    assert cells_by_notebook(document) == cells_by_notebook(local_audit), (problems(document), problems(local_audit))
    entries = [e for e in record.measurements["notebooks"] if e["backend"] == "cpu"]
    assert {e["path"] for e in entries} == NOTEBOOKS
    assert all(e["worker"]["dask"].startswith("tcp://") for e in entries)  # each ran on a Dask worker
    assert len({e["worker"]["pid"] for e in entries}) == 2
    runs = store.runs(kind="profile")
    assert len(runs) == 6 and all(r["digest"] == e["digest"] for r in runs for e in entries[:1])
    assert record.measurements["backends"]["cuda"]["available"] is False  # no worker declares a GPU resource


def test_shards_merged_cover_exactly_the_unsharded_audit(local_audit: dict[str, Any], tmp_path: Path) -> None:
    # Both shards at once, as two CI jobs would run them (and in half the time).
    env = audit_env()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nbscope",
                "audit",
                BOOK,
                "--shard",
                f"{i}/2",
                "--db",
                tmp_path / f"shard{i}.db",
                "-o",
                tmp_path / f"shard{i}.json",
                "-q",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
    shards = [json.loads((tmp_path / f"shard{i}.json").read_text()) for i in (1, 2)]
    paths = [{e["path"] for e in s["measurements"]["notebooks"]} for s in shards]
    assert paths[0].isdisjoint(paths[1])
    result = nbscope(
        "merge",
        tmp_path / "shard1.json",
        tmp_path / "shard2.json",
        "--db",
        tmp_path / "merged.db",
        "-o",
        tmp_path / "merged.json",
        "--markdown",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    unsharded = {e["path"] for e in local_audit["measurements"]["notebooks"]}
    assert {e["path"] for e in merged["measurements"]["notebooks"]} == unsharded == paths[0] | paths[1]
    assert merged["measurements"]["coverage"]["missing"] == []
    assert cells_by_notebook(merged) == cells_by_notebook(local_audit), (problems(merged), problems(local_audit))
    assert "| Lecture | CPU |" in result.stdout


def test_killed_audit_resumes_without_rerunning_finished_notebooks(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    env = audit_env()
    process = subprocess.Popen(
        [sys.executable, "-m", "nbscope", "audit", BOOK, "--workers", "1", "--db", db, "-q"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    finished: list[dict[str, Any]] = []
    while len(finished) < 2:
        assert process.poll() is None, "the audit ended before it could be killed"
        assert time.monotonic() < deadline, "no two notebooks finished in 300 s"
        time.sleep(0.2)
        if db.exists():
            finished = Store(db).runs(kind="profile")
    descendants = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # The pool processes and their kernels follow the killed audit instead of running on as orphans.
    _, alive = psutil.wait_procs(descendants, timeout=20)
    assert not alive, f"still running after the audit was killed: {alive}"
    before = {r["target"]: r["id"] for r in Store(db).runs(kind="profile")}
    assert len(before) >= 2 and not Store(db).runs(kind="audit")

    result = nbscope("audit", BOOK, "--workers", "2", "--db", db, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["measurements"]["notebooks"]
    reused = {e["target"]: e["run_id"] for e in entries if e["reused"]}
    assert reused == before  # every finished notebook reused, with its stored run
    assert all(e["status"] == "ok" for e in entries), [(e["path"], e["status"], e["error"]) for e in entries]
    profiles = Store(db).runs(kind="profile")
    assert len(profiles) == 6 and len({r["target"] for r in profiles}) == 6  # nothing ran twice


@pytest.mark.corpus
def test_audit_of_the_book_and_the_corpus_lectures_with_two_workers(audited_corpus: dict[str, Any]) -> None:
    document = audited_corpus  # the session's one audit of them (tests/conftest.py), also read by test_corpus.py
    m = document["measurements"]
    entries = {e["path"].rsplit("/", 1)[-1]: e for e in m["notebooks"]}
    assert len(entries) == 8 and all(e["status"] == "ok" for e in entries.values()), problems(document)
    for name in LECTURES:
        assert entries[name]["wall_s"] > 5 and entries[name]["compile_s"] > 0
    assert entries["jax_intro.md"]["cells_failed"] == 0  # its raises-exception cell is an expected error
    print(
        f"\naudit of 6 small notebooks + 2 corpus lectures, --workers 2: {document['_wall_s']:.1f} s "
        f"(notebooks' own wall {m['totals']['cpu_s']:.1f} s)"
    )
