"""``nbscope audit``: profile every notebook of a book, per backend, resumably, on this machine or Dask."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope.analyse import audit as _report
from nbscope.api._saving import save_run
from nbscope.api.audit._discover import discover, parse_shard, select_shard
from nbscope.api.audit._jobs import Job, JobResult, file_hash
from nbscope.api.audit._schedule import ExecutorFactory, JobFunction, LocalScheduler, gpu_slots
from nbscope.api.runs import store_then_stop
from nbscope.collect import fingerprint as fp
from nbscope.collect.platforms import BACKENDS, parse_backends
from nbscope.record.cells import target_name
from nbscope.record.live import new_live_path
from nbscope.record.run import RunRecord, check_label, default_label
from nbscope.record.secrets import command_for_record
from nbscope.schema.audit import AuditEntry, AuditTag, Availability
from nbscope.schema.codec import decode, encode
from nbscope.schema.machine import Machine
from nbscope.schema.progress import AuditEvent, AuditJobDone, AuditJobStarted, AuditPlanned, AuditRetry

if TYPE_CHECKING:
    from nbscope.api.audit._dask import DaskRunner
    from nbscope.record.store import Store

EventCallback = Callable[[AuditEvent], None]
# Stored runs looked at per notebook when searching for one to reuse (newest first).
LOOKUP_LIMIT = 200


@dataclass
class AuditOptions:
    """What shapes an audit; stored as the audit record's ``settings``."""

    backends: list[str] = field(default_factory=lambda: ["cpu"])
    workers: int = 1
    force: bool = False
    shard: str | None = None  # "i/n"
    dask: str | None = None  # scheduler address, or local[:N]
    share_gpu: bool = False
    jobs_per_gpu: int = 2  # notebooks per GPU at once with share_gpu
    timeout: float | None = None  # per cell, seconds
    # GPUs (device table keys) to forecast each lecture for from its CPU run: the CPU runs record program
    # data, and the audit gives each lecture's GPU blast radius (nbscope.analyse.audit.forecast_summary).
    forecast: list[str] = field(default_factory=list)
    label: str | None = None  # names the audit and every notebook's run (``--label``; None: ``$NBSCOPE_LABEL``)

    def run_label(self) -> str | None:
        """The label the audit's runs carry (not one of its settings)."""
        return self.label if self.label is not None else default_label()

    def validate(self) -> None:
        parse_backends(",".join(self.backends))
        check_label(self.label)
        if self.forecast:
            from nbscope.analyse.forecast.devices import load_table, resolve

            self.forecast = [d.key for d in resolve(load_table(), self.forecast)]  # unknown GPUs: one line
            if "cpu" not in self.backends:
                raise NbscopeError("--forecast forecasts from CPU runs: add cpu to --backends")
        if self.workers < 1:
            raise NbscopeError("--workers must be at least 1")
        if self.jobs_per_gpu < 1:
            raise NbscopeError("--jobs-per-gpu must be at least 1")
        from nbscope.api.profile import check_timeout

        check_timeout(self.timeout)
        if self.shard is not None:
            parse_shard(self.shard)

    def settings(self) -> dict[str, object]:
        return {
            "backends": self.backends,
            "workers": self.workers,
            "force": self.force,
            "shard": self.shard,
            "dask": self.dask,
            "share_gpu": self.share_gpu,
            "jobs_per_gpu": self.jobs_per_gpu if self.share_gpu else 1,
            "timeout": self.timeout,
            "forecast": list(self.forecast),
        }


def local_availability(
    backends: list[str], fingerprint: dict[str, object], jobs_per_gpu: int = 1
) -> dict[str, Availability]:
    """Which backends this machine can run, from its fingerprint; an unavailable one says why."""
    result: dict[str, Availability] = {}
    for backend in backends:
        platform = BACKENDS[backend]
        if platform == "cpu":
            result[backend] = Availability(True, platform, None)
        elif platform == "cuda":
            slots = gpu_slots(fingerprint, jobs_per_gpu)
            if slots:
                result[backend] = Availability(True, platform, None, tuple(s.label for s in slots))
            else:
                machine = decode(Machine, fingerprint)
                if machine.gpus:
                    reason = "CUDA_VISIBLE_DEVICES hides every GPU in the fingerprint"
                elif machine.gpus_absent is not None:
                    reason = f"no GPU devices in the fingerprint ({machine.gpus_absent})"
                else:
                    reason = "no GPU devices in the fingerprint"
                result[backend] = Availability(False, platform, reason)
        else:
            result[backend] = Availability(False, platform, _unschedulable(backend))
    return result


def _unschedulable(backend: str) -> str:
    return f"nbscope finds GPUs through NVML only: it cannot schedule {backend} safely"


