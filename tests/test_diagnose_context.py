"""The diagnosis context reads the run typed: its cells (with the code that ran), its totals, and the pairing
with another run of the notebook; the findings JSON carries the figures of the record as recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from diag_support import fired
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.diagnose._base import Context
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.schema.model import Cell, Totals

SETUP = ["import numpy as np", "def simulate(n):\n    return float(np.cumsum(np.ones(n)).sum())"]
ORIGINAL = "result = simulate(1_000)\nresult"
EDITED = "result = simulate(2_000)\nresult"
INSERTED = "print('a cell added before the edited one')"
LAST = "print('done')"
# Far below what the cold run's backend compiles on any machine: whether the rule fires depends on the cache.
LOW = {"cold-cache": {"min_backend_s": 0.01}}


def _write(path: Path, *sources: str) -> None:
    nbformat.write(new_notebook(cells=[new_code_cell(source) for source in sources]), path)


@pytest.fixture(scope="module")
def edited_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    """Two runs of one notebook file: as first written, then edited (one cell changed, one added before it)."""
    folder = tmp_path_factory.mktemp("edited")
    path = folder / "lecture.ipynb"
    runs = {}
    for name, sources in (("before", [*SETUP, ORIGINAL, LAST]), ("after", [*SETUP, INSERTED, EDITED, LAST])):
        _write(path, *sources)
        runs[name] = profile(
            path,
            ProfileOptions(jax_platform="cpu", cache_root=folder / "jax-cache"),
            live_path=folder / f"{name}.jsonl",
        )
    return runs


@pytest.mark.slow
def test_context_reads_typed_cells_and_their_code(edited_runs: dict[str, RunRecord]) -> None:
    before = edited_runs["before"]
    ctx = Context(before)
    assert all(isinstance(cell, Cell) for cell in ctx.run.cells) and isinstance(ctx.totals, Totals)
    assert not hasattr(ctx, "cells")  # no dict path beside the typed one
    cell = ctx.cell(2)
    assert cell is not None and cell.status == "ok" and ctx.ran(cell)
    # The file now holds the edited code: the context quotes the code this run ran, from its record.
    assert "simulate(2_000)" in Path(before.measurements["notebook"]["path"]).read_text()
    assert cell.source == ORIGINAL and ctx.source(cell) == ORIGINAL and ctx.sources_by_index[2] == ORIGINAL
    assert ctx.total_wall == pytest.approx(sum(c["wall_s"] for c in before.measurements["cells"]), abs=1e-6)
    assert ctx.cell(len(ctx.run.cells)) is None


@pytest.mark.slow
def test_other_cells_pair_the_edited_cell_with_the_code_each_run_ran(edited_runs: dict[str, RunRecord]) -> None:
    after, before = edited_runs["after"], edited_runs["before"]
    ctx = Context(after, other=before)
    paired = ctx.other_cells
    assert all(isinstance(cell, Cell) for cell in paired.values())
    # Unchanged cells pair with themselves; the edited cell (now cell 4) with the first run's cell 3, by its code,
    # across the cell added before it; the added cell has no pair.
    assert {index: cell.index for index, cell in paired.items()} == {0: 0, 1: 1, 3: 2, 4: 3}
    assert ctx.cell(3).source == EDITED and paired[3].source == ORIGINAL  # type: ignore[union-attr]
    assert paired[3].wall_s == before.measurements["cells"][2]["wall_s"]
    assert 2 not in paired and ctx.cell(2).source == INSERTED  # type: ignore[union-attr]
    assert Context(after).other_cells == {}


@pytest.fixture(scope="module")
def stored_cache_runs(profiled: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunRecord, RunRecord]:
    """The session's cold-then-warm pair of diag_cold_cache (test_diagnose_cold_cache.py reads it too), stored."""
    db = tmp_path_factory.mktemp("store") / "nbscope.db"
    store = Store(db)
    cold, warm = (store.get(store.save(profiled("diag_cold_cache", jax_cache=mode))) for mode in ("cold", "warm"))
    return db, cold, warm


@pytest.mark.slow
def test_findings_json_carries_the_records_figures_as_recorded(
    stored_cache_runs: tuple[Path, RunRecord, RunRecord], run_cli: Any
) -> None:
    db, cold, warm = stored_cache_runs
    document = diagnose(cold, other=warm, thresholds=LOW).to_dict()
    [finding] = [f for f in document["findings"] if f["rule"] == "cold-cache"]
    evidence, totals, warm_totals = finding["evidence"], cold.measurements["totals"], warm.measurements["totals"]
    # Read from the typed totals and settings, the figures are the document's own, of the same JSON types.
    for key in ("compile_s", "compiles", "cache_hits", "cache_state"):
        assert json.dumps(evidence[key]) == json.dumps(totals[key]), key
    assert evidence["jax_cache_setting"] == cold.settings["jax_cache"] == "cold"
    assert evidence["warm_run"] == warm.run_id and json.dumps(evidence["warm_cache_hits"]) == json.dumps(
        warm_totals["cache_hits"]
    )
    warm_backend = sum((c.get("jax") or {}).get("backend_s") or 0.0 for c in warm.measurements["cells"])
    assert evidence["warm_backend_compile_s"] == round(warm_backend, 4)
    assert finding["summary"].startswith(f"{totals['compiles']} compiles with the persistent cache cold")
    assert document["failed_cells"] == [] and document["cells_not_run"] == 0
    # `nbscope diagnose --json` prints exactly that document.
    done = run_cli(
        "diagnose",
        str(cold.run_id),
        "--other",
        str(warm.run_id),
        "--db",
        db,
        "--json",
        "--threshold",
        "cold-cache.min_backend_s=0.01",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(
        json.dumps({"run_id": cold.run_id, "target": cold.target, **document}, default=str)
    )


@pytest.mark.slow
def test_a_warm_run_of_another_notebook_is_not_the_measured_saving(
    stored_cache_runs: tuple[Path, RunRecord, RunRecord],
) -> None:
    _, cold, warm = stored_cache_runs
    elsewhere = RunRecord.from_dict({**warm.to_dict(), "target": "another/notebook.ipynb"})
    [finding] = fired(diagnose(cold, other=elsewhere, thresholds=LOW), "cold-cache")
    assert "upper bound" in finding.evidence["saving_is"] and "warm_run" not in finding.evidence
