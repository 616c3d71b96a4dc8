"""The gate's judgement: is a candidate run significantly slower than a baseline run?

Cells are paired across the two runs by ``source_hash`` (an edited cell at the same place is paired by
position and flagged). For each pair, and for the notebook total, the gate decides:

* ``below-floor``: both walls are under ``min_cell_s`` (tiny cells are noise), or the absolute change is
  under the noise floor ``max(abs_floor_s, mad_k · MAD)``, where MAD is the larger of the median absolute
  deviation of the repeated samples (``profile --repeat N``) and, when earlier runs of the same notebook in
  the same environment are given as ``history``, of the cell's wall time across those runs (the
  run-to-run noise, which repeats inside one run do not see: load on the machine drifts between runs);
* ``regression``: slower by more than ``max_slowdown`` and past the floor and, where both runs carry at
  least ``min_samples`` repeated samples (``profile --repeat N``), a one-sided Mann–Whitney U test says
  the candidate's samples are larger with ``p <= alpha``;
* ``not-significant``: slower by more than ``max_slowdown`` but the test does not support it;
* ``faster`` / ``unchanged``; ``failed`` when a cell that ran in the baseline fails in the candidate
  (error, timeout, dead kernel, not run), or when a figure to compare is missing or not a finite number
  (a record from elsewhere cannot pass by having no figures); ``new`` / ``removed`` for unpaired cells.

The gate fails (exit code 1 on the command line) on any ``regression`` or ``failed`` verdict.

Which stored runs are the baseline and the noise history is the job of :mod:`nbscope.api.gate`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.analyse._stats import mad, mann_whitney_greater
from nbscope.record.cells import cell_keys, pair_cells
from nbscope.record.run import RunRecord, describe_settings

OK_STATUSES = ("ok", "expected-error")
FAILED_STATUSES = ("error", "timeout", "kernel-died", "not-run")
CELL_KINDS = ("profile", "trace")
FAILING_VERDICTS = ("regression", "failed")


@dataclass
class GateOptions:
    """Thresholds of the gate; stored in its result."""

    max_slowdown: float = 0.10  # fraction: 0.10 = candidate may be 10 % slower
    alpha: float = 0.05  # significance level of the one-sided Mann–Whitney U test
    min_samples: int = 3  # repeated samples per side needed to test; fewer: thresholds alone decide
    min_cell_s: float = 0.05  # cells whose walls are both below this are never judged
    abs_floor_s: float = 0.02  # absolute change below this is noise
    mad_k: float = 3.0  # ... and so is a change below mad_k × the samples' median absolute deviation
    check_status: bool = True  # a cell that ran in the baseline and fails in the candidate fails the gate

    def validate(self) -> None:
        if not (self.max_slowdown >= 0 and math.isfinite(self.max_slowdown)):
            raise NbscopeError(f"--max-slowdown must be a non-negative fraction, not {self.max_slowdown}")
        if not 0 < self.alpha < 1:
            raise NbscopeError(f"--alpha must be between 0 and 1, not {self.alpha}")
        if self.min_samples < 2:
            raise NbscopeError("--min-samples must be at least 2")
        if self.min_cell_s < 0 or self.abs_floor_s < 0 or self.mad_k < 0:
            raise NbscopeError("noise floors must not be negative")


def parse_slowdown(text: str) -> float:
    """``10%`` → 0.10, ``0.1`` → 0.10, ``1.1x`` → 0.10 (a ratio)."""
    raw = str(text).strip().lower()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        elif raw.endswith("x") or raw.endswith("×"):
            value = float(raw[:-1]) - 1.0
        else:
            value = float(raw)
    except ValueError:
        raise NbscopeError(f"--max-slowdown expects e.g. 10%, 0.1 or 1.1x, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise NbscopeError(f"--max-slowdown must be 0 or more, not {text!r}")
    return value


# --- comparison ------------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One cell (or the total) in both runs, and the verdict."""

    key: str
    label: str
    index: int | None = None  # candidate's code-cell index (0-based); baseline's for a removed cell
    line: int | None = None
    first_line: str = ""
    base_s: float | None = None
    cand_s: float | None = None
    delta_s: float | None = None
    ratio: float | None = None
    base_samples: list[float] = field(default_factory=list)
    cand_samples: list[float] = field(default_factory=list)
    floor_s: float = 0.0
    history_mad_s: float | None = None  # MAD of this cell's wall across the history runs
    history_runs: int = 0
    p_value: float | None = None
    test: str = "none"  # "mann-whitney" | "none" (too few samples: thresholds alone decide)
    verdict: str = "unchanged"
    base_status: str | None = None
    cand_status: str | None = None
    source_changed: bool = False
    note: str = ""

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING_VERDICTS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["ratio"] is not None and not math.isfinite(data["ratio"]):
            data["ratio"] = None  # JSON has no infinity: a cell that took 0 s before
        return data


