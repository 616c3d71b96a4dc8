"""What every diagnosis rule shares: the Finding, the Skip, the rule registry entry and the context."""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, ClassVar, Literal, TypedDict, get_args

from nbscope import _units as units
from nbscope._redact import shorten
from nbscope.analyse import compare as compare_module
from nbscope.analyse.diagnose import _bindings, _forecast, _source
from nbscope.record import cells
from nbscope.record.run import RunRecord
from nbscope.record.sources import load_sources
from nbscope.schema import finding_document
from nbscope.schema.codec import Encoded, Read, decode
from nbscope.schema.machine import Machine, Settings
from nbscope.schema.model import Cell, JaxFunction, NotebookRun, Totals, compile_seconds

Severity = Literal["high", "medium", "low"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)  # highest first


HIGHLIGHTS = 3  # labelled evidence lines a finding shows without --verbose


class Advice(TypedDict):
    """A finding's fix and its one-line form, as a rule passes them to ``Finding(**advice)``."""

    action: str
    fix: str


def _pairs(value: object) -> list[tuple[str, str]] | None:
    """A finding's highlights as written: (label, text) pairs, those of another shape left out."""
    if not isinstance(value, list):
        return None
    return [(str(item[0]), str(item[1])) for item in value if isinstance(item, (list, tuple)) and len(item) == 2]


def _severity(value: object) -> Severity | None:
    """A finding's severity as written; one of another word reads as unknown."""
    return next((known for known in SEVERITIES if known == value), None)


def _texts(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _cell_number(outcome: Finding | Skip) -> int | None:
    """The number text shows for a finding's or skip's cell ("cell 3", 1-based among code cells): the JSON
    convention of run records (docs/run-record.md, "Cell numbers"), beside its code-cell ``index``."""
    return outcome.cell_index + 1 if isinstance(outcome.cell_index, int) else None


@dataclass
class Finding(Encoded):
    """A named cause, with the evidence it rests on and the change that removes it.

    Read as prose: ``title``, ``summary`` (one sentence with the numbers that matter), ``fix``, and a few
    labelled ``highlights`` chosen for the reader; ``evidence`` keeps everything (``--json``,
    ``--verbose``, the report's evidence fold). ``highlights`` and ``action`` are optional: a rule that
    does not set them gets lines derived from its evidence and the first clause of its fix.
    """

    rule: str  # e.g. "unrolled-loop"
    title: str  # short human title
    cell_index: Annotated[int | None, Read(key="index")]  # code-cell index (record cell "index"), None: notebook
    severity: Annotated[Severity, Read(_severity, otherwise="low")]
    confidence: float  # 0..1
    evidence: dict[str, object]
    summary: str  # one sentence with the numbers that matter
    fix: str  # concrete change to make, in code the reader owns
    # (label, text) lines for the reader, e.g. ("compile", "1.37 s of 1.43 s (96 %)"); at most HIGHLIGHTS shown.
    highlights: Annotated[list[tuple[str, str]] | None, Read(_pairs)] = None
    # The fix in one short line, for the list that ends `nbscope profile`.
    action: Annotated[str | None, Read(otherwise=None)] = None
    # The GPUs (device table keys) a forecast finding is about: made from a CPU run's GPU forecast, not
    # measured. Empty for findings measured in the run.
    forecast: Annotated[list[str], Read(_texts)] = field(default_factory=list)

    reshape = staticmethod(finding_document.reshape)  # read back from its document (``to_dict()``, an audit's)

    @classmethod
    def from_dict(cls, document: Mapping[str, object]) -> Finding:
        """A finding from its document (an audit keeps findings as documents); missing fields are empty."""
        return decode(cls, document)

    def evidence_highlights(self) -> list[tuple[str, str]]:
        """The labelled evidence lines to show: the rule's own, else a few readable ones from its evidence."""
        lines = (
            [(str(label), str(text)) for label, text in self.highlights]
            if self.highlights is not None
            else derived_highlights(self.evidence)
        )
        see_also = decode(finding_document.EvidenceTerms, self.evidence).see_also
        if see_also:  # a generic symptom names the specific causes found on its cell
            lines.insert(0, ("likely cause", ", ".join(f"{rule} (its own finding)" for rule in see_also)))
        return lines[:HIGHLIGHTS]

    def short_fix(self) -> str:
        """The fix in one line: the rule's ``action``, else the fix's first clause."""
        return self.action or first_clause(self.fix)

    @property
    def seconds_at_stake(self) -> float:
        return decode(finding_document.EvidenceTerms, self.evidence).seconds_at_stake

    # Its document: the fields, its highlights and one-line fix as shown, and its cell by both conventions.
    document_keys: ClassVar = (
        "rule",
        "title",
        "severity",
        "confidence",
        "evidence",
        "summary",
        "fix",
        ("highlights", evidence_highlights),
        ("action", short_fix),
        "forecast",
        ("index", "cell_index"),
        ("cell", _cell_number),
    )


def _readable(key: str, value: object) -> str | None:
    """An evidence value as a short phrase, or None when it would not help a reader (flags, tables)."""
    if isinstance(value, bool) or value is None or isinstance(value, dict):
        return None
    if isinstance(value, (int, float)):
        if key.endswith("_s"):
            return units.seconds(value)
        if key.endswith("_bytes"):
            return units.size(value)
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, list):
        if not value or not all(isinstance(item, (str, int, float)) and not isinstance(item, bool) for item in value):
            return None
        text = ", ".join(str(item) for item in value[:6]) + (" …" if len(value) > 6 else "")
    else:
        text = str(value)
    return shorten(text, 90)


