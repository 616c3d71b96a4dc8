"""From per-run entries to the audit's measurements: per lecture CPU vs GPU, the winner, the top cause.

Everything here works on entries alone (not on the full profile records), so that ``nbscope merge`` can
rebuild an audit from shard files made on other machines. The entries and the measurements are the typed
model of ``nbscope.schema.audit`` (written and read by ``schema.codec``).

``measurements`` of a run of kind ``audit``:

- ``totals``: ``notebooks``, ``runs`` (measured), ``profiled`` (this time), ``reused`` (from the store),
  ``failed``, ``partial``, ``not_run``, ``unavailable``, ``cells_failed``, ``wall_s`` (the audit's own
  wall time; ``null`` for a merge), ``cpu_s`` / ``gpu_s`` (sums of notebook totals), ``compile_s``,
  ``compared`` (lectures with both a CPU and a GPU run) and ``slower_on_gpu``;
- ``notebooks``: one entry per notebook and backend: ``path`` (book-relative), ``target``, ``source_hash``
  (whole file), ``backend``, ``run_id`` (its profile in the store), ``status`` (``ok`` / ``partial`` from the
  profile, or ``error``, ``unavailable``, ``not-run``), ``reused``, ``wall_s``, ``compile_s``, ``run_s``,
  ``execute_s``, ``kernel_start_s``, ``elapsed_s``, ``cells``, ``cells_failed``, ``compiles``,
  ``top_finding`` (the strongest diagnosis finding as a dict, or ``null``), ``top_findings`` (the first three),
  ``findings`` (how many), ``digest``,
  ``machine``, ``worker``, ``gpu``, ``error``;
- ``lectures``: per notebook ``cpu_s``, ``gpu_s``, ``gpu_backend``, ``winner`` (a backend, ``tie`` or
  ``null``), ``ratio`` (slower / faster), ``top_finding`` (of the slower run), ``action`` (its fix in one line);
- ``backends`` (availability, with the reason when unavailable), ``discovery``, ``shard``, ``summary``
  ("N of M lectures are slower on the GPU"); a merge adds ``merged_from`` and ``coverage``;
- with ``audit --forecast GPU``: each CPU entry's ``forecast`` (:func:`forecast_summary`), each lecture's
  ``forecast``, and ``forecast`` (:func:`blast_radius`): per lecture its CPU time, forecast GPU time
  range, verdict and dominant term, sorted by forecast slowdown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope._units import number
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.recommend import Recommendation, recommend
from nbscope.record.run import RunRecord
from nbscope.schema.audit import (
    MEASURED,
    Audit,
    AuditedRun,
    AuditEntry,
    AuditTag,
    AuditTotals,
    Availability,
    BackendChoice,
    BackendRun,
    BlastLecture,
    BlastRadius,
    Coverage,
    DeviceForecast,
    DominantTerm,
    ForecastError,
    ForecastSummary,
    GpuForecastRange,
    Lecture,
    MergedFile,
    TopCause,
)
from nbscope.schema.codec import decode

if TYPE_CHECKING:  # the forecast is imported only for runs with program data
    from nbscope.analyse.forecast import Forecast

__all__ = [
    "MEASURED",
    "TIE_RATIO",
    "TOP_FINDINGS",
    "Audit",
    "AuditEntry",
    "bare_entry",
    "blast_radius",
    "diagnose_entries",
    "entry_from_record",
    "forecast_summary",
    "is_gpu_backend",
    "lectures",
    "measurements",
    "summary_text",
]

# How much faster one backend must be to be called the winner; closer than this is a tie (timings on
# shared machines vary by ±20 %, see the project's facts; 10 % still separates clear cases).
TIE_RATIO = 1.10


TOP_FINDINGS = 3  # findings kept per notebook and backend (the audit shows them; `nbscope diagnose` has all)


def is_gpu_backend(backend: str) -> bool:
    return backend != "cpu"


def findings_of(record: RunRecord, other: RunRecord | None = None) -> tuple[list[dict[str, object]] | None, str | None]:
    """Diagnosed findings of a profile, most important first (diagnose's own order), as the audit entry keeps
    them; ``None`` and a reason when diagnosis is unavailable. ``other`` is the same notebook on the other
    backend, used as evidence."""
    try:
        return [f.to_dict() for f in diagnose(record, other=other)], None
    except NbscopeError as exc:  # a record the rules cannot read costs the audit its causes, not its results
        return None, f"diagnosis failed: {exc}"


def recommendation_of(cpu: RunRecord, gpu: RunRecord | None = None) -> dict[str, object] | None:
    """analyse.recommend's backend choice for a notebook (cpu, gpu or mixed) with its estimates, if available,
    as the audit entry stores it: from both runs, or (no GPU run) from the CPU run's GPU forecast."""
    try:
        result = recommend(cpu, gpu) if gpu is not None else recommend(cpu)
    except NbscopeError:  # the winner from the totals still stands
        return None
    if result.recommendation is None:
        return None
    keys = ("recommendation", "reason", "estimates", "pinned", "caveats")
    return _brief(result, keys if gpu is not None else (*keys[:2], "basis", *keys[2:]))


def _brief(result: Recommendation, keys: tuple[str, ...]) -> dict[str, object]:
    """Some keys of a recommendation's JSON document (every kind's has these): what an audit entry keeps of it."""
    document = result.to_dict()
    return {k: document[k] for k in keys}


def _dominant(result: Forecast, key: str) -> DominantTerm | None:
    """The notebook's largest GPU-side term on ``key`` (loops, work, launches, dispatch, transfers: what the
    GPU changes), adding up the same term over cells (two calls of one scan in two cells are one term)."""
    grouped: dict[tuple[Any, ...], DominantTerm] = {}
    for cell in result.cells:
        for term in cell.gpu[key].terms:
            if term.kind in ("host", "compile"):
                continue
            name = (term.kind, term.function, term.words)
            group = grouped.get(name) or DominantTerm(term.kind, term.function, term.words, 0.0, 0.0, (), ())
            high = None if group.high_s is None or term.high_s is None else group.high_s + term.high_s
            seen = cell.index in group.cells
            grouped[name] = replace(
                group,
                low_s=(group.low_s or 0.0) + term.low_s,
                high_s=high,
                cells=group.cells if seen else (*group.cells, cell.index),
                lines=group.lines if seen else (*group.lines, cell.line),
            )
    if not grouped:
        return None
    return max(grouped.values(), key=lambda g: float("inf") if g.high_s is None else (g.low_s or 0.0) + g.high_s)


def forecast_summary(record: RunRecord) -> ForecastSummary | None:
    """A CPU run's GPU forecast in brief, per GPU it was recorded for (``profile --forecast``, else the T4):
    CPU time, forecast range with everything on the GPU, verdicts, the dominant GPU-side term and the
    functions to keep on the CPU. None when the run holds no program data; only its ``error`` when the forecast
    refuses it."""
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.risks import gpus_of

    if record.notebook_run().program_data is None:
        return None
    try:
        result = forecast(record, gpus_of(record))
    except NbscopeError as exc:
        return ForecastSummary(gpus=(), has_jax=True, devices={}, notes=(), error=str(exc))
    devices = {}
    for device in result.devices:
        notebook = result.notebook[device.key]
        cpu_s = notebook.cpu_s
        devices[device.key] = DeviceForecast(
            name=device.name,
            cpu_s=cpu_s,
            low_s=notebook.low_s,
            high_s=notebook.high_s,
            verdict=notebook.verdict,
            all_on_gpu=notebook.all_on_gpu,
            slowdown=notebook.low_s / cpu_s if cpu_s > 0 else None,
            dominant=_dominant(result, device.key),
            keep_on_cpu=tuple(e.function for e in notebook.keep_on_cpu),
            plan=notebook.plan.to_dict() if notebook.plan is not None else None,
        )
    return ForecastSummary(gpus=tuple(devices), has_jax=result.has_jax, devices=devices, notes=tuple(result.notes))


def diagnose_entries(entries: Sequence[AuditEntry], load: Callable[[AuditEntry], RunRecord | None]) -> list[AuditEntry]:
    """The entries with each measured one's findings (and the GPU entry's ``recommendation``); a CPU entry whose
    run holds program data gets its ``forecast`` and, with no GPU run beside it, the forecast's
    ``recommendation``.

    Runs after all results are in, so that a GPU run is diagnosed with the same notebook's CPU run as
    evidence whichever finished first. ``load`` gives an entry's profile record (or None).
    """
    done = list(entries)
    by_key: dict[str, dict[str, int]] = {}
    for position, entry in enumerate(done):
        by_key.setdefault(entry.path, {})[entry.backend] = position
    for runs in by_key.values():
        records = {b: load(done[p]) for b, p in runs.items() if done[p].measured}
        cpu = records.get("cpu")
        for backend, record in records.items():
            if record is None:
                continue
            findings, why_not = findings_of(record, cpu if is_gpu_backend(backend) else None)
            position = runs[backend]
            done[position] = replace(
                done[position],
                top_finding=findings[0] if findings else None,
                top_findings=tuple(findings or [])[:TOP_FINDINGS],
                findings=len(findings) if findings is not None else None,
                diagnosis=why_not,
            )
            if is_gpu_backend(backend) and cpu is not None:
                done[position] = replace(done[position], recommendation=recommendation_of(cpu, record))
        if cpu is not None and cpu.notebook_run().program_data is not None:
            position = runs["cpu"]
            done[position] = replace(done[position], forecast=forecast_summary(cpu))
            if not any(is_gpu_backend(b) and r is not None for b, r in records.items()):
                done[position] = replace(done[position], recommendation=recommendation_of(cpu))
    return done


def audit_tag(record: RunRecord) -> AuditTag | None:
    """What the audit noted on a profile it ran (None: a profile no audit ran)."""
    return record.measured(AuditedRun).audit


def entry_from_record(record: RunRecord, *, key: str, backend: str, source_hash: str, reused: bool) -> AuditEntry:
    """One audit entry (a notebook on a backend) from its profile record."""
    run = record.notebook_run()
    totals, runner = run.totals, run.runner
    tag = audit_tag(record)
    # The findings, recommendation and forecast are left for diagnose_entries, once every run is in (the
    # forecast: for a CPU run with program data).
    return replace(
        bare_entry(key, backend, source_hash, record.status, None, record.target),
        run_id=record.run_id,
        reused=reused,
        wall_s=totals.wall_s,
        compile_s=totals.compile_s,
        run_s=totals.run_s,
        execute_s=runner.execute_s,
        kernel_start_s=runner.kernel_start_s,
        elapsed_s=tag.elapsed_s if tag is not None else None,
        cells=totals.cells,
        cells_failed=totals.cells_failed,
        compiles=totals.compiles,
        digest=record.digest,
        machine=record.machine().summary,
        worker=tag.worker if tag is not None else None,
        gpu=tag.gpu if tag is not None else None,
        started_at=record.started_at,
    )


def bare_entry(
    key: str, backend: str, source_hash: str | None, status: str, error: str | None, target: str | None = None
) -> AuditEntry:
    """An entry without a run: ``unavailable`` backend, ``error`` (no record), or ``not-run`` (interrupted)."""
    return AuditEntry(
        path=key,
        target=target,
        source_hash=source_hash,
        backend=backend,
        run_id=None,
        status=status,
        reused=False,
        wall_s=None,
        compile_s=None,
        run_s=None,
        execute_s=None,
        kernel_start_s=None,
        elapsed_s=None,
        cells=None,
        cells_failed=None,
        compiles=None,
        top_finding=None,
        top_findings=None,
        findings=None,
        diagnosis=None,
        recommendation=None,
        forecast=None,
        digest=None,
        machine=None,
        worker=None,
        gpu=None,
        started_at=None,
        error=error,
    )


def _backend_run(entry: AuditEntry) -> BackendRun:
    return BackendRun(
        status=entry.status,
        wall_s=number(entry.wall_s),
        run_id=entry.run_id,
        cells_failed=entry.cells_failed,
        error=entry.error,
    )


def lectures(entries: Sequence[AuditEntry], backends: Sequence[str]) -> list[Lecture]:
    """One row per notebook: CPU total, GPU total, winner and the top diagnosed cause with its fix."""
    by_key: dict[str, dict[str, AuditEntry]] = {}
    for entry in entries:
        by_key.setdefault(entry.path, {})[entry.backend] = entry
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    rows = []
    for key, runs in by_key.items():
        cpu, gpu = runs.get("cpu"), runs.get(gpu_backend) if gpu_backend else None
        cpu_s = cpu.wall_s if cpu is not None and cpu.measured else None
        gpu_s = gpu.wall_s if gpu is not None and gpu.measured else None
        winner, ratio = None, None
        if cpu_s is not None and gpu_s is not None:
            fast, slow = sorted((cpu_s, gpu_s))
            ratio = slow / fast if fast > 0 else None
            winner = "tie" if ratio is not None and ratio < TIE_RATIO else "cpu" if cpu_s < gpu_s else gpu_backend
        # The cause worth naming is the one behind the slower run; with one run, that run's.
        measured = sorted((e for e in runs.values() if e.measured), key=lambda e: e.wall_s or 0.0, reverse=True)
        top = next((e for e in measured if e.top_finding), None)
        cause = decode(TopCause, {**top.top_finding, "backend": top.backend}) if top and top.top_finding else None
        recommendation = next((e.recommendation for e in runs.values() if e.recommendation), None)
        action = (cause.action or cause.fix) if cause else None  # the fix in one line
        if action is None and recommendation:
            choice = decode(BackendChoice, recommendation)
            action = f"run it on {choice.recommendation}: {choice.reason or ''}".rstrip(": ")
        rows.append(
            Lecture(
                path=key,
                backends={b: _backend_run(e) for b, e in runs.items()},
                cpu_s=cpu_s,
                gpu_backend=gpu_backend,
                gpu_s=gpu_s,
                winner=winner,
                ratio=ratio,
                incomplete=any(
                    (e.cells_failed or 0) > 0 or e.status != "ok" for e in runs.values() if e.status != "unavailable"
                ),
                top_finding=cause,
                recommendation=recommendation,
                forecast=cpu.forecast if cpu is not None and cpu.measured else None,
                action=action,
            )
        )
    return rows


def summary_text(rows: Sequence[Lecture], backends: Sequence[str], availability: Mapping[str, Availability]) -> str:
    """ "N of M lectures are slower on the GPU", or why no lecture could be compared."""
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    if gpu_backend is None:
        measured = sum(1 for r in rows if r.cpu_s is not None)
        return f"{measured} of {len(rows)} lectures profiled on cpu; no GPU backend was asked for"
    compared = _compared(rows)
    if not compared:
        info = availability.get(gpu_backend)
        reason = info.reason if info is not None else None
        why = f": {gpu_backend} unavailable ({reason})" if reason else ""
        return f"0 of {len(rows)} lectures could be compared on cpu and {gpu_backend}{why}"
    slower = _slower_on_gpu(compared)
    text = f"{slower} of {len(compared)} lectures are slower on the GPU ({gpu_backend})"
    if len(compared) < len(rows):
        text += f"; {len(rows) - len(compared)} of {len(rows)} could not be compared"
    return text


def _compared(rows: Sequence[Lecture]) -> list[Lecture]:
    return [r for r in rows if r.cpu_s is not None and r.gpu_s is not None]


def _slower_on_gpu(compared: Sequence[Lecture]) -> int:
    return sum(1 for r in compared if r.gpu_s is not None and r.cpu_s is not None and r.gpu_s > r.cpu_s)


def _in_brief(device: DeviceForecast) -> GpuForecastRange:
    return GpuForecastRange(
        low_s=number(device.low_s),
        high_s=number(device.high_s),
        verdict=device.verdict,
        slowdown=number(device.slowdown),
    )


def blast_radius(rows: Sequence[Lecture]) -> BlastRadius | None:
    """The GPU blast radius of a CPU-only fleet run (``audit --forecast``): per lecture with a forecast, its
    CPU time, the forecast GPU time range with everything on the GPU, the verdict, the dominant term and
    the functions to keep on the CPU, for the first GPU forecast; sorted by forecast slowdown (low end
    over CPU time), largest first. None when no lecture has a forecast (its CPU run's :func:`forecast_summary`)."""
    forecast_rows = [(r.path, r.forecast) for r in rows if r.forecast is not None]
    if not forecast_rows:
        return None
    gpus = list(dict.fromkeys(g for _, summary in forecast_rows for g in summary.gpus))
    errors = tuple(ForecastError(path, summary.error) for path, summary in forecast_rows if summary.error)
    if not gpus:
        return BlastRadius(
            gpu=None, gpu_name=None, gpus=(), lectures=(), errors=errors, summary="no lecture could be forecast"
        )
    key = gpus[0]
    lectures = []
    for path, summary in forecast_rows:
        device = summary.devices.get(key)
        if device is None:
            continue
        lectures.append(
            BlastLecture(
                path=path,
                cpu_s=device.cpu_s,
                low_s=device.low_s,
                high_s=device.high_s,
                slowdown=device.slowdown,
                verdict=device.verdict,
                all_on_gpu=device.all_on_gpu,
                dominant=device.dominant,
                keep_on_cpu=device.keep_on_cpu,
                has_jax=summary.has_jax,
                gpus={k: _in_brief(d) for k, d in summary.devices.items()},
            )
        )
    lectures.sort(key=lambda x: (-(x.slowdown or 0.0), x.path))
    name = next((d.name for _, summary in forecast_rows for k, d in summary.devices.items() if k == key), key)
    slower = sum(1 for x in lectures if x.all_on_gpu == "slower")
    faster = sum(1 for x in lectures if x.all_on_gpu == "faster")
    text = (
        f"forecast from CPU runs: {slower} of {len(lectures)} lectures slower on the {name} with everything on "
        f"the GPU, {faster} faster"
    )
    return BlastRadius(gpu=key, gpu_name=name, gpus=tuple(gpus), lectures=tuple(lectures), errors=errors, summary=text)


def _totals(
    entries: Sequence[AuditEntry], rows: Sequence[Lecture], gpu_backend: str | None, wall_s: float | None
) -> AuditTotals:
    compared = _compared(rows)

    def count(*statuses: str) -> int:
        return sum(1 for e in entries if e.status in statuses)

    def backend_total(backend: str | None) -> float | None:
        values = [e.wall_s for e in entries if e.backend == backend and e.measured and e.wall_s is not None]
        return sum(values) if values else None

    return AuditTotals(
        notebooks=len(rows),
        runs=count(*MEASURED),
        profiled=sum(1 for e in entries if e.status in MEASURED and not e.reused),
        reused=sum(1 for e in entries if e.reused),
        failed=count("error"),
        partial=count("partial"),
        not_run=count("not-run"),
        unavailable=count("unavailable"),
        cells_failed=sum(e.cells_failed or 0 for e in entries),
        wall_s=wall_s,
        cpu_s=backend_total("cpu"),
        gpu_s=backend_total(gpu_backend),
        compile_s=sum(e.compile_s or 0.0 for e in entries if e.measured),
        compared=len(compared),
        slower_on_gpu=_slower_on_gpu(compared),
    )


def measurements(
    entries: Sequence[AuditEntry],
    *,
    backends: Sequence[str],
    availability: Mapping[str, Availability],
    discovery: Mapping[str, object],
    wall_s: float | None,
    workers: Mapping[str, object] | None = None,
    shard: Mapping[str, object] | None = None,
    merged_from: Sequence[MergedFile] | None = None,
    coverage: Coverage | None = None,
) -> Audit:
    """The audit record's ``measurements``: an audit run here names its ``shard`` (and its Dask ``workers``), a
    merge the files it read (``merged_from``) and what they cover."""
    rows = lectures(entries, backends)
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    return Audit(
        workers=workers,
        totals=_totals(entries, rows, gpu_backend, wall_s),
        backends=dict(availability),
        discovery=discovery,
        notebooks=tuple(entries),
        lectures=tuple(rows),
        summary=summary_text(rows, backends, availability),
        forecast=blast_radius(rows),
        shard=shard,
        merged_from=tuple(merged_from) if merged_from is not None else None,
        coverage=coverage,
    )
