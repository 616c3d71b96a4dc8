"""``nbscope bench --pathway``: the bench suite's workloads through the pathways.

The suite's groups become the cells of a generated notebook (one cell per group and dtype, each
calling the suite's own ``run_group``), which then runs through each pathway like any notebook. Each
cell also appends its figures to a file named by ``NBSCOPE_BENCH_OUT`` (one file per pathway and
repeat), so besides the cells' walls the record pairs every steady-state figure across pathways.

Unlike ``nbscope bench``, which gives every group a fresh process, the groups here share the one
process of the pathway, as the cells of a notebook do; the comparison is between pathways.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from nbscope.analyse.pathways import REL_TOL
from nbscope.api.pathways import DEFAULT_VIA, ProgressCallback, pathways_until_stopped
from nbscope.api.runs import store_then_stop
from nbscope.record.run import RunRecord
from nbscope.schema.codec import decode, encode
from nbscope.schema.pathways import BenchFigure, FigureEntry
from nbscope.schema.suite import BenchGroup, GroupFigure

if TYPE_CHECKING:
    import nbformat
    from nbformat import NotebookNode

    from nbscope.record.store import Store

OUT_VARIABLE = "NBSCOPE_BENCH_OUT"
MAD_FACTOR = 3.0

SETUP = """# nbscope bench through pathways: each cell runs one group of the suite in this process
import json
import os

from nbscope.collect.bench._worker import run_group


def _nbscope_default(value):
    return value.item() if hasattr(value, "item") else str(value)


def _nbscope_bench(group, dtype, size):
    result = run_group(group, dtype, size)
    out = os.environ.get("{out}")
    if out:
        keep = {{"group": group, "dtype": dtype, "status": result["status"], "reason": result.get("reason"),
                "figures": result["figures"]}}
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(keep, default=_nbscope_default) + "\\n")
    print(f"{{group}} ({{dtype}}): {{result['status']}}, {{len(result['figures'])}} figures", result.get("reason") or "")
"""


def bench_notebook(groups: list[str], dtypes: list[str], size: str) -> nbformat.NotebookNode:
    """A notebook whose cells are the suite's workloads, one group and dtype per cell."""
    from nbscope.collect.bench._config import dtypes_for
    from nbscope.collect.notebook import import_nbformat

    nbformat = import_nbformat()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(f"# nbscope bench workloads ({size})"))
    nb.cells.append(nbformat.v4.new_code_cell(SETUP.format(out=OUT_VARIABLE)))
    for group in groups:
        for dtype in dtypes_for(group, dtypes):
            nb.cells.append(nbformat.v4.new_code_cell(f"_nbscope_bench({group!r}, {dtype!r}, {size!r})"))
    return cast("NotebookNode", nb)


def run_bench_pathways(
    *,
    via: str | Iterable[str] | None = DEFAULT_VIA,
    only: Iterable[str] | None = None,
    dtype: str = "float32",
    size: str = "default",
    jax_platform: str | None = None,
    repeat: int = 1,
    store: Store | None = None,
    progress: ProgressCallback | None = None,
    fingerprint: dict[str, object] | None = None,
    label: str | None = None,
) -> RunRecord:
    """Run the suite's workloads through each pathway; a ``pathways`` record with bench ``figures``, labelled
    ``label``."""
    from nbscope.collect.bench._config import TIMEOUTS_S, parse_dtypes, parse_groups, parse_size
    from nbscope.collect.notebook import import_nbformat

    groups, dtypes, size = parse_groups(only), parse_dtypes(dtype), parse_size(size)
    with tempfile.TemporaryDirectory(prefix="nbscope-bench-pathways-") as tmp:
        folder = Path(tmp)
        path = folder / "nbscope_bench.ipynb"
        import_nbformat().write(bench_notebook(groups, dtypes, size), path)
        outputs = folder / "figures"
        outputs.mkdir()

        def env_hook(name: str, number: int) -> dict[str, str]:
            return {OUT_VARIABLE: str(outputs / f"{name}-{number}.jsonl")}

        record, run, interrupted = pathways_until_stopped(
            path,
            via,
            repeat,
            timeout=TIMEOUTS_S[size],
            jax_platform=jax_platform,
            fingerprint=fingerprint,
            progress=progress,
            env_hook=env_hook,
            target=f"bench:{size}",
            label=label,
        )
        record.settings.update(size=size, dtype=dtype, only=groups if only else None)
        figures = pair_figures(outputs, list(run.pathways))
    totals = replace(run.totals, figures=len(figures), figures_differing=sum(1 for f in figures if f.differs))
    record.measurements = encode(
        replace(run, totals=totals, figures=tuple(figures), verdict=figures_verdict(figures, run.verdict))
    )
    store_then_stop(record, store, interrupted)  # an interrupted run is saved with the figures so far
    return record


