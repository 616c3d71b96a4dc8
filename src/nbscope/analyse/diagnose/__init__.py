"""Diagnosis: named causes of slow (or wrongly timed) cells, each with its evidence and a concrete fix.

Each rule is a small module (``_<rule>.py``) exposing ``RULE``; ``RULES`` lists them in the order they
run. A rule reads the run record (and, when it needs code, the notebook's cell sources, re-read from the
path the record names or passed as ``sources``). A rule that lacks the data it needs adds a ``Skip``
saying what is missing instead of guessing.

Public interface (used by the HTML report and the fleet audit)::

    diagnose(record, *, other=None) -> list[Finding]      # most important first; .skipped lists Skips
    rule_thresholds() -> dict                            # each rule's thresholds and their defaults
    recommend(a, b) -> dict                              # backend choice with estimated cpu/gpu/mixed totals
    recommend(cpu_run) / recommend_forecast(cpu_run)     # the same from a CPU run's GPU forecast (no GPU run)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbscope import _units as units
from nbscope.analyse import compare as compare_module
from nbscope.analyse.diagnose import (
    _cold_cache,
    _compile_bound,
    _eager_flood,
    _first_call,
    _forecast,
    _gpu_memory,
    _latency_loop,
    _retrace_churn,
    _slow_compile_alarm,
    _slow_first_call,
    _unrolled_loop,
    _unsynchronised_timing,
    _weak_float64,
)
from nbscope.analyse.diagnose._base import SEVERITIES, Context, Finding, Rule, Skip, load_sources
from nbscope.record.run import RunRecord

__all__ = [
    "RULES", "Finding", "Findings", "Rule", "Skip", "diagnose", "recommend", "recommend_forecast", "rule_names",
    "rule_thresholds",
]

RULES: list[Rule] = [
    _unrolled_loop.RULE,
    _retrace_churn.RULE,
    _latency_loop.RULE,
    _weak_float64.RULE,
    _gpu_memory.RULE,
    _slow_compile_alarm.RULE,
    _compile_bound.RULE,
    _eager_flood.RULE,
    _cold_cache.RULE,
    _first_call.RULE,
    _slow_first_call.RULE,
    _unsynchronised_timing.RULE,
]


def rule_names() -> list[str]:
    return [rule.name for rule in RULES]


def rule_thresholds() -> dict[str, dict[str, float]]:
    """The thresholds each rule accepts in ``diagnose(thresholds=...)``, with their default values."""
    return {rule.name: dict(rule.thresholds) for rule in RULES if rule.thresholds}


def _checked_thresholds(thresholds: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """The caller's threshold overrides, refused with one line when a rule or a name is unknown."""
    from nbscope._errors import NbscopeError

    known = rule_thresholds()
    checked: dict[str, dict[str, float]] = {}
    for rule, values in thresholds.items():
        if rule not in known:
            raise NbscopeError(f"no thresholds for rule {rule!r}; rules with thresholds: {', '.join(known)}")
        unknown = sorted(set(values) - set(known[rule]))
        if unknown:
            raise NbscopeError(f"rule {rule} has no threshold {', '.join(unknown)}; its thresholds: {', '.join(known[rule])}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise NbscopeError(f"threshold {rule}.{name} must be a number, not {value!r}")
        checked[rule] = {name: float(value) for name, value in values.items()}
    return checked


class Findings(list[Finding]):
    """The findings of one diagnosis (a plain list of Finding), plus what could not be evaluated."""

    def __init__(
        self,
        findings: Iterable[Finding] = (),
        *,
        skipped: Iterable[Skip] = (),
        notes: Iterable[str] = (),
        thresholds: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        super().__init__(findings)
        self.skipped: list[Skip] = list(skipped)
        self.notes: list[str] = list(notes)
        # Thresholds the caller set in place of the defaults (empty: every rule used its defaults).
        self.thresholds: dict[str, dict[str, float]] = {rule: dict(v) for rule, v in (thresholds or {}).items()}

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "findings": [f.to_dict() for f in self],
            "skipped": [s.to_dict() for s in self.skipped],
            "notes": self.notes,
            "rules": rule_names(),
        }
        if self.thresholds:
            document["thresholds"] = self.thresholds
        return document


_GENERIC = {rule.name for rule in RULES if rule.generic}


def _order(finding: Finding) -> tuple[int, bool, float, float, int]:
    return (
        SEVERITIES.index(finding.severity) if finding.severity in SEVERITIES else len(SEVERITIES),
        finding.rule in _GENERIC,
        -finding.seconds_at_stake,
        -finding.confidence,
        finding.cell_index if finding.cell_index is not None else -1,
    )


def diagnose(
    record: RunRecord,
    *,
    other: RunRecord | None = None,
    sources: Mapping[str, str] | None = None,
    rules: Iterable[str] | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    gpus: str | Sequence[str] | None = None,
    devices_file: str | Path | None = None,
) -> list[Finding]:
    """Run every rule on a profile run; most important first.

    ``other`` is a second run of the same notebook (a CPU run for a GPU one, a warm-cache run for a cold
    one) that some rules use as measured evidence. ``sources`` maps a cell's source hash to its source;
    by default the notebook is re-read from the path in the record. ``thresholds`` overrides rules'
    thresholds by rule and name (``{"compile-bound": {"min_compile_s": 0.05}}``; see
    :func:`rule_thresholds`), e.g. to judge a run whose machine compiles much faster or slower than the
    defaults assume. The returned list is a :class:`Findings`: ``.skipped`` says which rules (or parts)
    could not be evaluated and why.

    On a CPU run recorded with program data (``nbscope profile --forecast``), the GPU rules fire as
    forecast findings (``Finding.forecast`` names the GPUs) for ``gpus`` (device table keys), else the
    GPUs named when the run was recorded, else the T4. Naming ``gpus`` for a run without program data,
    or for a GPU run, is refused with one line. ``devices_file`` adds or overrides GPUs of the device
    table, as ``nbscope forecast --devices`` does (default: ``$NBSCOPE_DEVICES``, then the config folder's).
    """
    compare_module.check_profile(record, "the run")
    if other is not None:
        compare_module.check_profile(other, "the other run")
    if gpus:
        gpus = [g.strip() for g in gpus.split(",")] if isinstance(gpus, str) else list(gpus)
        _forecast.check_request(record, gpus, compare_module.platform_of(record)["platform"],
                                compare_module.label(record, "the run"), devices_file=devices_file)
    wanted = set(rules) if rules is not None else None
    if wanted is not None:
        unknown = wanted - set(rule_names())
        if unknown:
            from nbscope._errors import NbscopeError

            raise NbscopeError(f"unknown rule(s) {', '.join(sorted(unknown))}; known: {', '.join(rule_names())}")
    overrides = _checked_thresholds(thresholds or {})
    ctx = Context(record, other=other, sources=sources, thresholds=overrides, gpus=gpus or None,
                  devices_file=devices_file)
    findings: list[Finding] = []
    skipped: list[Skip] = []
    for rule in RULES:
        if wanted is not None and rule.name not in wanted:
            continue
        try:
            for outcome in rule.evaluate(ctx):
                (findings if isinstance(outcome, Finding) else skipped).append(outcome)  # type: ignore[arg-type]
        except Exception as exc:  # one broken rule must not hide the others' findings
            skipped.append(Skip(rule.name, f"rule failed: {type(exc).__name__}: {exc}"))
    _link(findings)
    notes = [ctx.sources_note] if ctx.sources_note else []
    return Findings(sorted(findings, key=_order), skipped=skipped, notes=notes, thresholds=overrides)


def _link(findings: list[Finding]) -> None:
    """A generic finding on a cell names the specific findings on the same cell (its likely causes)."""
    specific: dict[int, list[str]] = {}
    for finding in findings:
        if finding.rule not in _GENERIC and finding.cell_index is not None:
            specific.setdefault(finding.cell_index, []).append(finding.rule)
    for finding in findings:
        if finding.rule in _GENERIC and finding.cell_index in specific:
            finding.evidence["see_also"] = sorted(set(specific[finding.cell_index]))


# ---- backend recommendation -------------------------------------------------------------------------

PIN_MIN_GAIN_S = 0.1  # a cell moves to the CPU only if that saves at least this ...
PIN_MIN_RATIO = 1.3  # ... and the accelerator is at least this much slower on it
MIXED_MIN_GAIN = 0.05  # mixed must beat the best single backend by 5 % to be worth the extra code


def _jax_work(cell: Mapping[str, Any] | None, calls: set[str], jitted: set[str]) -> set[str]:
    """User JAX functions a cell compiles or (by its source) calls."""
    if cell is None:
        return set()
    names = {str(f.get("name")) for f in (cell.get("jax") or {}).get("functions") or [] if f.get("kind") == "user"}
    names |= calls & jitted
    return names


def recommend(
    a: RunRecord,
    b: RunRecord | None = None,
    *,
    sources: Mapping[str, str] | None = None,
    gpus: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Which backend this notebook should use, from the measured per-cell figures of a CPU and a GPU run,
    or, when no GPU run exists, from the GPU forecast of a CPU run recorded with program data.

    Measured (``basis: "measured"``): ``cpu_s`` and ``gpu_s`` add each run's measured cell times;
    ``mixed_s`` is the GPU run with every JAX cell that ran faster on the CPU taken at its CPU time (those
    cells pinned to the CPU).

    Returns ``{"recommendation": "cpu" | "gpu" | "mixed" | None, "reason": str, "basis": "measured" |
    "forecast", "estimates": {"cpu_s", "gpu_s", "mixed_s" (None when nothing is worth pinning)}, "pinned":
    [{"cell", "line", "first_line", "functions", "cpu_s", "gpu_s", "saving_s"}], "faster_on_accelerator":
    [...], "accelerator": "gpu", "same_host": bool, "caveats": [str], "runs": {...}}``. The accelerator key
    is the platform name (``gpu`` for CUDA/ROCm, ``tpu``). Two runs on one backend give ``recommendation``
    None with a reason, unless they are CPU runs and one holds program data: then the forecast decides.

    Forecast (``basis: "forecast"``; ``b`` omitted, or two CPU runs): see :func:`recommend_forecast`.
    """
    compare_module.check_profile(a, "A")
    if b is None:
        return recommend_forecast(a, gpus=gpus, sources=sources)
    compare_module.check_profile(b, "B")
    pa, pb = compare_module.platform_of(a)["platform"], compare_module.platform_of(b)["platform"]
    result: dict[str, Any] = {
        "runs": {"a": {"run_id": a.run_id, "platform": pa}, "b": {"run_id": b.run_id, "platform": pb}},
        "recommendation": None,
        "basis": "measured",
        "estimates": None,
        "pinned": [],
        "caveats": [],
    }
    if pa == pb:
        with_programs = [r for r in (a, b) if r.measurements.get("programs")]
        if pa == "cpu" and with_programs:
            return recommend_forecast(with_programs[0], gpus=gpus, sources=sources)
        result["reason"] = f"both runs used the {pa} backend: nothing to choose between"
        return result
    if "cpu" not in (pa, pb):
        result["reason"] = f"neither run used the CPU ({pa} vs {pb}): no mixed estimate"
        ta, tb = ((r.measurements.get("totals") or {}).get("wall_s") for r in (a, b))
        if isinstance(ta, (int, float)) and isinstance(tb, (int, float)):
            result["recommendation"] = pa if ta <= tb else pb
            result["estimates"] = {f"{pa}_s": ta, f"{pb}_s": tb}
        return result
    cpu, acc = (a, b) if pa == "cpu" else (b, a)
    acc_name = pb if pa == "cpu" else pa
    if sources is None:
        sources, _ = load_sources(acc)
        if not sources:
            sources, _ = load_sources(cpu)
    from nbscope.analyse.diagnose._source import analyse

    index_of = {c.get("source_hash"): int(c["index"]) for c in acc.measurements["cells"]}
    code = analyse({index_of[h]: s for h, s in sources.items() if h in index_of})
    jitted = code.jitted
    pairs = compare_module.pair_cells(acc.measurements["cells"], cpu.measurements["cells"], sources=sources)
    cpu_total = sum(float(c.get("wall_s") or 0.0) for c in cpu.measurements["cells"])
    acc_total = sum(float(c.get("wall_s") or 0.0) for c in acc.measurements["cells"])
    mixed = acc_total
    pinned, faster_on_acc = [], []
    for pair in pairs:
        if pair.a is None or pair.b is None:
            continue
        wa, wc = pair.a.get("wall_s"), pair.b.get("wall_s")
        if not isinstance(wa, (int, float)) or not isinstance(wc, (int, float)):
            continue
        calls = code.calls_by_cell.get(int(pair.a["index"]), set())
        functions = _jax_work(pair.a, calls, jitted) | _jax_work(pair.b, calls, jitted)
        entry = {
            "cell": pair.a["index"],
            "line": pair.a.get("line"),
            "first_line": pair.a.get("first_line"),
            "functions": sorted(functions),
            "cpu_s": round(wc, 4),
            f"{acc_name}_s": round(wa, 4),
        }
        gain = wa - wc
        # Only cells with JAX work can be pinned; a NumPy cell runs on the host CPU either way.
        if functions and gain >= PIN_MIN_GAIN_S and (wc <= 0 or wa / wc >= PIN_MIN_RATIO):
            entry["saving_s"] = round(gain, 4)
            pinned.append(entry)
            mixed -= gain
        elif wc - wa >= PIN_MIN_GAIN_S:
            entry["saving_s"] = round(wc - wa, 4)
            faster_on_acc.append(entry)
    estimates = {"cpu_s": round(cpu_total, 4), f"{acc_name}_s": round(acc_total, 4), "mixed_s": round(mixed, 4) if pinned else None}
    best_single = "cpu" if cpu_total <= acc_total else acc_name
    best_single_s = min(cpu_total, acc_total)
    if pinned and mixed < best_single_s * (1 - MIXED_MIN_GAIN):
        choice = "mixed"
    else:
        choice = best_single
    pinned_names = sorted({n for p in pinned for n in p["functions"]})
    if choice == "mixed":
        reason = (
            f"{acc_name.upper()} with {', '.join(pinned_names) or 'the listed cells'} pinned to the CPU: "
            f"{_s(mixed)} vs {_s(cpu_total)} on CPU and {_s(acc_total)} on {acc_name.upper()}"
        )
    elif choice == "cpu":
        worst = max(pinned, key=lambda p: p["saving_s"], default=None)
        reason = f"CPU {_s(cpu_total)} vs {acc_name.upper()} {_s(acc_total)}" + (
            f"; the {acc_name.upper()} loses most in cell {worst['cell'] + 1} ({', '.join(worst['functions'])}: "
            f"{_s(worst[f'{acc_name}_s'])} vs {_s(worst['cpu_s'])})" if worst else ""
        )
    else:
        reason = f"{acc_name.upper()} {_s(acc_total)} vs CPU {_s(cpu_total)}"
    caveats = [
        "estimates add measured cell times (kernel start excluded); pinning moves a function's inputs between "
        "devices, which these runs did not measure",
    ]
    cpu_model = (cpu.fingerprint.get("cpu") or {}).get("model")
    acc_model = (acc.fingerprint.get("cpu") or {}).get("model")
    same_host = cpu_model == acc_model and (cpu.fingerprint.get("cpu") or {}).get("logical_cores") == (
        acc.fingerprint.get("cpu") or {}
    ).get("logical_cores")
    if not same_host:
        caveats.append(f"the runs come from different hosts ({cpu_model} vs {acc_model}): CPU-pinned figures are "
                       "those of the CPU run's host")
    result.update(
        recommendation=choice,
        reason=reason,
        estimates=estimates,
        pinned=pinned,
        faster_on_accelerator=sorted(faster_on_acc, key=lambda p: -p["saving_s"])[:5],
        accelerator=acc_name,
        same_host=same_host,
        caveats=caveats,
    )
    result["runs"] = {"cpu": {"run_id": cpu.run_id, "total_s": round(cpu_total, 4)},
                      acc_name: {"run_id": acc.run_id, "total_s": round(acc_total, 4)}}
    return result


_s = units.seconds


# ---- backend recommendation from a forecast ---------------------------------------------------------

_CHOICE = {"mixed": "mixed", "slower": "cpu", "similar": "cpu", "faster": "gpu"}


def recommend_forecast(
    record: RunRecord,
    *,
    gpus: str | Sequence[str] | None = None,
    sources: Mapping[str, str] | None = None,
    devices_file: str | Path | None = None,
) -> dict[str, Any]:
    """The backend choice for a notebook that has no GPU run: from the GPU forecast of a CPU run recorded
    with program data (``nbscope profile --forecast``), for ``gpus`` (else those named when it was
    recorded, else the T4); the choice is made for the first GPU, each GPU's figures are in ``forecast``.

    The same keys as :func:`recommend`, with ``basis: "forecast"``, a reason that says it is a forecast,
    ``estimates`` as ranges (``cpu_s`` measured; ``gpu_low_s`` / ``gpu_high_s`` with everything on the GPU;
    ``mixed_low_s`` / ``mixed_high_s`` with the functions the forecast keeps on the CPU), ``pinned`` per
    such function (its cells, the code change), and ``forecast``: per GPU key its verdict and totals.
    A run without program data, or one that ran on a GPU, is refused with one line; a run with no JAX
    gets ``recommendation`` None and says why.
    """
    from nbscope.analyse.forecast import forecast, uses_jax
    from nbscope.analyse.forecast.risks import gpus_of, require_forecast

    compare_module.check_profile(record, "the run")
    platform = compare_module.platform_of(record)["platform"]
    label = compare_module.label(record, "the run")
    require_forecast(record, platform, label)
    result: dict[str, Any] = {
        "runs": {"cpu": {"run_id": record.run_id,
                         "total_s": round(sum(float(c.get("wall_s") or 0.0) for c in record.measurements["cells"]), 4)}},
        "recommendation": None, "basis": "forecast", "estimates": None, "pinned": [], "faster_on_accelerator": [],
        "accelerator": "gpu", "caveats": [], "forecast": {},
    }
    if not uses_jax(record):
        result["reason"] = ("forecast: the notebook runs no JAX, so NumPy, Numba and Python run on the CPU whatever "
                            "GPU the machine has: nothing to choose between")
        return result
    forecast_result = forecast(record, gpus_of(record, gpus), sources=sources, devices_file=devices_file)
    for device in forecast_result["devices"]:
        notebook = forecast_result["notebook"][device["key"]]
        result["forecast"][device["key"]] = {
            "name": device["name"], "verdict": notebook["verdict"], "all_on_gpu": notebook["all_on_gpu"],
            "cpu_s": notebook["cpu_s"], "low_s": notebook["low_s"], "high_s": notebook["high_s"],
            "keep_on_cpu": [e["function"] for e in notebook["keep_on_cpu"]], "plan": notebook["plan"],
        }
    device = forecast_result["devices"][0]
    key, name = device["key"], device["name"]
    notebook = forecast_result["notebook"][key]
    cells = {c["index"]: c for c in forecast_result["cells"]}
    choice = _CHOICE.get(notebook["verdict"], "cpu")
    estimates: dict[str, Any] = {"cpu_s": round(notebook["cpu_s"], 4), "gpu_low_s": round(notebook["low_s"], 4),
                                 "gpu_high_s": None if notebook["high_s"] is None else round(notebook["high_s"], 4)}
    plan = notebook["plan"]
    if plan:
        estimates["mixed_low_s"] = round(plan["low_s"], 4)
        estimates["mixed_high_s"] = None if plan["high_s"] is None else round(plan["high_s"], 4)
    pinned = []
    for entry in notebook["keep_on_cpu"]:
        first = cells.get(entry["cells"][0]) if entry["cells"] else None
        pinned.append({
            "cell": entry["cells"][0] if entry["cells"] else None, "cells": entry["cells"],
            "line": (first or {}).get("line"), "first_line": (first or {}).get("first_line"),
            "functions": [entry["function"]], "cpu_s": round(entry["cpu_s"], 4),
            "gpu_low_s": round(entry["gpu_low_s"], 4),
            "gpu_high_s": None if entry["gpu_high_s"] is None else round(entry["gpu_high_s"], 4),
            "saving_s": round(entry["slower_by_s"], 4), "change": entry["change"]["text"],
            "example": entry["change"].get("example"),
        })
    gains = [{"functions": [e["function"]], "cells": e["cells"], "cell": e["cells"][0] if e["cells"] else None,
              "cpu_s": round(e["cpu_s"], 4), "gpu_low_s": round(e["gpu_low_s"], 4),
              "gpu_high_s": None if e["gpu_high_s"] is None else round(e["gpu_high_s"], 4),
              "saving_s": round(e["faster_by_s"], 4)} for e in notebook["gains"][:5]]
    gpu_range = _range(notebook["low_s"], notebook["high_s"])
    kept = ", ".join(e["function"] for e in notebook["keep_on_cpu"])
    where = f"CPU run {record.run_id}" if record.run_id is not None else "the CPU run"
    head = f"forecast for the {name} from {where} (no GPU run)"
    if choice == "mixed":
        reason = (f"{head}: GPU with {kept} kept on the CPU, {_range(plan['low_s'], plan['high_s'])}, vs "
                  f"{_s(notebook['cpu_s'])} measured on the CPU and {gpu_range} with everything on the GPU")
    elif choice == "gpu":
        reason = f"{head}: {gpu_range} on the GPU vs {_s(notebook['cpu_s'])} measured on the CPU"
    else:
        why = "slower" if notebook["verdict"] == "slower" else "no faster"
        reason = f"{head}: {why} on the GPU, {gpu_range} vs {_s(notebook['cpu_s'])} measured on the CPU"
        if kept:
            reason += f"; on a GPU, keep {kept} on the CPU"
    figures = device["figures"]
    loop = figures["loop_iteration_us"]
    result.update(
        recommendation=choice, reason=reason, estimates=estimates, pinned=pinned, faster_on_accelerator=gains,
        device=key,
        caveats=[
            "a forecast from a CPU run, not a measurement: loops at the device table's per-iteration cost "
            f"({name}: {loop['low']:g}–{loop['high']:g} µs per iteration, {loop['basis']}), work on a roofline of its "
            "peaks, host work carried over as measured on this CPU, XLA:GPU compile derived from this CPU's; "
            "see docs/forecast.md, and measure with a GPU run (nbscope compare CPU_RUN GPU_RUN) when one exists",
        ] + [f"cell {f['index'] + 1}: {f['reason']}" for f in forecast_result.get("not_forecast") or []],
    )
    return result


_range = _forecast.seconds_range