def find_previous(
    store: Store | None, target: str, source_hash: str, backend: str, digests: set[str], *, programs: bool = False
) -> tuple[RunRecord | None, float | None]:
    """A stored audit run to reuse (same file hash, backend and environment digest, and program data when
    ``programs``: a forecast needs it), and a duration estimate.

    The estimate (the last run of this notebook on this backend, on any machine) lets the scheduler start
    long notebooks first, which shortens the whole audit.
    """
    if store is None:
        return None, None
    reusable, estimate = None, None
    for record in store.records(kind="profile", target=target, limit=LOOKUP_LIMIT):
        tag = _report.audit_tag(record)
        if tag is None or tag.backend != backend or tag.interrupted:
            continue  # an interrupted notebook runs again
        run = record.notebook_run()
        if estimate is None:
            estimate = run.runner.total_s or run.totals.wall_s
        if (
            tag.source_hash == source_hash
            and record.digest in digests
            and (not programs or run.program_data is not None)
        ):
            reusable = record
            break
    return reusable, estimate


def _executor(
    runner: DaskRunner | None,
    options: AuditOptions,
    fingerprint: dict[str, object],
    emit: EventCallback,
    executor_factory: ExecutorFactory | None,
    job_function: JobFunction | None,
) -> Callable[[list[Job]], Any]:
    """What runs a batch of jobs: the Dask cluster, or the local scheduler over this machine's GPUs."""

    def execute(batch: list[Job]) -> Any:
        if runner is not None:
            # Dask takes every job at once and starts each when a worker is free: report them as queued.
            return runner.run(
                batch,
                share_gpu=options.share_gpu,
                jobs_per_gpu=options.jobs_per_gpu,
                on_start=lambda job: emit(AuditJobStarted(job.key, job.backend, job.gpu, queued=True)),
            )
        scheduler = LocalScheduler(
            options.workers,
            gpu_slots(fingerprint, options.jobs_per_gpu if options.share_gpu else 1),
            share_gpu=options.share_gpu,
            jobs_per_gpu=options.jobs_per_gpu,
            fingerprint=fingerprint,
            executor_factory=executor_factory,
            job_function=job_function,
        )
        return scheduler.run(batch, on_start=lambda job: emit(AuditJobStarted(job.key, job.backend, job.gpu)))

    return execute


def _dask_runner(options: AuditOptions) -> DaskRunner | None:
    """The Dask cluster the jobs go to (``--dask``), None: they run here."""
    if not options.dask:
        return None
    from nbscope.api.audit._dask import DaskRunner

    return DaskRunner(options.dask, workers=options.workers)


def audit(
    targets: str | Path | Sequence[str | Path],
    options: AuditOptions | None = None,
    *,
    store: Store | None = None,
    on_event: EventCallback | None = None,
    fingerprint: dict[str, object] | None = None,
    executor_factory: ExecutorFactory | None = None,
    job_function: JobFunction | None = None,
) -> RunRecord:
    """Profile every notebook of a book on each backend; returns (and stores) an audit record.

    Each notebook's profile is saved in ``store`` as soon as it finishes, so an audit that is killed
    keeps them, and a later audit reuses them (same file hash, backend and environment digest) unless
    ``options.force``. Ctrl-C saves a partial audit record, then re-raises KeyboardInterrupt.
    """
    options = options or AuditOptions()
    options.validate()
    emit = on_event or (lambda event: None)
    targets = [targets] if isinstance(targets, (str, Path)) else list(targets)
    book = discover(targets)
    keys = book.keys
    selected = select_shard(keys, *parse_shard(options.shard)) if options.shard else keys
    fingerprint = fingerprint or fp.collect()
    started = time.perf_counter()
    record = RunRecord(
        kind="audit",
        target=target_name(book.config if book.config is not None else book.root),
        fingerprint=fingerprint,
        settings={**options.settings(), "targets": [str(t) for t in targets]},
        label=options.run_label(),
    )
    runner = _dask_runner(options)
    try:
        availability, digests, workers = _where_jobs_can_run(runner, options, fingerprint)
        plan = _plan(
            selected,
            dict(zip(keys, book.notebooks, strict=True)),
            options,
            availability,
            digests,
            store,
            remote=runner is not None,
        )
        emit(
            AuditPlanned(
                notebooks=len(selected),
                in_book=len(keys),
                jobs=len(plan.jobs),
                reused=sum(1 for e in plan.entries.values() if e.reused),
                availability=availability,
                skipped=tuple(book.skipped),
            )
        )

        execute = _executor(runner, options, fingerprint, emit, executor_factory, job_function)
        interrupted = _run_jobs(plan, execute, store, record.target, emit)
        ordered = [plan.entries[k, b] for k in selected for b in options.backends]
        ordered = _report.diagnose_entries(ordered, lambda e: plan.loaded.get((e.path, e.backend)))
        record.measurements = encode(
            _report.measurements(
                ordered,
                backends=options.backends,
                availability=availability,
                discovery={**book.describe(), "selected": selected},
                wall_s=time.perf_counter() - started,
                workers=workers,
                shard=_shard_info(options.shard, selected, keys),
            )
        )
        _finish(record, plan, ordered, interrupted, store)
        return record
    finally:
        if runner is not None:
            runner.close()