def _label(key: str) -> str:
    for suffix in ("_s", "_bytes"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def derived_highlights(evidence: Mapping[str, object]) -> list[tuple[str, str]]:
    """Up to HIGHLIGHTS labelled lines from a rule's evidence, in its order: numbers with their units and
    short texts; flags, nested tables and bookkeeping keys are left to --verbose."""
    lines = []
    for key, value in evidence.items():
        if key in ("seconds_at_stake", "see_also") or key.endswith("_source"):
            continue
        text = _readable(key, value)
        if text is not None:
            lines.append((_label(key), text))
        if len(lines) == HIGHLIGHTS:
            break
    return lines


def first_clause(text: str, limit: int = 110) -> str:
    """The first clause of a fix (up to ``: ``, ``; `` or ``. `` outside backticks and brackets), cut at
    ``limit`` characters."""
    depth, quoted = 0, False
    for position, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "([{":
            depth += 1
        elif not quoted and char in ")]}":
            depth = max(0, depth - 1)
        elif not quoted and depth == 0 and char in ":;." and text[position + 1 : position + 2] in (" ", ""):
            text = text[:position]
            break
    text = text.strip()
    return shorten(text, limit)


@dataclass
class Skip(Encoded):
    """A rule that could not be evaluated (or only partly), and the data it would need."""

    rule: str
    reason: str
    cell_index: int | None = None
    document_keys: ClassVar = ("rule", "reason", ("index", "cell_index"), ("cell", _cell_number))


Outcome = Finding | Skip


@dataclass
class Rule:
    name: str
    evaluate: Callable[[Context], Iterable[Outcome]]
    # A generic rule names a symptom (compile-bound, cold cache); a specific one names a cause with its fix.
    # At equal severity specific findings come first, and a generic finding points to them.
    generic: bool = False
    # The rule's thresholds (seconds, shares, counts) with their default values; a caller may override them
    # with ``diagnose(thresholds={rule: {name: value}})``, e.g. to judge a run from a much faster machine.
    thresholds: Mapping[str, float] = field(default_factory=dict)


def severity(seconds: float, total: float | None, *, floor: Severity = "low") -> Severity:
    """High when the cause costs a quarter of the notebook or ≥ 10 s; medium from 1 s or 5 %."""
    share = seconds / total if total else 0.0
    level: Severity
    if seconds >= 10 or (share >= 0.25 and seconds >= 1):
        level = "high"
    elif seconds >= 1 or (share >= 0.05 and seconds >= 0.2):
        level = "medium"
    else:
        level = "low"
    return level if SEVERITIES.index(level) <= SEVERITIES.index(floor) else floor


seconds = units.seconds


@dataclass
class FunctionStats:
    """One JAX function's compiles over the whole run."""

    name: str
    kind: str
    count: int = 0  # backend compile events, cache hits included
    cache_hits: int = 0
    trace_s: float = 0.0
    lower_s: float = 0.0
    backend_s: float = 0.0
    shapes: list[str] = field(default_factory=list)
    # By code-cell index: the compile events there, and their seconds.
    cells: Counter[int] = field(default_factory=Counter)
    cell_seconds: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def main_cell(self) -> int | None:
        """The cell where this function cost the most compile time."""
        return max(self.cell_seconds, key=lambda i: self.cell_seconds[i]) if self.cell_seconds else None

    @property
    def compiles(self) -> int:
        return self.count - self.cache_hits

    def add(self, index: int, entry: JaxFunction) -> None:
        """Add one cell's compiles of this function."""
        if entry.kind == "user":
            self.kind = "user"
        self.count += entry.count
        self.cache_hits += entry.cache_hits
        self.trace_s += entry.trace_s
        self.lower_s += entry.lower_s
        self.backend_s += entry.backend_s
        self.shapes.extend(entry.shapes)
        self.cells[index] += entry.count
        self.cell_seconds[index] += entry.compile_s

    @property
    def compile_s(self) -> float:
        return compile_seconds(self)

    def evidence(self) -> dict[str, object]:
        return {
            "function": self.name,
            "kind": self.kind,
            "compiles": self.compiles,
            "cache_hits": self.cache_hits,
            "compile_s": round(self.compile_s, 4),
            "trace_s": round(self.trace_s, 4),
            "lower_s": round(self.lower_s, 4),
            "backend_s": round(self.backend_s, 4),
            "shapes": self.shapes,
            "compiles_per_cell": {str(k): v for k, v in sorted(self.cells.items())},
        }


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where a cell calls into an installed package."""

    line: int  # within the cell
    code: str  # the source line as written (shortened past 70 characters)
    package: str


class Context:
    """One record under diagnosis, with what the rules derive from it (computed once).

    The rules read the run typed: ``run`` (its cells, with the code that ran, and totals), ``machine`` (the
    fingerprint), ``settings``, and ``other_cells`` (the pairing with ``other``).
    """

    def __init__(
        self,
        record: RunRecord,
        *,
        other: RunRecord | None = None,
        thresholds: Mapping[str, Mapping[str, float]] | None = None,
        gpus: Sequence[str] | None = None,
        devices_file: str | Path | None = None,
    ) -> None:
        self.record = record
        self.other = other
        self.forecast_gpus = list(gpus) if gpus else None  # GPUs the GPU rules forecast for on a CPU run
        self.devices_file = devices_file  # the user's device file, when not the default one
        self.threshold_overrides = {rule: dict(values) for rule, values in (thresholds or {}).items()}
        self.sources, self.sources_note = load_sources(record)
        self.run: NotebookRun = record.notebook_run()
        self.totals: Totals = self.run.totals
        self.made_forecast: _forecast.ForecastEvidence | None = None  # made when a rule first asks for it

    def limits(self, rule: str, defaults: Mapping[str, float]) -> dict[str, float]:
        """A rule's thresholds: its defaults, with the values the caller passed for that rule."""
        return {**defaults, **self.threshold_overrides.get(rule, {})}

    @cached_property
    def machine(self) -> Machine:
        """The machine the run ran on (its fingerprint)."""
        return self.record.machine()

    @cached_property
    def settings(self) -> Settings:
        """How the run was asked to run."""
        return self.record.run_settings()

    @property
    def total_wall(self) -> float:
        if self.totals.wall_s is not None:
            return self.totals.wall_s
        return sum(c.wall_s or 0.0 for c in self.run.cells)

    @cached_property
    def numba_compile_s(self) -> float:
        """Numba's compile seconds over the run: the cells' own, added in order as the record's totals are."""
        return sum(c.numba.compile_s for c in self.run.cells if c.numba is not None)

    @cached_property
    def backend(self) -> compare_module.Backend:
        """The JAX backend the run used, and what says so."""
        return compare_module.backend(self.record)

    @property
    def forecast(self) -> _forecast.ForecastEvidence:
        """The run's GPU forecast for the GPU rules on a CPU run, or why there is none (made once, on first use)."""
        if self.made_forecast is None:
            self.made_forecast = _forecast.evidence(
                self.record, self.backend.platform, self.forecast_gpus, devices_file=self.devices_file
            )
        return self.made_forecast

    @cached_property
    def x64(self) -> compare_module.X64:
        """Whether JAX ran in float64, and the evidence for it."""
        return compare_module.x64_of(self.record)

    def source(self, cell: Cell) -> str | None:
        """The code the cell ran, when known (trusted: its text matches the cell's source hash)."""
        return self.sources.get(cell.source_hash)

    @cached_property
    def sources_by_index(self) -> dict[int, str]:
        """Code-cell index -> source, for the cells whose source is known."""
        return {cell.index: text for cell in self.run.cells if (text := self.source(cell)) is not None}

    @cached_property
    def code(self) -> _source.NotebookCode:
        return _source.analyse(self.sources_by_index)

    @cached_property
    def bindings(self) -> _bindings.Bindings:
        """What integer names hold at each statement, the notebook run in order (loop lengths)."""
        return _bindings.Bindings(self.sources_by_index)

    def call_into(self, cell_index: int, package: str | None) -> CallSite | None:
        """Where a cell calls into an installed package, or None when the cell's source does not show it.
        ``package`` None: the one package other than JAX, NumPy, Numba and the standard library that the cell
        calls, if only one."""
        source = self.sources_by_index.get(cell_index)
        tree = self.bindings.tree(cell_index) or self.code.trees.get(cell_index)
        if source is None or tree is None:
            return None
        if package is None:
            called = {
                self.code.imported[root].split(".")[0]
                for root in (_source.dotted(n.func).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Call))
                if root in self.code.imported
            }
            candidates = (
                called - set(sys.stdlib_module_names) - {"jax", "jaxlib", "numpy", "numba", "scipy", "matplotlib"}
            )
            if len(candidates) != 1:
                return None
            package = candidates.pop()
        calls = _source.calls_into(tree, self.code.imported, package)
        if not calls:
            return None
        lines = source.splitlines()
        line = calls[0].lineno
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ast.unparse(calls[0])
        return CallSite(line=line, code=shorten(code, 70), package=package)

    @property
    def has_sources(self) -> bool:
        return bool(self.sources)

    def missing_sources(self) -> str:
        return self.sources_note or "cell sources unavailable"

    def cell(self, index: int) -> Cell | None:
        return self.run.cell(index)

    @cached_property
    def functions(self) -> dict[str, FunctionStats]:
        """Every JAX function's compiles over the run, by name."""
        stats: dict[str, FunctionStats] = {}
        for cell in self.run.cells:
            for entry in cell.jax.functions if cell.jax else ():
                item = stats.setdefault(entry.name, FunctionStats(name=entry.name, kind=str(entry.kind)))
                item.add(cell.index, entry)
        return stats

    @cached_property
    def first_compiled(self) -> dict[str, int]:
        """User functions JAX compiled, by the first cell that compiled each."""
        return {
            name: min(stats.cells)
            for name, stats in self.functions.items()
            if stats.kind == "user" and name != "<lambda>" and stats.cells
        }

    def jax_functions_at(self, at: int) -> set[str]:
        """Names that are JAX functions when cell ``at`` runs: jitted in the source so far, or compiled by JAX by then
        and not bound to a plain Python function (the lecture's NumPy `f` later becomes a jitted `f`)."""
        plain = self.code.defined_plain_at(at)
        compiled = {name for name, first in self.first_compiled.items() if first <= at and name not in plain}
        return self.code.jitted_at(at) | compiled

    @cached_property
    def other_run(self) -> NotebookRun | None:
        """The other run's cells and totals, typed (None without ``other``)."""
        return self.other.notebook_run() if self.other is not None else None

    @cached_property
    def other_cells(self) -> dict[int, Cell]:
        """This record's cell index -> the paired cell of ``other`` (paired by the code that ran; a cell of an
        older record that carries no code is compared by the sources found for it)."""
        if self.other_run is None:
            return {}
        pairs = cells.pair_cells(self.run.cells, self.other_run.cells, sources=self.sources)
        return {pair.a.index: pair.b for pair in pairs if pair.a is not None and pair.b is not None}

    @cached_property
    def other_backend(self) -> compare_module.Backend | None:
        return compare_module.backend(self.other) if self.other is not None else None

    def ran(self, cell: Cell) -> bool:
        """The cell ran (whatever its end) and has a wall time."""
        return cell.ran and cell.wall_s is not None
