"""Running audit jobs on a Dask distributed cluster.

GPU jobs ask for the worker resource ``GPU`` (1, or 1/k with ``--share-gpu``), so a worker started with
``--resources GPU=1`` (one worker per GPU, as dask-cuda starts them, each with its own
``CUDA_VISIBLE_DEVICES``) runs one notebook at a time on its GPU. CPU jobs ask for nothing: they take a
worker thread. Results (whole run records, each with the fingerprint of the worker that ran it) stream
back as they finish and are saved by the caller in its own store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.api.audit._jobs import Job, run_job_in_thread, worker_fingerprint
from nbscope.api.audit._schedule import failed_result, memory_fraction
from nbscope.schema.codec import decode
from nbscope.schema.dask_scheduler import DaskScheduler
from nbscope.schema.machine import Machine


class DaskRunner:
    """A connection to a cluster (``local[:N]`` starts a LocalCluster of N single-threaded processes)."""

    def __init__(self, address: str, *, workers: int = 2, connect_timeout: float = 30.0) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise NbscopeError("--dask needs dask.distributed: pip install 'nbscope[dask]'") from None
        self.cluster = None
        address = address.strip()
        if address == "local" or address.startswith("local:"):
            count = address.partition(":")[2]
            if count and units.whole(count, 1) is None:
                raise NbscopeError("--dask: expected local or local:N (N workers, 1 or more)")
            self.cluster = LocalCluster(
                n_workers=units.whole(count) or workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
            address = self.cluster.scheduler_address
        try:
            self.client = Client(address, timeout=connect_timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            if self.cluster is not None:
                self.cluster.close()
            raise NbscopeError(f"--dask {address}: cannot reach the scheduler ({type(exc).__name__})") from None
        self.address = address
        self.fingerprints = self._fingerprints()
        self.machines = {address: decode(Machine, fingerprint) for address, fingerprint in self.fingerprints.items()}

    def _fingerprints(self) -> dict[str, dict[str, object]]:
        """Each worker's fingerprint (its environment digest decides which stored runs can be reused)."""
        if not self._scheduler().workers:
            try:
                self.client.wait_for_workers(1, timeout=30)
            except (TimeoutError, OSError):
                raise NbscopeError(f"--dask {self.address}: the cluster has no workers") from None
        try:
            return dict(self.client.run(worker_fingerprint))
        except (ImportError, ModuleNotFoundError):
            raise NbscopeError(
                f"--dask {self.address}: the workers cannot import nbscope; install it on every worker"
            ) from None

    def _scheduler(self) -> DaskScheduler:
        return decode(DaskScheduler, self.client.scheduler_info())

    def digests(self) -> set[str]:
        return {machine.digest for machine in self.machines.values()}

    def gpu_availability(self) -> tuple[bool, str | None]:
        """Whether some worker both sees a GPU and declares the GPU resource; else why not."""
        workers = self._scheduler().workers
        with_resource = [a for a, worker in workers.items() if (worker.resources.gpu or 0) > 0]
        with_devices = [a for a, machine in self.machines.items() if machine.gpus]
        if with_resource and any(a in with_devices for a in with_resource):
            return True, None
        if with_devices:
            return False, "Dask workers see GPUs but none declares the GPU resource (start them with --resources GPU=1)"
        if with_resource:
            return False, "Dask workers declare a GPU resource but their fingerprints list no GPU devices"
        return False, "no Dask worker has a GPU (no GPU devices in the workers' fingerprints)"

    def run(
        self,
        jobs: list[Job],
        *,
        share_gpu: bool = False,
        jobs_per_gpu: int = 1,
        on_start: Callable[[Job], None] | None = None,
    ) -> Iterator[tuple[Job, dict[str, object]]]:
        from distributed import as_completed

        futures = {}
        for job in jobs:
            resources = None
            if job.is_gpu:
                per_job = 1.0 / jobs_per_gpu if share_gpu else 1.0
                resources = {"GPU": per_job}
                if share_gpu:
                    job = replace(job, env={**job.env, "XLA_PYTHON_CLIENT_MEM_FRACTION": memory_fraction(jobs_per_gpu)})
            future = self.client.submit(
                run_job_in_thread,
                job,
                None,
                resources=resources,
                pure=False,
                key=f"nbscope-audit-{job.index}-{job.backend}-{job.source_hash}",
            )
            futures[future] = job
            if on_start is not None:
                on_start(job)
        try:
            for future in as_completed(list(futures)):
                job = futures.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # KilledWorker, CancelledError, a worker without the notebook's deps
                    result = failed_result(job, f"Dask: {type(exc).__name__}: {exc}".strip())
                yield job, result
        finally:
            if futures:  # interrupted: stop what has not finished so the cluster is free again
                self.client.cancel(list(futures), force=True)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()
