"""A trial's judgement (``nbscope try``): the cell's time and the notebook's total as it is and with a remedy, by the
gate's statistics (:mod:`nbscope.analyse.gate`: noise floors, and a Mann–Whitney test over the repeats), and whether
the values the cell binds are equal both ways (arrays within a tolerance, with the largest differences)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nbscope import _units as units
from nbscope.analyse.gate import GateComparison, GateOptions, gate
from nbscope.record.run import RunRecord
from nbscope.schema.codec import Encoded, decode
from nbscope.schema.status import FAILED  # a cell's statuses that leave its results unbound

if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Finding

RTOL, ATOL = 1e-6, 1e-9  # arrays (and floats) this close are equal within tolerance
# A remedy is judged against the notebook as it is: any change past the noise counts, not only one past 10 %.
TRIAL_GATE = GateOptions(max_slowdown=0.0)
_SPEED = {"faster": "faster", "regression": "slower", "not-significant": "within noise", "failed": "failed"}


@dataclass(frozen=True, slots=True)
class ValueCheck(Encoded):
    """One name the cell binds, both ways: ``equal`` (exactly), ``close`` (within tolerance), ``differs``,
    ``varies`` (differs between two runs as it is: no remedy is judged by it) or ``not compared`` (why in ``note``)."""

    name: str
    verdict: str
    abs_diff: float | None = None
    rel_diff: float | None = None
    note: str = ""

    def phrase(self) -> str:
        sizes = f"largest difference {self.abs_diff:.3g}, relative {self.rel_diff:.3g}" if self.abs_diff else ""
        return f"{self.name} {self.verdict}" + (
            f" ({', '.join(p for p in (sizes, self.note) if p)})" if sizes or self.note else ""
        )


@dataclass(frozen=True, slots=True)
class TrialResult(Encoded):
    """A remedy tried on one cell (``cell``: 1-based) of run ``of_run``: the two sides' stored runs, the cell's and
    the notebook's times each way with the gate's verdict, the values checked, notes, and ``not_tested`` (why and
    where it would be) for a remedy that cannot act on this machine."""

    of_run: int | None
    cell: int
    label: str
    remedy: str
    as_is_run: int | None = None
    remedy_run: int | None = None
    repeats: int = 0
    cell_as_is_s: float | None = None
    cell_remedy_s: float | None = None
    cell_verdict: str = ""
    p_value: float | None = None
    floor_s: float | None = None
    total_as_is_s: float | None = None
    total_remedy_s: float | None = None
    total_verdict: str = ""
    values: tuple[ValueCheck, ...] = ()
    notes: tuple[str, ...] = ()
    not_tested: str = ""
    # A cell that failed as it is: its values with the remedy checked against this run's, the notebook with JAX on
    # the CPU (None: checked against the runs as it is, or not checked).
    reference_run: int | None = None

    @property
    def results(self) -> str:
        """``equal``, ``differ``, ``vary`` (as it is), ``unknown`` (nothing compared) or ``not compared``."""
        verdicts = {v.verdict for v in self.values}
        if self.not_tested or not self.values:
            return "not compared"
        if "differs" in verdicts:
            return "differ"
        if verdicts & {"equal", "close"}:
            return "equal"
        return "vary" if "varies" in verdicts else "unknown"

    def results_phrase(self) -> str:
        against = f" to those with JAX on the CPU (run {self.reference_run})" if self.reference_run is not None else ""
        if self.results == "differ":
            return f"results differ{against}: " + "; ".join(v.phrase() for v in self.values if v.verdict == "differs")
        close = [v for v in self.values if v.verdict == "close"]
        if self.results == "equal":
            within = f" within tolerance ({'; '.join(v.phrase() for v in close)})" if close else ""
            return f"results equal{against}{within}"
        if self.results == "vary":
            return "results vary from run to run as it is: not compared"
        if self.values or self.cell_verdict.startswith("failed"):  # a failed cell bound nothing to compare
            return "no result compared" if self.values else "results not compared"
        return "results not compared (the cell binds no name)"

    def sentence(self) -> str:
        """``cell 28 1 min 22 s → 1.1 s (faster, p=0.05), results equal``, or why it was not tested."""
        if self.not_tested:
            return f"cell {self.cell} {self.remedy}: not tested here: {self.not_tested}"
        test = f", p={self.p_value:.2g}" if self.p_value is not None else ""
        if self.p_value is None and self.floor_s and self.cell_verdict in ("faster", "slower", "within noise"):
            # No test on one run each way: the verdict is the change against the noise model's floor for the cell.
            side = "within" if self.cell_verdict == "within noise" else "beyond"
            runs = "one run each way" if self.repeats <= 1 else f"{self.repeats} runs each way, too few for a test"
            test = f", {runs}: {side} its {units.seconds(self.floor_s)} noise floor"
        return (
            f"cell {self.cell} {units.seconds(self.cell_as_is_s)} → {units.seconds(self.cell_remedy_s)} "
            f"({self.cell_verdict}{test}), {self.results_phrase()}"
        )


def judge(
    source: RunRecord,
    as_is: RunRecord,
    remedied: RunRecord,
    cell: int,
    remedy: str,
    values: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]],
    notes: Sequence[str] = (),
    *,
    reference: tuple[int | None, Sequence[Mapping[str, Any]]] | None = None,
) -> TrialResult:
    """The trial of ``remedy`` on ``cell`` (1-based) of ``source``: ``as_is`` and ``remedied`` (its two runs, with
    their repeats) judged by the gate; ``values``: each side's captured values per repeat (``name → plain form``);
    ``reference``: for a cell that failed as it is, the run with JAX on the CPU and its values, which the remedy's
    are checked against."""
    result = gate(as_is, remedied, TRIAL_GATE)
    pair = next((c for c in result.cells if c.index == cell - 1), None)
    failed_as_is = pair is not None and pair.base_status in FAILED
    checks = () if failed_as_is else compare_values(values[0], values[1])
    reference_run = None
    compared_with: tuple[Sequence[Mapping[str, Any]], str] = (values[0], "as it is")
    if failed_as_is and reference is not None and reference[1]:
        compared_with = (reference[1], "with JAX on the CPU")
        reference_run, checks = reference[0], compare_values(reference[1], values[1])
        notes = (
            *notes,
            f"cell {cell} failed as it is: its values with the remedy were checked against run {reference_run}, the "
            f"notebook run through cell {cell} with JAX on the CPU (JAX_PLATFORMS=cpu)",
        )
    elif failed_as_is:
        notes = (*notes, f"results not compared: cell {cell} failed as it is, so it bound nothing to compare with")
    return TrialResult(
        of_run=source.run_id,
        cell=cell,
        label=pair.label if pair is not None else f"cell {cell}",
        remedy=remedy,
        as_is_run=as_is.run_id,
        remedy_run=remedied.run_id,
        repeats=result.baseline.repeats,
        cell_as_is_s=pair.base_judged_s if pair is not None else None,
        cell_remedy_s=pair.cand_judged_s if pair is not None else None,
        cell_verdict=_verdict(pair),
        p_value=pair.p_value if pair is not None else None,
        floor_s=pair.floor_s if pair is not None else None,
        total_as_is_s=result.total.base_s,
        total_remedy_s=result.total.cand_s,
        total_verdict=(
            f"not comparable (cell {cell} {pair.cand_status} with the remedy)"
            if pair is not None and pair.cand_status in FAILED and pair.base_status not in FAILED
            else _verdict(result.total)
        ),
        values=checks,
        notes=(*notes, *_one_run_note(*compared_with, checks)),
        reference_run=reference_run,
    )


def _one_run_note(compared_with: Sequence[object], side: str, checks: Sequence[ValueCheck]) -> list[str]:
    """With one run to compare with (as it is, or with JAX on the CPU), a value that changes from run to run cannot be
    told from one the remedy changed."""
    if len(compared_with) != 1 or not any(c.verdict == "differs" for c in checks):
        return []
    tells = " (--repeats 2 tells them apart)" if side == "as it is" else ""
    return [f"one run {side}: a value that varies from run to run would read as changed{tells}"]


def _verdict(pair: GateComparison | None) -> str:
    if pair is None:
        return "not measured"
    if pair.verdict == "failed":
        return f"failed with the remedy: {pair.note}"
    if pair.base_status in FAILED and pair.cand_status in (None, "ok"):
        # The remedy for a cell that fails there (a float64 solve on a TPU): what it measured is that it now runs.
        return f"fixed: it failed as it is ({pair.base_status}) and ran with the remedy"
    if pair.verdict == "not-comparable" or pair.base_status not in (None, "ok", "expected-error"):
        return f"not comparable ({pair.note or pair.base_status})"
    return _SPEED.get(pair.verdict, "within noise")


def compare_values(as_is: Sequence[Mapping[str, Any]], remedied: Sequence[Mapping[str, Any]]) -> tuple[ValueCheck, ...]:
    """Each name's check, from the first repeat of each side; a name whose value differs between two repeats as it
    is ``varies`` (the notebook's own randomness or timing: no remedy is judged by it)."""
    if not as_is or not remedied:
        return ()
    first, other = as_is[0], remedied[0]
    checks = []
    for name in sorted(set(first) | set(other), key=[*first, *other].index):
        if name not in first or name not in other:
            checks.append(
                ValueCheck(
                    name, "differs", note="bound " + ("only with the remedy" if name in other else "only as it is")
                )
            )
            continue
        check = _check(name, first[name], other[name])
        again = [_check(name, first[name], run[name]) for run in as_is[1:] if name in run]
        if any(c.verdict == "differs" for c in again):
            check = ValueCheck(name, "varies", note="differs between two runs as it is")
        checks.append(check)
    return tuple(checks)


def _check(name: str, a: Sequence[Any], b: Sequence[Any]) -> ValueCheck:
    """Two plain forms (:func:`nbscope.collect.remedies.capture`): ``('v', x)`` a plain value, ``('a', array)``,
    ``('s', [forms])`` a sequence or mapping, ``('p', bytes)`` pickled, ``('f', type)`` a function or module,
    ``('u', why)`` not captured (unpicklable, too large)."""
    for form in (a, b):
        if form[0] in ("f", "u"):
            return ValueCheck(name, "not compared", note="a function or module" if form[0] == "f" else str(form[1]))
    if a[0] != b[0]:
        return ValueCheck(name, "differs", note="a different kind of value")
    if a[0] == "s":
        if len(a[1]) != len(b[1]):
            return ValueCheck(name, "differs", note=f"{len(a[1])} items → {len(b[1])}")
        parts = [_check(name, x, y) for x, y in zip(a[1], b[1], strict=True)]
        worst = next((v for v in ("differs", "not compared", "close") if any(p.verdict == v for p in parts)), "equal")
        return ValueCheck(
            name,
            worst,
            _most([p.abs_diff for p in parts]),
            _most([p.rel_diff for p in parts]),
            next((p.note for p in parts if p.note), ""),
        )
    if a[0] == "a" or (a[0] == "v" and _number(a[1]) and _number(b[1])):
        return _numbers(name, a[1], b[1])
    return ValueCheck(name, "equal" if a[1] == b[1] else "differs")


def _number(value: object) -> bool:
    return isinstance(value, (int, float, complex)) and not isinstance(value, bool)


def _most(found: Sequence[float | None]) -> float | None:
    return max((f for f in found if f is not None), default=None)


def _numbers(name: str, a: object, b: object) -> ValueCheck:
    """Two arrays or numbers: equal exactly, within tolerance, or not, with the largest absolute and relative
    difference; a dtype or shape that changed is said."""
    import numpy as np

    x, y = np.asarray(a), np.asarray(b)
    note = f"dtype {x.dtype} → {y.dtype}" if x.dtype != y.dtype else ""
    if x.shape != y.shape:
        return ValueCheck(name, "differs", note=f"shape {x.shape} → {y.shape}")
    if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number)) or x.dtype == bool:
        return ValueCheck(name, "equal" if np.array_equal(x, y) else "differs", note=note)
    wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(y) else np.float64
    x, y = x.astype(wide), y.astype(wide)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    if bool(np.all(same)):
        return ValueCheck(name, "equal", note=note)
    if bool(np.any(np.isfinite(x) != np.isfinite(y))):  # inf or NaN one way, a number the other: no size to give
        return ValueCheck(name, "differs", note=", ".join(p for p in ("not finite on one side", note) if p))
    with np.errstate(all="ignore"):  # a NumPy warning is no part of the trial's report
        gap = np.where(same, 0.0, np.abs(x - y))
        scale = np.maximum(np.abs(x), np.abs(y))
        relative = np.where(scale > 0, gap / np.where(scale > 0, scale, 1.0), 0.0)
        abs_diff, rel_diff = float(np.max(gap)), float(np.max(relative))
    close = math.isfinite(abs_diff) and bool(np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True))
    return ValueCheck(name, "close" if close else "differs", abs_diff, rel_diff, note)


