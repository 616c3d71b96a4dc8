"""The gate's judgement: is a candidate run significantly slower than a baseline run?

Cells are paired across the two runs by ``source_hash`` (an edited cell at the same place is paired by
position and flagged). For each pair, and for the notebook total, the gate decides:

* ``below-floor``: both walls are under ``min_cell_s`` (tiny cells are noise), or the change is within
  the noise (:mod:`nbscope.analyse.noise`). The figure judged is the cell's wall time less its wait for
  a CPU (``sched.wait_s``: load on the machine, not the code) when both runs recorded it, else the wall.
  Its noise floor is, in this order of preference: ``max(abs_floor_s, mad_k · MAD)`` of the cell's figure
  across ``history`` (earlier runs of the same notebook in the same environment, at least ``MIN_HISTORY``
  of them: the run-to-run noise, which repeats inside one run do not see); else the floor of the cell's
  kind and size (:func:`nbscope.analyse.noise.pair_noise`); and never below ``mad_k`` × the MAD of the
  repeated samples (``profile --repeat N``). :attr:`GateResult.noise_note` says which one the verdict
  rests on;
* ``regression``: slower by more than ``max_slowdown`` and past the floor and, where both runs carry at
  least ``min_samples`` repeated samples (``profile --repeat N``), a one-sided Mann–Whitney U test says
  the candidate's samples are larger with ``p <= alpha``;
* ``not-significant``: slower by more than ``max_slowdown`` but the test does not support it;
* ``faster`` / ``unchanged``; ``failed`` when a cell that ran in the baseline fails in the candidate
  (error, timeout, dead kernel, not run), or when a figure to compare is missing, negative or not a
  finite number (a record from elsewhere can neither pass by having no figures nor by impossible ones);
  ``new`` / ``removed`` for unpaired cells.

The gate fails (exit code 1 on the command line) on any ``regression`` or ``failed`` verdict.

Which stored runs are the baseline and the noise history is the job of :mod:`nbscope.api.gate`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.analyse import noise as noise_model
from nbscope.analyse._stats import mad, mann_whitney_greater
from nbscope.record.cells import cell_keys, pair_cells
from nbscope.record.run import RunRecord, describe_settings

OK_STATUSES = ("ok", "expected-error")
FAILED_STATUSES = ("error", "timeout", "kernel-died", "not-run", "interrupted")
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
    # Floors by each cell's kind and size (nbscope.analyse.noise) where history does not set them; off:
    # abs_floor_s and the MADs alone decide, as on a machine known to be quiet.
    noise_model: bool = True

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
    floor_basis: str = "none"  # "history" | "model" | "repeats" | "none": what set the floor
    judged: str = "wall"  # "unwaited" (wall less the wait for a CPU, both sides) or "wall"
    base_judged_s: float | None = None  # the judged figure, each side
    cand_judged_s: float | None = None
    model_floor_s: float | None = None  # the floor of the cell's kind and size, without history
    kind: str = ""  # kind of cell for the model floor: plain, threaded, import, first-call
    history_mad_s: float | None = None  # MAD of this cell's judged figure across the history runs
    history_range_s: float | None = None  # and the range (largest − smallest) it spanned there
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
    history_runs: int = 0  # earlier comparable runs given as history
    noise_note: str = ""  # one sentence: what the verdicts' noise floors rest on

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
                    f"{c.label} — {units.seconds(c.base_judged_s)} → {units.seconds(c.cand_judged_s)}"
                    + (" less the wait for a CPU" if c.judged == "unwaited" else "")
                    + f" (×{c.ratio:.2f}"
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
            "noise_note": self.noise_note,
            "total": self.total.to_dict(),
            "cells": [c.to_dict() for c in self.cells],
            "warnings": self.warnings,
        }


_number = noise_model.time_of  # NaN, infinities and negative times are not measurements


def _samples(cell: dict[str, Any], judged: str = "wall") -> list[float]:
    """The repeated samples of the judged figure (wall, or wall less each repeat's wait for a CPU)."""
    samples = cell.get("samples") or {}
    walls = samples.get("wall_s") or []
    if judged == "unwaited":
        waits = samples.get("wait_s") or []
        if len(waits) == len(walls):
            pairs = [(_number(w), _number(t)) for w, t in zip(walls, waits, strict=True)]
            return [max(0.0, w - t) for w, t in pairs if w is not None and t is not None]
    return [float(s) for s in walls if _number(s) is not None]


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
    """Fill delta, ratio, floor, p-value and verdict of a comparison whose figures are set.

    The judged figures (``base_judged_s`` / ``cand_judged_s``) default to the walls; the floor is the
    larger of ``model_floor_s`` and the history's (``history_mad_s``), each when set, and never below the
    repeats'.
    """
    base, cand = comparison.base_s, comparison.cand_s
    if base is None or cand is None:
        # Both ran, yet a figure is missing, NaN or negative: a broken record must never pass.
        sides = " and ".join(name for name, value in (("baseline", base), ("candidate", cand)) if value is None)
        comparison.verdict = "failed"
        comparison.note = f"no wall time in the {sides} (missing, negative or not a finite number)"
        return comparison
    if comparison.base_judged_s is None or comparison.cand_judged_s is None:
        comparison.judged, comparison.base_judged_s, comparison.cand_judged_s = "wall", base, cand
    jb, jc = comparison.base_judged_s, comparison.cand_judged_s
    comparison.delta_s = jc - jb
    comparison.ratio = noise_model.finite_ratio(jb, jc)
    repeats_floor = options.mad_k * max(mad(comparison.base_samples), mad(comparison.cand_samples))
    floor, basis = 0.0, "none"
    if comparison.model_floor_s is not None and options.noise_model:
        floor, basis = comparison.model_floor_s, "model"
    if comparison.history_mad_s is not None:
        # The history widens the floor of a cell noisier than its kind, never narrows it: ten runs show
        # the typical run-to-run noise, not its heavy tails (benchmarks/gate_false_alarms.py: 18–24 % false
        # alarms per pair on a shared 2-core machine when the history alone set the floor).
        history = noise_model.history_floor(comparison.history_mad_s, options.mad_k, min(jb, jc),
                                            comparison.history_range_s or 0.0)
        if history >= floor:
            floor, basis = history, "history"
    if repeats_floor > floor:
        floor, basis = repeats_floor, "repeats"
    comparison.floor_s = max(options.abs_floor_s, floor)
    comparison.floor_basis = basis
    testable = min(len(comparison.base_samples), len(comparison.cand_samples)) >= options.min_samples
    if testable:
        comparison.test = "mann-whitney"
        slower = mann_whitney_greater(comparison.cand_samples, comparison.base_samples)
        faster = mann_whitney_greater(comparison.base_samples, comparison.cand_samples)
        comparison.p_value = slower if jc >= jb else faster
    if max(base, cand) < options.min_cell_s:
        comparison.verdict = "below-floor"
    elif abs(comparison.delta_s) < comparison.floor_s:
        comparison.verdict = "below-floor"
        wall_ratio = noise_model.finite_ratio(base, cand)
        if comparison.judged == "unwaited" and not (1 / 1.1 <= wall_ratio <= 1.1):
            comparison.note = _join(comparison.note, f"wall ×{wall_ratio:.2f}, but the change was waiting for a CPU")
    elif comparison.ratio > 1 + options.max_slowdown:
        significant = comparison.p_value is None or comparison.p_value <= options.alpha
        comparison.verdict = "regression" if significant else "not-significant"
    elif comparison.ratio < 1 / (1 + options.max_slowdown):
        significant = comparison.p_value is None or comparison.p_value <= options.alpha
        comparison.verdict = "faster" if significant else "unchanged"
    else:
        comparison.verdict = "unchanged"
    return comparison


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


def _compare_cells(
    base: dict[str, Any] | None,
    cand: dict[str, Any] | None,
    changed: bool,
    options: GateOptions,
    noise: dict[tuple[str, str], tuple[float, float, int]],
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
    pair = noise_model.pair_noise(base, cand)
    comparison.judged, comparison.kind = pair.judged, pair.kind
    comparison.base_judged_s, comparison.cand_judged_s = pair.base_s, pair.cand_s
    comparison.model_floor_s = pair.floor_s
    comparison.base_samples = _samples(base, pair.judged)
    comparison.cand_samples = _samples(cand, pair.judged)
    if key is not None and not changed:
        known = noise.get((key, pair.judged))
        if known is not None:
            comparison.history_mad_s, comparison.history_range_s, comparison.history_runs = known
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
    noise: dict[tuple[str, str], tuple[float, float, int]],
) -> Comparison:
    total = Comparison(key="total", label="total")
    counted = [c for c in pairs if c.verdict not in ("new", "removed", "not-comparable", "failed")]
    base_cells = base.measurements.get("cells")
    if not base_cells or not cand.measurements.get("cells"):
        # Per-notebook figures only (jupyter-cache, or a record without cells): compare totals.
        total.base_s = _number((base.measurements.get("totals") or {}).get("wall_s"))
        total.cand_s = _number((cand.measurements.get("totals") or {}).get("wall_s"))
        total.label = "total (whole notebook)"
        if ("total", "wall") in noise:
            total.history_mad_s, total.history_range_s, total.history_runs = noise[("total", "wall")]
        if total.base_s is not None and total.cand_s is not None:
            total.model_floor_s = noise_model.model_floor(min(total.base_s, total.cand_s))
        return judge(total, options)
    total.label = f"total of {units.count(len(counted), 'paired cell')}"
    total.base_s = sum(c.base_s or 0.0 for c in counted)
    total.cand_s = sum(c.cand_s or 0.0 for c in counted)
    judged = "unwaited" if counted and all(c.judged == "unwaited" for c in counted) else "wall"
    total.judged = judged
    if judged == "unwaited":
        total.base_judged_s = sum(c.base_judged_s or 0.0 for c in counted)
        total.cand_judged_s = sum(c.cand_judged_s or 0.0 for c in counted)
    else:
        total.base_judged_s, total.cand_judged_s = total.base_s, total.cand_s
    if ("total", judged) in noise:
        total.history_mad_s, total.history_range_s, total.history_runs = noise[("total", judged)]
    # The machine slows every cell of a run together: the total's floor is the sum of the cells' (the
    # history may widen it, as a cell's).
    total.model_floor_s = sum(c.model_floor_s or 0.0 for c in counted)
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


def history_noise(history: list[RunRecord]) -> dict[tuple[str, str], tuple[float, float, int]]:
    """Run-to-run noise per (cell key, judged figure) and per (``"total"``, figure): (MAD, range, runs) over the
    history runs, for the wall and, where the runs recorded it, the wall less the wait for a CPU.

    Only cells that ran fine count; a key needs at least ``MIN_HISTORY`` values.
    """
    values: dict[tuple[str, str], list[float]] = {}
    for record in history:
        cells = list(record.measurements.get("cells") or [])
        free_total: float | None = 0.0
        for key, cell in zip(cell_keys(cells), cells, strict=True):
            wall = _number(cell.get("wall_s"))
            if wall is None or cell.get("status") not in OK_STATUSES:
                free_total = None if cell.get("status") not in OK_STATUSES else free_total
                continue
            values.setdefault((key, "wall"), []).append(wall)
            free = noise_model.unwaited(cell)
            if free is not None:
                values.setdefault((key, "unwaited"), []).append(free)
            free_total = None if free is None or free_total is None else free_total + free
        if record.status != "ok":
            continue
        total = _number((record.measurements.get("totals") or {}).get("wall_s"))
        if total is not None:
            values.setdefault(("total", "wall"), []).append(total)
        if cells and free_total is not None:
            values.setdefault(("total", "unwaited"), []).append(free_total)
    return {key: (mad(found), max(found) - min(found), len(found))
            for key, found in values.items() if len(found) >= MIN_HISTORY}


def noise_note(comparisons: list[Comparison], history: int, repeats: tuple[int, int], options: GateOptions) -> str:
    """One sentence on what the noise floors rest on, the same for the terminal, markdown and JSON."""
    judged = [c for c in comparisons if c.floor_basis != "none"]
    by_history = sum(c.floor_basis == "history" for c in judged)
    unwaited = sum(c.judged == "unwaited" for c in judged)
    runs = f"{history} earlier comparable run{'s' if history != 1 else ''}"
    if history >= MIN_HISTORY and options.noise_model:
        text = (f"noise: the larger of each cell's floor by kind and size and the run-to-run noise of {runs} "
                f"({options.mad_k:g} σ of a difference; it set {by_history} of {len(judged)} floors)")
    elif history >= MIN_HISTORY:
        text = f"noise: run-to-run noise of {runs} ({options.mad_k:g} σ of a difference); noise model off"
    elif options.noise_model:
        text = f"noise: floors by each cell's kind and size ({runs} here, {MIN_HISTORY} needed for run-to-run noise)"
    else:
        text = (f"noise: abs_floor {options.abs_floor_s:g} s and {options.mad_k:g} × MAD of repeats only "
                f"(noise model off; {runs} here, {MIN_HISTORY} needed for run-to-run noise)")
    if unwaited:
        text += "; each cell's wait for a CPU left out" + (
            f" ({unwaited} of {len(judged)} cells)" if unwaited < len(judged) else "")
    if min(repeats) >= options.min_samples:
        text += f"; repeats tested (Mann–Whitney, α={options.alpha:g})"
    elif comparisons:
        text += f"; {min(repeats)} sample(s) a side, no significance test (--repeat {options.min_samples} to test)"
    return text


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
            cells = list(record.measurements.get("cells") or [])
            waits = bool(cells) and all(noise_model.wait_of(c) is not None for c in cells if c.get("status") == "ok")
            warnings.append(
                f"the machine was busy when the {name} run started (load average {load:.1f} on {cores} cores): "
                + ("its walls are inflated; the verdicts leave out each cell's wait for a CPU" if waits
                   else "its timings may be inflated and false alarms are likely")
            )
    history = [r for r in history or [] if r is not candidate and (r.run_id is None or r.run_id != candidate.run_id)]
    noise = history_noise(history)
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
    return GateResult(
        baseline=run_summary(baseline),
        candidate=run_summary(candidate),
        options=options,
        cells=comparisons,
        total=total,
        warnings=warnings,
        history_runs=len(history),
        noise_note=noise_note([*comparisons, total] if comparisons else [total], len(history), repeats, options),
    )
