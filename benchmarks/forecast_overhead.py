"""What ``nbscope profile --forecast`` costs: notebooks profiled with and without program data.

Two notebooks by default, side by side in one run: a cell that runs a small jitted function 1,000,000
times (``tests/files/forecast_million.md``: the case that grew a kernel to an OOM kill before the
trace was bounded) and the original investigation's lecture (``../shared/corpus/numpy_vs_numba_vs_jax.md``,
when present). Runs are interleaved (off, on, on, off, ...) so that a machine getting busier or quieter
weighs on both sides alike. Per notebook it prints:

* **cells**: the cells' wall time with program data over the same without (the kernel's whole request, so
  the probe's profiler session and HLO collection count), the median over pairs (each repeat is a pair, one
  run of each, one right after the other in alternating order), with a 90 % bootstrap interval of that
  median and whether it says the target is met, missed or not resolved by so many pairs;
* **longest cell**: the same ratio for the notebook's longest cell alone (the million calls; the issue's bound
  is per cell, and ``import jax`` beside it would dilute it), with its own interval and verdict;
* **thread**, **kernel**: the same ratio of the cell's thread's CPU time and of the kernel's (every
  thread's, the guard's included), from the probe's ``sched``: waiting for a CPU does not count;
* **each cell** of 0.1 s or more: the same ratio for that cell alone, with its interval, and how long the
  probe's collection after the cell took in the kernel (the trace's stop, the HLO, the lowering for the GPU);
* **elapsed**: the median end-to-end time of ``profile()``, which adds what nbscope does outside the
  kernel (reading traces and HLO, XLA's cost analysis, importing JAX once);
* **memory**: the largest per-cell peak of the kernel's memory (VmHWM, reset at each cell's start) with
  program data minus the same cell's without: what the kernel held more. Not the growth over the cell's
  start: after a session that recorded heavily the probe hands freed heap back to the system (malloc_trim),
  so with program data the next cell can start lower and grow more to the same peak (kesten_processes' cell
  16: +7,802 MB of growth, +6 MB of peak);
* **the run's peak**: the highest cell's peak, with and without program data, per pair (where waits move an
  earlier cell's asynchronous work into the cell that dispatched it, per-cell peaks move with it);
* **peak memory per cell**: the kernel's peak (VmHWM, reset at each cell's start) without and with program
  data, the difference (the issue's bound: at most 200 MB), its growth over the cell's start with minus
  without, whether each cell finished in every run, why its trace was cut when it was, and the peak with
  minus without in each pair (the bound holds per cell in every run, not on the median).

    python benchmarks/forecast_overhead.py [NOTEBOOK ...] [--repeats N] [--together] [--control] [--json OUT]

``--together`` runs each pair at the same time, one kernel with program data and one without, each in a
process of its own: on a machine whose speed drifts (a shared VM here moved a plain loop's time by ±20 % from
one second to the next) both sides of a pair then see the same moment, and the ratio is the median of the
pairs' ratios. It needs two free cores; the two kernels share the machine's memory bandwidth alike.

``--control`` runs both sides of every pair without program data: the ratios and intervals it prints are
what the method gives on this machine when nothing differs, so a figure within them is noise, not cost.

Targets (issue 24): cells ratio ≤ 1.05, memory added ≤ 200 MB.
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
MILLION = ROOT / "tests" / "files" / "forecast_million.md"


def _profile(path: Path, programs: bool) -> dict[str, Any]:
    from nbscope.api.profile import ProfileOptions, profile

    started = time.perf_counter()
    record = profile(path, ProfileOptions(programs=programs, jax_platform="cpu"), fingerprint={"digest": "bench"})
    return {"record": record.to_dict(), "elapsed_s": time.perf_counter() - started}


def _profile_pair(path: Path, *, control: bool = False) -> dict[bool, dict[str, Any]]:
    """One profile with program data and one without (``control``: both without), run at the same time in
    processes of their own."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nbscope-overhead-") as folder:
        outputs = {programs: Path(folder) / f"{programs}.json" for programs in (False, True)}
        children = {
            programs: subprocess.Popen(
                [sys.executable, __file__, "--child", str(path), "on" if programs and not control else "off", str(out)],
                stdout=subprocess.DEVNULL,
            )
            for programs, out in outputs.items()
        }
        for programs, child in children.items():
            if child.wait() != 0:
                raise SystemExit(f"the profile with forecast={'on' if programs else 'off'} failed")
        return {programs: json.loads(out.read_text()) for programs, out in outputs.items()}