def _finish(record: RunRecord, plan: _Plan, ordered: list[AuditEntry], interrupted: bool, store: Store | None) -> None:
    """The audit run finished as ``ok`` or ``partial`` and stored (then stopped, after a signal)."""
    failed = any(e.status in ("error", "not-run") for e in ordered)
    # A signal after every notebook finished (SIGHUP as the terminal closes) stops the audit, but its run is
    # complete: only a notebook left unfinished makes it partial.
    unfinished = any(plan.entries[job.key, job.backend].status == "not-run" for job in plan.jobs)
    record.finish("partial" if (interrupted and unfinished) or failed else "ok")
    what = (
        "partial audit run {id} (the notebooks that finished are runs of their own)"
        if record.status == "partial"
        else "audit run {id} (every notebook finished)"
    )
    store_then_stop(record, store, interrupted, what)


def _where_jobs_can_run(
    runner: DaskRunner | None, options: AuditOptions, fingerprint: dict[str, object]
) -> tuple[dict[str, Availability], set[str], dict[str, Any] | None]:
    """Each backend's availability (on the Dask workers, or on this machine), the environment digests a
    reusable earlier profile may have, and the Dask workers (None: this machine)."""
    if runner is None:
        availability = local_availability(
            options.backends, fingerprint, options.jobs_per_gpu if options.share_gpu else 1
        )
        return availability, {decode(Machine, fingerprint).digest}, None
    gpu_ok, gpu_reason = runner.gpu_availability()
    availability = {
        b: (
            Availability(True, BACKENDS[b], None)
            if BACKENDS[b] == "cpu" or gpu_ok
            else Availability(False, BACKENDS[b], gpu_reason if BACKENDS[b] == "cuda" else _unschedulable(b))
        )
        for b in options.backends
    }
    workers = {
        address: {"digest": machine.digest, "machine": machine.summary} for address, machine in runner.machines.items()
    }
    return availability, runner.digests(), workers


@dataclass
class _Plan:
    """What an audit will do: an entry per (notebook, backend), the jobs to run, the profiles it reuses."""

    entries: dict[tuple[str, str], AuditEntry] = field(default_factory=dict)
    loaded: dict[tuple[str, str], RunRecord] = field(default_factory=dict)  # the profile behind each entry
    jobs: list[Job] = field(default_factory=list)


def _plan(
    selected: Sequence[str],
    by_key: dict[str, Path],
    options: AuditOptions,
    availability: dict[str, Availability],
    digests: set[str],
    store: Store | None,
    *,
    remote: bool,
) -> _Plan:
    plan = _Plan()
    estimates: dict[int, float] = {}
    for key in selected:
        path = by_key[key]
        source_hash, target = file_hash(path), target_name(path)
        for backend in options.backends:
            if not availability[backend].available:
                plan.entries[key, backend] = _report.bare_entry(
                    key, backend, source_hash, "unavailable", availability[backend].reason, target
                )
                continue
            forecast = list(options.forecast) if BACKENDS[backend] == "cpu" else []
            previous, estimate = find_previous(store, target, source_hash, backend, digests, programs=bool(forecast))
            if previous is not None and not options.force:
                plan.entries[key, backend] = _report.entry_from_record(
                    previous, key=key, backend=backend, source_hash=source_hash, reused=True
                )
                plan.loaded[key, backend] = previous
                continue
            index = len(plan.jobs)
            live = None
            if not remote and store is not None:
                live = str(new_live_path(store.path, f"audit-{index}"))
            plan.jobs.append(
                Job(
                    key=key,
                    path=str(path),
                    target=target,
                    backend=backend,
                    platform=BACKENDS[backend],
                    source_hash=source_hash,
                    timeout=options.timeout,
                    live_path=live,
                    index=index,
                    content=path.read_bytes() if remote else None,
                    forecast=forecast,
                    label=options.run_label(),
                )
            )
            plan.entries[key, backend] = _report.bare_entry(key, backend, source_hash, "not-run", None, target)
            if estimate is not None:
                estimates[index] = estimate
    # Longest first, so that no long notebook starts last while the other workers idle: notebooks never
    # run go first (any may be the longest), biggest file first (lectures with more code tend to run
    # longer); then the rest by their last measured duration.
    sizes = {j.index: Path(j.path).stat().st_size for j in plan.jobs}
    plan.jobs.sort(key=lambda j: (j.index in estimates, -estimates.get(j.index, sizes[j.index]), j.index))
    return plan


