"""``nbscope compare``: two profile runs of a notebook side by side.

Cells are paired by the cell model's one pairing function (:func:`nbscope.record.cells.pair_cells`):
by source hash, moved cells by hash elsewhere, edited cells by position and similarity. For each
pair the wall, compile and run times of both sides, their ratio and the winner; then the totals; then
every difference in settings and machine fingerprint that could explain the figures.

A winner whose difference the machine's own noise explains (:mod:`nbscope.analyse.noise`: the wait for a
CPU left out, and the floor of the cell's kind and size) is shown as ``within noise``, never as a speed-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

from nbscope._errors import NbscopeError
from nbscope.analyse import noise
from nbscope.collect import fingerprint as fp
from nbscope.record.cells import CellMatch, CellPair, pair_cells, same_notebook
from nbscope.record.run import PROFILE_KINDS, RunRecord, backend_of, object_in
from nbscope.record.sources import sources_of
from nbscope.schema.codec import Encoded, Write, decode, given, known, never
from nbscope.schema.model import Cell, Totals
from nbscope.schema.status import CUT_SHORT

# A difference below both of these is noise on a shared machine (facts: ±20 % between runs).
TIE_RATIO = 1.10
TIE_SECONDS = 0.005

# The settings a run's title names, when the run recorded them.
TITLE_SETTINGS = ("jax_platform", "jax_cache", "pathway")

TOTAL_KEYS = (
    "wall_s",
    "compile_s",
    "run_s",
    "compiles",
    "user_compiles",
    "eager_compiles",
    "numba_compiles",
    "cache_hits",
    "kernel_start_s",
    "peak_rss_bytes",
)

_BACKEND = "JAX backend: CPU and accelerator (GPU, TPU) differ per cell (compile, dispatch, loops, float64)"
_CORES = "core count: BLAS, XLA:CPU and Numba parallel threads"
# Why a difference in a fingerprint or settings field can change timings; first matching prefix wins.
_WHY: tuple[tuple[str, str], ...] = (
    ("settings.jax_platform", _BACKEND),
    ("derived.platform", _BACKEND),
    ("settings.jax_cache", "persistent compile cache: a warm cache turns backend compiles into retrievals"),
    ("derived.cache_state", "persistent compile cache state at the start of the run"),
    ("settings.env", "environment overrides given to the kernel"),
    ("settings.pathway", "how the notebook ran (kernel, script, book): start-up and per-cell overheads differ"),
    ("settings.repeat", "figures are medians over repeats on one side"),
    ("settings.timeline", "a per-cell jax.profiler trace adds overhead"),
    ("derived.x64", "float64 vs float32: float64 doubles memory traffic and is slow on consumer GPUs"),
    ("cpu.model", "CPU model: single-thread speed and vector width"),
    ("cpu.logical_cores", _CORES),
    ("cpu.physical_cores", _CORES),
    ("cpu.affinity_cores", "cores this process may use"),
    ("cpu.cgroup_cpu_limit", "container CPU quota: caps parallel speed-ups"),
    ("cpu.max_mhz", "CPU clock"),
    ("cpu.load_average", "other load on the machine during the run"),
    ("memory.", "RAM: large arrays may swap"),
    ("blas.", "BLAS library or threads: NumPy matmul and linear algebra speed"),
    ("numba_threading.", "Numba threading layer or threads: parallel=True speed"),
    ("gpu.", "GPU model, memory or driver"),
    ("versions.jax", "JAX/XLA version: compiler and runtime changes"),
    ("versions.numba", "Numba version"),
    ("versions.numpy", "NumPy version"),
    ("versions.python", "Python version: interpreter speed"),
    ("versions.", "library version"),
    ("environment.JAX_ENABLE_X64", "float64 on or off for JAX"),
    ("environment.JAX_PLATFORM", "JAX backend selection"),
    ("environment.JAX_COMPILATION_CACHE", "persistent compile cache"),
    ("environment.XLA_PYTHON_CLIENT", "GPU memory preallocation"),
    ("environment.XLA_FLAGS", "XLA compiler flags"),
    ("environment.", "environment variable that changes numerical libraries"),
    ("host.", "operating system"),
)


def why(path: str) -> str:
    return next((reason for prefix, reason in _WHY if path.startswith(prefix)), "")


def check_profile(record: RunRecord, name: str = "run") -> None:
    """Refuse records that hold no per-cell figures (bench, audit, ...)."""
    if record.kind not in (*PROFILE_KINDS, "trial"):  # a trial's side is a profile of the notebook too
        raise NbscopeError(f"{name} is a {record.kind!r} run; compare and diagnose need a profile run")
    # The document's shape, checked where it is read: a missing list is not an empty notebook.
    if not record.notebook_run().cells_recorded:
        raise NbscopeError(f"{name} has no per-cell measurements (measurements.cells is missing)")


def label(record: RunRecord, fallback: str) -> str:
    return f"run {record.run_id}" if record.run_id else fallback


# ---- platform and dtype -------------------------------------------------------------------------


def platform_of(record: RunRecord) -> dict[str, Any]:
    """The JAX backend a run used, and how we know (see :func:`nbscope.record.run.backend_of`)."""
    return backend_of(record)


@dataclass(frozen=True, slots=True)
class Backend:
    """The JAX backend a run used (cpu, gpu, tpu; None: not known), and what says so."""

    platform: str | None
    source: str | None


def backend(record: RunRecord) -> Backend:
    """:func:`platform_of`, typed."""
    return decode(Backend, backend_of(record))


def _is_float64(shape: str) -> bool:
    return "float64" in shape or "complex128" in shape


@dataclass(frozen=True, slots=True)
class X64:
    """Whether JAX ran in float64 (None: the record does not tell), and the evidence that says so."""

    x64: bool | None
    source: str
    cells: tuple[int, ...] = ()  # the cells whose compiles took float64 arguments


def x64_of(record: RunRecord) -> X64:
    """Whether JAX ran in float64, from the strongest evidence the record holds."""
    machine = record.machine()
    functions = [
        (cell.index, function) for cell in record.notebook_run().cells if cell.jax for function in cell.jax.functions
    ]
    float64_cells = sorted({index for index, function in functions if any(map(_is_float64, function.shapes))})
    if float64_cells:
        return X64(True, "float64 argument shapes in JAX compiles", tuple(float64_cells))
    if machine.jax_runtime is not None and machine.jax_runtime.x64 is not None:
        return X64(machine.jax_runtime.x64, "fingerprint.jax_runtime.x64")
    flag = record.run_settings().environment(machine).get("JAX_ENABLE_X64")
    if flag is not None:
        return X64(flag.strip().lower() in ("1", "true", "yes", "on"), "JAX_ENABLE_X64")
    if any("float32" in shape for _, function in functions for shape in function.shapes):
        return X64(False, "only float32 argument shapes in JAX compiles")
    return X64(None, "no JAX compile shapes and no x64 setting recorded")


# ---- comparison ---------------------------------------------------------------------------------


WinnerSide = Literal["A", "B", "tie"]


@dataclass(frozen=True, slots=True)
class Winner(Encoded):
    """Who is faster, by how much, and whether the machine's noise explains the difference."""

    side: Annotated[WinnerSide | None, Write(key="winner")]  # None: a side has no figure
    factor: float | None  # the slower side's figure over the faster's
    text: str  # "B 3.1× faster", "tie", "within noise", "–"
    # None: the noise was not judged (a cell of one run, a count)
    within_noise: Annotated[bool | None, Write(when=known)] = None
    noise_floor_s: Annotated[float | None, Write(when=known)] = None  # the floor a winner within noise fell under

    @classmethod
    def of(cls, a: float | None, b: float | None) -> Winner:
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return cls(None, None, "–")
        if a <= 0 and b <= 0:
            return cls("tie", 1.0, "tie")
        slow, fast = max(a, b), min(a, b)
        factor = slow / fast if fast > 0 else float("inf")
        if factor < TIE_RATIO or slow - fast < TIE_SECONDS:
            return cls("tie", round(factor, 3), "tie")
        side: WinnerSide = "B" if b < a else "A"
        shown = f"{factor:.1f}" if factor < 100 else f"{factor:.0f}"
        return cls(side, round(factor, 3), f"{side} {shown}× faster")


