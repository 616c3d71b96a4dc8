"""Running audit jobs on this machine: CPU jobs up to ``--workers`` at once, GPU jobs one per GPU.

JAX preallocates 75 % of a GPU's memory per process, so two unguarded JAX kernels on one GPU starve
each other (book builds lost kernels that way). Each GPU therefore runs one notebook at a time, pinned
with ``CUDA_VISIBLE_DEVICES``; with ``--share-gpu`` it runs ``jobs_per_gpu`` at once, each kernel
capped by ``XLA_PYTHON_CLIENT_MEM_FRACTION`` to its share.

Jobs run in a pool of separate processes (each then starts its kernel): a crash or a stuck event loop
in one cannot touch the others, and nbclient's asyncio use needs no thread care.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from nbscope._errors import NbscopeError
from nbscope.api.audit._jobs import Job, init_local_worker, run_job
from nbscope.schema import process_environment
from nbscope.schema.codec import decode
from nbscope.schema.machine import Machine

# Memory left to the CUDA contexts and cuDNN/cuBLAS workspaces outside XLA's pools when a GPU is shared.
SHARED_GPU_HEADROOM = 0.10

JobFunction = Callable[[Job, dict[str, object] | None], dict[str, object]]
ExecutorFactory = Callable[[int], Executor]


@dataclass
class GpuSlot:
    """One GPU as the scheduler sees it."""

    device: str  # the CUDA_VISIBLE_DEVICES value that selects it
    label: str
    capacity: int  # notebooks at once
    running: int = 0


def gpu_slots(
    fingerprint: dict[str, object], jobs_per_gpu: int = 1, environ: dict[str, str] | None = None
) -> list[GpuSlot]:
    """The GPUs jobs may use: the fingerprint's devices, narrowed to an existing ``CUDA_VISIBLE_DEVICES``.

    Devices are named by UUID where NVML gave one: NVML numbers GPUs in PCI order, CUDA by default
    fastest first, so an index could pin a job to a different GPU than the one listed.
    """
    visible = process_environment.read(environ).cuda_visible_devices
    allowed = None if visible is None else {v.strip() for v in visible.split(",") if v.strip()}
    slots = []
    for position, gpu in enumerate(decode(Machine, fingerprint).gpus):
        index = str(gpu.index if gpu.index is not None else position)
        if allowed is not None and index not in allowed and (gpu.uuid is None or gpu.uuid not in allowed):
            continue
        slots.append(
            GpuSlot(device=gpu.uuid or index, label=f"{index}: {gpu.name or 'GPU'}", capacity=max(1, jobs_per_gpu))
        )
    return slots


def memory_fraction(jobs_per_gpu: int) -> str:
    """Each sharing kernel's XLA_PYTHON_CLIENT_MEM_FRACTION: an equal share of what the headroom leaves."""
    share = (1.0 - SHARED_GPU_HEADROOM) / max(1, jobs_per_gpu)
    return f"{int(share * 100) / 100:.2f}"  # rounded down: shares must never add up to more than the GPU


def gpu_env(slot: GpuSlot, share: bool, jobs_per_gpu: int) -> dict[str, str]:
    # CUDA_DEVICE_ORDER: an index then means NVML's (and nvidia-smi's) numbering
    env = {"CUDA_VISIBLE_DEVICES": slot.device, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if share:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = memory_fraction(jobs_per_gpu)
    return env


def process_pool(workers: int) -> Executor:
    # spawn, not fork: the parent may hold threads (progress, SQLite) that a fork would copy mid-state.
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_local_worker,
        initargs=(os.getpid(),),
    )


