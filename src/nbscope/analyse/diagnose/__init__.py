"""Diagnosis: named causes of slow (or wrongly timed) cells, each with its evidence and a concrete fix.

Each rule is a small module (``_<rule>.py``) exposing ``RULE``; ``RULES`` lists them in the order they
run. A rule reads the run record (and, when it needs code, the code that ran, which the record carries: see
``record.sources``). A rule that lacks the data it needs adds a ``Skip``
saying what is missing instead of guessing.

Public interface (used by the HTML report and the fleet audit)::

    diagnose(record, *, other=None) -> Findings           # most important first; .skipped lists Skips
    rule_thresholds() -> dict                            # each rule's thresholds and their defaults

The backend recommendation (CPU, GPU or mixed) is not a diagnosis: it lives in ``analyse.recommend``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, overload

from nbscope._errors import NbscopeError
from nbscope.analyse import compare as compare_module
from nbscope.analyse.diagnose import (
    _cold_cache,
    _compile_bound,
    _eager_flood,
    _first_call,
    _forecast,
    _gpu_memory,
    _host_loop,
    _latency_loop,
    _retrace_churn,
    _slow_compile_alarm,
    _slow_first_call,
    _unrolled_loop,
    _unsupported_on_device,
    _unsynchronised_timing,
    _weak_float64,
)
from nbscope.analyse.diagnose._base import SEVERITIES, Context, Finding, Rule, Skip
from nbscope.record.cells import failure_text
from nbscope.record.run import RunRecord
from nbscope.record.sources import naming
from nbscope.schema.codec import encode

if TYPE_CHECKING:  # the forecast is imported only when a rule needs one
    from nbscope.analyse.forecast import Forecast

__all__ = ["RULES", "Finding", "Findings", "Rule", "Skip", "diagnose", "rule_names", "rule_thresholds"]

RULES: list[Rule] = [
    _unsupported_on_device.RULE,
    _unrolled_loop.RULE,
    _retrace_churn.RULE,
    _latency_loop.RULE,
    _host_loop.RULE,
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
    known = rule_thresholds()
    checked: dict[str, dict[str, float]] = {}
    for rule, values in thresholds.items():
        if rule not in known:
            raise NbscopeError(f"no thresholds for rule {rule!r}; rules with thresholds: {', '.join(known)}")
        unknown = sorted(set(values) - set(known[rule]))
        if unknown:
            raise NbscopeError(
                f"rule {rule} has no threshold {', '.join(unknown)}; its thresholds: {', '.join(known[rule])}"
            )
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise NbscopeError(f"threshold {rule}.{name} must be a number, not {value!r}")
            if value < 0:  # a time, a share or a count: a negative one would make the rule fire on anything
                raise NbscopeError(f"threshold {rule}.{name} must be 0 or more, not {value!r}")
        checked[rule] = {name: float(value) for name, value in values.items()}
    return checked


@dataclass(frozen=True, slots=True)
class FailedCell:
    """A cell that raised, died, timed out or was interrupted: the rules judged only what ran."""

    index: int
    line: int | None
    status: str
    text: str  # what happened, as a sentence says it: "died (DeadKernelError: …)"

    @property
    def label(self) -> str:
        """``cell 3 (line 41)``: the cell's number as a reader counts code cells, and its line when known."""
        return f"cell {self.index + 1} (line {self.line})" if self.line else f"cell {self.index + 1}"


@dataclass(frozen=True, slots=True)
class Findings(Sequence[Finding]):
    """The findings of one diagnosis, most important first (a sequence of Finding), plus what could not be
    evaluated: the rules skipped and why, notes, the cells that failed (raised, died, timed out or were
    interrupted) and how many never ran, the GPU forecast the GPU rules read (None when no rule needed one: the
    backend choice reuses it) and the thresholds the caller set in place of the defaults."""

    items: tuple[Finding, ...] = ()
    skipped: tuple[Skip, ...] = ()
    notes: tuple[str, ...] = ()
    failed_cells: tuple[FailedCell, ...] = ()
    cells_not_run: int = 0
    forecast: Forecast | None = None
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @overload
    def __getitem__(self, index: int) -> Finding: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Finding, ...]: ...
    def __getitem__(self, index: int | slice) -> Finding | tuple[Finding, ...]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def to_dict(self) -> dict[str, object]:
        """The diagnosis as ``diagnose --json`` prints it (thresholds only where the caller set some)."""
        thresholds = {"thresholds": {rule: dict(v) for rule, v in self.thresholds.items()}} if self.thresholds else {}
        return {
            "findings": encode(list(self.items)),
            "skipped": encode(self.skipped),
            "notes": list(self.notes),
            "failed_cells": encode(self.failed_cells),
            "cells_not_run": self.cells_not_run,
            "rules": rule_names(),
            **thresholds,
        }


_GENERIC = {rule.name for rule in RULES if rule.generic}


def _order(finding: Finding) -> tuple[int, bool, float, float, int]:
    return (
        SEVERITIES.index(finding.severity),
        finding.rule in _GENERIC,
        -finding.seconds_at_stake,
        -finding.confidence,
        finding.cell_index if finding.cell_index is not None else -1,
    )


def diagnose(
    record: RunRecord,
    *,
    other: RunRecord | None = None,
    sources: Mapping[str, str] | str | Path | None = None,
    rules: Iterable[str] | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    gpus: str | Sequence[str] | None = None,
    devices_file: str | Path | None = None,
) -> Findings:
    """Run every rule on a profile run; most important first.

    ``other`` is a second run of the same notebook (a CPU run for a GPU one, a warm-cache run for a cold
    one) that some rules use as measured evidence. ``sources`` names the notebook's code (a path, or sources by
    source hash) for cells an older record does not carry (:func:`nbscope.record.sources.naming`). ``thresholds`` overrides rules'
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
        _forecast.check_request(
            record,
            gpus,
            compare_module.platform_of(record)["platform"],
            compare_module.label(record, "the run"),
            devices_file=devices_file,
        )
    wanted = set(rules) if rules is not None else None
    if wanted is not None:
        unknown = wanted - set(rule_names())
        if unknown:
            raise NbscopeError(f"unknown rule(s) {', '.join(sorted(unknown))}; known: {', '.join(rule_names())}")
    overrides = _checked_thresholds(thresholds or {})
    record = naming(record, sources)
    ctx = Context(record, other=other, thresholds=overrides, gpus=gpus or None, devices_file=devices_file)
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
    failed = [
        FailedCell(c.index, c.line, c.status, text)
        for c in ctx.run.cells
        if c.status != "expected-error" and (text := failure_text(c))
    ]
    not_run = sum(1 for c in ctx.run.cells if c.status == "not-run")
    evidence = ctx.made_forecast  # made only if a rule asked for it
    return Findings(
        tuple(sorted(findings, key=_order)),
        skipped=tuple(skipped),
        notes=(ctx.sources_note,) if ctx.sources_note else (),
        thresholds=overrides,
        failed_cells=tuple(failed),
        cells_not_run=not_run,
        forecast=evidence.result if evidence is not None else None,
    )


def _link(findings: list[Finding]) -> None:
    """A generic finding on a cell names the specific findings on the same cell (its likely causes)."""
    specific: dict[int, list[str]] = {}
    for finding in findings:
        if finding.rule not in _GENERIC and finding.cell_index is not None:
            specific.setdefault(finding.cell_index, []).append(finding.rule)
    for finding in findings:
        if finding.rule in _GENERIC and finding.cell_index in specific:
            finding.evidence["see_also"] = sorted(set(specific[finding.cell_index]))
