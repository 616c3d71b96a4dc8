"""From per-run entries to the audit's measurements: per lecture CPU vs GPU, the winner, the top cause.

Everything here works on entries alone (not on the full profile records), so that ``nbscope merge`` can
rebuild an audit from shard files made on other machines.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import Finding, diagnose
from nbscope.analyse.recommend import Recommendation, recommend
from nbscope.record.run import RunRecord
from nbscope.schema._fields import figure as _number
from nbscope.schema._fields import mapping as _mapping
from nbscope.schema._fields import text as _text

if TYPE_CHECKING:  # the forecast is imported only for runs with program data
    from nbscope.analyse.forecast import Forecast

# Entry statuses: a run's own (ok / partial / error), or why there is no run.
MEASURED = ("ok", "partial")
# How much faster one backend must be to be called the winner; closer than this is a tie (timings on
# shared machines vary by ±20 %, see the project's facts; 10 % still separates clear cases).
TIE_RATIO = 1.10


TOP_FINDINGS = 3  # findings kept per notebook and backend (the audit shows them; `nbscope diagnose` has all)


def is_gpu_backend(backend: str) -> bool:
    return backend != "cpu"


def findings_of(record: RunRecord, other: RunRecord | None = None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Diagnosed findings of a profile, most important first (diagnose's own order); ``None`` and a reason
    when diagnosis is unavailable. ``other`` is the same notebook on the other backend, used as evidence."""
    try:
        return [f.to_dict() for f in diagnose(record, other=other)], None
    except NbscopeError as exc:  # a record the rules cannot read costs the audit its causes, not its results
        return None, f"diagnosis failed: {exc}"


def recommendation_of(cpu: RunRecord, gpu: RunRecord) -> dict[str, Any] | None:
    """analyse.recommend's backend choice for a notebook (cpu, gpu or mixed) with its estimates, if available,
    as the audit entry stores it."""
    try:
        result = recommend(cpu, gpu)
    except NbscopeError:  # the winner from the totals still stands
        return None
    if result.recommendation is None:
        return None
    return _brief(result, ("recommendation", "reason", "estimates", "pinned", "caveats"))


def forecast_recommendation_of(cpu: RunRecord) -> dict[str, Any] | None:
    """analyse.recommend's backend choice from a CPU run's GPU forecast (no GPU run), if available, as the
    audit entry stores it."""
    try:
        result = recommend(cpu)
    except NbscopeError:
        return None
    if result.recommendation is None:
        return None
    return _brief(result, ("recommendation", "reason", "basis", "estimates", "pinned", "caveats"))


def _brief(result: Recommendation, keys: tuple[str, ...]) -> dict[str, Any]:
    """Some keys of a recommendation's JSON document: what an audit entry keeps of it."""
    document = result.to_dict()
    return {k: document.get(k) for k in keys}


def _dominant(result: Forecast, key: str) -> dict[str, Any] | None:
    """The notebook's largest GPU-side term on ``key`` (loops, work, launches, dispatch, transfers: what the
    GPU changes), adding up the same term over cells (two calls of one scan in two cells are one term); as the
    audit entry stores it."""
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cell in result.cells:
        for term in cell.gpu[key].terms:
            if term.kind in ("host", "compile"):
                continue
            group = grouped.setdefault((term.kind, term.function, term.words), {
                "kind": term.kind, "function": term.function, "words": term.words,
                "low_s": 0.0, "high_s": 0.0, "cells": [], "lines": []})
            group["low_s"] += term.low_s
            group["high_s"] = None if group["high_s"] is None or term.high_s is None else group["high_s"] + term.high_s
            if cell.index not in group["cells"]:
                group["cells"].append(cell.index)
                group["lines"].append(cell.line)
    if not grouped:
        return None
    return max(grouped.values(), key=lambda g: float("inf") if g["high_s"] is None else g["low_s"] + g["high_s"])


