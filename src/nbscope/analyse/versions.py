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
from dataclasses import dataclass, field
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.analyse import compare as compare_module
from nbscope.analyse import gate as gate_module
from nbscope.analyse.gate import GateOptions
from nbscope.collect import fingerprint as fp
from nbscope.record.cells import number, pair_cells
from nbscope.record.run import RunRecord

CELL_FIGURES = ("wall_s", "compile_s", "run_s")
BAD_VERDICTS = ("regression",)


@dataclass
class VariantRun:
    """One variant: its requirements, its environment and its run, or why it has no run."""

    label: str  # the variant's requirement specifiers as given, e.g. "jax==0.10.1"
    requirements: list[str]  # everything installed: the variant's and the notebook's
    environment: str | None = None  # the environment's folder
    reused: bool | None = None  # the environment came from the cache
    build_s: float | None = None
    record: RunRecord | None = None
    error: str | None = None  # why it could not be built or run

    @property
    def ran(self) -> bool:
        return self.record is not None

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "label": self.label,
            "requirements": self.requirements,
            "environment": self.environment,
            "reused": self.reused,
            "build_s": self.build_s,
            "run_id": record.run_id if record else None,
            "status": record.status if record else "not-run",
            "digest": record.digest if record else None,
            "versions": (record.fingerprint.get("versions") if record else None),
            "kernel_python": ((record.measurements.get("kernel") or {}).get("executable") if record else None),
            "error": self.error,
        }


@dataclass
class VersionsResult:
    """``nbscope versions``: every variant, the per-cell table, the differing fields and the gates."""

    target: str
    variants: list[VariantRun]
    cells: list[dict[str, Any]] = field(default_factory=list)
    totals: list[dict[str, Any]] = field(default_factory=list)
    differences: list[dict[str, Any]] = field(default_factory=list)
    gates: list[dict[str, Any]] = field(default_factory=list)  # {"a", "b", "result": GateResult}

    @property
    def ran(self) -> list[VariantRun]:
        return [v for v in self.variants if v.ran]

    @property
    def failed(self) -> list[VariantRun]:
        return [v for v in self.variants if not v.ran]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "variants": [v.to_dict() for v in self.variants],
            "cells": self.cells,
            "totals": self.totals,
            "differences": self.differences,
            "gates": [{"a": g["a"], "b": g["b"], **g["result"].to_dict()} for g in self.gates],
        }