_CUT_WORDS = {"timeout": "timed out", "kernel-died": "its kernel died", "interrupted": "interrupted"}  # CUT_SHORT's


def cut_short_winner(result: Winner, cut_a: str | None, cut_b: str | None) -> Winner:
    """``result`` where a side was cut short (a status of ``CUT_SHORT``): that side's time is a lower bound, so
    the other side wins only where the bound is already past it ("A ≥ 4.9× faster (B timed out)"); else no winner."""
    if cut_a is None and cut_b is None:
        return result
    if cut_a is not None and cut_b is not None:
        return Winner(None, None, "both cut short")
    cut_side, cut = ("A", cut_a) if cut_a is not None else ("B", cut_b or "")
    words = f"{cut_side} {_CUT_WORDS[cut]}"
    if result.side in ("A", "B") and result.side != cut_side:
        return replace(result, text=result.text.replace(" ", " ≥ ", 1) + f" ({words})")  # "A ≥ 4.9× faster (...)"
    return Winner(None, None, words)


def within_noise(result: Winner, floor_s: float, delta_s: float | None, judged: str) -> Winner:
    """A winner that the machine's own noise explains becomes ``within noise``: a tie, with the factor kept."""
    if result.side not in ("A", "B") or delta_s is None or abs(delta_s) >= floor_s:
        return replace(result, within_noise=False)
    what = "" if judged == "unwaited" else " (walls)"
    return replace(result, side="tie", within_noise=True, text=f"within noise{what}", noise_floor_s=round(floor_s, 6))