def forecast_summary(record: RunRecord) -> dict[str, Any] | None:
    """A CPU run's GPU forecast in brief, per GPU it was recorded for (``profile --forecast``, else the T4):
    CPU time, forecast range with everything on the GPU, verdicts, the dominant GPU-side term and the
    functions to keep on the CPU, as the audit entry stores it. None when the run holds no program data;
    ``{"error": ...}`` when the forecast refuses it."""
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.risks import gpus_of

    if record.notebook_run().program_data is None:
        return None
    try:
        result = forecast(record, gpus_of(record))
    except NbscopeError as exc:
        return {"error": str(exc)}
    devices = {}
    for device in result.devices:
        notebook = result.notebook[device.key]
        cpu_s = notebook.cpu_s
        devices[device.key] = {
            "name": device.name, "cpu_s": cpu_s, "low_s": notebook.low_s, "high_s": notebook.high_s,
            "verdict": notebook.verdict, "all_on_gpu": notebook.all_on_gpu,
            "slowdown": notebook.low_s / cpu_s if cpu_s > 0 else None,
            "dominant": _dominant(result, device.key), "keep_on_cpu": [e.function for e in notebook.keep_on_cpu],
            "plan": notebook.plan.to_dict() if notebook.plan is not None else None,
        }
    return {"gpus": list(devices), "has_jax": result.has_jax, "devices": devices, "notes": list(result.notes)}


def diagnose_entries(entries: list[dict[str, Any]], load: Callable[[dict[str, Any]], RunRecord | None]) -> None:
    """Fill each measured entry's ``top_finding`` (and the GPU entry's ``recommendation``) in place; a CPU
    entry whose run holds program data gets its ``forecast`` and, with no GPU run beside it, the
    forecast's ``recommendation``.

    Runs after all results are in, so that a GPU run is diagnosed with the same notebook's CPU run as
    evidence whichever finished first. ``load`` gives an entry's profile record (or None).
    """
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in entries:
        by_key.setdefault(entry["path"], {})[entry["backend"]] = entry
    for runs in by_key.values():
        records = {b: load(e) for b, e in runs.items() if _measured(e)}
        cpu = records.get("cpu")
        for backend, record in records.items():
            if record is None:
                continue
            findings, why_not = findings_of(record, cpu if is_gpu_backend(backend) else None)
            runs[backend].update(top_finding=findings[0] if findings else None, top_findings=(findings or [])[:TOP_FINDINGS],
                                 findings=len(findings) if findings is not None else None, diagnosis=why_not)
            if is_gpu_backend(backend) and cpu is not None:
                runs[backend]["recommendation"] = recommendation_of(cpu, record)
        if cpu is not None and cpu.notebook_run().program_data is not None:
            runs["cpu"]["forecast"] = forecast_summary(cpu)
            if not any(is_gpu_backend(b) and r is not None for b, r in records.items()):
                runs["cpu"]["recommendation"] = forecast_recommendation_of(cpu)