def differing_fields(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Fingerprint fields (the comparable ones, as the digest sees them) whose values are not the same in
    every run, with each run's value and why the field can change timings."""
    if len(records) < 2:
        return []
    paths: list[str] = []
    for other in records[1:]:
        for path, _, _ in fp.diff(records[0].fingerprint, other.fingerprint):
            if path not in paths and path != "fingerprint_version":
                paths.append(path)
    flat = [fp.flatten(r.fingerprint) for r in records]
    missing = fp.absent("field not present")
    rows = [{"field": path, "values": [f.get(path, missing) for f in flat], "why": compare_module.why(path)}
            for path in paths]
    # Software first: the question is which package version moved.
    return sorted(rows, key=lambda row: (not row["field"].startswith("versions."), row["field"]))


def compare_variants(
    target: str, variants: list[VariantRun], gate_options: GateOptions | None = None
) -> VersionsResult:
    """The runs of the variants side by side, per cell, with differences and consecutive gates."""
    result = VersionsResult(target=target, variants=variants)
    ran = result.ran
    if not ran:
        return result
    reference = list(ran[0].record.measurements.get("cells") or [])  # type: ignore[union-attr]
    per_variant: list[dict[int, dict[str, Any]]] = []
    for variant in ran:
        cells = list(variant.record.measurements.get("cells") or [])  # type: ignore[union-attr]
        by_reference: dict[int, dict[str, Any]] = {}
        for pair in pair_cells(reference, cells):
            if pair.a is not None and pair.b is not None:
                by_reference[int(pair.a["index"])] = pair.b
        per_variant.append(by_reference)
    for cell in reference:
        index = int(cell["index"])
        result.cells.append({
            "index": index,
            "line": cell.get("line"),
            "first_line": cell.get("first_line"),
            "runs": [compare_module.cell_figures(found.get(index)) for found in per_variant],
        })
    for variant in ran:
        totals = variant.record.measurements.get("totals") or {}  # type: ignore[union-attr]
        result.totals.append({key: totals.get(key) for key in (*CELL_FIGURES, "compiles", "cells_failed")})
    result.differences = differing_fields([v.record for v in ran])  # type: ignore[misc]
    options = gate_options or GateOptions()
    for before, after in zip(ran, ran[1:], strict=False):
        gate_result = gate_module.gate(before.record, after.record, options)  # type: ignore[arg-type]
        # Different environments are the point here: the differing fields are listed instead.
        gate_result.warnings = [w for w in gate_result.warnings if not w.startswith("different environments")]
        result.gates.append({"a": before.label, "b": after.label, "result": gate_result})
    return result


def verdicts_by_cell(gate_result: gate_module.GateResult) -> dict[int, str]:
    """The gate's verdict per cell, keyed by the candidate's (0-based) cell index."""
    return {c.index: c.verdict for c in gate_result.cells if c.index is not None}


# ---- bisection ------------------------------------------------------------------------------------------


def target_label(cell: int | None) -> str:
    return "the total" if cell is None else f"cell {cell}"


def judge_version(
    good: RunRecord, candidate: RunRecord, cell: int | None, options: GateOptions
) -> gate_module.Comparison:
    """The gate's comparison of ``candidate`` against ``good`` on cell ``cell`` (1-based, as the ledger
    numbers cells) or, for ``None``, on the total of the paired cells."""
    result = gate_module.gate(good, candidate, options)
    if cell is None:
        return result.total
    for comparison in result.cells:
        if comparison.index == cell - 1 and comparison.verdict not in ("new", "removed"):
            return comparison
    raise NbscopeError(f"cell {cell} is not in both runs (the notebook has {len(result.cells)} code cells)")


def is_bad(comparison: gate_module.Comparison) -> bool:
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
    cells = record.measurements.get("cells") or []
    if cell is not None and not 1 <= cell <= len(cells):
        raise NbscopeError(f"--cell {cell}: the notebook has {len(cells)} code cells (numbered from 1)")
    failed = [c for c in cells if c.get("status") not in gate_module.OK_STATUSES + ("skipped",)]
    if cell is not None:
        failed = [c for c in failed if c.get("index") == cell - 1]
    if failed:
        first = failed[0]
        error = first.get("error") or {}
        raise NbscopeError(
            f"cell {int(first.get('index', 0)) + 1} did not run cleanly under the good version ({first.get('status')}"
            + (f": {error.get('name')}: {str(error.get('message') or '')[:120]}" if error.get("name") else "")
            + "): there is nothing to compare slower versions with"
        )


def _cell_of(record: RunRecord, reference: RunRecord, cell: int) -> dict[str, Any] | None:
    reference_cells = reference.measurements.get("cells") or []
    wanted = next((c for c in reference_cells if c.get("index") == cell - 1), None)
    for pair in pair_cells(reference_cells, record.measurements.get("cells") or []):
        if pair.a is wanted:
            return pair.b
    return None


def _split(source: Mapping[str, Any] | None, *, total: bool) -> dict[str, Any]:
    if source is None:
        return {}
    if total:
        return {
            "wall_s": number(source.get("wall_s")),
            "compile_s": number(source.get("compile_s")),
            "run_s": number(source.get("run_s")),
            "compiles": source.get("compiles"),
            "user_compiles": source.get("user_compiles"),
            "eager_compiles": source.get("eager_compiles"),
            "numba_compiles": source.get("numba_compiles"),
        }
    jax = source.get("jax") or {}
    numba = source.get("numba") or {}
    return {
        "wall_s": number(source.get("wall_s")),
        "compile_s": number(source.get("compile_s")),
        "run_s": number(source.get("run_s")),
        "compiles": jax.get("compiles") if jax else None,
        "user_compiles": jax.get("user_compiles") if jax else None,
        "eager_compiles": jax.get("eager_compiles") if jax else None,
        "numba_compiles": numba.get("compiles") if numba else None,
    }


def evidence(
    last_good: RunRecord,
    first_bad: RunRecord,
    cell: int | None,
    *,
    findings_good: Sequence[Any] = (),
    findings_bad: Sequence[Any] = (),
) -> dict[str, Any]:
    """What moved between the last good and the first bad release, on the chosen cell or the total:
    wall, compile and run seconds and compile counts on each side (and which of compile or run grew
    more), findings of the diagnosis that appear only in the bad release's run, fingerprint fields."""
    total = cell is None
    if total:
        before = _split(last_good.measurements.get("totals"), total=True)
        after = _split(first_bad.measurements.get("totals"), total=True)
    else:
        before = _split(_cell_of(last_good, last_good, cell), total=False)  # type: ignore[arg-type]
        after = _split(_cell_of(first_bad, last_good, cell), total=False)  # type: ignore[arg-type]
    moved: dict[str, Any] = {}
    for key in ("wall_s", "compile_s", "run_s"):
        a, b = before.get(key), after.get(key)
        moved[key] = (b - a) if isinstance(a, float) and isinstance(b, float) else None
    grew = [k for k in ("compile_s", "run_s") if isinstance(moved[k], float)]
    if grew and isinstance(moved["wall_s"], float) and moved["wall_s"] > 0:
        largest = max(grew, key=lambda k: moved[k])
        share = moved[largest] / moved["wall_s"]
        moved["mostly"] = {"part": largest.removesuffix("_s"), "share": share}
    counts = {k: (before.get(k), after.get(k)) for k in ("compiles", "user_compiles", "eager_compiles", "numba_compiles")}
    changed_counts = {k: {"good": a, "bad": b} for k, (a, b) in counts.items() if a != b}
    def keyed(finding: Any) -> tuple[str, int | None]:
        return (finding.rule, finding.cell_index)
    relevant = [f for f in findings_bad if total or f.cell_index is None or f.cell_index == (cell or 0) - 1]
    known = {keyed(f) for f in findings_good}
    appeared = [f.to_dict() for f in relevant if keyed(f) not in known]
    return {
        "target": target_label(cell),
        "good": before,
        "bad": after,
        "moved": moved,
        "compile_counts_changed": changed_counts,
        "findings_appeared": appeared,
        "differences": differing_fields([last_good, first_bad]),
    }


@dataclass
class BisectStep:
    """One profiled version and the gate's word on it against the good version."""

    version: str
    run_id: int | None
    verdict: str  # the gate's verdict on the target, "good" version itself: "baseline"; "untestable"
    bad: bool | None  # None: the baseline, or untestable
    comparison: dict[str, Any] | None = None
    error: str | None = None
    profiled: bool = True  # False: it could not be installed, so nothing ran

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "run_id": self.run_id, "verdict": self.verdict, "bad": self.bad,
                "comparison": self.comparison, "error": self.error, "profiled": self.profiled}


