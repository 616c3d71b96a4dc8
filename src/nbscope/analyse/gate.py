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

The total (:attr:`GateResult.total`) covers the paired cells only. Where cells are unpaired, a second total,
:attr:`GateResult.whole`, adds each new cell's time to the candidate and each removed cell's to the baseline
and is judged as the total is: a new 2 s cell in a notebook of 0.2 s fails a 10 % gate, although every
paired cell is unchanged.

The gate fails (exit code 1 on the command line) on any ``regression`` or ``failed`` verdict.

Which stored runs are the baseline and the noise history is the job of :mod:`nbscope.api.gate`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, ClassVar, Literal

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope._redact import shorten
from nbscope.analyse import noise as noise_model
from nbscope.analyse._stats import mad, mann_whitney_greater
from nbscope.record.cells import cell_keys, pair_cells
from nbscope.record.run import RunRecord, describe_settings
from nbscope.schema.codec import Encoded, Write, known
from nbscope.schema.machine import Cpu
from nbscope.schema.model import Cell

OK_STATUSES = ("ok", "expected-error")
FAILED_STATUSES = ("error", "timeout", "kernel-died", "not-run", "interrupted")
CELL_KINDS = ("profile", "trace")
# What the gate says of a pair of cells (or of the total): the module's docstring says when each holds.
GateVerdict = Literal[
    "regression", "failed", "not-significant", "faster", "new", "removed", "not-comparable", "below-floor", "unchanged"
]
FAILING_VERDICTS = ("regression", "failed")
UNPAIRED_VERDICTS = ("new", "removed")


@dataclass(frozen=True, slots=True)
class RunSpread:
    """The run-to-run noise of one figure (a cell's, or the total's) over the history runs."""

    mad_s: float | None = None
    range_s: float | None = None
    runs: int = 0  # the history runs it rests on (0: no history for this figure)


@dataclass(frozen=True, slots=True)
class HistoryNoise:
    """Run-to-run noise per (cell key or "total", judged figure) over the history runs."""

    spreads: Mapping[tuple[str, str], RunSpread] = field(default_factory=dict)
    outliers: Mapping[str, float] = field(default_factory=dict)  # run → its largest ratio to a figure's median

    def of(self, key: str, judged: str) -> RunSpread:
        """The spread of ``key``'s ``judged`` figure (``wall``, ``unwaited``); an empty one without history."""
        return self.spreads.get((key, judged), RunSpread())


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
        for option, value in (("--min-cell", self.min_cell_s), ("--floor", self.abs_floor_s), ("--mad-k", self.mad_k)):
            if not (math.isfinite(value) and value >= 0):  # NaN would silently judge every cell as unchanged
                raise NbscopeError(f"{option} must be a finite number of 0 or more, not {value}")