def entry_from_record(record: RunRecord, *, key: str, backend: str, source_hash: str, reused: bool,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One audit entry (a notebook on a backend) from its profile record."""
    run = record.notebook_run()
    totals, runner = run.totals, run.runner
    # The audit job's figures have no typed view: read as recorded.
    audit = record.measurements.get("audit") or {}
    entry = {
        "path": key,
        "target": record.target,
        "source_hash": source_hash,
        "backend": backend,
        "run_id": record.run_id,
        "status": record.status,
        "reused": reused,
        "wall_s": totals.wall_s,
        "compile_s": totals.compile_s,
        "run_s": totals.run_s,
        "execute_s": runner.execute_s,
        "kernel_start_s": runner.kernel_start_s,
        "elapsed_s": audit.get("elapsed_s"),
        "cells": totals.cells,
        "cells_failed": totals.cells_failed,
        "compiles": totals.compiles,
        "top_finding": None,  # filled by diagnose_entries once every run is in
        "top_findings": None,
        "findings": None,
        "diagnosis": None,
        "recommendation": None,
        "forecast": None,  # filled by diagnose_entries for a CPU run with program data
        "digest": record.digest,
        "machine": record.machine().summary,
        "worker": audit.get("worker"),
        "gpu": audit.get("gpu"),
        "started_at": record.started_at,
        "error": None,
    }
    entry.update(extra or {})
    return entry


def bare_entry(key: str, backend: str, source_hash: str | None, status: str, error: str | None,
               target: str | None = None) -> dict[str, Any]:
    """An entry without a run: ``unavailable`` backend, ``error`` (no record), or ``not-run`` (interrupted)."""
    return {
        "path": key, "target": target, "source_hash": source_hash, "backend": backend, "run_id": None,
        "status": status, "reused": False, "wall_s": None, "compile_s": None, "run_s": None, "execute_s": None,
        "kernel_start_s": None, "elapsed_s": None, "cells": None, "cells_failed": None, "compiles": None,
        "top_finding": None, "top_findings": None, "findings": None, "diagnosis": None, "recommendation": None,
        "forecast": None,
        "digest": None, "machine": None,
        "worker": None, "gpu": None, "started_at": None, "error": error,
    }


def _measured(entry: dict[str, Any] | None) -> bool:
    return entry is not None and entry.get("status") in MEASURED and isinstance(entry.get("wall_s"), (int, float))


# ---- the audit's results, typed --------------------------------------------------------------------
# An audit is stored as a run record of kind ``audit``: these views are what its renderers read, built from
# the entries by the functions below and parsed back from a stored (or merged) audit by ``Audit.parse``;
# ``as_json`` gives each one's part of the record's ``measurements`` exactly as stored.








@dataclass(frozen=True)
class BackendRun:
    """A lecture's run on one backend, as the audit table shows it."""

    status: str | None
    wall_s: float | None
    run_id: Any  # the run in the store (an int), None without one
    cells_failed: int | None
    error: str | None

    @classmethod
    def parse(cls, value: Any) -> BackendRun:
        value = _mapping(value)
        failed = value.get("cells_failed")
        return cls(status=_text(value.get("status")), wall_s=_number(value.get("wall_s")), run_id=value.get("run_id"),
                   cells_failed=failed if isinstance(failed, int) and not isinstance(failed, bool) else None,
                   error=None if value.get("error") is None else str(value.get("error")))

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "wall_s": self.wall_s, "run_id": self.run_id,
                "cells_failed": self.cells_failed, "error": self.error}


@dataclass(frozen=True)
class TopCause:
    """The strongest finding of a lecture's slower run: diagnose's finding, as stored, and its backend."""

    title: str
    backend: str | None
    action: str | None  # the fix in one line
    fix: str | None
    document: Mapping[str, Any]  # the finding as ``Finding.to_dict()`` wrote it, with ``backend``

    @classmethod
    def parse(cls, value: Any) -> TopCause | None:
        if not isinstance(value, Mapping):
            return None
        return cls(title=str(value.get("title") or value.get("rule") or ""), backend=_text(value.get("backend")),
                   action=_text(value.get("action")), fix=_text(value.get("fix")), document=value)

    def as_json(self) -> dict[str, Any]:
        return dict(self.document)


@dataclass(frozen=True)
class Lecture:
    """One notebook of the audit: its total per backend, the winner and the top diagnosed cause with its fix."""

    path: str
    backends: Mapping[str, BackendRun]
    cpu_s: float | None
    gpu_backend: str | None
    gpu_s: float | None
    winner: str | None  # a backend, "tie", or None when the two were not both measured
    ratio: float | None  # slower over faster
    incomplete: bool
    top_finding: TopCause | None
    recommendation: Mapping[str, Any] | None  # analyse.recommend's choice, as it returns it
    forecast: Mapping[str, Any] | None  # the CPU run's forecast_summary
    action: str | None

    @classmethod
    def parse(cls, value: Any) -> Lecture:
        value = _mapping(value)
        ratio = value.get("ratio")
        return cls(
            path=str(value.get("path") or ""),
            backends={str(b): BackendRun.parse(run) for b, run in _mapping(value.get("backends")).items()},
            cpu_s=_number(value.get("cpu_s")), gpu_backend=_text(value.get("gpu_backend")),
            gpu_s=_number(value.get("gpu_s")), winner=_text(value.get("winner")), ratio=_number(ratio),
            incomplete=bool(value.get("incomplete")), top_finding=TopCause.parse(value.get("top_finding")),
            recommendation=value.get("recommendation") if isinstance(value.get("recommendation"), Mapping) else None,
            forecast=value.get("forecast") if isinstance(value.get("forecast"), Mapping) else None,
            action=_text(value.get("action")),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "backends": {b: run.as_json() for b, run in self.backends.items()},
            "cpu_s": self.cpu_s,
            "gpu_backend": self.gpu_backend,
            "gpu_s": self.gpu_s,
            "winner": self.winner,
            "ratio": self.ratio,
            "incomplete": self.incomplete,
            "top_finding": self.top_finding.as_json() if self.top_finding is not None else None,
            "recommendation": self.recommendation,
            "forecast": self.forecast,
            "action": self.action,
        }


