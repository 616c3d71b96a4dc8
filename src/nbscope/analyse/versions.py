"""One notebook under several versions of its packages: the runs side by side, and a bisection's verdicts.

:func:`compare_variants` lays the runs of ``nbscope versions`` out per cell (paired by the cell model's
one pairing function against the first variant that ran), names the fingerprint fields that differ
between variants (``versions.jax`` ...) and runs the gate between each two consecutive variants.

For ``nbscope bisect``, :func:`judge_version` asks the gate whether a version's run is significantly
slower than the good version's on the chosen cell (or the total), :func:`next_probe` picks the version to
profile next, and :func:`evidence` says what moved between the last good and the first bad release:
compile versus run, compile counts, findings that appeared, fingerprint fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from nbscope._errors import NbscopeError
from nbscope._redact import shorten
from nbscope.analyse import compare as compare_module
from nbscope.analyse import gate as gate_module
from nbscope.analyse.compare import CellFigures, cell_figures
from nbscope.analyse.diagnose import Finding
from nbscope.analyse.gate import GateOptions, GateVerdict
from nbscope.collect import fingerprint as fp
from nbscope.record.cells import pair_cells
from nbscope.record.run import RunRecord
from nbscope.schema.codec import Write
from nbscope.schema.model import Cell, Totals

BAD_VERDICTS = ("regression",)
# A bisection step's word: the gate's on a version, "baseline" on the good version, "untestable" where none ran.
BisectVerdict = GateVerdict | Literal["baseline", "untestable"]


def _always(owner: object) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class VariantRun:
    """One variant: its requirements, its environment and its run (what ``--json`` writes of it), or why it has
    no run. Made by :func:`variant_run`."""

    label: str  # the variant's requirement specifiers as given, e.g. "jax==0.10.1"
    requirements: tuple[str, ...]  # everything installed: the variant's and the notebook's
    environment: str | None  # the environment's folder
    reused: bool | None  # the environment came from the cache
    build_s: float | None
    run_id: int | None
    status: str  # the run's, or "not-run"
    digest: str | None
    versions: object  # the run's fingerprint's, as recorded (the typed ``Machine.versions`` splits out JAX plugins)
    kernel_python: str | None
    error: str | None  # why it could not be built or run
    record: Annotated[RunRecord | None, Write(omit=_always)]

    @property
    def ran(self) -> bool:
        return self.record is not None


def variant_run(
    label: str,
    requirements: Sequence[str],
    *,
    environment: str | None = None,
    reused: bool | None = None,
    build_s: float | None = None,
    record: RunRecord | None = None,
    error: str | None = None,
) -> VariantRun:
    """A variant, with what its run (if any) says of itself."""
    kernel = record.notebook_run().kernel if record else None
    return VariantRun(
        label=label,
        requirements=tuple(requirements),
        environment=environment,
        reused=reused,
        build_s=build_s,
        run_id=record.run_id if record else None,
        status=record.status if record else "not-run",
        digest=record.digest if record else None,
        versions=record.machine().recorded_versions if record else None,
        kernel_python=kernel.executable if kernel else None,
        error=error,
        record=record,
    )


@dataclass(frozen=True, slots=True)
class VariantCell:
    """A cell of the first variant that ran, with the figures of the cell paired with it in each variant."""

    index: int
    line: int | None
    first_line: str
    runs: tuple[CellFigures | None, ...]  # one per variant that ran; None where its run has no such cell


@dataclass(frozen=True, slots=True)
class VariantTotals:
    """A variant's notebook totals."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    compiles: int
    cells_failed: int

    @classmethod
    def of(cls, totals: Totals) -> VariantTotals:
        return cls(
            wall_s=totals.wall_s,
            compile_s=totals.compile_s,
            run_s=totals.run_s,
            compiles=totals.compiles,
            cells_failed=totals.cells_failed,
        )


@dataclass(frozen=True, slots=True)
class FieldValues:
    """A fingerprint field whose value is not the same in every run: each run's value (as recorded, or
    ``{"absent": ...}``), and why the field can change timings."""

    field: str
    values: tuple[object, ...]
    why: str


