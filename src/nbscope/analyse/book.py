"""Book-level views over many profile runs: the slowest cells of a whole book, and a lecture-by-lecture
table of two sets of runs (a CPU runner's and a GPU runner's, two branches, two machines).

Each view takes run records (found by :mod:`nbscope.api.book`), reads their typed cells and totals
(``RunRecord.notebook_run``), and returns typed results (``to_dict`` is what ``--json`` prints); the renderers
in :mod:`nbscope.render.book` format them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, ClassVar

from nbscope.analyse.compare import Winner, platform_of
from nbscope.record.cells import same_notebook
from nbscope.record.run import RunRecord
from nbscope.schema.codec import Encoded, Write

CELL_KINDS = ("profile", "trace")


@dataclass
class RunSet:
    """Runs named by one argument (a book, an audit, a label, runs), with what could not be found."""

    name: str
    records: list[RunRecord] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # notebooks of the book or audit without a stored run

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "runs": [r.run_id for r in self.records], "missing": self.missing}


def newest_per_notebook(records: Sequence[RunRecord]) -> list[RunRecord]:
    """One run per notebook, the newest, in the order the notebooks first appear."""
    chosen: dict[str, RunRecord] = {}
    for record in records:
        kept = chosen.get(record.target)
        if kept is None or (record.started_at, record.run_id or 0) > (kept.started_at, kept.run_id or 0):
            chosen[record.target] = record
    return list(chosen.values())


@dataclass(frozen=True, slots=True)
class SlowCell:
    """One cell of the slowest-cells view: where it is, the run and backend it comes from, its times."""

    target: str
    run_id: int | None
    backend: str | None
    index: int  # among the notebook's code cells, from 0
    line: int | None
    source: str  # its first line of code
    source_hash: str
    status: str
    wall_s: float
    compile_s: float | None
    run_s: float | None
    share: float | None = None  # of every run's wall time together, or of its own run's (``share_of``)

    @property
    def cell(self) -> int:
        """The cell's number as a reader counts code cells (from 1)."""
        return self.index + 1

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "run_id": self.run_id,
            "backend": self.backend,
            "index": self.index,
            "cell": self.cell,
            "line": self.line,
            "source": self.source,
            "source_hash": self.source_hash,
            "status": self.status,
            "wall_s": self.wall_s,
            "compile_s": self.compile_s,
            "run_s": self.run_s,
            "share": self.share,
        }


@dataclass(frozen=True, slots=True)
class SlowestCells(Encoded):
    """The slowest cells across the runs of some sets (:func:`slowest_cells`); ``to_dict`` is ``--json``."""

    sets: tuple[RunSet, ...]
    notebooks: int
    runs: int
    share_of: str  # "all": each share is of every run together; "run": of the cell's own run
    cells: int  # every cell with a wall time, shown or not
    wall_s: float  # of those cells
    shown_wall_s: float
    rows: tuple[SlowCell, ...]  # slowest first


def slowest_cells(runs: Sequence[RunSet], *, limit: int | None = 20) -> SlowestCells:
    """The slowest cells across every run of ``runs``, slowest first (``limit=None``: every cell).

    A cell is named by its notebook, its number (``cell`` 1-based among code cells, ``index`` 0-based) and
    line, with the run it comes from and that run's backend. A cell's ``share`` is of the wall time of every
    notebook's run together (a book's runs); where one notebook has several runs (``nbscope cells 1 3`` on two
    runs of one notebook) adding them up would count the notebook twice, so each share is of its own run
    (``share_of`` says which).
    """
    records: list[RunRecord] = []
    for record in (r for run_set in runs for r in run_set.records if r.kind in CELL_KINDS):
        if not any(record is kept or (record.run_id is not None and record.run_id == kept.run_id) for kept in records):
            records.append(record)  # a run named twice counts once
    per_notebook = Counter(record.target for record in records)
    per_run = any(count > 1 for count in per_notebook.values())
    rows: list[tuple[int, SlowCell]] = []  # (the run's place in ``records``, the cell)
    run_wall: defaultdict[int, float] = defaultdict(float)  # each run's timed cells: a shown row's run has one
    for number_in_list, record in enumerate(records):
        backend = platform_of(record)["platform"]
        for cell in record.notebook_run().cells:
            if cell.wall_s is None:
                continue
            run_wall[number_in_list] += cell.wall_s
            rows.append(
                (
                    number_in_list,
                    SlowCell(
                        target=record.target,
                        run_id=record.run_id,
                        backend=backend,
                        index=cell.index,
                        line=cell.line,
                        source=cell.code_line,
                        source_hash=cell.source_hash,
                        status=cell.status,
                        wall_s=cell.wall_s,
                        compile_s=cell.compile_s,
                        run_s=cell.run_s,
                    ),
                )
            )
    total = sum(row.wall_s for _, row in rows)
    rows.sort(key=lambda item: item[1].wall_s, reverse=True)
    shown = []
    for run, row in rows[:limit] if limit else rows:
        whole = run_wall[run] if per_run else total
        shown.append(replace(row, share=row.wall_s / whole if whole > 0 else None))
    return SlowestCells(
        sets=tuple(runs),
        notebooks=len(per_notebook),
        runs=len(records),
        share_of="run" if per_run else "all",
        cells=len(rows),
        wall_s=total,
        shown_wall_s=sum(row.wall_s for row in shown),
        rows=tuple(shown),
    )