@dataclass(frozen=True, slots=True)
class CellFigures(Encoded):  # versions writes a cell's figures per version
    """The figures of one cell that a comparison shows."""

    index: int
    line: int | None
    status: str
    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    compiles: int  # JAX and Numba
    cache_hits: int
    timeline: str | None  # the timeline's classification of the cell, when traced


def cell_figures(cell: Cell | None) -> CellFigures | None:
    """The figures of one cell that a comparison shows (None for a cell absent from a run)."""
    if cell is None:
        return None
    classification = cell.timeline_summary.classification if cell.timeline_summary is not None else None
    return CellFigures(
        index=cell.index,
        line=cell.line,
        status=cell.status,
        wall_s=cell.wall_s,
        compile_s=cell.compile_s,
        run_s=cell.run_s,
        compiles=(cell.jax.compiles if cell.jax else 0) + (cell.numba.compiles if cell.numba else 0),
        cache_hits=cell.jax.cache_hits if cell.jax else 0,
        timeline=classification,
    )


@dataclass(frozen=True, slots=True)
class CellRow:
    """One row of a comparison: a cell of A, of B or of both (as they were paired), and who is faster."""

    match: CellMatch  # how the cells were paired (:class:`nbscope.record.cells.CellPair`)
    similarity: float | None
    line: int | None  # of A's cell when there is one, else B's
    first_line: str
    code_line: str
    source_hash: str
    a: CellFigures | None
    b: CellFigures | None
    ratio_b_over_a: float | None
    delta_s: float | None  # B's wall less A's
    winner: Annotated[Winner, Write(inline=True)]
    document_keys: ClassVar = (
        "index_a",
        "index_b",
        "line",
        "first_line",
        "code_line",
        "source_hash",
        "match",
        "similarity",
        "a",
        "b",
        "ratio_b_over_a",
        "delta_s",
        "winner",
    )

    @property
    def index_a(self) -> int | None:
        return self.a.index if self.a else None

    @property
    def index_b(self) -> int | None:
        return self.b.index if self.b else None


@dataclass(frozen=True, slots=True)
class TotalRow:
    """One notebook total of both runs; a time has a winner, a count none."""

    key: Annotated[str, Write(when=never)]  # the total's name in the record (``wall_s``, ``compiles``, ...)
    a: float | None
    b: float | None
    winner: Annotated[Winner | None, Write(inline=True)]


@dataclass(frozen=True, slots=True)
class Difference:
    """A setting, derived state or fingerprint field that differs, and why it could change the figures."""

    field: str  # ``settings.jax_cache``, ``derived.platform``, ``gpu.devices.0.name``, ...
    a: Any  # the values as recorded (any JSON value)
    b: Any
    kind: str  # setting, derived, run, machine, software, environment
    why: str
    note: Annotated[str | None, Write(when=given)] = None


