"""The job behind ``nbscope gate``: pick the candidate and baseline runs from the store, judge them, and
remember the verdict so that a run that failed is never the next automatic baseline.

The automatic baseline (:func:`latest_baseline`) is an earlier complete run (status ``ok``) of the same
target, kind and environment digest, measured with the same settings (backend, JAX cache mode, timeline,
repeat count), that did not fail the gate: the last one that passed it, else (no run has passed yet) the
newest one never judged.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.analyse.gate import CELL_KINDS, GateOptions, GateResult, gate
from nbscope.analyse.gate import parse_slowdown as parse_slowdown  # the CLI reads --max-slowdown with it
from nbscope.record.run import RunRecord, describe_settings
from nbscope.record.store import resolve_run, settings_key

# The runs a gate judges: per-cell profiles, and jupyter-cache imports (totals only).
GATE_KINDS = (*CELL_KINDS, "jupyter-cache")
# The earlier runs a candidate may be judged against, as summaries, and those left out by reason.
Comparable = tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]


def _comparable_earlier(store: Any, candidate: RunRecord) -> Comparable:
    """Stored runs that may stand for the candidate's past, newest first, and those left out by reason:
    the store's summaries of them (no document is read; the callers read the runs they choose).

    Same target, kind and digest; started no later than the candidate (any time for a candidate from a
    file that is not in the store); status ``ok``; same measurement settings; not failed by the gate.
    """
    if not store.path.exists():
        return [], {}  # no store: runs named by files have no stored past
    settings = json.loads(settings_key(candidate.measurement_settings()))  # as the store gives them back
    kept: list[dict[str, Any]] = []
    left_out: dict[str, list[dict[str, Any]]] = {}
    names = store.names_of(candidate.target)  # runs stored under the notebook's older names too
    rows = store.summaries(("started_at", "status", "settings"), target=names, digest=candidate.digest,
                           kind=candidate.kind)
    verdicts = store.verdicts(row["id"] for row in rows)
    for row in rows:
        if candidate.run_id is not None and (row["id"] == candidate.run_id or row["started_at"] > candidate.started_at):
            continue
        measured = row["settings"]
        if measured is None:  # its document could not be read when the store was migrated
            record = store.readable(row["id"])
            if record is None:
                continue  # reported by the store, as any unreadable row
            measured = record.measurement_settings()
        measured = {k: v for k, v in measured.items() if k != "env"}  # a run under other --env values still counts
        if row["status"] != "ok":
            reason = f"status {row['status']}"
        elif measured != settings:
            reason = "other settings"
        elif not verdicts.get(row["id"], {}).get("passed", True):
            reason = "failed the gate"
        else:
            kept.append(row)
            continue
        left_out.setdefault(reason, []).append(row)
    return kept, left_out


def _runs_text(rows: list[dict[str, Any]], most: int = 5) -> str:
    ids = [str(r["id"]) for r in rows]
    if len(ids) == 1:
        return f"run {ids[0]}"
    return f"runs {', '.join(ids[:most])}" + (f" and {len(ids) - most} more" if len(ids) > most else "")


def latest_baseline(
    store: Any, candidate: RunRecord, notes: list[str] | None = None, *, comparable: Comparable | None = None
) -> RunRecord:
    """The run a candidate is judged against when none is named: among the earlier runs with its target,
    kind, digest and measurement settings, complete (status ``ok``) and not failed by the gate, the last
    one that passed the gate, else the newest one never judged.

    ``notes`` receives one line naming the chosen run and the newer runs passed over, when there are any.
    ``comparable``: what :func:`_comparable_earlier` gave for this candidate, when it was asked already.
    """
    kept, left_out = comparable or _comparable_earlier(store, candidate)
    kept = list(kept)
    verdicts = store.verdicts(row["id"] for row in kept) if kept else {}
    chosen: RunRecord | None = None
    while kept and chosen is None:
        passed = [r for r in kept if verdicts.get(r["id"], {}).get("passed")]
        row = passed[0] if passed else kept[0]
        chosen = store.readable(row["id"])  # the only document read
        if chosen is None:
            kept.remove(row)  # unreadable: reported by the store, and passed over
    if chosen is None:
        why = "; ".join(f"{_runs_text(rows)}: {reason}" for reason, rows in left_out.items())
        raise NbscopeError(
            f"no earlier complete {candidate.kind} run of {candidate.target} with digest {candidate.digest} and the "
            f"same settings ({describe_settings(candidate.measurement_settings())}) that did not fail the gate, in "
            f"{store.path}" + (f" (left out: {why})" if why else "") + "; name one with --baseline"
        )
    newer = {"not judged by the gate": kept[: kept.index(row)]}
    for reason, rows in left_out.items():
        newer[reason] = [r for r in rows if (r["started_at"], r["id"]) > (chosen.started_at, chosen.run_id or 0)]
    passed_over = "; ".join(f"{_runs_text(rows)} ({reason})" for reason, rows in newer.items() if rows)
    if notes is not None and passed_over:
        how = "the last run that passed the gate" if passed else "the newest comparable run"
        notes.append(f"baseline run {chosen.run_id} is {how}; newer runs passed over: {passed_over}")
    return chosen


def history_runs(
    store: Any, candidate: RunRecord, count: int, *, comparable: Comparable | None = None
) -> list[RunRecord]:
    """Up to ``count`` newest stored runs that started before the candidate, with its target, digest,
    kind and measurement settings, complete and not failed by the gate: the run-to-run noise of this
    notebook in this environment. Only their documents are read."""
    if count <= 0:
        return []
    kept, _ = comparable or _comparable_earlier(store, candidate)
    found: list[RunRecord] = []
    for row in kept:
        if len(found) >= count:
            break
        if row["started_at"] < candidate.started_at and (record := store.readable(row["id"])) is not None:
            found.append(record)
    return found


def latest_run(store: Any, target: str | None) -> RunRecord:
    """The newest stored profile/trace/jupyter-cache run (of ``target`` when given, by any of its names)."""
    if not store.path.exists():
        raise store.missing()
    found = store.latest(target=store.names_of(target) if target else None, kind=list(GATE_KINDS))
    if found is None:
        where = f" of {target}" if target else ""
        raise NbscopeError(f"no run{where} in {store.path} to use as the candidate")
    return found


def gate_stored(
    store: Any,
    *,
    candidate: str = "latest",
    baseline: str = "latest",
    target: str | None = None,
    options: GateOptions | None = None,
    history: int = 10,
) -> GateResult:
    """Judge a candidate run against a baseline (each a run reference: an id, ``latest:NOTEBOOK``, a label,
    a run JSON file; or ``latest``), with the run-to-run noise of up to ``history`` earlier comparable
    runs; the verdict is stored with the candidate when it is a stored run.

    ``latest`` means: for the candidate, the newest run (of ``target`` when given); for the baseline, the
    automatic baseline (:func:`latest_baseline`).
    """
    if history < 0:
        raise NbscopeError("--history must be 0 or more")
    cand = latest_run(store, target) if candidate == "latest" else resolve_run(candidate, store, kinds=GATE_KINDS)
    notes: list[str] = []
    comparable = _comparable_earlier(store, cand)  # one search of the store for both
    base = (latest_baseline(store, cand, notes, comparable=comparable) if baseline == "latest"
            else resolve_run(baseline, store, kinds=GATE_KINDS))
    result = gate(base, cand, options, history=history_runs(store, cand, history, comparable=comparable))
    result = replace(result, warnings=[*notes, *result.warnings])
    if cand.run_id is not None:
        # Remembered so that a run that failed is never the next automatic baseline.
        try:
            store.record_verdict(cand.run_id, baseline_id=base.run_id, passed=result.passed, reasons=result.reasons())
        except NbscopeError as exc:  # a read-only store still gets its verdict; it is only not remembered
            result = replace(result, warnings=[*result.warnings, f"the verdict is not remembered: {exc}"])
    return result