def _median(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None


def _interval(ratios: list[float], *, resamples: int = 2000, seed: int = 24) -> tuple[float, float] | None:
    """A 90 % bootstrap interval of the median of the pairs' ratios (seeded, so one run prints one answer):
    on a machine this noisy, whether the target is met, missed or not resolved by so many pairs."""
    import random

    if len(ratios) < 3:
        return None
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return medians[int(0.05 * resamples)], medians[int(0.95 * resamples) - 1]


def _verdict(interval: tuple[float, float] | None, target: float = 1.05) -> str:
    if interval is None:
        return "too few pairs"
    low, high = interval
    return "met" if high <= target else "not met" if low > target else "not resolved by these pairs"


def _growth(cell: dict[str, Any]) -> float | None:
    rss = cell.get("rss") or {}
    peak, before = rss.get("peak_bytes"), rss.get("before_bytes")
    return peak - before if isinstance(peak, int) and isinstance(before, int) else None


def _peak(cell: dict[str, Any]) -> int | None:
    """The kernel's peak resident memory in the cell (VmHWM, reset at its start where Linux allows)."""
    peak = (cell.get("rss") or {}).get("peak_bytes")
    return peak if isinstance(peak, int) else None


def _run_peak(run: dict[str, Any]) -> int | None:
    """The kernel's peak over the whole run: the highest of its cells' peaks."""
    peaks = [peak for peak in map(_peak, run["record"]["measurements"]["cells"]) if peak is not None]
    return max(peaks) if peaks else None


def _megabytes(value: float | None, *, sign: bool = False) -> str:
    return "–" if value is None else f"{value / 1e6:+.0f} MB" if sign else f"{value / 1e6:.0f} MB"


def _cells_wall(run: dict[str, Any]) -> float:
    return sum(c.get("wall_s") or 0.0 for c in run["record"]["measurements"]["cells"])


def _longest_cell(off: dict[str, Any], on: dict[str, Any]) -> tuple[float | None, float | None]:
    """The wall time of the run's longest cell (as run without program data) on each side: the issue's bound
    is per cell, and a notebook's other cells (``import jax``) would dilute it."""
    cells_off, cells_on = off["record"]["measurements"]["cells"], on["record"]["measurements"]["cells"]
    if not cells_off or len(cells_off) != len(cells_on):
        return None, None
    longest = max(range(len(cells_off)), key=lambda i: cells_off[i].get("wall_s") or 0.0)
    return cells_off[longest].get("wall_s"), cells_on[longest].get("wall_s")


def _cells_cpu(run: dict[str, Any], figure: str) -> float | None:
    """The cells' CPU seconds from the probe's ``sched``: ``on_cpu_s`` (the cell's thread) or ``cpu_s``
    (every thread of the kernel, the guard's included); None without /proc."""
    values = [(c.get("sched") or {}).get(figure) for c in run["record"]["measurements"]["cells"]]
    numbers = [v for v in values if isinstance(v, (int, float))]
    return sum(numbers) if numbers else None


def _collection_s(cell: dict[str, Any]) -> float:
    """How long the probe's collection after the cell took in the kernel (trace stop, HLO, GPU lowering):
    the cell's ``collection_s``, or for a record older than it the sum of its ``programs.collect_s``."""
    if isinstance(cell.get("collection_s"), (int, float)):
        return float(cell["collection_s"])
    spent = (cell.get("programs") or {}).get("collect_s") or {}
    return sum(v for v in spent.values() if isinstance(v, (int, float)))


def _interval_text(interval: tuple[float, float] | None) -> str:
    return f"{interval[0]:.3f}–{interval[1]:.3f}" if interval else "–"


def _pair_ratio(off: float | None, on: float | None) -> float | None:
    return on / off if isinstance(off, (int, float)) and isinstance(on, (int, float)) and off > 0 else None


def measure(notebook: Path, repeats: int, *, together: bool = False, control: bool = False) -> dict[str, Any]:
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    # Each repeat is a pair, one run with program data and one without, run together or one after the other:
    # the ratios are the medians of the pairs' (wall time, the cell's thread's CPU time, the kernel's).
    pairs: dict[str, list[float]] = {"wall": [], "longest_cell": [], "thread_cpu": [], "kernel_cpu": []}
    per_cell_pairs: dict[int, list[float]] = {}
    for index in range(repeats):
        if together:
            pair = _profile_pair(notebook, control=control)
            for programs, run in pair.items():
                runs[programs].append(run)
        else:
            order = (False, True) if index % 2 == 0 else (True, False)
            pair = {}
            for programs in order:
                pair[programs] = run = _profile(notebook, programs and not control)
                runs[programs].append(run)
                print(
                    f"{notebook.name}: run {index + 1}/{repeats} forecast={'on ' if programs else 'off'} "
                    f"{run['elapsed_s']:.1f} s ({run['record']['status']})",
                    file=sys.stderr,
                )
        figures = {
            "wall": _pair_ratio(_cells_wall(pair[False]), _cells_wall(pair[True])),
            "longest_cell": _pair_ratio(*_longest_cell(pair[False], pair[True])),
            "thread_cpu": _pair_ratio(_cells_cpu(pair[False], "on_cpu_s"), _cells_cpu(pair[True], "on_cpu_s")),
            "kernel_cpu": _pair_ratio(_cells_cpu(pair[False], "cpu_s"), _cells_cpu(pair[True], "cpu_s")),
        }
        for name, value in figures.items():
            if value is not None:
                pairs[name].append(value)
        for cell_index, (cell_off, cell_on) in enumerate(
            zip(
                pair[False]["record"]["measurements"]["cells"],
                pair[True]["record"]["measurements"]["cells"],
                strict=False,
            )
        ):
            ratio = _pair_ratio(cell_off.get("wall_s"), cell_on.get("wall_s"))
            if ratio is not None:
                per_cell_pairs.setdefault(cell_index, []).append(ratio)
        print(
            f"{notebook.name}: pair {index + 1}/{repeats}: cells {_cells_wall(pair[False]):.2f} s off, "
            f"{_cells_wall(pair[True]):.2f} s on; ratios "
            + ", ".join(f"{name} ×{value:.3f}" for name, value in figures.items() if value is not None),
            file=sys.stderr,
        )

    def per_cell(programs: bool, figure: Any) -> list[float | None]:
        columns = [r["record"]["measurements"]["cells"] for r in runs[programs]]
        return [_median([figure(cells[i]) for cells in columns]) for i in range(len(columns[0]))]

    off, on = per_cell(False, lambda c: c.get("wall_s")), per_cell(True, lambda c: c.get("wall_s"))
    grow_off, grow_on = per_cell(False, _growth), per_cell(True, _growth)
    sum_off = sum(v for v in off if v is not None)
    sum_on = sum(v for v in on if v is not None)
    elapsed_off = _median([r["elapsed_s"] for r in runs[False]]) or 0.0
    elapsed_on = _median([r["elapsed_s"] for r in runs[True]]) or 0.0
    in_kernel = sum(_collection_s(c) for r in runs[True] for c in r["record"]["measurements"]["cells"]) / len(
        runs[True]
    )
    cells = []
    for index, ratios in sorted(per_cell_pairs.items()):
        if (off[index] or 0.0) < 0.1:
            continue
        spent = [_collection_s(r["record"]["measurements"]["cells"][index]) for r in runs[True]]
        cells.append(
            {
                "index": index,
                "line": runs[False][0]["record"]["measurements"]["cells"][index].get("line"),
                "off_s": off[index],
                "on_s": on[index],
                "ratio": _median(ratios),
                "interval": _interval(ratios),
                "collection_s": _median(spent),
            }
        )
    cut = sum(
        1 for r in runs[True] for c in r["record"]["measurements"]["cells"] if (c.get("programs") or {}).get("window")
    )
    peak_off, peak_on = per_cell(False, _peak), per_cell(True, _peak)
    added = [b - a for a, b in zip(peak_off, peak_on, strict=True) if a is not None and b is not None]
    memory = []
    for index, cell in enumerate(runs[False][0]["record"]["measurements"]["cells"]):
        reasons = sorted(
            {
                str(((c.get("programs") or {}).get("window") or {}).get("reason") or "cut")
                for c in (r["record"]["measurements"]["cells"][index] for r in runs[True])
                if (c.get("programs") or {}).get("window")
            }
        )
        statuses = sorted(
            {
                r["record"]["measurements"]["cells"][index].get("status") or "?"
                for side in (False, True)
                for r in runs[side]
            }
        )
        # The bound holds per cell in every run, not on the median: each pair's peak with minus without.
        each_pair = [
            None if a is None or b is None else b - a
            for a, b in (
                (
                    _peak(off_run["record"]["measurements"]["cells"][index]),
                    _peak(on_run["record"]["measurements"]["cells"][index]),
                )
                for off_run, on_run in zip(runs[False], runs[True], strict=False)
            )
        ]
        memory.append(
            {
                "index": index,
                "line": cell.get("line"),
                "peak_off_bytes": peak_off[index],
                "peak_on_bytes": peak_on[index],
                "growth_off_bytes": grow_off[index],
                "growth_on_bytes": grow_on[index],
                "statuses": statuses,
                "cut": reasons,
                "added_each_pair_bytes": each_pair,
            }
        )
    # The run's peak, the highest of its cells': where --forecast's waits moved an earlier cell's asynchronous
    # work into the cell that dispatched it (docs/forecast.md), that cell's peak rises by what the run without
    # allocated in a later cell, and the later cell's falls; the kernel's own peak compares like for like.
    run_peaks = [
        (_run_peak(off_run), _run_peak(on_run)) for off_run, on_run in zip(runs[False], runs[True], strict=False)
    ]
    return {
        "notebook": str(notebook),
        "repeats": repeats,
        "control": control,
        "cells_off_s": sum_off,
        "cells_on_s": sum_on,
        "run_peak_each_pair_bytes": run_peaks,
        "cells_ratio": _median(pairs["wall"]),
        "pair_ratios": pairs["wall"] or None,
        "cells_ratio_interval": _interval(pairs["wall"]),
        "longest_cell_ratio": _median(pairs["longest_cell"]),
        "longest_cell_pair_ratios": pairs["longest_cell"] or None,
        "longest_cell_ratio_interval": _interval(pairs["longest_cell"]),
        "thread_cpu_ratio": _median(pairs["thread_cpu"]),
        "kernel_cpu_ratio": _median(pairs["kernel_cpu"]),
        "thread_cpu_pair_ratios": pairs["thread_cpu"] or None,
        "kernel_cpu_pair_ratios": pairs["kernel_cpu"] or None,
        "elapsed_off_s": elapsed_off,
        "elapsed_on_s": elapsed_on,
        "elapsed_ratio": elapsed_on / elapsed_off if elapsed_off else None,
        "memory_added_bytes": max(added) if added else None,
        "in_kernel_collection_s": in_kernel,
        "traces_cut": cut / len(runs[True]),
        "cells": cells,
        "memory": memory,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one side of a --together pair: profile, write the run where told
        notebook, programs, out = argv[1:4]
        Path(out).write_text(json.dumps(_profile(Path(notebook), programs == "on")))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind per notebook (default 3)")
    parser.add_argument(
        "--together",
        action="store_true",
        help="run each pair at the same time (ratio: the median of the pairs'; needs two free cores)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="both sides of every pair without program data: what the method gives when nothing differs",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or [MILLION] + ([CORPUS] if CORPUS.exists() else [])
    results = [measure(path, args.repeats, together=args.together, control=args.control) for path in notebooks]
    if args.control:
        print('control: both sides of every pair ran without program data ("on" below is a second run without)')
    print(
        f"{'notebook':<28} {'cells off':>10} {'cells on':>10} {'ratio':>7} {'thread':>7} {'kernel':>7} "
        f"{'elapsed':>8} {'memory +':>10} {'cut':>4} {'in kernel':>10}"
    )
    for figures in results:
        memory = figures["memory_added_bytes"]
        print(
            f"{Path(figures['notebook']).name[:28]:<28} {figures['cells_off_s']:>9.2f}s {figures['cells_on_s']:>9.2f}s "
            f"{figures['cells_ratio'] or 0:>7.3f} {figures['thread_cpu_ratio'] or 0:>7.3f} "
            f"{figures['kernel_cpu_ratio'] or 0:>7.3f} {figures['elapsed_ratio'] or 0:>8.3f} "
            f"{'–' if memory is None else f'{memory / 1e6:.0f} MB':>10} {figures['traces_cut']:>4.0f} "
            f"{figures['in_kernel_collection_s'] * 1e3:>8.0f}ms"
        )
    for figures in results:
        for label, prefix, pairs in (
            ("cells", "cells", "pair_ratios"),
            ("longest cell", "longest_cell", "longest_cell_pair_ratios"),
        ):
            interval = figures[f"{prefix}_ratio_interval"]
            print(
                f"{Path(figures['notebook']).name}: {label} ratio {figures[f'{prefix}_ratio'] or 0:.3f}, 90 % interval "
                + _interval_text(interval)
                + f" over {len(figures[pairs] or [])} pairs: ≤ 1.05 {_verdict(interval)}"
            )
        for cell in figures["cells"]:
            interval = cell["interval"]
            print(
                f"{Path(figures['notebook']).name}: cell {cell['index'] + 1} (line {cell['line'] or '?'}): "
                f"{cell['off_s']:.2f} s off, {cell['on_s']:.2f} s on, ratio {cell['ratio'] or 0:.3f}, 90 % interval "
                + _interval_text(interval)
                + f"; collection after it in the kernel {(cell['collection_s'] or 0) * 1e3:.0f} ms"
            )
        name = Path(figures["notebook"]).name
        for row in figures["memory"]:
            off, on, grow_off, grow_on = (
                row[k] for k in ("peak_off_bytes", "peak_on_bytes", "growth_off_bytes", "growth_on_bytes")
            )
            added = on - off if on is not None and off is not None else None
            grown = grow_on - grow_off if grow_on is not None and grow_off is not None else None
            print(
                f"{name}: cell {row['index'] + 1} (line {row['line'] or '?'}): peak (VmHWM) {_megabytes(off)} off, "
                f"{_megabytes(on)} on ({_megabytes(added, sign=True)}"
                f"{', over 200 MB' if added is not None and added > 200e6 else ''}); "
                f"growth over the cell's start {_megabytes(grown, sign=True)} with program data; "
                f"status {'/'.join(row['statuses'])}"
                + (f"; trace cut: {', '.join(row['cut'])}" if row["cut"] else "")
                + "; peak with minus without, each pair "
                + ", ".join(_megabytes(added, sign=True) for added in row["added_each_pair_bytes"])
            )
        print(
            f"{name}: the run's peak (its highest cell's), each pair: "
            + ", ".join(
                f"{_megabytes(off)} off, {_megabytes(on)} on "
                f"({_megabytes(on - off if on is not None and off is not None else None, sign=True)})"
                for off, on in figures["run_peak_each_pair_bytes"]
            )
        )
        for label, key in (
            ("wall", "pair_ratios"),
            ("longest cell", "longest_cell_pair_ratios"),
            ("thread CPU", "thread_cpu_pair_ratios"),
            ("kernel CPU", "kernel_cpu_pair_ratios"),
        ):
            if figures[key]:
                print(
                    f"{Path(figures['notebook']).name}: each pair's {label} ratio "
                    + ", ".join(f"{r:.3f}" for r in figures[key])
                )
    print(
        "targets: cells ratio ≤ 1.05, memory added ≤ 200 MB (ratio: the median over pairs of the cells' wall time "
        "with program data over without; thread, kernel: the same of the cell's thread's CPU time and of the "
        "kernel's, every thread; memory: the largest per-cell peak (VmHWM) with minus without; cut: cells whose "
        "trace was cut: its memory budget, a flood of events, or its parts)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
