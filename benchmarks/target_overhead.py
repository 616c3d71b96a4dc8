"""What keeping each program for the TPU costs the kernel, and what compiling a notebook for the TPU costs here.

Per notebook (default: the corpus lectures), profiles with program data are run in pairs, one with the kernel
keeping each compiled program's module for the target and one without (``NBSCOPE_PROBE_TARGET=0``), one right
after the other in alternating order, so that a machine getting busier weighs on both sides alike. It prints:

* **cells**: the cells' wall time kept over not kept, the median over pairs, with its spread (the issue's bound:
  at most +5 %);
* **programs**: how many the run compiled, and how many the kernel kept for the target;
* **memory**: the largest per-cell peak of the kernel (VmHWM) kept minus not kept (issue 34's bound: 200 MB);
* **compile for the target**: the run's programs compiled for a TPU v5e topology here, cold (an empty cache) and
  again (from the cache), with how many the compiler refused: what ``forecast --device tpu-v5e`` adds.

    python benchmarks/target_overhead.py [NOTEBOOK ...] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


def _profile(path: Path, keep: bool) -> Any:
    from nbscope.api.profile import ProfileOptions, profile

    os.environ["NBSCOPE_PROBE_TARGET"] = "1" if keep else "0"
    try:
        return profile(path, ProfileOptions(programs=True, jax_platform="cpu"), fingerprint={"digest": "bench"})
    finally:
        os.environ.pop("NBSCOPE_PROBE_TARGET", None)


def _cells_wall(record: Any) -> float:
    return sum(c.wall_s or 0.0 for c in record.notebook_run().cells)


def _peak(record: Any) -> int:
    return max((c.rss.peak_bytes or 0) for c in record.notebook_run().cells if c.rss is not None)


def _kept(record: Any) -> tuple[int, int]:
    data = record.notebook_run().program_data
    programs = data.programs.values() if data is not None else ()
    return sum(1 for p in programs if p.target is not None), len(programs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    notebooks = args.notebooks or sorted(p for p in CORPUS.glob("*.md") if p.name != "README.md")
    if not notebooks:
        raise SystemExit(f"no notebook given and no corpus at {CORPUS}")
    from nbscope.api.forecast import target_environment
    from nbscope.collect.target_compile import compile_programs

    python = target_environment(install=False)
    for path in notebooks:
        ratios, peaks, kept_record = [], [], None
        for repeat in range(args.repeats):
            order = (True, False) if repeat % 2 == 0 else (False, True)
            runs = {keep: _profile(path, keep) for keep in order}
            if not all(_cells_wall(run) > 0 for run in runs.values()):  # a side that ran no cell: say so, go on
                print(f"  pair {repeat + 1}: a side ran no cell ({[run.status for run in runs.values()]}), left out")
                continue
            ratios.append(_cells_wall(runs[True]) / _cells_wall(runs[False]))
            peaks.append(_peak(runs[True]) - _peak(runs[False]))
            kept_record = runs[True]
        if kept_record is None:
            continue
        kept, programs = _kept(kept_record)
        print(f"{path.name}: {programs} programs, {kept} kept for the target")
        print(
            f"  cells: kept/not kept {statistics.median(ratios):.3f} (pairs {', '.join(f'{r:.3f}' for r in ratios)}); "
            f"target ≤ 1.05"
        )
        print(f"  memory: largest cell peak kept minus not kept {max(peaks) / 1e6:+.0f} MB (bound 200 MB)")
        if python is None:
            print("  compile for the target: no target environment (`nbscope target-env tpu --install`)")
            continue
        data = kept_record.notebook_run().program_data
        with tempfile.TemporaryDirectory(prefix="nbscope-target-") as folder:
            for label in ("cold", "cached"):
                started = time.perf_counter()
                result = compile_programs(data.programs, python, budget_s=3600, cache=Path(folder))
                refused = sum(1 for c in result.compiled.values() if c.error)
                print(
                    f"  compile for the target ({label}): {time.perf_counter() - started:.1f} s, "
                    f"{len(result.compiled)} compiled ({refused} refused), {len(result.guessed)} guessed, "
                    f"{sum(c.compile_s or 0 for c in result.compiled.values()):.1f} s of compiles"
                )


if __name__ == "__main__":
    main()
