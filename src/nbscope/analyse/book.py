"""Book-level views over many profile runs: the slowest cells of a whole book, and a lecture-by-lecture
table of two sets of runs (a CPU runner's and a GPU runner's, two branches, two machines).

Each view takes run records (found by :mod:`nbscope.api.book`), reads their typed cells and totals
(``RunRecord.notebook_run``), and returns plain data (what ``--json`` prints); the renderers in
:mod:`nbscope.render.book` format it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nbscope.analyse.compare import platform_of, winner
from nbscope.record.cells import same_notebook
from nbscope.record.run import RunRecord

CELL_KINDS = ("profile", "trace")


@dataclass
class RunSet:
    """Runs named by one argument (a book, an audit, a label, runs), with what could not be found."""

    name: str
    records: list[RunRecord] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # notebooks of the book or audit without a stored run

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "runs": [r.run_id for r in self.records], "missing": self.missing}


def newest_per_notebook(records: Sequence[RunRecord]) -> list[RunRecord]:
    """One run per notebook, the newest, in the order the notebooks first appear."""
    chosen: dict[str, RunRecord] = {}
    for record in records:
        kept = chosen.get(record.target)
        if kept is None or (record.started_at, record.run_id or 0) > (kept.started_at, kept.run_id or 0):
            chosen[record.target] = record
    return list(chosen.values())


def slowest_cells(runs: Sequence[RunSet], *, limit: int | None = 20) -> dict[str, Any]:
    """The slowest cells across every run of ``runs``, slowest first (``limit=None``: every cell).

    A cell is named by its notebook, its number (``cell`` 1-based among code cells, ``index`` 0-based) and
    line, with the run it comes from and that run's backend. A cell's ``share`` is of the wall time of every
    notebook's run together (a book's runs); where one notebook has several runs (``nbscope cells 1 3`` on two
    runs of one notebook) adding them up would count the notebook twice, so each share is of its own run
    (``share_of`` says which).
    """
    rows: list[dict[str, Any]] = []
    records: list[RunRecord] = []
    for record in (r for run_set in runs for r in run_set.records if r.kind in CELL_KINDS):
        if not any(record is kept or (record.run_id is not None and record.run_id == kept.run_id) for kept in records):
            records.append(record)  # a run named twice counts once
    per_notebook: dict[str, int] = {}
    for record in records:
        per_notebook[record.target] = per_notebook.get(record.target, 0) + 1
    per_run = any(count > 1 for count in per_notebook.values())
    run_wall: dict[int, float] = {}
    for number_in_list, record in enumerate(records):
        backend = platform_of(record)["platform"]
        for cell in record.notebook_run().cells:
            if cell.wall_s is None:
                continue
            run_wall[number_in_list] = run_wall.get(number_in_list, 0.0) + cell.wall_s
            rows.append({
                "target": record.target,
                "run_id": record.run_id,
                "run": number_in_list,
                "backend": backend,
                "index": cell.index,
                "cell": cell.index + 1,
                "line": cell.line,
                "source": cell.code_line,
                "source_hash": cell.source_hash,
                "status": cell.status,
                "wall_s": cell.wall_s,
                "compile_s": cell.compile_s,
                "run_s": cell.run_s,
            })
    total = sum(r["wall_s"] for r in rows)
    rows.sort(key=lambda r: r["wall_s"], reverse=True)
    shown = rows[:limit] if limit else rows
    for row in shown:
        whole = run_wall.get(row["run"], 0.0) if per_run else total
        row["share"] = row["wall_s"] / whole if whole > 0 else None
    for row in rows:
        del row["run"]
    return {
        "sets": [s.to_dict() for s in runs],
        "notebooks": len(per_notebook),
        "runs": len(records),
        "share_of": "run" if per_run else "all",
        "cells": len(rows),
        "wall_s": total,
        "shown_wall_s": sum(r["wall_s"] for r in shown),
        "rows": shown,
    }


def _totals(record: RunRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    totals = record.notebook_run().totals
    return {
        "run_id": record.run_id,
        "backend": platform_of(record)["platform"] if record.kind in CELL_KINDS else None,
        "status": record.status,
        "wall_s": totals.wall_s,
        "compile_s": totals.compile_s,
        "cells": totals.cells,
        "cells_failed": totals.cells_failed,
    }


def by_lecture(a: RunSet, b: RunSet) -> dict[str, Any]:
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
    both = [r for r in rows if r["a"] and r["b"] and r["a"]["wall_s"] is not None and r["b"]["wall_s"] is not None]
    total_a = sum(r["a"]["wall_s"] for r in both)
    total_b = sum(r["b"]["wall_s"] for r in both)
    wins = {side: sum(1 for r in both if r["winner"] == side) for side in ("A", "B", "tie")}
    return {
        "a": a.to_dict(),
        "b": b.to_dict(),
        "rows": rows,
        "paired": len(both),
        "totals": {"a_wall_s": total_a, "b_wall_s": total_b, **(winner(total_a, total_b) if both else {})},
        "wins": wins,
    }


def _lecture_row(record_a: RunRecord | None, record_b: RunRecord | None) -> dict[str, Any]:
    side_a, side_b = _totals(record_a), _totals(record_b)
    row: dict[str, Any] = {
        "target": (record_a or record_b).target,  # type: ignore[union-attr]
        "a": side_a,
        "b": side_b,
    }
    if side_a and side_b:
        row.update(winner(side_a["wall_s"], side_b["wall_s"]))
    else:
        row.update({"winner": None, "factor": None, "text": "only in A" if side_a else "only in B"})
    return row
