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

from collections.abc import Callable
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.recommend import recommend
from nbscope.record.run import RunRecord

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
    """analyse.recommend's backend choice for a notebook (cpu, gpu or mixed) with its estimates, if available."""
    try:
        result = recommend(cpu, gpu)
    except NbscopeError:  # the winner from the totals still stands
        return None
    if not isinstance(result, dict) or result.get("recommendation") is None:
        return None
    return {k: result.get(k) for k in ("recommendation", "reason", "estimates", "pinned", "caveats")}


def forecast_recommendation_of(cpu: RunRecord) -> dict[str, Any] | None:
    """analyse.recommend's backend choice from a CPU run's GPU forecast (no GPU run), if available."""
    try:
        result = recommend(cpu)
    except NbscopeError:
        return None
    if result.get("recommendation") is None:
        return None
    return {k: result.get(k) for k in ("recommendation", "reason", "basis", "estimates", "pinned", "caveats")}


def _dominant(result: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The notebook's largest GPU-side term on ``key`` (loops, work, launches, dispatch, transfers: what the
    GPU changes), adding up the same term over cells (two calls of one scan in two cells are one term)."""
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cell in result["cells"]:
        for term in cell["gpu"][key]["terms"]:
            if term["kind"] in ("host", "compile"):
                continue
            group = grouped.setdefault((term["kind"], term.get("function"), term["words"]), {
                "kind": term["kind"], "function": term.get("function"), "words": term["words"],
                "low_s": 0.0, "high_s": 0.0, "cells": [], "lines": []})
            group["low_s"] += term["low_s"]
            group["high_s"] = None if group["high_s"] is None or term["high_s"] is None else group["high_s"] + term["high_s"]
            if cell["index"] not in group["cells"]:
                group["cells"].append(cell["index"])
                group["lines"].append(cell.get("line"))
    if not grouped:
        return None
    return max(grouped.values(), key=lambda g: float("inf") if g["high_s"] is None else g["low_s"] + g["high_s"])


def forecast_summary(record: RunRecord) -> dict[str, Any] | None:
    """A CPU run's GPU forecast in brief, per GPU it was recorded for (``profile --forecast``, else the T4):
    CPU time, forecast range with everything on the GPU, verdicts, the dominant GPU-side term and the
    functions to keep on the CPU. None when the run holds no program data; ``{"error": ...}`` when the
    forecast refuses it."""
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.risks import gpus_of

    if not record.measurements.get("programs"):
        return None
    try:
        result = forecast(record, gpus_of(record))
    except NbscopeError as exc:
        return {"error": str(exc)}
    devices = {}
    for device in result["devices"]:
        key = device["key"]
        notebook = result["notebook"][key]
        cpu_s = notebook["cpu_s"]
        devices[key] = {
            "name": device["name"], "cpu_s": cpu_s, "low_s": notebook["low_s"], "high_s": notebook["high_s"],
            "verdict": notebook["verdict"], "all_on_gpu": notebook["all_on_gpu"],
            "slowdown": notebook["low_s"] / cpu_s if cpu_s > 0 else None,
            "dominant": _dominant(result, key), "keep_on_cpu": [e["function"] for e in notebook["keep_on_cpu"]],
            "plan": notebook["plan"],
        }
    return {"gpus": list(devices), "has_jax": result["has_jax"], "devices": devices, "notes": result["notes"]}


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
        if cpu is not None and cpu.measurements.get("programs"):
            runs["cpu"]["forecast"] = forecast_summary(cpu)
            if not any(is_gpu_backend(b) and r is not None for b, r in records.items()):
                runs["cpu"]["recommendation"] = forecast_recommendation_of(cpu)


def entry_from_record(record: RunRecord, *, key: str, backend: str, source_hash: str, reused: bool,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One audit entry (a notebook on a backend) from its profile record."""
    from nbscope.collect import fingerprint as fp

    totals = record.measurements.get("totals") or {}
    runner = record.measurements.get("runner") or {}
    audit = record.measurements.get("audit") or {}
    entry = {
        "path": key,
        "target": record.target,
        "source_hash": source_hash,
        "backend": backend,
        "run_id": record.run_id,
        "status": record.status,
        "reused": reused,
        "wall_s": totals.get("wall_s"),
        "compile_s": totals.get("compile_s"),
        "run_s": totals.get("run_s"),
        "execute_s": runner.get("execute_s"),
        "kernel_start_s": runner.get("kernel_start_s"),
        "elapsed_s": audit.get("elapsed_s"),
        "cells": totals.get("cells"),
        "cells_failed": totals.get("cells_failed"),
        "compiles": totals.get("compiles"),
        "top_finding": None,  # filled by diagnose_entries once every run is in
        "top_findings": None,
        "findings": None,
        "diagnosis": None,
        "recommendation": None,
        "forecast": None,  # filled by diagnose_entries for a CPU run with program data
        "digest": record.digest,
        "machine": fp.summary(record.fingerprint),
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
    return bool(entry) and entry.get("status") in MEASURED and isinstance(entry.get("wall_s"), (int, float))


def lectures(entries: list[dict[str, Any]], backends: list[str]) -> list[dict[str, Any]]:
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
        row: dict[str, Any] = {
            "path": key,
            "backends": {b: {"status": e.get("status"), "wall_s": e.get("wall_s"), "run_id": e.get("run_id"),
                             "cells_failed": e.get("cells_failed"), "error": e.get("error")} for b, e in runs.items()},
            "cpu_s": cpu.get("wall_s") if _measured(cpu) else None,
            "gpu_backend": gpu_backend,
            "gpu_s": gpu.get("wall_s") if _measured(gpu) else None,
            "winner": None,
            "ratio": None,
            "incomplete": any((e.get("cells_failed") or 0) > 0 or e.get("status") != "ok"
                              for e in runs.values() if e.get("status") != "unavailable"),
        }
        if _measured(cpu) and _measured(gpu):
            fast, slow = sorted((row["cpu_s"], row["gpu_s"]))
            row["ratio"] = slow / fast if fast > 0 else None
            if row["ratio"] is not None and row["ratio"] < TIE_RATIO:
                row["winner"] = "tie"
            else:
                row["winner"] = "cpu" if row["cpu_s"] < row["gpu_s"] else gpu_backend
        # The cause worth naming is the one behind the slower run; with one run, that run's.
        measured = [e for e in runs.values() if _measured(e)]
        measured.sort(key=lambda e: e["wall_s"], reverse=True)
        top = next(((e["backend"], e["top_finding"]) for e in measured if e.get("top_finding")), None)
        row["top_finding"] = dict(top[1], backend=top[0]) if top else None
        row["recommendation"] = next((e["recommendation"] for e in runs.values() if e.get("recommendation")), None)
        row["forecast"] = (cpu or {}).get("forecast") if _measured(cpu) else None
        row["action"] = (top[1].get("action") or top[1].get("fix")) if top else None  # the fix in one line
        if row["action"] is None and row["recommendation"]:
            rec = row["recommendation"]
            row["action"] = f"run it on {rec['recommendation']}: {rec.get('reason') or ''}".rstrip(": ")
        rows.append(row)
    return rows


def summary_text(rows: list[dict[str, Any]], backends: list[str], availability: dict[str, dict[str, Any]]) -> str:
    """"N of M lectures are slower on the GPU", or why no lecture could be compared."""
    gpu_backend = next((b for b in backends if is_gpu_backend(b)), None)
    if gpu_backend is None:
        measured = sum(1 for r in rows if r["cpu_s"] is not None)
        return f"{measured} of {len(rows)} lectures profiled on cpu; no GPU backend was asked for"
    compared = [r for r in rows if r["cpu_s"] is not None and r["gpu_s"] is not None]
    if not compared:
        reason = (availability.get(gpu_backend) or {}).get("reason")
        why = f": {gpu_backend} unavailable ({reason})" if reason else ""
        return f"0 of {len(rows)} lectures could be compared on cpu and {gpu_backend}{why}"
    slower = sum(1 for r in compared if r["gpu_s"] > r["cpu_s"])
    text = f"{slower} of {len(compared)} lectures are slower on the GPU ({gpu_backend})"
    if len(compared) < len(rows):
        text += f"; {len(rows) - len(compared)} of {len(rows)} could not be compared"
    return text


def blast_radius(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The GPU blast radius of a CPU-only fleet run (``audit --forecast``): per lecture with a forecast, its
    CPU time, the forecast GPU time range with everything on the GPU, the verdict, the dominant term and
    the functions to keep on the CPU, for the first GPU forecast; sorted by forecast slowdown (low end
    over CPU time), largest first. None when no lecture has a forecast."""
    forecast_rows = [r for r in rows if isinstance(r.get("forecast"), dict)]
    if not forecast_rows:
        return None
    gpus: list[str] = []
    for row in forecast_rows:
        gpus += [g for g in row["forecast"].get("gpus") or [] if g not in gpus]
    errors = [{"path": r["path"], "error": r["forecast"]["error"]} for r in forecast_rows if r["forecast"].get("error")]
    if not gpus:
        return {"gpu": None, "gpus": [], "lectures": [], "errors": errors, "summary": "no lecture could be forecast"}
    key = gpus[0]
    lectures = []
    for row in forecast_rows:
        device = (row["forecast"].get("devices") or {}).get(key)
        if device is None:
            continue
        lectures.append({
            "path": row["path"], "cpu_s": device["cpu_s"], "low_s": device["low_s"], "high_s": device["high_s"],
            "slowdown": device["slowdown"], "verdict": device["verdict"], "all_on_gpu": device["all_on_gpu"],
            "dominant": device["dominant"], "keep_on_cpu": device["keep_on_cpu"], "has_jax": row["forecast"]["has_jax"],
            "gpus": {k: {f: d[f] for f in ("low_s", "high_s", "verdict", "slowdown")}
                     for k, d in (row["forecast"].get("devices") or {}).items()},
        })
    lectures.sort(key=lambda x: (-(x["slowdown"] or 0.0), x["path"]))
    name = next((d["name"] for r in forecast_rows for k, d in (r["forecast"].get("devices") or {}).items() if k == key), key)
    slower = sum(1 for x in lectures if x["all_on_gpu"] == "slower")
    faster = sum(1 for x in lectures if x["all_on_gpu"] == "faster")
    summary = (f"forecast from CPU runs: {slower} of {len(lectures)} lectures slower on the {name} with everything on "
               f"the GPU, {faster} faster")
    return {"gpu": key, "gpu_name": name, "gpus": gpus, "lectures": lectures, "errors": errors, "summary": summary}


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
    compared = [r for r in rows if r["cpu_s"] is not None and r["gpu_s"] is not None]

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
        "slower_on_gpu": sum(1 for r in compared if r["gpu_s"] > r["cpu_s"]),
    }
    result = {
        "totals": totals,
        "backends": availability,
        "discovery": discovery,
        "notebooks": entries,
        "lectures": rows,
        "summary": summary_text(rows, backends, availability),
    }
    radius = blast_radius(rows)
    if radius is not None:
        result["forecast"] = radius
    result.update(extra or {})
    return result
