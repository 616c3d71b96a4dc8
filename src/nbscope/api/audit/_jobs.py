"""One audit job: profile one notebook on one backend, in whatever process or Dask worker runs it.

A job travels as a plain dataclass and comes back as a plain dict (the whole run record as a dict, or
an error), so it pickles for process pools and Dask alike. The parent saves records; a worker never
writes to the store, so a worker on another machine needs no access to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope.schema.codec import Measured, decode

if TYPE_CHECKING:
    from nbscope.api.profile import RunSpec

_FINGERPRINT: dict[str, Any] | None = None


@dataclass
class Job:
    """What a worker needs to profile one notebook on one backend."""

    key: str  # book-relative path: the notebook's name in the audit
    path: str  # absolute path on the machine that planned the audit
    target: str  # the store target of its profile records
    backend: str  # as asked for (cpu, cuda, gpu, ...)
    platform: str  # the JAX_PLATFORMS value
    source_hash: str  # of the whole file
    timeout: float | None = None  # per cell
    env: dict[str, str] = field(default_factory=dict)  # for the kernel
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES value it was pinned to (local scheduling)
    live_path: str | None = None  # where cell records stream; None: a temporary file, removed on success
    content: bytes | None = None  # the file itself, for workers that may not share the file system
    index: int = 0
    forecast: list[str] = field(default_factory=list)  # GPUs to forecast for: record program data (CPU jobs)
    label: str | None = None  # the audit's --label: it travels with the job to a worker on another machine

    @property
    def is_gpu(self) -> bool:
        return self.platform != "cpu"

    def spec(self) -> RunSpec:
        """The profile this job runs."""
        from nbscope.api.profile import RunSpec

        return RunSpec(
            timeout=self.timeout,
            env=dict(self.env),
            jax_platform=self.platform,
            forecast=tuple(self.forecast),
            label=self.label,
        )


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's result as the parent reads it (decoded from the plain dict a worker sends back)."""

    ok: bool
    record: Mapping[str, Any] | None  # the profile's document
    error: str | None
    retryable: bool  # failed for a reason outside its notebook: worth one more try
    worker: Any  # host, pid, Dask address
    elapsed_s: Measured

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> JobResult:
        return decode(cls, document)


def file_hash(path: str | Path) -> str:
    """First 16 hex digits of SHA-256 of the whole file: any edit, code or prose, makes a new version."""
    from nbscope._files import read_bounded

    return hashlib.sha256(read_bounded(path, what="notebook", note=False)).hexdigest()[:16]


def worker_fingerprint() -> dict[str, Any]:
    """This process's fingerprint, collected once (it takes ~0.3 s and does not change under a worker)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from nbscope.collect import fingerprint as fp

        _FINGERPRINT = fp.collect()
    return _FINGERPRINT


def _notebook_path(job: Job, scratch: list[Path]) -> Path:
    """The notebook to run: the planner's file if this worker sees it unchanged, else the shipped copy."""
    from nbscope._errors import NbscopeError

    path = Path(job.path)
    if path.is_file() and file_hash(path) == job.source_hash:
        return path
    if job.content is not None:
        folder = Path(tempfile.mkdtemp(prefix="nbscope-audit-"))
        scratch.append(folder)
        copy = folder / path.name
        copy.write_bytes(job.content)
        return copy
    if path.is_file():
        raise NbscopeError(f"{job.key} changed while the audit ran (source hash differs)")
    raise NbscopeError(f"{job.path}: not found on {socket.gethostname()}")


def run_job(job: Job, fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Profile ``job`` here; never raises: failures come back as ``{"ok": False, "error": ...}``."""
    import shutil

    from nbscope._errors import NbscopeError

    started = time.perf_counter()
    result: dict[str, Any] = {
        "key": job.key,
        "backend": job.backend,
        "ok": False,
        "record": None,
        "error": None,
        "worker": {"host": socket.gethostname(), "pid": os.getpid(), "dask": _dask_worker_address()},
        "retryable": False,
    }
    scratch: list[Path] = []
    live_path = Path(job.live_path) if job.live_path else None
    temporary_live = live_path is None
    if temporary_live:
        handle, name = tempfile.mkstemp(prefix="nbscope-live-", suffix=".jsonl")
        os.close(handle)
        live_path = Path(name)
    try:
        from nbscope.api.profile import profile

        path = _notebook_path(job, scratch)
        record = profile(
            path, job.spec(), store=None, fingerprint=fingerprint or worker_fingerprint(), live_path=live_path
        )
        result["record"] = record.to_dict()
        result["ok"] = True
    except NbscopeError as exc:
        result["error"] = str(exc)
        # The notebook's own problems (unreadable, missing) fail again; a kernel that did not start may not.
        result["retryable"] = str(exc).startswith("could not start kernel")
    except KeyboardInterrupt:
        result["error"] = "interrupted"
    except Exception as exc:  # a bug or an environment problem in one notebook must not end the audit
        result["error"] = f"{type(exc).__name__}: {exc}".strip()
        result["retryable"] = True
    finally:
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)
        if temporary_live and result["ok"] and live_path is not None:
            live_path.unlink(missing_ok=True)  # the record came back whole: the side file is redundant
    result["elapsed_s"] = time.perf_counter() - started
    return result


def run_job_in_thread(job: Job, fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run_job`` on a fresh thread with its own event loop, closed afterwards.

    Dask runs tasks on a reused worker thread pool; nbclient drives the kernel through asyncio, and a
    loop left set on a pooled thread (or shared between two tasks) leaks or collides.
    """
    box: dict[str, Any] = {}
    address = _dask_worker_address()  # only the task's own thread knows its worker

    def target() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            box["result"] = run_job(job, fingerprint)
        finally:
            current = asyncio.get_event_loop_policy().get_event_loop()
            for each in {loop, current}:
                if not each.is_running():
                    each.close()
            asyncio.set_event_loop(None)

    thread = threading.Thread(target=target, name=f"nbscope-audit-{job.index}", daemon=True)
    thread.start()
    thread.join()
    result = box.get("result") or {
        "key": job.key,
        "backend": job.backend,
        "ok": False,
        "record": None,
        "error": "job thread failed",
        "worker": {"host": socket.gethostname(), "pid": os.getpid()},
        "elapsed_s": None,
    }
    result["worker"]["dask"] = address
    return result


def _dask_worker_address() -> str | None:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return None


def init_local_worker(parent_pid: int) -> None:
    """Initializer of local pool processes: follow the parent's lifetime.

    Ctrl-C is left to the parent (it cancels, saves the partial audit, then stops the pool). If the parent
    dies without that (SIGKILL), the pool would run on and its kernels with it: a watchdog kills this
    process's children (the kernels) and exits once the parent is gone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="nbscope-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            try:
                import psutil

                for child in psutil.Process().children(recursive=True):
                    try:
                        child.kill()
                    except psutil.Error:
                        pass
            finally:
                os._exit(1)