@dataclass(frozen=True, slots=True)
class LectureSide(Encoded):
    """One set's newest run of a notebook, in the lecture-by-lecture view."""

    run_id: int | None
    backend: str | None
    status: str
    wall_s: float | None
    compile_s: float | None
    cells: int
    cells_failed: int

    @classmethod
    def of(cls, record: RunRecord) -> LectureSide:
        totals = record.notebook_run().totals
        return cls(
            run_id=record.run_id,
            backend=platform_of(record)["platform"] if record.kind in CELL_KINDS else None,
            status=record.status,
            wall_s=totals.wall_s,
            compile_s=totals.compile_s,
            cells=totals.cells,
            cells_failed=totals.cells_failed,
        )


@dataclass(frozen=True, slots=True)
class LectureRow(Encoded):
    """A notebook of either set: its run in A, in B (None where a set has none), and who is faster."""

    target: str
    a: LectureSide | None
    b: LectureSide | None
    winner: Annotated[Winner, Write(inline=True)]


@dataclass(frozen=True, slots=True)
class Lectures(Encoded):
    """Two sets of runs lecture by lecture (:func:`by_lecture`); ``to_dict`` is ``--json``."""

    a: RunSet
    b: RunSet
    rows: tuple[LectureRow, ...]
    paired: int  # notebooks in both sets with a wall time on each side
    a_wall_s: float  # of the paired notebooks
    b_wall_s: float
    winner: Winner | None  # of the totals; None when no notebook is paired
    wins: Mapping[str, int]  # "A", "B", "tie": how many paired notebooks each side won
    document_keys: ClassVar = ("a", "b", "rows", "paired", "totals", "wins")

    @property
    def totals(self) -> dict[str, object]:
        """The paired notebooks' walls on each side, and the winner of those totals."""
        return {"a_wall_s": self.a_wall_s, "b_wall_s": self.b_wall_s, **(self.winner.to_dict() if self.winner else {})}


def by_lecture(a: RunSet, b: RunSet) -> Lectures:
    """A row per notebook of either set: its newest run's wall and compile time on each side, and the winner.

    Notebooks pair by name, or as the same notebook under an older name or another name with the same
    content (:func:`nbscope.record.cells.same_notebook`); one in a single set has the other side empty.
    """
    runs_a, runs_b = newest_per_notebook(a.records), newest_per_notebook(b.records)
    unpaired_b = list(runs_b)
    rows = []
    for record_a in runs_a:
        match = next((r for r in unpaired_b if r.target == record_a.target), None) or next(
            (r for r in unpaired_b if same_notebook(record_a, r)), None
        )
        if match is not None:
            unpaired_b.remove(match)
        rows.append(_lecture_row(record_a, match))
    rows.extend(_lecture_row(None, record_b) for record_b in unpaired_b)
    both = [(r.a.wall_s, r.b.wall_s) for r in rows if r.a and r.b and r.a.wall_s is not None and r.b.wall_s is not None]
    total_a, total_b = sum(wall_a for wall_a, _ in both), sum(wall_b for _, wall_b in both)
    wins = {
        side: sum(
            1
            for r in rows
            if r.a and r.b and r.a.wall_s is not None and r.b.wall_s is not None and r.winner.side == side
        )
        for side in ("A", "B", "tie")
    }
    return Lectures(
        a=a,
        b=b,
        rows=tuple(rows),
        paired=len(both),
        a_wall_s=total_a,
        b_wall_s=total_b,
        winner=Winner.of(total_a, total_b) if both else None,
        wins=wins,
    )


def _lecture_row(record_a: RunRecord | None, record_b: RunRecord | None) -> LectureRow:
    side_a = LectureSide.of(record_a) if record_a else None
    side_b = LectureSide.of(record_b) if record_b else None
    if side_a and side_b:
        result = Winner.of(side_a.wall_s, side_b.wall_s)
    else:
        result = Winner(None, None, "only in A" if side_a else "only in B")
    return LectureRow(target=(record_a or record_b).target, a=side_a, b=side_b, winner=result)  # type: ignore[union-attr]