def _read(path: Path) -> list[dict[str, object]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def pair_figures(outputs: Path, names: list[str]) -> list[BenchFigure]:
    """Each figure's steady median (and first call) per pathway, medians over repeats."""
    values: dict[str, dict[str, list[tuple[float, float, float | None]]]] = {}
    labels: dict[str, GroupFigure] = {}
    for name in names:
        for path in sorted(outputs.glob(f"{name}-*.jsonl")):
            for group in _read(path):
                for figure in decode(BenchGroup, group).figures:
                    value = figure.reported()
                    if value is None:
                        continue
                    first = figure.first.wall_s if figure.first is not None else None
                    values.setdefault(str(figure.key), {}).setdefault(name, []).append((*value, first))
                    labels.setdefault(str(figure.key), figure)
    return [_paired(key, labels[key], by_name) for key, by_name in values.items()]


def _paired(key: str, figure: GroupFigure, by_name: dict[str, list[tuple[float, float, float | None]]]) -> BenchFigure:
    """One figure through the pathways: medians over repeats, and whether they differ beyond noise."""
    by_pathway: dict[str, FigureEntry] = {}
    for name, samples in by_name.items():
        medians = [s[0] for s in samples]
        firsts = [s[2] for s in samples if isinstance(s[2], (int, float))]
        by_pathway[name] = FigureEntry(
            median_s=statistics.median(medians),
            spread=max(s[1] for s in samples),
            first_s=statistics.median(firsts) if firsts else None,
            samples=tuple(medians) if len(medians) > 1 else None,
        )
    ratio: float | None = 1.0
    differs, slowest = False, None
    if len(by_pathway) >= 2:
        centres = {n: e.median_s for n, e in by_pathway.items() if e.median_s is not None}
        low, high = min(centres.values()), max(centres.values())
        tolerance = max(REL_TOL, MAD_FACTOR * max(e.spread or 0.0 for e in by_pathway.values()))
        ratio = high / low if low > 0 else None
        differs = low > 0 and (high - low) / low > tolerance
        slowest = max(centres, key=centres.__getitem__)
    return BenchFigure(
        key=key,
        label=figure.label,
        group=figure.group,
        dtype=figure.dtype,
        by_pathway=by_pathway,
        differs=differs,
        ratio=ratio,
        slowest=slowest,
    )


def figures_verdict(figures: list[BenchFigure], cells_verdict: str) -> str:
    compared = [f for f in figures if len(f.by_pathway) >= 2]
    if not compared:
        return cells_verdict
    differing = sorted((f for f in compared if f.differs), key=lambda f: -(f.ratio or 0))
    if not differing:
        return f"bench figures agree within noise across pathways ({len(compared)} figures); {cells_verdict}"
    shown = ", ".join(f"{f.label or f.key} ×{f.ratio or 0:.2f} slower in {f.slowest}" for f in differing[:3])
    return f"{len(differing)} of {len(compared)} bench figures differ beyond noise ({shown}); {cells_verdict}"