@dataclass
class BisectResult:
    """``nbscope bisect``: the released versions tried, each profile's verdict, and the first bad one."""

    target: str
    package: str
    good: str
    bad: str
    cell: int | None
    versions: list[str]
    steps: list[BisectStep] = field(default_factory=list)
    first_bad: str | None = None
    last_good: str | None = None
    slowdown: dict[str, Any] | None = None  # the gate's comparison, first bad against the good version
    step_slowdown: dict[str, Any] | None = None  # ... and against the last good release
    evidence: dict[str, Any] | None = None
    untestable: list[str] = field(default_factory=list)  # versions that could not be installed or run
    ambiguous: list[str] = field(default_factory=list)  # first bad is one of these (untestable between)
    note: str | None = None

    @property
    def profiles(self) -> int:
        """How many versions were profiled (the good one included)."""
        return sum(1 for s in self.steps if s.profiled)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "package": self.package,
            "good": self.good,
            "bad": self.bad,
            "on": target_label(self.cell),
            "versions": self.versions,
            "profiles": self.profiles,
            "steps": [s.to_dict() for s in self.steps],
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "slowdown": self.slowdown,
            "step_slowdown": self.step_slowdown,
            "evidence": self.evidence,
            "untestable": self.untestable,
            "ambiguous": self.ambiguous,
            "note": self.note,
        }