class LocalScheduler:
    """Feeds jobs to an executor while respecting CPU and per-GPU limits; yields results as they finish."""

    def __init__(
        self,
        cpu_workers: int,
        gpus: list[GpuSlot],
        *,
        share_gpu: bool = False,
        jobs_per_gpu: int = 1,
        fingerprint: dict[str, object] | None = None,
        executor_factory: ExecutorFactory | None = None,
        job_function: JobFunction | None = None,
    ) -> None:
        if cpu_workers < 1:
            raise NbscopeError("--workers must be at least 1")
        self.cpu_workers = cpu_workers
        self.gpus = gpus
        self.share_gpu = share_gpu
        self.jobs_per_gpu = jobs_per_gpu if share_gpu else 1
        self.fingerprint = fingerprint
        self.executor_factory = executor_factory or process_pool
        self.job_function = job_function or run_job
        self.executor: Executor | None = None

    def run(
        self, jobs: list[Job], on_start: Callable[[Job], None] | None = None
    ) -> Iterator[tuple[Job, dict[str, object]]]:
        """Run every job; yields ``(job as run, result)`` in completion order."""
        if not jobs:
            return
        if any(j.is_gpu for j in jobs) and not self.gpus:
            raise NbscopeError("GPU jobs were planned but this machine lists no GPU")
        size = min(len(jobs), self.cpu_workers + sum(g.capacity for g in self.gpus))
        pending = deque(jobs)
        running: dict[Future[dict[str, object]], tuple[Job, GpuSlot | None]] = {}
        cpu_busy = 0
        self.executor = self.executor_factory(size)
        try:
            while pending or running:
                # Start every job a free slot allows, in plan order; a job waiting for a GPU does not
                # hold back CPU jobs behind it.
                for planned in list(pending):
                    job, slot = planned, None
                    if job.is_gpu:
                        slot = next((g for g in self.gpus if g.running < g.capacity), None)
                        if slot is None:
                            continue
                        slot.running += 1
                        job = replace(
                            job, gpu=slot.device, env={**job.env, **gpu_env(slot, self.share_gpu, self.jobs_per_gpu)}
                        )
                    else:
                        if cpu_busy >= self.cpu_workers:
                            continue
                        cpu_busy += 1
                    pending.remove(planned)
                    if on_start is not None:
                        on_start(job)
                    running[self.executor.submit(self.job_function, job, self.fingerprint)] = (job, slot)
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                broken = False
                for future in done:
                    job, slot = running.pop(future)
                    if slot is not None:
                        slot.running -= 1
                    else:
                        cpu_busy -= 1
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        broken = True
                        result = failed_result(job, "a worker process died (this notebook or one running beside it)")
                    except Exception as exc:
                        result = failed_result(job, f"{type(exc).__name__}: {exc}")
                    yield job, result
                if broken:  # every job still in that pool is lost with it; carry on in a fresh one
                    self.executor.shutdown(wait=False, cancel_futures=True)
                    self.executor = self.executor_factory(size)
        finally:
            self.close(kill=bool(running))

    def close(self, *, kill: bool = False) -> None:
        """Stop the pool; with ``kill`` (an interrupted audit) end its processes now, and so their kernels."""
        executor, self.executor = self.executor, None
        if executor is None:
            return
        processes = list(getattr(executor, "_processes", {}).values()) if kill else []
        # The kernels a pool process started (each in a session of its own) and what they started: found
        # before their parent goes, since after that they belong to init.
        descendants = _descendants([p.pid for p in processes if p.pid is not None]) if kill else []
        leftovers = _kernel_files(descendants)
        executor.shutdown(wait=not kill, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.kill()
        for child in descendants:
            try:
                child.kill()
            except Exception:  # already gone
                pass
        for process in processes:
            process.join(timeout=10)
        for path in leftovers:  # what the killed processes' cleanup would have removed
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _kernel_files(processes: list[psutil.Process]) -> list[Path]:
    """What the kernels nbscope started (its probe argument on their command line) left: each one's connection file
    (``-f FILE``: its key and ports) and probe home (``NBSCOPE_PROBE_OUT``'s folder); never a notebook's files."""
    from nbscope.collect.inject import PROBE_ARGUMENT

    found: list[Path] = []
    for process in processes:
        with contextlib.suppress(Exception):  # gone, or not a kernel nbscope started
            argv: list[str] = process.cmdline()
            if PROBE_ARGUMENT not in argv:
                continue
            found.append(Path(argv[argv.index("-f") + 1]))
            home = Path(process.environ()["NBSCOPE_PROBE_OUT"]).parent
            found += [home] if home.name.startswith("nbscope-probe-") else []
    return found


def _descendants(pids: list[int]) -> list[psutil.Process]:
    found: list[psutil.Process] = []
    for pid in pids:
        try:
            found += psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            continue
    return found


def failed_result(job: Job, error: str) -> dict[str, object]:
    """The result of a job that did not finish (its worker died, or its executor failed it): retryable, no record."""
    return {
        "key": job.key,
        "backend": job.backend,
        "ok": False,
        "record": None,
        "error": error,
        "worker": None,
        "elapsed_s": None,
        "retryable": True,
    }