@dataclass(frozen=True, slots=True)
class Pairing:
    """How the cells of the two runs were paired, counted by kind of match."""

    cells_a: int
    cells_b: int
    by_hash: int
    by_order: int  # edited in place
    by_move: int
    by_similarity: int
    only_a: int
    only_b: int
    document_keys: ClassVar = (
        "cells_a",
        "cells_b",
        "by_hash",
        "by_order",
        "by_move",
        "by_similarity",
        "only_a",
        "only_b",
        "all_paired",
    )

    @property
    def all_paired(self) -> bool:
        return not self.only_a and not self.only_b

    @classmethod
    def of(cls, pairs: list[CellPair[Cell]], cells_a: int, cells_b: int) -> Pairing:
        def matched(match: str) -> int:
            return sum(p.match == match for p in pairs)

        return cls(
            cells_a=cells_a,
            cells_b=cells_b,
            by_hash=matched("hash"),
            by_order=matched("edited"),
            by_move=matched("moved"),
            by_similarity=matched("similar"),
            only_a=matched("only-a"),
            only_b=matched("only-b"),
        )


@dataclass(frozen=True, slots=True)
class ComparedRun:
    """One side of a comparison: which run, on what machine and backend, under which settings."""

    label: str
    run_id: int | None
    target: str
    status: str
    started_at: str
    machine: str
    digest: str
    platform: str | None
    recorded_settings: Annotated[Mapping[str, object], Write(key="settings")]  # the settings document, as recorded
    # The settings a title names (TITLE_SETTINGS), as recorded and in the record's order: only those the run
    # recorded (a ``trace`` run records no ``jax_cache``, which the typed settings read as "off").
    title_settings: Annotated[tuple[tuple[str, Any], ...], Write(when=never)]

    @classmethod
    def of(cls, record: RunRecord, name: str) -> ComparedRun:
        recorded = record.settings or {}
        return cls(
            label=name,
            run_id=record.run_id,
            target=record.target,
            status=record.status,
            started_at=record.started_at,
            machine=record.machine().summary,
            digest=record.digest,
            platform=platform_of(record)["platform"],
            recorded_settings=record.settings,
            title_settings=tuple((k, v) for k, v in recorded.items() if k in TITLE_SETTINGS and v),
        )


@dataclass(frozen=True, slots=True)
class Comparison(Encoded):
    """Two runs side by side; ``to_dict`` is what ``--json`` prints."""

    a: RunRecord
    b: RunRecord
    pairs: tuple[CellPair[Cell], ...]
    run_a: Annotated[ComparedRun, Write(key="a")]
    run_b: Annotated[ComparedRun, Write(key="b")]
    pairing: Pairing
    rows: Annotated[tuple[CellRow, ...], Write(key="cells")]
    totals: tuple[TotalRow, ...]  # in the order of TOTAL_KEYS
    differences: tuple[Difference, ...]
    same_notebook: bool = True  # False: two different notebooks, compared because the caller allowed it
    document_keys: ClassVar = (
        "run_a",
        "run_b",
        "same_notebook",
        "pairing",
        "rows",
        ("totals", "totals_by_key"),
        "differences",
    )

    @property
    def totals_by_key(self) -> dict[str, TotalRow]:
        return {row.key: row for row in self.totals}

    def total(self, key: str) -> TotalRow | None:
        return next((row for row in self.totals if row.key == key), None)


