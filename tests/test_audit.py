"""nbscope audit without kernels: discovery, shards, backends, GPU scheduling, resuming, merge, rendering.

Jobs here run through a fake job function on threads (no kernels), so every scheduling and resuming rule
is checked in seconds; tests/test_audit_run.py runs real notebooks.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.api.audit import (
    AuditOptions,
    Job,
    LocalScheduler,
    audit,
    discover,
    export_audit,
    gpu_slots,
    local_availability,
    memory_fraction,
    merge,
    parse_backends,
    parse_shard,
    select_shard,
)
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.schema.audit import Audit
from nbscope.schema.codec import decode, encode

BOOK = Path(__file__).resolve().parent / "files" / "audit_book"
NOTEBOOKS = [
    "sleep_numpy.ipynb",
    "numpy_stats.md",
    "chapters/pure_python.md",
    "jax_small.md",
    "numba_small.ipynb",
    "error_cell.ipynb",
]


# --- discovery -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [BOOK, BOOK / "_toc.yml", BOOK / "myst.yml"])
def test_toc_myst_and_folder_list_the_same_notebooks_in_book_order(target: Path) -> None:
    book = discover(target)
    assert book.keys == NOTEBOOKS
    assert book.root == BOOK
    assert book.skipped == [{"path": "intro.md", "reason": "no code cells"}]
    assert book.source == ("myst" if target.name == "myst.yml" else "toc")


def test_folder_without_config_is_scanned_skipping_build_output(tmp_path: Path) -> None:
    shutil.copytree(BOOK, tmp_path / "book", ignore=shutil.ignore_patterns("_toc.yml", "myst.yml"))
    (tmp_path / "book" / "_build" / "html").mkdir(parents=True)
    shutil.copy(BOOK / "jax_small.md", tmp_path / "book" / "_build" / "html" / "copy.md")
    (tmp_path / "book" / ".ipynb_checkpoints").mkdir()
    shutil.copy(BOOK / "error_cell.ipynb", tmp_path / "book" / ".ipynb_checkpoints" / "x.ipynb")
    book = discover(tmp_path / "book")
    assert book.source == "directory"
    assert sorted(book.keys) == sorted(NOTEBOOKS)


def test_glob_single_file_and_several_targets() -> None:
    book = discover(str(BOOK / "**" / "*.md"))
    assert book.source == "glob" and book.root == BOOK
    assert book.keys == ["chapters/pure_python.md", "jax_small.md", "numpy_stats.md"]
    assert discover(BOOK / "jax_small.md").keys == ["jax_small.md"]
    several = discover([BOOK / "jax_small.md", BOOK / "chapters" / "pure_python.md", BOOK / "jax_small.md"])
    assert several.keys == ["jax_small.md", "chapters/pure_python.md"]  # the duplicate is audited once


def test_toc_entry_without_suffix_prefers_ipynb_like_jupyter_book(tmp_path: Path) -> None:
    shutil.copy(BOOK / "error_cell.ipynb", tmp_path / "page.ipynb")
    shutil.copy(BOOK / "jax_small.md", tmp_path / "page.md")
    shutil.copy(BOOK / "numpy_stats.md", tmp_path / "other.md")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: page\nchapters:\n- file: other\n- glob: sub/*\n")
    assert discover(tmp_path).keys == ["page.ipynb", "other.md"]


@pytest.mark.parametrize(
    ("toc", "message"),
    [
        ("root: intro\nchapters:\n- file: nowhere\n", "entry 'nowhere' names no file"),
        ("root: intro\nchapters: {file: a}\n", "'chapters' must be a list"),
        ("root: [unclosed\n", "not valid YAML"),
        ("- just a list\n", "expected a mapping"),
    ],
)
def test_bad_tables_of_contents_are_one_line_errors(tmp_path: Path, toc: str, message: str) -> None:
    (tmp_path / "intro.md").write_text("# intro\n")
    (tmp_path / "_toc.yml").write_text(toc)
    with pytest.raises(NbscopeError, match=message) as info:
        discover(tmp_path)
    assert "\n" not in str(info.value)


def test_missing_targets_and_empty_books_are_errors(tmp_path: Path) -> None:
    with pytest.raises(NbscopeError, match="no such file or directory"):
        discover(tmp_path / "nothing")
    with pytest.raises(NbscopeError, match="no .ipynb or .md files match"):
        discover(str(tmp_path / "*.ipynb"))
    (tmp_path / "readme.md").write_text("# only prose\n")
    with pytest.raises(NbscopeError, match="no notebooks with code cells"):
        discover(tmp_path)
    (tmp_path / "myst.yml").write_text("version: 1\nproject:\n  toc:\n    - file: missing.md\n")
    with pytest.raises(NbscopeError, match="missing.md"):
        discover(tmp_path / "myst.yml")


# --- shards ------------------------------------------------------------------------------------------


def test_shards_partition_the_book_deterministically() -> None:
    shards = [select_shard(NOTEBOOKS, i, 3) for i in (1, 2, 3)]
    assert sorted(k for s in shards for k in s) == sorted(NOTEBOOKS)
    assert all(len(s) == 2 for s in shards)
    assert select_shard(list(reversed(NOTEBOOKS)), 2, 3) == list(reversed(shards[1]))  # same set, any order
    assert select_shard(NOTEBOOKS, 1, 1) == NOTEBOOKS
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        with pytest.raises(NbscopeError, match="--shard"):
            parse_shard(bad)


# --- backends and GPUs ---------------------------------------------------------------------------


def test_backends_are_validated() -> None:
    assert parse_backends("cpu, CUDA") == ["cpu", "cuda"]
    with pytest.raises(NbscopeError, match="unknown backend 'quantum'"):
        parse_backends("cpu,quantum")
    for twice in ("cpu,cpu", "cuda,gpu"):
        with pytest.raises(NbscopeError, match="twice"):
            parse_backends(twice)
    with pytest.raises(NbscopeError, match="at least one"):
        parse_backends(" , ")


def test_unavailable_gpu_backend_is_reported_with_its_reason(monkeypatch: pytest.MonkeyPatch, fake_nvml: Any) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    no_gpu = {"gpu": {"devices": fp.absent("NVML unavailable: NVMLError_LibraryNotFound")}}
    availability = local_availability(["cpu", "cuda", "rocm"], no_gpu)
    assert availability["cpu"].available
    assert not availability["cuda"].available
    assert "no GPU devices in the fingerprint (NVML unavailable" in str(availability["cuda"].reason)
    assert not availability["rocm"].available
    two_gpus = fp.collect(nvml=fake_nvml)
    assert local_availability(["cuda"], two_gpus)["cuda"].available
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    slots = gpu_slots(two_gpus)
    assert [s.label.split(":")[0] for s in slots] == ["1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in str(local_availability(["cuda"], two_gpus)["cuda"].reason)


class Recorder:
    """A fake job function: records how many jobs ran at once per device, returns a synthetic profile."""

    def __init__(self, walls: dict[tuple[str, str], float] | None = None, delay: float = 0.05) -> None:
        self.walls = walls or {}
        self.delay = delay
        self.lock = threading.Lock()
        self.now: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)
        self.jobs: list[Job] = []

    def __call__(self, job: Job, fingerprint: dict[str, Any] | None) -> dict[str, Any]:
        device = job.env.get("CUDA_VISIBLE_DEVICES", "cpu") if job.is_gpu else "cpu"
        with self.lock:
            self.jobs.append(job)
            self.now[device] += 1
            self.peak[device] = max(self.peak[device], self.now[device])
        time.sleep(self.delay)
        with self.lock:
            self.now[device] -= 1
        wall = self.walls.get((job.key, job.backend), 1.0)
        record = RunRecord(
            kind="profile",
            target=job.target,
            fingerprint=fingerprint or {},
            settings={"jax_platform": job.platform, "env": job.env},
            measurements={
                "totals": {"wall_s": wall, "compile_s": 0.1, "cells": 1, "cells_failed": 0},
                "runner": {"total_s": wall + 0.5, "execute_s": wall},
                "cells": [{"index": 0, "source_hash": job.source_hash, "status": "ok", "wall_s": wall}],
            },
        ).finish("ok")
        return {
            "key": job.key,
            "backend": job.backend,
            "ok": True,
            "record": record.to_dict(),
            "error": None,
            "worker": {"host": "test", "pid": 0},
            "elapsed_s": self.delay,
        }


def _jobs(count: int, platform: str) -> list[Job]:
    return [
        Job(
            key=f"n{i}.md",
            path=f"/x/n{i}.md",
            target=f"n{i}.md",
            backend=platform,
            platform=platform,
            source_hash="h",
            index=i,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("share", [False, True])
def test_gpu_jobs_run_one_per_gpu_unless_shared(monkeypatch: pytest.MonkeyPatch, fake_nvml: Any, share: bool) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fingerprint = fp.collect(nvml=fake_nvml)
    per_gpu = 2 if share else 1
    slots = gpu_slots(fingerprint, per_gpu)
    assert len(slots) == 2
    recorder = Recorder(delay=0.08)
    scheduler = LocalScheduler(
        2,
        slots,
        share_gpu=share,
        jobs_per_gpu=per_gpu,
        fingerprint=fingerprint,
        executor_factory=lambda n: ThreadPoolExecutor(max_workers=n),
        job_function=recorder,
    )
    cuda = _jobs(8, "cuda")
    cpu = [Job(**{**j.__dict__, "index": j.index + 100, "key": "c" + j.key}) for j in _jobs(5, "cpu")]
    results = list(scheduler.run(cuda + cpu))
    assert len(results) == 13 and all(r["ok"] for _, r in results)
    devices = {s.device for s in slots}
    assert set(recorder.peak) == devices | {"cpu"}  # both GPUs used, each pinned by its UUID
    assert all(recorder.peak[d] == per_gpu for d in devices)
    assert recorder.peak["cpu"] <= 2
    fractions = {j.env.get("XLA_PYTHON_CLIENT_MEM_FRACTION") for j in recorder.jobs if j.is_gpu}
    assert fractions == ({memory_fraction(2)} if share else {None})
    assert memory_fraction(2) == "0.45"
    assert all("CUDA_VISIBLE_DEVICES" not in j.env for j in recorder.jobs if not j.is_gpu)


# --- audits with fake jobs: resuming, GPU comparison, merge ------------------------------------------


def _fake_audit(target: Any, store: Store, fingerprint: dict[str, Any], recorder: Any, **options: Any) -> RunRecord:
    return audit(
        target,
        AuditOptions(**options),
        store=store,
        fingerprint=fingerprint,
        executor_factory=lambda n: ThreadPoolExecutor(max_workers=n),
        job_function=recorder,
    )


def _written_back(record: RunRecord) -> str:
    """An audit's measurements read into the typed model and written again, key order and all."""
    return json.dumps(encode(decode(Audit, record.measurements)))