def lectures(entries: list[dict[str, Any]], backends: list[str]) -> list[Lecture]:
    """One row per notebook: CPU total, GPU total, winner and the top diagnosed cause with its fix."""
    order: list[str] = []
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in entries:
        if entry["path"] not in by_key:
            order.append(entry["path"])
            by_key[entry["path"]] = {}
        by_key[entry["path"]][entry["backend"]] = entry
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    rows = []
    for key in order:
        runs = by_key[key]
        cpu, gpu = runs.get("cpu"), runs.get(gpu_backend) if gpu_backend else None
        cpu_s = cpu.get("wall_s") if cpu is not None and _measured(cpu) else None
        gpu_s = gpu.get("wall_s") if gpu is not None and _measured(gpu) else None
        winner, ratio = None, None
        if cpu_s is not None and gpu_s is not None:
            fast, slow = sorted((cpu_s, gpu_s))
            ratio = slow / fast if fast > 0 else None
            if ratio is not None and ratio < TIE_RATIO:
                winner = "tie"
            else:
                winner = "cpu" if cpu_s < gpu_s else gpu_backend
        # The cause worth naming is the one behind the slower run; with one run, that run's.
        measured = [e for e in runs.values() if _measured(e)]
        measured.sort(key=lambda e: e["wall_s"], reverse=True)
        top = next(((e["backend"], e["top_finding"]) for e in measured if e.get("top_finding")), None)
        recommendation = next((e["recommendation"] for e in runs.values() if e.get("recommendation")), None)
        action = (top[1].get("action") or top[1].get("fix")) if top else None  # the fix in one line
        if action is None and recommendation:
            action = f"run it on {recommendation['recommendation']}: {recommendation.get('reason') or ''}".rstrip(": ")
        rows.append(Lecture(
            path=key,
            backends={b: BackendRun.parse(e) for b, e in runs.items()},
            cpu_s=cpu_s,
            gpu_backend=gpu_backend,
            gpu_s=gpu_s,
            winner=winner,
            ratio=ratio,
            incomplete=any((e.get("cells_failed") or 0) > 0 or e.get("status") != "ok"
                           for e in runs.values() if e.get("status") != "unavailable"),
            top_finding=TopCause.parse(dict(top[1], backend=top[0])) if top else None,
            recommendation=recommendation,
            forecast=(cpu or {}).get("forecast") if _measured(cpu) else None,
            action=action,
        ))
    return rows


def summary_text(rows: Sequence[Lecture], backends: list[str], availability: dict[str, dict[str, Any]]) -> str:
    """"N of M lectures are slower on the GPU", or why no lecture could be compared."""
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    if gpu_backend is None:
        measured = sum(1 for r in rows if r.cpu_s is not None)
        return f"{measured} of {len(rows)} lectures profiled on cpu; no GPU backend was asked for"
    compared = _compared(rows)
    if not compared:
        reason = (availability.get(gpu_backend) or {}).get("reason")
        why = f": {gpu_backend} unavailable ({reason})" if reason else ""
        return f"0 of {len(rows)} lectures could be compared on cpu and {gpu_backend}{why}"
    slower = _slower_on_gpu(compared)
    text = f"{slower} of {len(compared)} lectures are slower on the GPU ({gpu_backend})"
    if len(compared) < len(rows):
        text += f"; {len(rows) - len(compared)} of {len(rows)} could not be compared"
    return text


def _compared(rows: Sequence[Lecture]) -> list[Lecture]:
    """The lectures measured on both the CPU and the GPU backend."""
    return [r for r in rows if r.cpu_s is not None and r.gpu_s is not None]


def _slower_on_gpu(compared: Sequence[Lecture]) -> int:
    return sum(1 for r in compared if r.gpu_s is not None and r.cpu_s is not None and r.gpu_s > r.cpu_s)