def not_tested(source: RunRecord, cell: int, remedy: str, why: str) -> TrialResult:
    """A trial that was not run: ``why``, and where it would be."""
    return TrialResult(of_run=source.run_id, cell=cell, label=f"cell {cell}", remedy=remedy, not_tested=why)


def with_runs(result: TrialResult, as_is: int | None, remedied: int | None) -> TrialResult:
    return replace(result, as_is_run=as_is, remedy_run=remedied)


@dataclass(frozen=True, slots=True)
class _Evidence:
    """What a finding's evidence says of where its remedy applies."""

    loop_functions: Mapping[str, object] = field(default_factory=dict)
    forecast_functions: Mapping[str, object] = field(default_factory=dict)
    float64_cells: tuple[int, ...] = ()
    affected_cells: tuple[int, ...] = ()
    functions: tuple[str, ...] = ()  # unsupported-on-device: the functions the failing cell compiled
    cpu_advised: bool = False  # host-loop: its fix offers the CPU (a loop of small calls on a device)


# Rules whose fix is a remedy ``nbscope try`` applies: a latency-bound loop's and a device's Python loop's "on the
# CPU", a weak float64's "keep JAX in float32", and a compile cost's "a warm compile cache".
_CACHE_RULES = ("compile-bound", "first-call")