@dataclass(frozen=True, slots=True)
class VariantGate:
    """The gate between two consecutive variants (``a`` before, ``b`` after)."""

    a: str
    b: str
    result: Annotated[gate_module.GateResult, Write(inline=True)]  # written as the gate writes it, beside a and b


@dataclass(frozen=True, slots=True)
class VersionsResult:
    """``nbscope versions``: every variant, the per-cell table, the differing fields and the gates."""

    target: str
    variants: tuple[VariantRun, ...]
    cells: tuple[VariantCell, ...] = ()
    totals: tuple[VariantTotals, ...] = ()  # one per variant that ran
    differences: tuple[FieldValues, ...] = ()
    gates: tuple[VariantGate, ...] = ()

    @property
    def ran(self) -> list[VariantRun]:
        return [v for v in self.variants if v.ran]

    @property
    def failed(self) -> list[VariantRun]:
        return [v for v in self.variants if not v.ran]


def differing_fields(records: Sequence[RunRecord]) -> list[FieldValues]:
    """Fingerprint fields (the comparable ones, as the digest sees them) whose values are not the same in
    every run, with each run's value and why the field can change timings. The fingerprints are compared
    field by field as recorded (``collect.fingerprint``): the typed ``Machine`` holds only what analyses read."""
    if len(records) < 2:
        return []
    paths: list[str] = []
    for other in records[1:]:
        for path, _, _ in fp.diff(records[0].fingerprint, other.fingerprint):
            if path not in paths and path != "fingerprint_version":
                paths.append(path)
    flat = [fp.flatten(r.fingerprint) for r in records]
    missing = fp.absent("field not present")
    rows = [
        FieldValues(field=path, values=tuple(f.get(path, missing) for f in flat), why=compare_module.why(path))
        for path in paths
    ]
    # Software first: the question is which package version moved.
    return sorted(rows, key=lambda row: (not row.field.startswith("versions."), row.field))


def compare_variants(
    target: str, variants: list[VariantRun], gate_options: GateOptions | None = None
) -> VersionsResult:
    """The runs of the variants side by side, per cell, with differences and consecutive gates."""
    ran = [v for v in variants if v.ran]
    records: list[RunRecord] = [v.record for v in ran if v.record is not None]
    if not records:
        return VersionsResult(target=target, variants=tuple(variants))
    reference = records[0].notebook_run().cells
    per_variant: list[dict[int, Cell]] = []
    for record in records:
        pairs = pair_cells(reference, record.notebook_run().cells)
        per_variant.append({pair.a.index: pair.b for pair in pairs if pair.a is not None and pair.b is not None})
    cells = tuple(
        VariantCell(
            index=cell.index,
            line=cell.line,
            first_line=cell.first_line,
            runs=tuple(cell_figures(found.get(cell.index)) for found in per_variant),
        )
        for cell in reference
    )
    options = gate_options or GateOptions()
    gates = []
    for before, after in zip(ran, ran[1:], strict=False):
        gate_result = gate_module.gate(before.record, after.record, options)  # type: ignore[arg-type]
        # Different environments are the point here: the differing fields are listed instead.
        gate_result = replace(
            gate_result, warnings=[w for w in gate_result.warnings if not w.startswith("different environments")]
        )
        gates.append(VariantGate(a=before.label, b=after.label, result=gate_result))
    return VersionsResult(
        target=target,
        variants=tuple(variants),
        cells=cells,
        totals=tuple(VariantTotals.of(record.notebook_run().totals) for record in records),
        differences=tuple(differing_fields(records)),
        gates=tuple(gates),
    )


def verdicts_by_cell(gate_result: gate_module.GateResult) -> dict[int, GateVerdict]:
    """The gate's verdict per cell, keyed by the candidate's (0-based) cell index."""
    return {c.index: c.verdict for c in gate_result.cells if c.index is not None}


# ---- bisection ------------------------------------------------------------------------------------------


def target_label(cell: int | None) -> str:
    return "the total" if cell is None else f"cell {cell}"


def judge_version(
    good: RunRecord, candidate: RunRecord, cell: int | None, options: GateOptions
) -> gate_module.GateComparison:
    """The gate's comparison of ``candidate`` against ``good`` on cell ``cell`` (1-based, as the ledger
    numbers cells) or, for ``None``, on the total of the paired cells."""
    result = gate_module.gate(good, candidate, options)
    if cell is None:
        return result.total
    for comparison in result.cells:
        if comparison.index == cell - 1 and comparison.verdict not in ("new", "removed"):
            return comparison
    raise NbscopeError(f"cell {cell} is not in both runs (the notebook has {len(result.cells)} code cells)")


