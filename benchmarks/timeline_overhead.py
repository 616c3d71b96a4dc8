"""What ``nbscope profile --timeline`` costs: the same notebook profiled with and without it.

Runs are interleaved (off, on, on, off, off, on, ...) so that a machine getting busier or quieter over
the run weighs on both sides alike. Prints, per cell, the median wall time without and with the
timeline and the difference in ms, then the totals and their ratio. ``wall`` is the kernel's whole
request (what the ledger shows; it includes writing the cell's trace), ``code`` the cell's code alone.

    python benchmarks/timeline_overhead.py [NOTEBOOK] [--repeats N] [--json OUT]

Default notebook: the original investigation's lecture (``../shared/corpus/numpy_vs_numba_vs_jax.md``)
when present, else ``tests/files/timeline_tiny.ipynb``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "numpy_vs_numba_vs_jax.md"
FALLBACK = ROOT / "tests" / "files" / "timeline_tiny.ipynb"


def _profile(path: Path, timeline: bool) -> dict[str, Any]:
    from nbscope.api.profile import ProfileOptions, profile

    started = time.perf_counter()
    record = profile(path, ProfileOptions(timeline=timeline), fingerprint={"digest": "bench"})
    return {"record": record.to_dict(), "elapsed_s": time.perf_counter() - started}


def _median(values: list[float | None]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, default=CORPUS if CORPUS.exists() else FALLBACK)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each kind (default 2)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for index in range(args.repeats):
        order = (False, True) if index % 2 == 0 else (True, False)
        for timeline in order:
            run = _profile(args.notebook, timeline)
            runs[timeline].append(run)
            status = run["record"]["status"]
            print(
                f"run {index + 1}/{args.repeats} timeline={'on ' if timeline else 'off'} "
                f"{run['elapsed_s']:.1f} s ({status})",
                file=sys.stderr,
            )

    cells_off = [r["record"]["measurements"]["cells"] for r in runs[False]]
    cells_on = [r["record"]["measurements"]["cells"] for r in runs[True]]
    rows = []
    for position, cell in enumerate(cells_on[0]):
        row = {
            "index": cell["index"],
            "first_line": cell.get("first_line", "")[:40],
            "wall_off_s": _median([c[position].get("wall_s") for c in cells_off]),
            "wall_on_s": _median([c[position].get("wall_s") for c in cells_on]),
            "code_off_s": _median([c[position].get("code_s") for c in cells_off]),
            "code_on_s": _median([c[position].get("code_s") for c in cells_on]),
            "stop_s": _median([(c[position].get("timeline") or {}).get("stop_s") for c in cells_on]),
            "events": _median([(c[position].get("timeline") or {}).get("events") for c in cells_on]),
            "classification": (cell.get("timeline") or {}).get("classification"),
        }
        rows.append(row)

    def total(key: str) -> float:
        return sum(r[key] for r in rows if isinstance(r[key], (int, float)))

    print(f"\nnotebook: {args.notebook}  ({args.repeats} runs each, medians)")
    print(
        f"{'#':>3} {'wall off':>10} {'wall on':>10} {'Δ ms':>9} {'code Δ ms':>10} {'trace write':>12} "
        f"{'events':>8}  class / source"
    )
    for row in rows:
        delta = (row["wall_on_s"] or 0) - (row["wall_off_s"] or 0)
        code_delta = (row["code_on_s"] or 0) - (row["code_off_s"] or 0)
        stop = f"{row['stop_s'] * 1e3:.1f} ms" if row["stop_s"] is not None else "–"
        events = f"{row['events']:.0f}" if row["events"] is not None else "–"
        print(
            f"{row['index'] + 1:>3} {(row['wall_off_s'] or 0) * 1e3:>8.1f}ms {(row['wall_on_s'] or 0) * 1e3:>8.1f}ms "
            f"{delta * 1e3:>9.1f} {code_delta * 1e3:>10.1f} {stop:>12} {events:>8}  "
            f"{row['classification'] or '-'} · {row['first_line']}"
        )
    wall_off, wall_on = total("wall_off_s"), total("wall_on_s")
    code_off, code_on = total("code_off_s"), total("code_on_s")
    traced = [r for r in rows if r["stop_s"] is not None]
    elapsed_off = _median([r["elapsed_s"] for r in runs[False]]) or 0.0
    elapsed_on = _median([r["elapsed_s"] for r in runs[True]]) or 0.0
    summary = {
        "notebook": str(args.notebook),
        "repeats": args.repeats,
        "cells": len(rows),
        "traced_cells": len(traced),
        "wall_off_s": wall_off,
        "wall_on_s": wall_on,
        "wall_ratio": wall_on / wall_off if wall_off else None,
        "code_ratio": code_on / code_off if code_off else None,
        # Untraced cells (before `import jax`) differ only by noise: leave them out of the per-cell cost.
        "ms_per_traced_cell": sum((r["wall_on_s"] or 0) - (r["wall_off_s"] or 0) for r in traced) / len(traced) * 1e3
        if traced
        else None,
        "median_trace_write_ms": (_median([r["stop_s"] for r in traced]) or 0.0) * 1e3 if traced else None,
        "elapsed_off_s": elapsed_off,
        "elapsed_on_s": elapsed_on,
        "rows": rows,
    }
    print(
        f"\ncells' wall: {wall_off:.2f} s without, {wall_on:.2f} s with --timeline "
        f"(×{summary['wall_ratio']:.3f}); cells' code alone ×{summary['code_ratio']:.3f}"
    )
    if traced:
        print(
            f"{len(traced)} traced cells: +{summary['ms_per_traced_cell']:.1f} ms each on average, "
            f"median trace write {summary['median_trace_write_ms']:.1f} ms"
        )
    print(f"whole profile (kernel start to shutdown, summarising included): {elapsed_off:.1f} s → {elapsed_on:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