def _row(pair: CellPair[Cell]) -> tuple[CellRow, float | None]:
    """A pair's row, and the noise floor of its change when both runs have the cell."""
    fa, fb = cell_figures(pair.a), cell_figures(pair.b)
    ref = pair.a or pair.b
    assert ref is not None  # a pair holds a cell of A, of B or of both
    wall_a, wall_b = (fa.wall_s if fa else None), (fb.wall_s if fb else None)
    ratio = delta = None
    if wall_a is not None and wall_b is not None:
        ratio, delta = (round(wall_b / wall_a, 4) if wall_a > 0 else None), wall_b - wall_a
    result, floor = Winner.of(wall_a, wall_b), None
    cut_a, cut_b = (f.status if f is not None and f.status in CUT_SHORT else None for f in (fa, fb))
    if cut_a or cut_b:  # a lower bound: no noise to judge
        result = cut_short_winner(result, cut_a, cut_b)
    elif pair.a is not None and pair.b is not None:
        pair_noise = noise.pair_noise(pair.a, pair.b)
        judged_delta = (
            pair_noise.cand_s - pair_noise.base_s
            if pair_noise.base_s is not None and pair_noise.cand_s is not None
            else None
        )
        result, floor = within_noise(result, pair_noise.floor_s, judged_delta, pair_noise.judged), pair_noise.floor_s
    row = CellRow(
        match=pair.match,
        similarity=pair.similarity,
        line=ref.line,
        first_line=ref.first_line,
        code_line=ref.code_line,
        source_hash=ref.source_hash,
        a=fa,
        b=fb,
        ratio_b_over_a=ratio,
        delta_s=delta,
        winner=result,
    )
    return row, floor


def compare(a: RunRecord, b: RunRecord, *, allow_different: bool = False) -> Comparison:
    """Compare two profile runs of one notebook (under different machines, settings or versions).

    Runs of two different notebooks (:func:`nbscope.record.cells.same_notebook`) are refused: their
    totals and paired cells would read as a speed-up. ``allow_different`` compares them anyway, and the
    comparison says so. Cells are paired by the code that ran: a cell's own, else (a record from before
    cells carried their code) ``record.sources``.
    """
    check_profile(a, "A")
    check_profile(b, "B")
    same = same_notebook(a, b)
    if not same and not allow_different:
        raise NbscopeError(
            f"{label(a, 'A')} is of {a.target} and {label(b, 'B')} of {b.target}: different notebooks "
            "(pass --allow-different to compare them anyway)"
        )
    run_a, run_b = a.notebook_run(), b.notebook_run()
    pairs = pair_cells(run_a.cells, run_b.cells, sources=sources_of(a, b))
    rows, floors = [], []
    for pair in pairs:
        row, floor = _row(pair)
        rows.append(row)
        if floor is not None:
            floors.append(floor)
    pairing = Pairing.of(pairs, len(run_a.cells), len(run_b.cells))
    totals = compare_totals(a, b)
    # The machine slows every cell of a run together: the totals' noise is the sum of the cells'.
    if pairing.all_paired and floors:
        totals = tuple(_wall_within_noise(row, sum(floors)) if row.key == "wall_s" else row for row in totals)
    return Comparison(
        a=a,
        b=b,
        pairs=tuple(pairs),
        run_a=ComparedRun.of(a, label(a, "A")),
        run_b=ComparedRun.of(b, label(b, "B")),
        pairing=pairing,
        rows=tuple(rows),
        totals=totals,
        differences=differences(a, b),
        same_notebook=same,
    )


def _wall_within_noise(row: TotalRow, floor_s: float) -> TotalRow:
    a, b = noise.time_of(row.a), noise.time_of(row.b)
    delta = b - a if a is not None and b is not None else None
    return replace(row, winner=within_noise(row.winner or Winner.of(row.a, row.b), floor_s, delta, "wall"))


def _total(totals: Totals, key: str) -> float | None:
    """A total of TOTAL_KEYS as the record has it: unknown when it has none (the typed ``Totals`` reads an
    absent count as 0), bytes as the whole number recorded (the typed view holds every figure as a float)."""
    if key not in totals.recorded:
        return None
    value = getattr(totals, key)
    return int(value) if key.endswith("_bytes") and value is not None and value.is_integer() else value


def compare_totals(a: RunRecord, b: RunRecord) -> tuple[TotalRow, ...]:
    """The totals of TOTAL_KEYS of both runs, each time with its winner."""
    run_a, run_b = a.notebook_run(), b.notebook_run()
    totals_a, totals_b = run_a.totals, run_b.totals
    # A run with a cell cut short measured a lower bound of its times.
    cut_a, cut_b = (next((c.status for c in run.cells if c.status in CUT_SHORT), None) for run in (run_a, run_b))
    rows = []
    for key in TOTAL_KEYS:
        va, vb = _total(totals_a, key), _total(totals_b, key)
        winner = Winner.of(va, vb) if key.endswith("_s") else None
        if winner is not None and key in ("wall_s", "compile_s", "run_s"):  # the cells' sums, not the kernel's start
            winner = cut_short_winner(winner, cut_a, cut_b)
        rows.append(TotalRow(key, va, vb, winner))
    return tuple(rows)