@dataclass(frozen=True)
class DominantTerm:
    """A lecture's largest GPU-side forecast term (a loop, work, launches, ...), added up over its cells."""

    kind: str | None
    function: str | None
    words: str
    low_s: float | None
    high_s: float | None  # None: no upper bound
    cells: tuple[int, ...]
    lines: tuple[int | None, ...]  # each cell's line in its file, when known

    @classmethod
    def parse(cls, value: Any) -> DominantTerm | None:
        if not isinstance(value, Mapping):
            return None
        return cls(kind=_text(value.get("kind")), function=_text(value.get("function")), words=str(value.get("words") or ""),
                   low_s=_number(value.get("low_s")), high_s=_number(value.get("high_s")),
                   cells=tuple(c for c in value.get("cells") or () if isinstance(c, int)),
                   lines=tuple(line if isinstance(line, int) else None for line in value.get("lines") or ()))

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "function": self.function, "words": self.words, "low_s": self.low_s,
                "high_s": self.high_s, "cells": list(self.cells), "lines": list(self.lines)}


@dataclass(frozen=True)
class GpuForecastRange:
    """One GPU's forecast for a lecture, in brief."""

    low_s: float | None
    high_s: float | None
    verdict: str | None
    slowdown: float | None

    @classmethod
    def parse(cls, value: Any) -> GpuForecastRange:
        value = _mapping(value)
        return cls(low_s=_number(value.get("low_s")), high_s=_number(value.get("high_s")),
                   verdict=_text(value.get("verdict")), slowdown=_number(value.get("slowdown")))

    def as_json(self) -> dict[str, Any]:
        return {"low_s": self.low_s, "high_s": self.high_s, "verdict": self.verdict, "slowdown": self.slowdown}


@dataclass(frozen=True)
class BlastLecture:
    """One lecture of the blast radius: its CPU time and its forecast on the first GPU named."""

    path: str
    cpu_s: float | None
    low_s: float | None
    high_s: float | None
    slowdown: float | None
    verdict: str | None
    all_on_gpu: str | None
    dominant: DominantTerm | None
    keep_on_cpu: tuple[str, ...]
    has_jax: bool
    gpus: Mapping[str, GpuForecastRange]

    @classmethod
    def parse(cls, value: Any) -> BlastLecture:
        value = _mapping(value)
        return cls(
            path=str(value.get("path") or ""), cpu_s=_number(value.get("cpu_s")), low_s=_number(value.get("low_s")),
            high_s=_number(value.get("high_s")), slowdown=_number(value.get("slowdown")),
            verdict=_text(value.get("verdict")), all_on_gpu=_text(value.get("all_on_gpu")),
            dominant=DominantTerm.parse(value.get("dominant")),
            keep_on_cpu=tuple(str(f) for f in value.get("keep_on_cpu") or ()),
            has_jax=bool(value.get("has_jax", True)),
            gpus={str(k): GpuForecastRange.parse(g) for k, g in _mapping(value.get("gpus")).items()},
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "cpu_s": self.cpu_s, "low_s": self.low_s, "high_s": self.high_s,
            "slowdown": self.slowdown, "verdict": self.verdict, "all_on_gpu": self.all_on_gpu,
            "dominant": self.dominant.as_json() if self.dominant is not None else None,
            "keep_on_cpu": list(self.keep_on_cpu), "has_jax": self.has_jax,
            "gpus": {k: g.as_json() for k, g in self.gpus.items()},
        }


@dataclass(frozen=True)
class ForecastError:
    """A lecture the forecast refused, and why."""

    path: str
    error: str

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "error": self.error}