def remedy_for(finding: Finding, record: RunRecord) -> tuple[int, str] | None:
    """The cell (1-based) and remedy that try a finding's fix, where its fix is one (else None); a compile cost is
    tried once for the notebook, judged on the cell that compiled longest in ``record``."""
    evidence = decode(_Evidence, finding.evidence)
    cells = [finding.cell_index] if finding.cell_index is not None else []
    if finding.rule == "latency-bound-loop" and cells:
        functions = [*evidence.loop_functions, *evidence.forecast_functions]
        return cells[0] + 1, f"cpu:{functions[0].split('.')[-1]}" if functions else "cpu"
    if finding.rule == "host-loop" and cells and evidence.cpu_advised:
        return cells[0] + 1, "cpu"  # the whole cell: the loop's slicing and copies are dispatched too
    if finding.rule == "unsupported-on-device" and cells:
        return cells[0] + 1, f"cpu:{evidence.functions[0]}" if evidence.functions else "cpu"
    if finding.rule == "weak-float64":
        found = cells or [*evidence.float64_cells, *evidence.affected_cells]
        return (found[0] + 1, "x64:off") if found else None
    if finding.rule in _CACHE_RULES:  # one trial for the notebook: a warm cache acts on every cell
        compiled = [(c.compile_s or 0.0, c.index) for c in record.notebook_run().cells]
        return (max(compiled)[1] + 1, "cache:warm") if compiled else None
    return None