@dataclass
class GateResult:
    """Everything the gate found; ``passed`` is False on a significant regression or a new failure."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    options: GateOptions
    cells: list[Comparison]
    total: Comparison
    warnings: list[str] = field(default_factory=list)
    history_runs: int = 0  # earlier runs whose spread set the run-to-run noise floor

    @property
    def failures(self) -> list[Comparison]:
        return [c for c in [*self.cells, self.total] if c.failing]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def reasons(self) -> list[str]:
        """One line per failure, naming the cell."""
        lines = []
        for c in self.failures:
            if c.verdict == "failed":
                lines.append(f"{c.label}: {c.note or c.cand_status}")
            else:
                # " — " after the label: a source line may end with ":" itself ("for _ in range(20):").
                lines.append(
                    f"{c.label} — {units.seconds(c.base_s)} → {units.seconds(c.cand_s)} (×{c.ratio:.2f}"
                    + (f", p={c.p_value:.3g}" if c.p_value is not None else ", single samples")
                    + ")"
                )
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "reasons": self.reasons(),
            "baseline": self.baseline,
            "candidate": self.candidate,
            "options": asdict(self.options),
            "history_runs": self.history_runs,
            "total": self.total.to_dict(),
            "cells": [c.to_dict() for c in self.cells],
            "warnings": self.warnings,
        }


_number = units.number  # NaN and infinities are not measurements


def _samples(cell: dict[str, Any]) -> list[float]:
    samples = (cell.get("samples") or {}).get("wall_s") or []
    return [float(s) for s in samples if _number(s) is not None]


def cell_label(cell: dict[str, Any]) -> str:
    """``cell 3 (line 41): first source line``, as the ledger numbers cells (1-based)."""
    where = f" (line {cell['line']})" if cell.get("line") else ""
    first = str(cell.get("first_line") or "")
    if len(first) > 60:
        first = first[:59] + "…"
    return f"cell {int(cell.get('index', 0)) + 1}{where}: {first}"


def judge(
    comparison: Comparison, options: GateOptions
) -> Comparison:
    """Fill delta, ratio, floor, p-value and verdict of a comparison whose figures are set."""
    base, cand = comparison.base_s, comparison.cand_s
    if base is None or cand is None:
        # Both ran, yet a figure is missing or NaN: a broken record must not pass as "unchanged".
        sides = " and ".join(name for name, value in (("baseline", base), ("candidate", cand)) if value is None)
        comparison.verdict = "failed"
        comparison.note = f"no wall time in the {sides} (missing or not a finite number)"
        return comparison
    comparison.delta_s = cand - base
    comparison.ratio = cand / base if base > 0 else (math.inf if cand > 0 else 1.0)
    spread = max(mad(comparison.base_samples), mad(comparison.cand_samples), comparison.history_mad_s or 0.0)
    comparison.floor_s = max(options.abs_floor_s, options.mad_k * spread)
    testable = min(len(comparison.base_samples), len(comparison.cand_samples)) >= options.min_samples
    if testable:
        comparison.test = "mann-whitney"
        slower = mann_whitney_greater(comparison.cand_samples, comparison.base_samples)
        faster = mann_whitney_greater(comparison.base_samples, comparison.cand_samples)
        comparison.p_value = slower if cand >= base else faster
    if max(base, cand) < options.min_cell_s:
        comparison.verdict = "below-floor"
    elif abs(comparison.delta_s) < comparison.floor_s:
        comparison.verdict = "below-floor"
    elif comparison.ratio > 1 + options.max_slowdown:
        significant = comparison.p_value is None or comparison.p_value <= options.alpha
        comparison.verdict = "regression" if significant else "not-significant"
    elif comparison.ratio < 1 / (1 + options.max_slowdown):
        significant = comparison.p_value is None or comparison.p_value <= options.alpha
        comparison.verdict = "faster" if significant else "unchanged"
    else:
        comparison.verdict = "unchanged"
    return comparison


def _compare_cells(
    base: dict[str, Any] | None,
    cand: dict[str, Any] | None,
    changed: bool,
    options: GateOptions,
    noise: dict[str, tuple[float, int]],
    key: str | None,
) -> Comparison:
    shown = cand if cand is not None else base
    assert shown is not None
    comparison = Comparison(
        key=str(shown.get("source_hash") or f"index-{shown.get('index')}"),
        label=cell_label(shown),
        index=shown.get("index"),
        line=shown.get("line"),
        first_line=str(shown.get("first_line") or ""),
        base_status=base.get("status") if base else None,
        cand_status=cand.get("status") if cand else None,
        source_changed=changed,
    )
    if base is None or cand is None:
        comparison.verdict = "new" if base is None else "removed"
        comparison.base_s = _number(base.get("wall_s")) if base else None
        comparison.cand_s = _number(cand.get("wall_s")) if cand else None
        return comparison
    comparison.base_s, comparison.cand_s = _number(base.get("wall_s")), _number(cand.get("wall_s"))
    comparison.base_samples, comparison.cand_samples = _samples(base), _samples(cand)
    if key is not None and key in noise and not changed:
        comparison.history_mad_s, comparison.history_runs = noise[key]
    if changed:
        comparison.note = "source changed"
    base_ran = comparison.base_status in OK_STATUSES
    if comparison.cand_status in FAILED_STATUSES and base_ran:
        comparison.verdict = "failed" if options.check_status else "not-comparable"
        error = cand.get("error") or {}
        comparison.note = f"now {comparison.cand_status}" + (
            f" ({error.get('name')}: {str(error.get('message') or '')[:80]})" if error.get("name") else ""
        )
        return comparison
    if comparison.base_status == comparison.cand_status and not base_ran:
        comparison.verdict = "unchanged"
        comparison.note = f"{comparison.cand_status} in both runs"
        return comparison
    if not base_ran or comparison.cand_status not in OK_STATUSES:
        comparison.verdict = "not-comparable"
        comparison.note = f"status {comparison.base_status} → {comparison.cand_status}"
        return comparison
    return judge(comparison, options)


def _total(
    pairs: list[Comparison], base: RunRecord, cand: RunRecord, options: GateOptions,
    noise: dict[str, tuple[float, int]],
) -> Comparison:
    total = Comparison(key="total", label="total")
    if "total" in noise:
        total.history_mad_s, total.history_runs = noise["total"]
    counted = [c for c in pairs if c.verdict not in ("new", "removed", "not-comparable", "failed")]
    base_cells = base.measurements.get("cells")
    if not base_cells or not cand.measurements.get("cells"):
        # Per-notebook figures only (jupyter-cache, or a record without cells): compare totals.
        total.base_s = _number((base.measurements.get("totals") or {}).get("wall_s"))
        total.cand_s = _number((cand.measurements.get("totals") or {}).get("wall_s"))
        total.label = "total (whole notebook)"
        return judge(total, options)
    total.label = f"total of {units.count(len(counted), 'paired cell')}"
    total.base_s = sum(c.base_s or 0.0 for c in counted)
    total.cand_s = sum(c.cand_s or 0.0 for c in counted)
    # Per-repeat totals, where every counted cell has one sample per repeat.
    lengths_b = {len(c.base_samples) for c in counted}
    lengths_c = {len(c.cand_samples) for c in counted}
    if counted and len(lengths_b) == 1 and len(lengths_c) == 1 and 0 not in lengths_b | lengths_c:
        total.base_samples = [sum(s) for s in zip(*(c.base_samples for c in counted), strict=True)]
        total.cand_samples = [sum(s) for s in zip(*(c.cand_samples for c in counted), strict=True)]
    return judge(total, options)


def _load(record: RunRecord) -> float | None:
    """The 1-minute load average when the run started (from its fingerprint)."""
    cpu = record.fingerprint.get("cpu")
    load = cpu.get("load_average") if isinstance(cpu, dict) else None
    return _number(load[0]) if isinstance(load, list) and load else None


def busy(record: RunRecord) -> tuple[float | None, int | None]:
    """(1-minute load average, logical cores) when the machine was busy at the run's start: a load above
    max(cores + 1, 1.5 × cores). The margin is nbscope's own kernels, which back-to-back runs leave in the
    1-minute average."""
    load = _load(record)
    cpu = record.fingerprint.get("cpu")
    cores = cpu.get("logical_cores") if isinstance(cpu, dict) else None
    if load is None or not isinstance(cores, int) or load <= max(cores + 1, 1.5 * cores):
        return None, None
    return load, cores


def run_summary(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "kind": record.kind,
        "target": record.target,
        "status": record.status,
        "started_at": record.started_at,
        "digest": record.digest,
        "repeats": record.measurements.get("repeats") or (record.settings or {}).get("repeat") or 1,
        "settings": record.measurement_settings(),
        "wall_s": _number((record.measurements.get("totals") or {}).get("wall_s")),
        "load_average": _load(record),
    }


MIN_HISTORY = 3  # fewest earlier runs whose spread counts as run-to-run noise


def history_noise(history: list[RunRecord]) -> dict[str, tuple[float, int]]:
    """Run-to-run noise per cell key (and ``"total"``): (MAD of wall_s, runs) over the history runs.

    Only cells that ran fine count; a key needs at least ``MIN_HISTORY`` values.
    """
    walls: dict[str, list[float]] = {}
    totals: list[float] = []
    for record in history:
        cells = list(record.measurements.get("cells") or [])
        for key, cell in zip(cell_keys(cells), cells, strict=True):
            wall = _number(cell.get("wall_s"))
            if wall is not None and cell.get("status") in OK_STATUSES:
                walls.setdefault(key, []).append(wall)
        total = _number((record.measurements.get("totals") or {}).get("wall_s"))
        if total is not None and record.status == "ok":
            totals.append(total)
    noise = {key: (mad(values), len(values)) for key, values in walls.items() if len(values) >= MIN_HISTORY}
    if len(totals) >= MIN_HISTORY:
        noise["total"] = (mad(totals), len(totals))
    return noise


def gate(
    baseline: RunRecord,
    candidate: RunRecord,
    options: GateOptions | None = None,
    *,
    history: list[RunRecord] | None = None,
) -> GateResult:
    """Compare a candidate run against a baseline; see the module docstring for the rules.

    ``history``: earlier runs of the same notebook in the same environment (the baseline may be one);
    their spread per cell raises the noise floor to the run-to-run noise (see :func:`history_runs`).
    """
    options = options or GateOptions()
    options.validate()
    warnings = []
    for record, name in ((baseline, "baseline"), (candidate, "candidate")):
        if record.kind not in (*CELL_KINDS, "jupyter-cache"):
            raise NbscopeError(
                f"the {name} is a {record.kind!r} run; gate compares profile, trace and jupyter-cache runs"
            )
    if baseline.run_id is not None and baseline.run_id == candidate.run_id:
        raise NbscopeError(f"baseline and candidate are the same run ({baseline.run_id})")
    if baseline.target != candidate.target:
        warnings.append(f"different targets: {baseline.target} vs {candidate.target}")
    if baseline.digest != candidate.digest:
        warnings.append(
            f"different environments (digest {baseline.digest or '?'} vs {candidate.digest or '?'}): "
            "timings may differ for reasons other than the code"
        )
    if baseline.kind != candidate.kind:
        warnings.append(f"different kinds of run: {baseline.kind} vs {candidate.kind}")
    base_settings, cand_settings = baseline.measurement_settings(), candidate.measurement_settings()
    if base_settings != cand_settings:
        warnings.append(
            f"different measurement settings ({describe_settings(base_settings)} vs {describe_settings(cand_settings)}): "
            "the runs do not measure the same thing"
        )
    for record, name in ((baseline, "baseline"), (candidate, "candidate")):
        if record.status != "ok":
            warnings.append(f"the {name} run's status is {record.status}")
        load, cores = busy(record)
        if load is not None:
            warnings.append(
                f"the machine was busy when the {name} run started (load average {load:.1f} on {cores} cores): "
                "its timings may be inflated and false alarms are likely"
            )
    history = [r for r in history or [] if r is not candidate and (r.run_id is None or r.run_id != candidate.run_id)]
    noise = history_noise(history)
    if history and len(history) < MIN_HISTORY:
        warnings.append(
            f"run-to-run noise not estimated: {len(history)} earlier run(s) of this notebook here, {MIN_HISTORY} needed"
        )
    base_cells = list(baseline.measurements.get("cells") or [])
    cand_cells = list(candidate.measurements.get("cells") or [])
    if not base_cells or not cand_cells:
        warnings.append("no per-cell figures in one of the runs: comparing notebook totals only")
        comparisons: list[Comparison] = []
    else:
        keys = dict(zip(map(id, cand_cells), cell_keys(cand_cells), strict=True))
        comparisons = [
            _compare_cells(b, c, changed, options, noise, keys.get(id(c)) if c is not None else None)
            for b, c, changed in ((p.a, p.b, p.source_changed) for p in pair_cells(base_cells, cand_cells))
        ]
    total = _total(comparisons, baseline, candidate, options, noise)
    repeats = (run_summary(baseline)["repeats"], run_summary(candidate)["repeats"])
    if min(repeats) < options.min_samples and comparisons:
        warnings.append(
            f"fewer than {options.min_samples} repeats in a run ({repeats[0]} vs {repeats[1]}): no significance "
            f"test; thresholds alone decide (profile with --repeat {options.min_samples} or more to test)"
        )
    return GateResult(
        baseline=run_summary(baseline),
        candidate=run_summary(candidate),
        options=options,
        cells=comparisons,
        total=total,
        warnings=warnings,
        history_runs=len(history),
    )