def _run_jobs(
    plan: _Plan, execute: Callable[[list[Job]], Any], store: Store | None, audit_target: str, emit: EventCallback
) -> bool:
    """Run the plan's jobs, saving each profile as it finishes; True when a stop signal cut the audit short."""
    done = 0
    try:
        # A job that failed for a reason outside its notebook (a kernel that did not start, a pool
        # process that died: transient on a loaded machine) gets one more try, after the others.
        retry: list[Job] = []
        for attempt, batch in enumerate((plan.jobs, retry)):
            for job, sent in execute(batch):
                result = JobResult.of(sent)
                if attempt == 0 and not result.ok and result.retryable:
                    retry.append(job)
                    emit(AuditRetry(job.key, job.backend, result.error))
                    continue
                entry, profile_record = _save_result(store, job, result, audit_target)
                if profile_record is not None:
                    plan.loaded[job.key, job.backend] = profile_record
                entry = replace(entry, attempts=attempt + 1)
                plan.entries[job.key, job.backend] = entry
                done += 1
                emit(AuditJobDone(entry, done, len(plan.jobs)))
    except KeyboardInterrupt:
        # The notebooks that were running when the audit stopped: their pool processes are gone, and
        # the cells they finished are in their live files. Store those as partial runs, each with the cell
        # it was running as interrupted by the signal (SIGINT when it came as a plain KeyboardInterrupt).
        from nbscope import _signals

        signum = _signals.received()
        stopped = (time.time(), _signals.signal_name(signum) if signum else "SIGINT")
        for job in plan.jobs:
            if plan.entries[job.key, job.backend].status == "not-run" and job.live_path:
                _save_interrupted(store, job, plan.entries, stopped)
        return True
    return False


def _shard_info(shard: str | None, selected: list[str], keys: list[str]) -> dict[str, object] | None:
    if not shard:
        return None
    index, count = parse_shard(shard)
    return {"index": index, "count": count, "notebooks": len(selected), "in_book": len(keys)}


def _save_interrupted(
    store: Store | None, job: Job, entries: dict[tuple[str, str], AuditEntry], stopped: tuple[float, str]
) -> None:
    """Store what an interrupted notebook measured (from its live file) as a partial profile run. Its audit
    entry stays ``not-run`` and names that run: a partial wall is no figure to compare backends by."""
    from nbscope import _signals
    from nbscope.api import live
    from nbscope.record.live import recover

    path = Path(str(job.live_path))
    if store is None or not path.is_file():
        return
    try:
        record = recover(path, stopped)
    except NbscopeError:
        return  # nothing recoverable (the worker had not written its header yet)
    record.measurements["audit"] = encode(
        AuditTag(
            path=job.key,
            book=None,
            source_hash=job.source_hash,
            backend=job.backend,
            gpu=job.gpu,
            env=job.env,
            worker=None,
            elapsed_s=None,
            interrupted=True,
        )
    )
    run_id = live.store_recovered(path, record, store).record.run_id
    done = record.notebook_run().totals
    entries[job.key, job.backend] = replace(
        entries[job.key, job.backend],
        run_id=run_id,
        error=f"interrupted while it ran: {done.cells_run} of {done.cells} cells saved as partial run {run_id}",
    )
    _signals.note_saved(f"partial run {run_id} ({job.key})")


def _save_result(
    store: Store | None, job: Job, result: JobResult, book_target: str
) -> tuple[AuditEntry, RunRecord | None]:
    """Store a finished job's profile (tagged with what resuming needs); its audit entry and the record."""
    if not result.ok or result.record is None:
        entry = _report.bare_entry(
            job.key, job.backend, job.source_hash, "error", result.error or "no result", job.target
        )
        return entry, None
    record = RunRecord.from_dict(dict(result.record), source=f"the result of {job.key}")
    record.target = job.target  # the same name as `nbscope profile` gives it here, wherever it ran
    record.command = command_for_record(sys.argv)  # a pool worker's argv says nothing; the audit's command does
    record.measurements["audit"] = encode(
        AuditTag(
            path=job.key,
            book=book_target,
            source_hash=job.source_hash,
            backend=job.backend,
            gpu=job.gpu,
            env=job.env,
            worker=result.worker,
            elapsed_s=result.elapsed_s,
        )
    )
    if store is not None:
        save_run(store, record)
        if job.live_path:
            from nbscope.record.live import remove_live_file

            remove_live_file(Path(job.live_path))  # its cells are in the store now
    entry = _report.entry_from_record(
        record, key=job.key, backend=job.backend, source_hash=job.source_hash, reused=False
    )
    return entry, record
