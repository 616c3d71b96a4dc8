"""What the in-kernel probe costs: plain nbclient vs `nbscope profile`, interleaved in one run.

For each notebook the two runners alternate (A B A B ...) so drifting machine load hits both alike.
Compared figure: the sum of per-cell busy→idle times that nbclient records (the kernel's own clock),
which is what the probe can change; kernel start and shutdown are the same code in both runners.

    python benchmarks/probe_overhead.py [--rounds 5] [--lecture PATH]

Targets (issue B): ≤ 2 % on the lecture, ≤ 0.5 ms per cell on the 200-cell trivial notebook.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from nbscope.collect.notebook import read
from nbscope.collect.runner import ExecutionOptions, execute

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LECTURE = ROOT.parent / "shared" / "corpus" / "numpy_vs_numba_vs_jax.md"


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def busy_idle_total(nb: nbformat.NotebookNode) -> float:
    total = 0.0
    for cell in nb.cells:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.status.busy" in timing and "iopub.status.idle" in timing:
            total += _stamp(timing["iopub.status.idle"]) - _stamp(timing["iopub.status.busy"])
    return total


def run_plain(path: Path) -> float:
    notebook = read(path)
    client = NotebookClient(
        notebook.nb,
        kernel_name=notebook.kernel_name,
        allow_errors=True,
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return busy_idle_total(notebook.nb)


def run_probed(path: Path) -> float:
    execution = execute(read(path), ExecutionOptions())
    return busy_idle_total(execution.executed_nb)


def trivial_notebook(folder: Path, cells: int = 200) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"x{i} = {i}") for i in range(cells)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "trivial200.ipynb"
    nbformat.write(nb, path)
    return path


def measure(path: Path, rounds: int) -> tuple[list[float], list[float], int]:
    plain, probed = [], []
    for round_number in range(rounds):
        # Alternate which runner goes first so neither always runs on a warmer machine.
        order = (run_plain, run_probed) if round_number % 2 == 0 else (run_probed, run_plain)
        for runner in order:
            (plain if runner is run_plain else probed).append(runner(path))
    return plain, probed, len(read(path).code_cells)


def report(name: str, plain: list[float], probed: list[float], cells: int) -> None:
    p, q = statistics.median(plain), statistics.median(probed)
    print(f"{name}: {cells} code cells, {len(plain)} rounds each")
    print(f"  plain nbclient  busy→idle total: median {p:.4f} s  (all: {', '.join(f'{v:.3f}' for v in plain)})")
    print(f"  nbscope profile busy→idle total: median {q:.4f} s  (all: {', '.join(f'{v:.3f}' for v in probed)})")
    print(f"  ratio probed/plain (medians): {q / p:.4f}  ({(q / p - 1) * 100:+.2f} %)")
    print(f"  added per cell (medians): {(q - p) / cells * 1e3:+.3f} ms")
    # Under background load the minimum is the steadier estimate of each runner's own cost.
    lo_p, lo_q = min(plain), min(probed)
    print(
        f"  ratio probed/plain (minimums): {lo_q / lo_p:.4f}  ({(lo_q / lo_p - 1) * 100:+.2f} %), "
        f"added per cell {(lo_q - lo_p) / cells * 1e3:+.3f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lecture-rounds", type=int, default=3)
    parser.add_argument("--lecture", type=Path, default=DEFAULT_LECTURE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = trivial_notebook(Path(folder))
        report("trivial 200-cell notebook", *measure(path, args.rounds))
    if args.lecture.exists():
        report(args.lecture.name, *measure(args.lecture, args.lecture_rounds))
    else:
        print(f"lecture {args.lecture} not found: skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