@pytest.fixture
def no_gpu() -> dict[str, Any]:
    fingerprint = fp.collect(nvml=None)
    fingerprint["gpu"] = {"devices": fp.absent("NVML unavailable: test")}
    fingerprint["digest"] = fp.digest(fingerprint)
    return fingerprint


def test_audit_resumes_from_the_store_and_reruns_only_changed_notebooks(
    tmp_path: Path, tmp_db: Path, no_gpu: dict[str, Any]
) -> None:
    book = tmp_path / "book"
    shutil.copytree(BOOK, book)
    store = Store(tmp_db)
    first = Recorder()
    record = _fake_audit(book, store, no_gpu, first, backends=["cpu", "cuda"], workers=2, label="nightly")
    assert record.label == "nightly" and {job.label for job in first.jobs} == {
        "nightly"
    }  # in the options, not os.environ
    t = record.measurements["totals"]
    assert (t["notebooks"], t["profiled"], t["reused"], t["unavailable"]) == (6, 6, 0, 6)
    assert record.kind == "audit" and record.run_id is not None
    entry = record.measurements["notebooks"][0]
    assert set(entry) >= {"path", "source_hash", "backend", "run_id", "status", "wall_s", "compile_s", "top_finding"}
    assert "0 of 6 lectures could be compared on cpu and cuda: cuda unavailable" in record.measurements["summary"]

    again = Recorder()
    record = _fake_audit(book, store, no_gpu, again, backends=["cpu", "cuda"], workers=2)
    assert again.jobs == [] and record.measurements["totals"]["reused"] == 6

    (book / "numpy_stats.md").write_text((book / "numpy_stats.md").read_text() + "\nA new paragraph.\n")
    changed = Recorder()
    record = _fake_audit(book, store, no_gpu, changed)
    assert [j.key for j in changed.jobs] == ["numpy_stats.md"]

    other_env = dict(no_gpu, digest="another-env")
    assert len(_fake_audit(book, store, other_env, Recorder()).measurements["notebooks"]) == 6
    forced = Recorder()
    _fake_audit(book, store, no_gpu, forced, force=True)
    assert len(forced.jobs) == 6
    profiles = store.runs(kind="profile")
    assert len(profiles) == 6 + 1 + 6 + 6
    stored = store.get(profiles[0]["id"]).measurements["audit"]
    assert set(stored) >= {"source_hash", "backend", "path", "book"}


