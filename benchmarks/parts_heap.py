"""What the trace's parts leave in the heap: eager float64 operations, each compiled for a new shape, run in one
process with and without the probe's program recorder, side by side.

Issue AC's last memory case (``benchmarks/lectures/eager_float64_shapes.md``, cell 2) measured in a kernel swings
by hundreds of MB from one pair to the next. Here, without a kernel, each variant runs the same loop in a fresh
Python process and prints the peak growth over the loop's start (VmHWM, reset as the loop starts), what stays
resident once the heap is trimmed (``malloc_trim(0)``: the memory really held) and the loop's time:

* ``off``: no recorder (the notebook alone);
* ``on``: the recorder as a kernel runs it with program data: the trace stopped as each compile starts and a new
  part started as it ends (``_nbscope_program.Programs``), each part watched by its guard;
* ``no parts``: the recorder with no profiler session (its counter and HLO only).

Measured on a 2-core machine (2026-12-06, jax 0.10.2, 200 iterations, six operations each, one process each):
``off`` +2,080 to +2,118 MB at the peak. Before the fix below, ``on`` read +2,810 to +2,956 MB: each part's guard
read malloc's heaps (``mallinfo2``, which takes their locks) every 20 ms for 0.5 s after each of the 1,200 compiles,
and the notebook's freed arrays stayed resident (the same +1,800 MB was held in every variant once the heap was
trimmed; without those reads +2,052 MB). The guard now reads them so only after the compile of a program with a
small loop, the kind that floods: ``on`` +2,162 MB. In kernels the same cell had read −130, −24 and −106 MB with
program data over without in three pairs (``benchmarks/forecast_overhead.py``; its ``--control`` pairs −34 to
+6 MB), and once +802 MB (one pair of five).

    python benchmarks/parts_heap.py [--iterations N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe"
VARIANTS = ("off", "on", "no parts")

LOOP = r"""
import ctypes, gc, sys, tempfile, time
sys.path.insert(0, {probe!r})
variant, iterations = {variant!r}, {iterations}
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp

def status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) * 1024

libc = ctypes.CDLL(None)
x = jnp.ones((1000, 1000))
x.block_until_ready()
if variant != "off":
    import _nbscope_program as recorder
    if variant == "no parts":
        def no_session(**_):
            raise RuntimeError("no session")
        recorder._session = no_session
    programs = recorder.Programs(tempfile.mkdtemp())
    programs.start(1)
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
before, started = status("VmRSS"), time.perf_counter()
for k in range(iterations):
    y = jnp.sin(x[: 500 + k] * 1.5 + k) ** 2
    float(y.sum())
seconds, peak = time.perf_counter() - started, status("VmHWM")
gc.collect()
libc.malloc_trim(0)
print(peak - before, status("VmRSS") - before, seconds)
"""


def _run(variant: str, iterations: int) -> tuple[int, int, float]:
    code = LOOP.format(probe=str(PROBE), variant=variant, iterations=iterations)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak, held, seconds = done.stdout.split()[-3:]
    return int(peak), int(held), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    iterations = parser.parse_args().iterations
    results = {variant: _run(variant, iterations) for variant in VARIANTS}
    base_peak = results["off"][0]
    print(f"{'variant':<10} {'peak +MB':>9} {'over off':>9} {'held +MB':>9} {'loop s':>7}")
    for variant, (peak, held, seconds) in results.items():
        print(f"{variant:<10} {peak / 1e6:>9.0f} {(peak - base_peak) / 1e6:>+9.0f} {held / 1e6:>9.0f} {seconds:>7.1f}")


if __name__ == "__main__":
    main()