def parse_slowdown(text: str) -> float:
    """``10%`` → 0.10, ``0.1`` → 0.10 (a bare number is a fraction), ``1.1x`` → 0.10 (a ratio). A bare number above
    1 (``1.1``: 10 % as a ratio, or 110 %?) is refused as ambiguous: write ``10%``, ``1.1x`` or ``110%``."""
    raw = str(text).strip().lower()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        elif raw.endswith("x") or raw.endswith("×"):
            value = float(raw[:-1]) - 1.0
        else:
            value = float(raw)
            if value > 1:
                raise NbscopeError(
                    f"--max-slowdown {text} is ambiguous: write {value:g}x (or {(value - 1) * 100:g}%) for "
                    f"{value:g} times as slow, {value * 100:g}% for {value * 100:g} % slower"
                )
    except ValueError:
        raise NbscopeError(f"--max-slowdown expects e.g. 10%, 0.1 or 1.1x, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise NbscopeError(f"--max-slowdown must be 0 or more, not {text!r}")
    return value


# --- comparison ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GateComparison(Encoded):
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
    base_samples: tuple[float, ...] = ()
    cand_samples: tuple[float, ...] = ()
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
    verdict: GateVerdict = "unchanged"
    base_status: str | None = None
    cand_status: str | None = None
    source_changed: bool = False
    note: str = ""

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING_VERDICTS


@dataclass(frozen=True, slots=True)
class GateRunSummary:
    """One side of the gate: which run it is, how it was measured, its total and the load it started under."""

    run_id: int | None
    kind: str
    target: str
    status: str
    started_at: str
    digest: str
    repeats: int
    settings: Mapping[str, object]  # the measurement settings (``RunRecord.measurement_settings``)
    wall_s: float | None
    load_average: float | None  # the 1-minute load average when the run started


@dataclass(frozen=True)
class Confirmation:
    """A regression judged once more on a rerun of the notebook (``gate --confirm``): the first candidate, why it
    was judged regressed, and whether the rerun regressed too (then the gate fails: ``confirmed``)."""

    first_run_id: int | None
    first_reasons: list[str]
    rerun_id: int | None
    confirmed: bool

    def sentence(self) -> str:
        first = f"run {self.first_run_id}" if self.first_run_id is not None else "the first candidate"
        rerun = f"run {self.rerun_id}" if self.rerun_id is not None else "a rerun"
        if self.confirmed:
            return f"confirmed: {first} regressed, and so did {rerun}, a rerun of its notebook"
        return (
            f"not confirmed: {first} regressed ({'; '.join(self.first_reasons)}), but {rerun}, a rerun of its "
            f"notebook, did not: a one-off slowdown, not failed"
        )


@dataclass(frozen=True)
class GateResult(Encoded):
    """Everything the gate found; ``passed`` is False on a significant regression or a new failure."""

    baseline: GateRunSummary
    candidate: GateRunSummary
    options: GateOptions
    cells: list[GateComparison]
    total: GateComparison
    warnings: list[str] = field(default_factory=list)
    history_runs: int = 0  # earlier comparable runs given as history
    noise_note: str = ""  # one sentence: what the verdicts' noise floors rest on
    # The paired cells and the unpaired ones together, where some cells are new or removed (else None).
    whole: Annotated[GateComparison | None, Write(key="whole_notebook")] = None
    # With ``gate --confirm``, where a first candidate was judged regressed and its notebook ran once more: this
    # result judges the rerun, ``confirmation`` says of what (see :func:`nbscope.api.gate.confirm`).
    confirmation: Annotated[Confirmation | None, Write(when=known)] = None
    # What ``gate --json`` prints, in its order.
    document_keys: ClassVar = (
        "passed",
        "exit_code",
        "reasons",
        "baseline",
        "candidate",
        "options",
        "history_runs",
        "noise_note",
        "total",
        "whole",
        "cells",
        "warnings",
        "confirmation",
    )

    @property
    def totals(self) -> list[GateComparison]:
        """The total of the paired cells, then the whole notebook's where cells are unpaired."""
        return [self.total] if self.whole is None else [self.total, self.whole]

    @property
    def unpaired(self) -> list[GateComparison]:
        return [c for c in self.cells if c.verdict in UNPAIRED_VERDICTS]

    @property
    def failures(self) -> list[GateComparison]:
        return [c for c in [*self.cells, *self.totals] if c.failing]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
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


_number = noise_model.time_of  # NaN, infinities and negative times are not measurements


def _samples(cell: Cell, judged: str = "wall") -> tuple[float, ...]:
    """The repeated samples of the judged figure (wall, or wall less each repeat's wait for a CPU)."""
    walls = cell.samples.wall_s if cell.samples is not None else ()
    waits = cell.samples.wait_s if cell.samples is not None else ()
    if judged == "unwaited" and len(waits) == len(walls):
        pairs = [(_number(w), t) for w, t in zip(walls, waits, strict=True)]
        return tuple(max(0.0, w - t) for w, t in pairs if w is not None and t is not None)
    return tuple(w for w in walls if _number(w) is not None)


def cell_label(cell: Cell) -> str:
    """``cell 3 (line 41): first source line``, as the ledger numbers cells (1-based)."""
    where = f" (line {cell.line})" if cell.line else ""
    return f"cell {cell.index + 1}{where}: {shorten(cell.first_line, 60)}"


def judge(comparison: GateComparison, options: GateOptions) -> GateComparison:
    """The comparison with delta, ratio, floor, p-value and verdict filled in from its figures.

    The judged figures (``base_judged_s`` / ``cand_judged_s``) default to the walls; the floor is the
    larger of ``model_floor_s`` and the history's (``history_mad_s``), each when set, and never below the
    repeats'.
    """
    base, cand = comparison.base_s, comparison.cand_s
    if base is None or cand is None:
        # Both ran, yet a figure is missing, NaN or negative: a broken record must never pass.
        sides = " and ".join(name for name, value in (("baseline", base), ("candidate", cand)) if value is None)
        return replace(
            comparison, verdict="failed", note=f"no wall time in the {sides} (missing, negative or not a finite number)"
        )
    judged, jb, jc = comparison.judged, comparison.base_judged_s, comparison.cand_judged_s
    if jb is None or jc is None:
        judged, jb, jc = "wall", base, cand
    delta = jc - jb
    ratio = noise_model.finite_ratio(jb, jc)
    repeats_floor = options.mad_k * max(mad(comparison.base_samples), mad(comparison.cand_samples))
    floor, basis = 0.0, "none"
    if comparison.model_floor_s is not None and options.noise_model:
        floor, basis = comparison.model_floor_s, "model"
    if comparison.history_mad_s is not None:
        # The history widens the floor of a cell noisier than its kind, never narrows it: ten runs show
        # the typical run-to-run noise, not its heavy tails (benchmarks/gate_false_alarms.py: 18–24 % false
        # alarms per pair on a shared 2-core machine when the history alone set the floor).
        history = noise_model.history_floor(
            comparison.history_mad_s, options.mad_k, min(jb, jc), comparison.history_range_s or 0.0
        )
        if history >= floor:
            floor, basis = history, "history"
    if repeats_floor > floor:
        floor, basis = repeats_floor, "repeats"
    floor_s = max(options.abs_floor_s, floor)
    test, p_value = "none", None
    if min(len(comparison.base_samples), len(comparison.cand_samples)) >= options.min_samples:
        test = "mann-whitney"
        slower = mann_whitney_greater(comparison.cand_samples, comparison.base_samples)
        faster = mann_whitney_greater(comparison.base_samples, comparison.cand_samples)
        p_value = slower if jc >= jb else faster
    note = comparison.note
    significant = p_value is None or p_value <= options.alpha
    verdict: GateVerdict
    if max(base, cand) < options.min_cell_s:
        verdict = "below-floor"
    elif abs(delta) < floor_s:
        verdict = "below-floor"
        wall_ratio = noise_model.finite_ratio(base, cand)
        if judged == "unwaited" and not (1 / 1.1 <= wall_ratio <= 1.1):
            note = _join(note, f"wall ×{wall_ratio:.2f}, but the change was waiting for a CPU")
    elif ratio > 1 + options.max_slowdown:
        verdict = "regression" if significant else "not-significant"
    elif ratio < 1 / (1 + options.max_slowdown):
        verdict = "faster" if significant else "unchanged"
    else:
        verdict = "unchanged"
    if verdict != "below-floor" and judged == "unwaited" and abs(jb - base) + abs(jc - cand) >= floor_s:
        note = _join(note, f"judged less the wait for a CPU; wall {units.seconds(base)} → {units.seconds(cand)}")
    return replace(
        comparison,
        judged=judged,
        base_judged_s=jb,
        cand_judged_s=jc,
        delta_s=delta,
        ratio=ratio,
        floor_s=floor_s,
        floor_basis=basis,
        test=test,
        p_value=p_value,
        verdict=verdict,
        note=note,
    )


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


def _compare_cells(
    base: Cell | None, cand: Cell | None, changed: bool, options: GateOptions, noise: HistoryNoise, key: str | None
) -> GateComparison:
    cell = cand if cand is not None else base
    assert cell is not None
    comparison = GateComparison(
        key=cell.source_hash or f"index-{cell.index}",
        label=cell_label(cell),
        index=cell.index,
        line=cell.line,
        first_line=cell.first_line,
        base_status=base.status if base else None,
        cand_status=cand.status if cand else None,
        source_changed=changed,
    )
    if base is None or cand is None:
        wall = _number(cell.wall_s)
        # The smaller side is 0 s: the floor of a change from nothing (as a paired cell's, from its smaller side).
        floor = max(options.min_cell_s, options.abs_floor_s, noise_model.model_floor(0.0))
        where = "not in the baseline" if base is None else "not in the candidate"
        if wall is None:
            note = f"{where}; no wall time"
        elif cell.status not in OK_STATUSES:
            note = f"{where}; {cell.status}"
        else:
            note = f"{where}: {units.seconds(wall)}, " + (
                "counted in the whole notebook's total" if wall >= floor else "under the noise floor"
            )
        return replace(
            comparison,
            verdict="new" if base is None else "removed",
            base_s=_number(base.wall_s) if base else None,
            cand_s=_number(cand.wall_s) if cand else None,
            floor_s=floor,
            note=note,
        )
    pair = noise_model.pair_noise(base, cand)
    spread = noise.of(key, pair.judged) if key is not None and not changed else RunSpread()
    comparison = replace(
        comparison,
        base_s=_number(base.wall_s),
        cand_s=_number(cand.wall_s),
        judged=pair.judged,
        kind=pair.kind,
        base_judged_s=pair.base_s,
        cand_judged_s=pair.cand_s,
        model_floor_s=pair.floor_s,
        base_samples=_samples(base, pair.judged),
        cand_samples=_samples(cand, pair.judged),
        history_mad_s=spread.mad_s,
        history_range_s=spread.range_s,
        history_runs=spread.runs,
        note="source changed" if changed else "",
    )
    base_ran = comparison.base_status in OK_STATUSES
    if comparison.cand_status in FAILED_STATUSES and base_ran:
        error = cand.error
        return replace(
            comparison,
            verdict="failed" if options.check_status else "not-comparable",
            note=f"now {comparison.cand_status}"
            + (f" ({error.name}: {shorten(error.message, 80)})" if error and error.name else ""),
        )
    if comparison.base_status == comparison.cand_status and not base_ran:
        return replace(comparison, verdict="unchanged", note=f"{comparison.cand_status} in both runs")
    if not base_ran or comparison.cand_status not in OK_STATUSES:
        return replace(
            comparison, verdict="not-comparable", note=f"status {comparison.base_status} → {comparison.cand_status}"
        )
    return judge(comparison, options)


def _total(
    pairs: Sequence[GateComparison], base: RunRecord, cand: RunRecord, options: GateOptions, noise: HistoryNoise
) -> GateComparison:
    base_run, cand_run = base.notebook_run(), cand.notebook_run()
    base_judged: float | None = None
    cand_judged: float | None = None
    base_samples: tuple[float, ...] = ()
    cand_samples: tuple[float, ...] = ()
    if not base_run.cells or not cand_run.cells:
        # Per-notebook figures only (jupyter-cache, or a record without cells): compare totals.
        label, judged = "total (whole notebook)", "wall"
        base_s, cand_s = _number(base_run.totals.wall_s), _number(cand_run.totals.wall_s)
        model_floor = (
            noise_model.model_floor(min(base_s, cand_s)) if base_s is not None and cand_s is not None else None
        )
    else:
        counted = [c for c in pairs if c.verdict not in ("new", "removed", "not-comparable", "failed")]
        label = f"total of {units.count(len(counted), 'paired cell')}"
        base_s = sum(c.base_s or 0.0 for c in counted)
        cand_s = sum(c.cand_s or 0.0 for c in counted)
        judged = "unwaited" if counted and all(c.judged == "unwaited" for c in counted) else "wall"
        if judged == "unwaited":
            base_judged = sum(c.base_judged_s or 0.0 for c in counted)
            cand_judged = sum(c.cand_judged_s or 0.0 for c in counted)
        else:
            base_judged, cand_judged = base_s, cand_s
        # Per-repeat totals, where every counted cell has one sample per repeat.
        lengths_b = {len(c.base_samples) for c in counted}
        lengths_c = {len(c.cand_samples) for c in counted}
        if counted and len(lengths_b) == 1 and len(lengths_c) == 1 and 0 not in lengths_b | lengths_c:
            base_samples = tuple(sum(s) for s in zip(*(c.base_samples for c in counted), strict=True))
            cand_samples = tuple(sum(s) for s in zip(*(c.cand_samples for c in counted), strict=True))
        # The machine slows every cell of a run together: the total's floor is the sum of the cells' (the
        # history may widen it, as a cell's).
        model_floor = sum(c.model_floor_s or 0.0 for c in counted)
    spread = noise.of("total", judged)
    total = GateComparison(
        key="total",
        label=label,
        base_s=base_s,
        cand_s=cand_s,
        judged=judged,
        base_judged_s=base_judged,
        cand_judged_s=cand_judged,
        history_mad_s=spread.mad_s,
        history_range_s=spread.range_s,
        history_runs=spread.runs,
        model_floor_s=model_floor,
        base_samples=base_samples,
        cand_samples=cand_samples,
    )
    return judge(total, options)


def _whole(comparisons: Sequence[GateComparison], total: GateComparison, options: GateOptions) -> GateComparison | None:
    """The paired cells' total plus each new cell's time (candidate) and each removed cell's (baseline), judged
    as the total is; None when every cell is paired. An unpaired cell that did not run counts 0 s."""
    unpaired = [c for c in comparisons if c.verdict in UNPAIRED_VERDICTS]
    if not unpaired or total.base_s is None or total.cand_s is None:
        return None
    new = [c for c in unpaired if c.verdict == "new" and c.cand_status in OK_STATUSES]
    removed = [c for c in unpaired if c.verdict == "removed" and c.base_status in OK_STATUSES]
    new_s = sum(c.cand_s or 0.0 for c in new)
    removed_s = sum(c.base_s or 0.0 for c in removed)
    parts = [
        f"{units.count(len(new), 'new cell')} {units.seconds(new_s)}" if new else "",
        f"{units.count(len(removed), 'removed cell')} {units.seconds(removed_s)}" if removed else "",
    ]
    whole = GateComparison(
        key="whole",
        label="whole notebook (paired cells + " + " + ".join(p for p in parts if p) + ")"
        if new or removed
        else "whole notebook (paired cells; the unpaired ones did not run)",
        base_s=total.base_s + removed_s,
        cand_s=total.cand_s + new_s,
        # The figure the paired total judged (wall, or wall less the wait for a CPU) plus the unpaired walls.
        judged=total.judged,
        base_judged_s=(total.base_judged_s or 0.0) + removed_s,
        cand_judged_s=(total.cand_judged_s or 0.0) + new_s,
        history_mad_s=total.history_mad_s,
        history_range_s=total.history_range_s,
        history_runs=total.history_runs,
        # Each unpaired cell changes from 0 s: its floor is that of a change from nothing.
        model_floor_s=(total.model_floor_s or 0.0) + noise_model.model_floor(0.0) * len(new + removed),
    )
    return judge(whole, options)


def _load(cpu: Cpu) -> float | None:
    """The 1-minute load average when the run started (from its fingerprint)."""
    return _number(cpu.load_average[0]) if cpu.load_average else None


def busy(record: RunRecord) -> tuple[float | None, int | None]:
    """(1-minute load average, logical cores) when the machine was busy at the run's start: a load above
    max(cores + 1, 1.5 × cores). The margin is nbscope's own kernels, which back-to-back runs leave in the
    1-minute average."""
    cpu = record.machine().cpu
    load, cores = _load(cpu), cpu.logical_cores
    if load is None or cores is None or load <= max(cores + 1, 1.5 * cores):
        return None, None
    return load, cores


def run_summary(record: RunRecord) -> GateRunSummary:
    """Which run ``record`` is, for either side of the gate."""
    run = record.notebook_run()
    return GateRunSummary(
        run_id=record.run_id,
        kind=record.kind,
        target=record.target,
        status=record.status,
        started_at=record.started_at,
        digest=record.digest,
        # A record without ``measurements.repeats`` says how often it ran in its settings.
        repeats=run.repeats if run.repeats != 1 else record.run_settings().repeat,
        settings=record.measurement_settings(),
        wall_s=_number(run.totals.wall_s),
        load_average=_load(record.machine().cpu),
    )


MIN_HISTORY = 3  # fewest earlier runs whose spread counts as run-to-run noise
# A history value this far from the figure's median is an outlier, not noise (a manual profile on a loaded
# machine, an imported record): more than OUTLIER_SIGMAS σ (1.4826 × MAD) and OUTLIER_RELATIVE of the median.
OUTLIER_SIGMAS = 5.0
OUTLIER_RELATIVE = 0.5


def _spread(found: list[tuple[float, str]], outliers: dict[str, float]) -> RunSpread | None:
    """MAD and range of a figure's history values, outliers (far from the median by :data:`OUTLIER_SIGMAS` and
    :data:`OUTLIER_RELATIVE`) left out and noted in ``outliers`` (run → its largest ratio to a median); None
    with fewer than :data:`MIN_HISTORY` values kept. One run can then never widen every floor."""
    values = [value for value, _ in found]
    middle = statistics.median(values)
    bound = max(OUTLIER_SIGMAS * 1.4826 * mad(values), OUTLIER_RELATIVE * middle, noise_model.JITTER_S)
    kept = []
    for value, run in found:
        if abs(value - middle) <= bound:
            kept.append(value)
            continue
        ratio = noise_model.finite_ratio(min(value, middle), max(value, middle))
        outliers[run] = max(outliers[run], ratio) if run in outliers else ratio
    if len(kept) < MIN_HISTORY:
        return None
    return RunSpread(mad(kept), max(kept) - min(kept), len(kept))


def history_noise(history: Sequence[RunRecord]) -> HistoryNoise:
    """Run-to-run noise per (cell key, judged figure) and per (``"total"``, figure): (MAD, range, runs) over the
    history runs, for the wall and, where the runs recorded it, the wall less the wait for a CPU.

    Only cells that ran fine count; a key needs at least ``MIN_HISTORY`` values, outliers left out (:func:`_spread`).
    """
    values: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for number, record in enumerate(history):
        run = record.notebook_run()
        cells = run.cells
        name = f"run {record.run_id}" if record.run_id is not None else f"history run {number + 1}"
        free_total: float | None = 0.0
        for key, cell in zip(cell_keys(cells), cells, strict=True):
            wall, ran = _number(cell.wall_s), cell.status in OK_STATUSES
            if wall is None or not ran:
                free_total = free_total if ran else None
                continue
            values.setdefault((key, "wall"), []).append((wall, name))
            free = noise_model.unwaited(cell)
            if free is not None:
                values.setdefault((key, "unwaited"), []).append((free, name))
            free_total = None if free is None or free_total is None else free_total + free
        if record.status != "ok":
            continue
        total = _number(run.totals.wall_s)
        if total is not None:
            values.setdefault(("total", "wall"), []).append((total, name))
        if cells and free_total is not None:
            values.setdefault(("total", "unwaited"), []).append((free_total, name))
    outliers: dict[str, float] = {}
    spreads = {key: _spread(found, outliers) for key, found in values.items() if len(found) >= MIN_HISTORY}
    return HistoryNoise({key: spread for key, spread in spreads.items() if spread is not None}, outliers)


def noise_note(
    comparisons: list[GateComparison],
    history: int,
    repeats: tuple[int, int],
    options: GateOptions,
    outliers: Mapping[str, float] | None = None,
) -> str:
    """One sentence on what the noise floors rest on, the same for the terminal, markdown and JSON."""
    judged = [c for c in comparisons if c.floor_basis != "none"]
    by_history = sum(c.floor_basis == "history" for c in judged)
    unwaited = sum(c.judged == "unwaited" for c in judged)
    runs = f"{history} earlier comparable run{'s' if history != 1 else ''}"
    if history >= MIN_HISTORY and options.noise_model:
        text = (
            f"noise: the larger of each cell's floor by kind and size and the run-to-run noise of {runs} "
            f"({options.mad_k:g} σ of a difference; it set {by_history} of {len(judged)} floors)"
        )
    elif history >= MIN_HISTORY:
        text = f"noise: run-to-run noise of {runs} ({options.mad_k:g} σ of a difference); noise model off"
    elif options.noise_model:
        text = f"noise: floors by each cell's kind and size ({runs} here, {MIN_HISTORY} needed for run-to-run noise)"
    else:
        text = (
            f"noise: abs_floor {options.abs_floor_s:g} s and {options.mad_k:g} × MAD of repeats only "
            f"(noise model off; {runs} here, {MIN_HISTORY} needed for run-to-run noise)"
        )
    if unwaited:
        text += "; each cell's wait for a CPU left out" + (
            f" ({unwaited} of {len(judged)} cells)" if unwaited < len(judged) else ""
        )
    if outliers:
        named = sorted(outliers.items(), key=lambda item: -item[1])
        text += "; left out of the run-to-run noise as outliers: " + ", ".join(
            f"{run} (×{ratio:.2f} the series' median)" for run, ratio in named[:5]
        )
        text += f" and {len(named) - 5} more" if len(named) > 5 else ""
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
        if record.kind not in (*CELL_KINDS, "jupyter-cache", "trial"):
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
    base_cells, cand_cells = baseline.notebook_run().cells, candidate.notebook_run().cells
    for record, name, cells in ((baseline, "baseline", base_cells), (candidate, "candidate", cand_cells)):
        if record.status != "ok":
            warnings.append(f"the {name} run's status is {record.status}")
        load, cores = busy(record)
        if load is not None:
            waits = bool(cells) and all(noise_model.wait_of(c) is not None for c in cells if c.status == "ok")
            warnings.append(
                f"the machine was busy when the {name} run started (load average {load:.1f} on {cores} cores): "
                + (
                    "its walls are inflated; the verdicts leave out each cell's wait for a CPU"
                    if waits
                    else "its timings may be inflated and false alarms are likely"
                )
            )
    history = [r for r in history or [] if r is not candidate and (r.run_id is None or r.run_id != candidate.run_id)]
    noise = history_noise(history)
    comparisons: list[GateComparison] = []
    if not base_cells or not cand_cells:
        warnings.append("no per-cell figures in one of the runs: comparing notebook totals only")
    else:
        keys = dict(zip(map(id, cand_cells), cell_keys(cand_cells), strict=True))
        for pair in pair_cells(base_cells, cand_cells):
            key = keys[id(pair.b)] if pair.b is not None else None
            comparisons.append(_compare_cells(pair.a, pair.b, pair.source_changed, options, noise, key))
    total = _total(comparisons, baseline, candidate, options, noise)
    whole = _whole(comparisons, total, options)
    base_summary, cand_summary = run_summary(baseline), run_summary(candidate)
    repeats = (base_summary.repeats, cand_summary.repeats)
    return GateResult(
        baseline=base_summary,
        candidate=cand_summary,
        options=options,
        cells=comparisons,
        total=total,
        warnings=warnings,
        history_runs=len(history),
        noise_note=noise_note(
            [*comparisons, total] if comparisons else [total], len(history), repeats, options, noise.outliers
        ),
        whole=whole,
    )