def test_a_job_that_failed_outside_its_notebook_is_tried_once_more(tmp_db: Path, no_gpu: dict[str, Any]) -> None:
    recorder = Recorder()
    calls: list[str] = []

    def flaky(job: Job, fingerprint: dict[str, Any] | None) -> dict[str, Any]:
        calls.append(job.key)
        if job.key == "jax_small.md" and calls.count(job.key) == 1:
            return {
                "key": job.key,
                "backend": job.backend,
                "ok": False,
                "record": None,
                "retryable": True,
                "error": "could not start kernel 'python3': TimeoutError",
            }
        if job.key == "numpy_stats.md":  # the notebook's own problem: no second try
            return {
                "key": job.key,
                "backend": job.backend,
                "ok": False,
                "record": None,
                "retryable": False,
                "error": "numpy_stats.md: not a readable MyST notebook",
            }
        return recorder(job, fingerprint)

    record = _fake_audit(BOOK, Store(tmp_db), no_gpu, flaky, workers=2)
    entries = {e["path"]: e for e in record.measurements["notebooks"]}
    assert calls.count("jax_small.md") == 2 and entries["jax_small.md"]["attempts"] == 2
    assert entries["jax_small.md"]["status"] == "ok"
    assert calls.count("numpy_stats.md") == 1 and entries["numpy_stats.md"]["status"] == "error"
    assert record.status == "partial" and record.measurements["totals"]["failed"] == 1