# ---- differences ------------------------------------------------------------------------------------


def _settings_rows(a: RunRecord, b: RunRecord) -> list[Difference]:
    # Every recorded setting, those the typed ``Settings`` leaves out (``kernel``) too: a walk over the documents.
    rows = []
    sa, sb = a.settings or {}, b.settings or {}
    unset = fp.absent("not set")  # (not Python's None)
    for key in sorted((set(sa) | set(sb)) - {"env_signed"}):  # a hash of ``env``, whose differences are shown
        va, vb = sa.get(key, unset), sb.get(key, unset)
        if key == "env":
            env_a, env_b = object_in(sa, key), object_in(sb, key)
            for name in sorted(set(env_a) | set(env_b)):
                value_a, value_b = env_a.get(name, unset), env_b.get(name, unset)
                if value_a != value_b:
                    rows.append(_difference(f"settings.env.{name}", value_a, value_b, "setting"))
        elif va != vb:
            rows.append(_difference(f"settings.{key}", va, vb, "setting"))
    return rows


def _derived_rows(a: RunRecord, b: RunRecord) -> list[Difference]:
    rows = []
    pa, pb = platform_of(a), platform_of(b)
    if pa["platform"] != pb["platform"]:
        rows.append(
            _difference(
                "derived.platform",
                pa["platform"],
                pb["platform"],
                "derived",
                note=f"A from {pa['source']}; B from {pb['source']}",
            )
        )
    ca, cb = a.notebook_run().totals.cache_state, b.notebook_run().totals.cache_state
    if ca != cb:
        rows.append(_difference("derived.cache_state", ca, cb, "derived"))
    xa, xb = x64_of(a), x64_of(b)
    if xa.x64 is not None and xb.x64 is not None and xa.x64 != xb.x64:
        rows.append(_difference("derived.x64", xa.x64, xb.x64, "derived", note=f"A: {xa.source}; B: {xb.source}"))
    pathway_a, pathway_b = a.notebook_run().runner.pathway, b.notebook_run().runner.pathway
    if pathway_a != pathway_b and a.run_settings().pathway is None:
        rows.append(_difference("derived.pathway", pathway_a, pathway_b, "derived"))
    if a.target != b.target:
        rows.append(_difference("target", a.target, b.target, "run", note="different notebooks"))
    if a.tool_version != b.tool_version:
        rows.append(_difference("tool_version", a.tool_version, b.tool_version, "run"))
    return rows


def _load_rows(a: RunRecord, b: RunRecord) -> list[Difference]:
    """The load average is volatile (not in the digest), but a busy machine explains slow cells."""
    cpus = [record.machine().cpu for record in (a, b)]
    loads = [cpu.load_per_core for cpu in cpus]
    if any(x is not None and x >= 0.5 for x in loads) and loads[0] != loads[1]:
        la, lb = (list(cpu.load_average) if cpu.load_average is not None else None for cpu in cpus)
        return [
            _difference(
                "cpu.load_average", la, lb, "machine", note="1-minute load at the start, per core ≥ 0.5 on one side"
            )
        ]
    return []


def _difference(path: str, a: object, b: object, kind: str, *, note: str | None = None) -> Difference:
    return Difference(field=path, a=a, b=b, kind=kind, why=why(path), note=note)


def _kind_of(path: str) -> str:
    if path.startswith("versions."):
        return "software"
    if path.startswith("environment."):
        return "environment"
    return "machine"


def differences(a: RunRecord, b: RunRecord) -> tuple[Difference, ...]:
    """Settings, derived state and fingerprint fields that differ, settings first (the fingerprints compared
    field by field as recorded: ``collect.fingerprint.diff``)."""
    rows = _settings_rows(a, b) + _derived_rows(a, b)
    for path, va, vb in fp.diff(a.fingerprint, b.fingerprint):
        if path in ("fingerprint_version",):
            continue
        rows.append(_difference(path, va, vb, _kind_of(path)))
    rows += _load_rows(a, b)
    return tuple(rows)
