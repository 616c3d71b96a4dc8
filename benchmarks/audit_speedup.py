"""Speed-up of ``nbscope audit --workers N`` over ``--workers 1`` on a book of small notebooks.

    python benchmarks/audit_speedup.py [BOOK] [--workers 2] [--rounds 2] [--json]

Each round audits the whole book once with one worker and once with N (order alternating between
rounds, so a drift in machine load does not favour one side), each into a fresh store so nothing is
reused. The figure is the ratio of the median audit wall times. The default book
(tests/files/audit_book) has notebooks of 1-3 s of work that leave a core free (sleeps mixed with
small NumPy/JAX/Numba work), the case where parallel runs should approach N× on N cores; notebooks that
saturate every core on their own cannot gain, and their timings would suffer from running side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nbscope.api.audit import AuditOptions, audit
from nbscope.record.store import Store

DEFAULT_BOOK = Path(__file__).resolve().parents[1] / "tests" / "files" / "audit_book"


def one_audit(book: Path, workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="nbscope-audit-bench-") as folder:
        store = Store(Path(folder) / "nbscope.db")
        load = os.getloadavg()[0]
        started = time.perf_counter()
        record = audit(book, AuditOptions(workers=workers, force=True), store=store)
        wall = time.perf_counter() - started
    totals = record.measurements["totals"]
    if totals["failed"] or totals["runs"] != totals["notebooks"]:
        raise SystemExit(f"audit with --workers {workers} did not profile every notebook: {totals}")
    return {"workers": workers, "wall_s": wall, "notebook_wall_s": totals["cpu_s"], "load_before": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("book", nargs="?", type=Path, default=DEFAULT_BOOK)
    parser.add_argument("--workers", type=int, default=2, help="parallel workers compared with one (default 2)")
    parser.add_argument("--rounds", type=int, default=2, help="audits per setting (default 2)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    runs: dict[int, list[dict[str, float]]] = {1: [], args.workers: []}
    for round_index in range(args.rounds):
        order = (1, args.workers) if round_index % 2 == 0 else (args.workers, 1)
        for workers in order:
            result = one_audit(args.book, workers)
            runs[workers].append(result)
            print(
                f"round {round_index + 1}: --workers {workers}: {result['wall_s']:.1f} s "
                f"(notebooks' own wall {result['notebook_wall_s']:.1f} s, load {result['load_before']:.1f})",
                file=sys.stderr,
            )
    serial = statistics.median(r["wall_s"] for r in runs[1])
    parallel = statistics.median(r["wall_s"] for r in runs[args.workers])
    figures = {
        "book": str(args.book),
        "cores": os.cpu_count(),
        "workers": args.workers,
        "rounds": args.rounds,
        "serial_wall_s": serial,
        "parallel_wall_s": parallel,
        "speedup": serial / parallel,
        "runs": runs,
    }
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(
            f"--workers 1: {serial:.1f} s · --workers {args.workers}: {parallel:.1f} s · "
            f"speed-up {serial / parallel:.2f}× on {os.cpu_count()} cores (median of {args.rounds})"
        )


if __name__ == "__main__":
    main()