def test_gpu_audit_names_the_winner_and_counts_lectures_slower_on_the_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_db: Path, fake_nvml: Any
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fingerprint = fp.collect(nvml=fake_nvml)
    walls = {(k, "cuda"): 3.0 for k in NOTEBOOKS[:4]} | {(k, "cuda"): 0.2 for k in NOTEBOOKS[4:]}
    recorder = Recorder(walls)
    record = _fake_audit(BOOK, Store(tmp_db), fingerprint, recorder, backends=["cpu", "cuda"], workers=2)
    m = record.measurements
    assert m["summary"] == "4 of 6 lectures are slower on the GPU (cuda)"
    assert (m["totals"]["compared"], m["totals"]["slower_on_gpu"]) == (6, 4)
    rows = {r["path"]: r for r in m["lectures"]}
    assert rows["jax_small.md"]["winner"] == "cpu" and rows["jax_small.md"]["ratio"] == pytest.approx(3.0)
    assert rows["error_cell.ipynb"]["winner"] == "cuda"
    assert all(j.env["CUDA_VISIBLE_DEVICES"].startswith("GPU-") for j in recorder.jobs if j.is_gpu)
    assert _written_back(record) == json.dumps(m)  # the typed model reads and writes the stored audit unchanged


def test_merge_joins_shards_and_prefers_measured_runs(
    tmp_path: Path, no_gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch, fake_nvml: Any
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    files = []
    for index in (1, 2):
        store = Store(tmp_path / f"shard{index}.db")
        record = _fake_audit(BOOK, store, no_gpu, Recorder(), backends=["cpu", "cuda"], shard=f"{index}/2")
        assert len(record.measurements["notebooks"]) == 6  # 3 notebooks × 2 backends
        files.append(export_audit(record, tmp_path / f"shard{index}.json", store=store))
    gpu_store = Store(tmp_path / "gpu.db")
    gpu_record = _fake_audit(
        BOOK, gpu_store, fp.collect(nvml=fake_nvml), Recorder({(k, "cuda"): 0.1 for k in NOTEBOOKS}), backends=["cuda"]
    )
    gpu_file = export_audit(gpu_record, tmp_path / "gpu.json", store=gpu_store)
    assert len(json.loads(gpu_file.read_text())["runs"]) == 6

    merged_store = Store(tmp_path / "merged.db")
    shards_only = merge(files[:1], store=merged_store, fingerprint=no_gpu)
    assert shards_only.status == "partial" and len(shards_only.measurements["coverage"]["missing"]) == 3

    merged = merge([*files, gpu_file], store=merged_store, fingerprint=no_gpu)
    m = merged.measurements
    assert m["coverage"]["missing"] == [] and m["coverage"]["shards"] == ["1/2", "2/2"]
    assert [r["path"] for r in m["lectures"]] != [] and {r["path"] for r in m["lectures"]} == set(NOTEBOOKS)
    assert all(e["status"] == "ok" for e in m["notebooks"])  # GPU runs replaced "cuda unavailable"
    assert m["summary"] == "0 of 6 lectures are slower on the GPU (cuda)"
    assert merged.status == "ok"
    imported = [e["run_id"] for e in m["notebooks"]]
    assert all(isinstance(i, int) for i in imported)
    assert merged_store.get(imported[0]).kind == "profile"
    assert _written_back(merged) == json.dumps(m)
    again = merge([*files, gpu_file], store=merged_store, fingerprint=no_gpu)  # runs are imported once
    assert [e["run_id"] for e in again.measurements["notebooks"]] == imported


def test_merge_refuses_what_is_not_an_audit(tmp_path: Path, no_gpu: dict[str, Any]) -> None:
    profile = RunRecord(kind="profile", target="x.md", fingerprint=no_gpu, measurements={"totals": {}})
    (tmp_path / "profile.json").write_text(profile.to_json())
    with pytest.raises(NbscopeError, match="is a profile run, not an audit"):
        merge([tmp_path / "profile.json"], fingerprint=no_gpu)
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(NbscopeError, match="not valid JSON"):
        merge([tmp_path / "junk.json"], fingerprint=no_gpu)


# --- rendering ---------------------------------------------------------------------------------------


def test_reports_escape_notebook_text(
    tmp_path: Path, no_gpu: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from nbscope.render.audit import audit_html, audit_markdown, print_audit

    page = tmp_path / "<script>alert(1) [red]x.md"
    shutil.copy(BOOK / "jax_small.md", page)
    record = _fake_audit(page, Store(tmp_path / "s.db"), no_gpu, Recorder(), backends=["cpu", "cuda"])
    for text in (audit_html(record),):
        assert "<script>alert" not in text and "&lt;script&gt;alert(1)" in text
    markdown = audit_markdown(record)
    assert "| Lecture | CPU | cuda | Winner |" in markdown and "cuda unavailable" in markdown
    print_audit(record)
    out = capsys.readouterr().out
    assert "[red]x" in out and "could be compared" in out


def test_cli_bad_input_is_one_line(run_cli: Any, tmp_path: Path) -> None:
    for args, message in (
        (["audit", tmp_path / "nothing"], "no such file or directory"),
        (["audit", BOOK, "--shard", "3/2"], "--shard"),
        (["audit", BOOK, "--backends", "cpu,quantum"], "unknown backend"),
        (["audit", BOOK, "--workers", "0"], "--workers must be at least 1"),
        (["merge", BOOK / "_toc.yml"], "not valid JSON"),
    ):
        result = run_cli(*args, "--db", tmp_path / "s.db")
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