@dataclass(frozen=True)
class BlastRadius:
    """The GPU blast radius of a CPU-only fleet run (``audit --forecast``): see :func:`blast_radius`."""

    gpu: str | None  # the first GPU forecast (device table key); None when no lecture could be forecast
    gpu_name: str | None
    gpus: tuple[str, ...]
    lectures: tuple[BlastLecture, ...]
    errors: tuple[ForecastError, ...]
    summary: str

    @classmethod
    def parse(cls, value: Any) -> BlastRadius | None:
        """The blast radius of a stored audit; None when it has none."""
        if not isinstance(value, Mapping) or value.get("lectures") is None:
            return None
        return cls(
            gpu=_text(value.get("gpu")), gpu_name=_text(value.get("gpu_name")),
            gpus=tuple(str(g) for g in value.get("gpus") or ()),
            lectures=tuple(BlastLecture.parse(x) for x in value.get("lectures") or ()),
            errors=tuple(ForecastError(str(e.get("path")), str(e.get("error"))) for e in value.get("errors") or ()
                         if isinstance(e, Mapping)),
            summary=str(value.get("summary") or ""),
        )

    def as_json(self) -> dict[str, Any]:
        head: dict[str, Any] = {"gpu": self.gpu}
        if self.gpu is not None:  # no GPU forecast, no name to give
            head["gpu_name"] = self.gpu_name
        return {**head, "gpus": list(self.gpus), "lectures": [x.as_json() for x in self.lectures],
                "errors": [e.as_json() for e in self.errors], "summary": self.summary}


def blast_radius(rows: Sequence[Lecture]) -> BlastRadius | None:
    """The GPU blast radius of a CPU-only fleet run (``audit --forecast``): per lecture with a forecast, its
    CPU time, the forecast GPU time range with everything on the GPU, the verdict, the dominant term and
    the functions to keep on the CPU, for the first GPU forecast; sorted by forecast slowdown (low end
    over CPU time), largest first. None when no lecture has a forecast.

    A lecture's forecast is its CPU run's :func:`forecast_summary` (a dict, as the audit entry stores it)."""
    forecast_rows = [(r.path, r.forecast) for r in rows if r.forecast is not None]
    if not forecast_rows:
        return None
    gpus: list[str] = []
    for _, summary in forecast_rows:
        gpus += [g for g in summary.get("gpus") or [] if g not in gpus]
    errors = tuple(ForecastError(path, summary["error"]) for path, summary in forecast_rows if summary.get("error"))
    if not gpus:
        return BlastRadius(gpu=None, gpu_name=None, gpus=(), lectures=(), errors=errors,
                           summary="no lecture could be forecast")
    key = gpus[0]
    lectures = []
    for path, summary in forecast_rows:
        devices = summary.get("devices") or {}
        device = devices.get(key)
        if device is None:
            continue
        lectures.append(BlastLecture(
            path=path, cpu_s=device["cpu_s"], low_s=device["low_s"], high_s=device["high_s"],
            slowdown=device["slowdown"], verdict=device["verdict"], all_on_gpu=device["all_on_gpu"],
            dominant=DominantTerm.parse(device["dominant"]), keep_on_cpu=tuple(device["keep_on_cpu"]),
            has_jax=summary["has_jax"],
            gpus={k: GpuForecastRange.parse(d) for k, d in devices.items()},
        ))
    lectures.sort(key=lambda x: (-(x.slowdown or 0.0), x.path))
    name = next((d["name"] for _, summary in forecast_rows for k, d in (summary.get("devices") or {}).items()
                 if k == key), key)
    slower = sum(1 for x in lectures if x.all_on_gpu == "slower")
    faster = sum(1 for x in lectures if x.all_on_gpu == "faster")
    text = (f"forecast from CPU runs: {slower} of {len(lectures)} lectures slower on the {name} with everything on "
            f"the GPU, {faster} faster")
    return BlastRadius(gpu=key, gpu_name=name, gpus=tuple(gpus), lectures=tuple(lectures), errors=errors, summary=text)


@dataclass(frozen=True)
class AuditEntry:
    """One notebook on one backend, as an audit's views read its entry: how it ended and its top findings."""

    path: str
    backend: str
    status: str | None
    run_id: Any  # its profile in the store (an int), None without one
    wall_s: float | None
    cells_failed: int | None
    error: str | None
    top_findings: tuple[Finding, ...] | None  # None: not diagnosed
    findings: int | None  # how many findings the diagnosis made

    @classmethod
    def parse(cls, value: Any) -> AuditEntry:
        value = _mapping(value)
        run = BackendRun.parse(value)
        top = value.get("top_findings")
        count = value.get("findings")
        return cls(
            path=str(value.get("path") or ""), backend=str(value.get("backend") or ""), status=run.status,
            run_id=run.run_id, wall_s=run.wall_s, cells_failed=run.cells_failed, error=run.error,
            top_findings=tuple(Finding.from_dict(f) for f in top if isinstance(f, Mapping)) if isinstance(top, list) else None,
            findings=count if isinstance(count, int) and not isinstance(count, bool) else None,
        )