def is_bad(comparison: gate_module.GateComparison) -> bool:
    """A version is bad when the gate calls its run a regression against the good version."""
    return comparison.verdict in BAD_VERDICTS


def next_probe(low: int, high: int, untestable: set[int]) -> int | None:
    """The position to profile next when ``low`` is known good and ``high`` known bad (``high`` may be one
    past the last version: nothing is known bad yet), skipping versions that could not be tested; None
    when nothing is left between them."""
    candidates = [i for i in range(low + 1, high) if i not in untestable]
    if not candidates:
        return None
    middle = (low + high) / 2
    return min(candidates, key=lambda i: (abs(i - middle), i))


def check_baseline(record: RunRecord, cell: int | None) -> None:
    """Refuse a ``--cell`` the notebook does not have, or a good version under which the chosen cell (for
    the total: any cell) did not run cleanly, before any other version is profiled."""
    cells = record.notebook_run().cells
    if cell is not None and not 1 <= cell <= len(cells):
        raise NbscopeError(f"--cell {cell}: the notebook has {len(cells)} code cells (numbered from 1)")
    failed = [c for c in cells if c.status not in gate_module.OK_STATUSES + ("skipped",)]
    if cell is not None:
        failed = [c for c in failed if c.index == cell - 1]
    if failed:
        first = failed[0]
        error = first.error
        raise NbscopeError(
            f"cell {first.index + 1} did not run cleanly under the good version ({first.status}"
            + (f": {error.name}: {shorten(error.message, 120)}" if error is not None and error.name else "")
            + "): there is nothing to compare slower versions with"
        )


def _cell_of(record: RunRecord, reference: RunRecord, cell: int) -> Cell | None:
    """The cell of ``record`` paired with ``reference``'s cell ``cell`` (1-based)."""
    reference_cells = reference.notebook_run().cells
    wanted = next((c for c in reference_cells if c.index == cell - 1), None)
    return next((pair.b for pair in pair_cells(reference_cells, record.notebook_run().cells) if pair.a is wanted), None)


@dataclass(frozen=True, slots=True)
class Figures:
    """One side's figures of the bisected target: times, and compile counts (None: not measured)."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    compiles: int | None
    user_compiles: int | None
    eager_compiles: int | None
    numba_compiles: int | None

    @classmethod
    def of_totals(cls, totals: Totals) -> Figures:
        return cls(
            wall_s=totals.wall_s,
            compile_s=totals.compile_s,
            run_s=totals.run_s,
            compiles=totals.compiles,
            user_compiles=totals.user_compiles,
            eager_compiles=totals.eager_compiles,
            numba_compiles=totals.numba_compiles,
        )

    @classmethod
    def of_cell(cls, cell: Cell) -> Figures:
        jax, numba = cell.jax, cell.numba
        return cls(
            wall_s=cell.wall_s,
            compile_s=cell.compile_s,
            run_s=cell.run_s,
            compiles=jax.compiles if jax else None,
            user_compiles=jax.user_compiles if jax else None,
            eager_compiles=jax.eager_compiles if jax else None,
            numba_compiles=numba.compiles if numba else None,
        )


COUNTS = ("compiles", "user_compiles", "eager_compiles", "numba_compiles")


@dataclass(frozen=True, slots=True)
class Growth:
    """The part of a run that grew most (``compile`` or ``run``), and its share of the added wall time."""

    part: str
    share: float


@dataclass(frozen=True, slots=True)
class Moved:
    """How much each time grew from the last good to the first bad release, and which part grew most."""

    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    mostly: Annotated[Growth | None, Write(omit=lambda moved: moved.mostly is None)] = None  # when the wall grew


@dataclass(frozen=True, slots=True)
class CountChange:
    """A compile count on each side (None: not measured)."""

    good: int | None
    bad: int | None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What moved between the last good and the first bad release (see :func:`evidence`)."""

    target: str  # "the total" or "cell 3"
    good: Annotated[Figures | None, Write(null={})]  # None: the cell is not in that run
    bad: Annotated[Figures | None, Write(null={})]
    moved: Moved
    compile_counts_changed: Mapping[str, CountChange]
    findings_appeared: tuple[Finding, ...]
    differences: tuple[FieldValues, ...]