@dataclass(frozen=True)
class Availability:
    """Whether the audit could run a backend, and why not."""

    available: bool
    reason: str | None

    @classmethod
    def parse(cls, value: Any) -> Availability:
        value = _mapping(value)
        return cls(available=bool(value.get("available")), reason=None if value.get("reason") is None else str(value["reason"]))


@dataclass(frozen=True)
class AuditTotals:
    notebooks: int
    profiled: int
    reused: int
    failed: int
    wall_s: float | None  # the audit's own wall time (None for a merge)

    @classmethod
    def parse(cls, value: Any) -> AuditTotals:
        value = _mapping(value)

        def count(key: str) -> int:
            item = value.get(key)
            return item if isinstance(item, int) and not isinstance(item, bool) else 0

        return cls(notebooks=count("notebooks"), profiled=count("profiled"), reused=count("reused"),
                   failed=count("failed"), wall_s=_number(value.get("wall_s")))


@dataclass(frozen=True)
class Audit:
    """A stored audit (a run record of kind ``audit``), typed for its views."""

    summary: str
    totals: AuditTotals
    lectures: tuple[Lecture, ...]
    entries: tuple[AuditEntry, ...]
    backends: Mapping[str, Availability]
    forecast: BlastRadius | None
    missing: tuple[str, ...]  # a merge: the notebooks no merged file covered

    @property
    def gpu_backend(self) -> str | None:
        return self.lectures[0].gpu_backend if self.lectures else None

    @property
    def failures(self) -> tuple[AuditEntry, ...]:
        """The entries that have no run: an error, or not run (interrupted)."""
        return tuple(e for e in self.entries if e.status in ("error", "not-run"))

    @classmethod
    def parse(cls, measurements: Mapping[str, Any]) -> Audit:
        return cls(
            summary=str(measurements.get("summary") or ""),
            totals=AuditTotals.parse(measurements.get("totals")),
            lectures=tuple(Lecture.parse(row) for row in measurements.get("lectures") or ()),
            entries=tuple(AuditEntry.parse(e) for e in measurements.get("notebooks") or () if isinstance(e, Mapping)),
            backends={str(b): Availability.parse(i) for b, i in _mapping(measurements.get("backends")).items()},
            forecast=BlastRadius.parse(measurements.get("forecast")),
            missing=tuple(str(k) for k in _mapping(measurements.get("coverage")).get("missing") or ()),
        )


def measurements(
    entries: list[dict[str, Any]],
    *,
    backends: list[str],
    availability: dict[str, dict[str, Any]],
    discovery: dict[str, Any],
    wall_s: float | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The audit record's ``measurements``."""
    rows = lectures(entries, backends)
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    compared = _compared(rows)

    def count(*statuses: str) -> int:
        return sum(1 for e in entries if e.get("status") in statuses)

    def backend_total(backend: str | None) -> float | None:
        values = [e["wall_s"] for e in entries if e.get("backend") == backend and _measured(e)]
        return sum(values) if values else None

    totals = {
        "notebooks": len(rows),
        "runs": count(*MEASURED),
        "profiled": sum(1 for e in entries if e.get("status") in MEASURED and not e.get("reused")),
        "reused": sum(1 for e in entries if e.get("reused")),
        "failed": count("error"),
        "partial": count("partial"),
        "not_run": count("not-run"),
        "unavailable": count("unavailable"),
        "cells_failed": sum(e.get("cells_failed") or 0 for e in entries),
        "wall_s": wall_s,
        "cpu_s": backend_total("cpu"),
        "gpu_s": backend_total(gpu_backend),
        "compile_s": sum(e.get("compile_s") or 0.0 for e in entries if _measured(e)),
        "compared": len(compared),
        "slower_on_gpu": _slower_on_gpu(compared),
    }
    result = {
        "totals": totals,
        "backends": availability,
        "discovery": discovery,
        "notebooks": entries,
        "lectures": [row.as_json() for row in rows],
        "summary": summary_text(rows, backends, availability),
    }
    radius = blast_radius(rows)
    if radius is not None:
        result["forecast"] = radius.as_json()
    result.update(extra or {})
    return result