def _growth(before: float | None, after: float | None) -> float | None:
    return after - before if before is not None and after is not None else None


def evidence(
    last_good: RunRecord,
    first_bad: RunRecord,
    cell: int | None,
    *,
    findings_good: Sequence[Finding] = (),
    findings_bad: Sequence[Finding] = (),
) -> Evidence:
    """What moved between the last good and the first bad release, on the chosen cell or the total:
    wall, compile and run seconds and compile counts on each side (and which of compile or run grew
    more), findings of the diagnosis that appear only in the bad release's run, fingerprint fields."""
    before: Figures | None
    after: Figures | None
    if cell is None:
        before = Figures.of_totals(last_good.notebook_run().totals)
        after = Figures.of_totals(first_bad.notebook_run().totals)
    else:
        good_cell, bad_cell = _cell_of(last_good, last_good, cell), _cell_of(first_bad, last_good, cell)
        before = Figures.of_cell(good_cell) if good_cell else None
        after = Figures.of_cell(bad_cell) if bad_cell else None
    growth = {
        key: _growth(getattr(before, key, None), getattr(after, key, None)) for key in ("wall_s", "compile_s", "run_s")
    }
    moved = Moved(wall_s=growth["wall_s"], compile_s=growth["compile_s"], run_s=growth["run_s"])
    grew = {part: seconds for part, seconds in growth.items() if part != "wall_s" and seconds is not None}
    wall = growth["wall_s"]
    if grew and wall is not None and wall > 0:
        largest = max(grew, key=grew.__getitem__)
        moved = Moved(**growth, mostly=Growth(largest.removesuffix("_s"), grew[largest] / wall))
    counts = {key: (getattr(before, key, None), getattr(after, key, None)) for key in COUNTS}

    def keyed(finding: Finding) -> tuple[str, int | None]:
        return (finding.rule, finding.cell_index)

    relevant = [f for f in findings_bad if cell is None or f.cell_index is None or f.cell_index == (cell or 0) - 1]
    known = {keyed(f) for f in findings_good}
    return Evidence(
        target=target_label(cell),
        good=before,
        bad=after,
        moved=moved,
        compile_counts_changed={k: CountChange(a, b) for k, (a, b) in counts.items() if a != b},
        findings_appeared=tuple(f for f in relevant if keyed(f) not in known),
        differences=tuple(differing_fields([last_good, first_bad])),
    )


@dataclass(frozen=True, slots=True)
class BisectStep:
    """One profiled version and the gate's word on it against the good version."""

    version: str
    run_id: int | None
    verdict: BisectVerdict  # the gate's verdict on the target
    bad: bool | None  # None: the baseline, or untestable
    comparison: gate_module.GateComparison | None = None
    error: str | None = None
    profiled: bool = True  # False: it could not be installed, so nothing ran


@dataclass
class BisectResult:
    """``nbscope bisect``: the released versions tried, each profile's verdict, and the first bad one (fields in
    the order ``--json`` writes them)."""

    target: str
    package: str
    good: str
    bad: str
    cell: Annotated[int | None, Write(omit=_always)]  # 1-based; None: the total
    on: str  # "the total" or "cell 3": :func:`target_label`
    versions: list[str]
    profiles: int = 0  # how many versions were profiled (the good one included)
    steps: list[BisectStep] = field(default_factory=list)
    first_bad: str | None = None
    last_good: str | None = None
    slowdown: gate_module.GateComparison | None = None  # the gate's comparison, first bad against the good version
    step_slowdown: gate_module.GateComparison | None = None  # ... and against the last good release
    evidence: Evidence | None = None
    untestable: list[str] = field(default_factory=list)  # versions that could not be installed or run
    ambiguous: list[str] = field(default_factory=list)  # first bad is one of these (untestable between)
    note: str | None = None

    def add(self, step: BisectStep) -> None:
        """One more version tried."""
        self.steps.append(step)
        self.profiles = sum(1 for s in self.steps if s.profiled)
