"""Do small jitted calls stay slower after a JAX profiler session has been stopped? (issue 24's 5 % bound)

``--forecast`` traces a million-call cell for a short window and then stops the profiler session on the
guard's thread while the cell runs on. The cell stays slower than without program data by more than the
window and the stop explain. This isolates the profiler itself, outside nbscope and outside a kernel: each
case is a fresh Python process that times 100,000-call chunks of one small jitted function (the thread's
CPU time, so waiting for a CPU does not count), makes N calls under a bare profiler session (as the probe
opens it: no Python tracer, no HLO protos), stops it, and times the same chunks again. It prints per case
the median over processes of (fastest chunk after) / (fastest chunk before):

* ``control``: no session, the same N calls;
* ``main-N``: N calls traced, the session stopped on the calling thread, between calls;
* ``thread-N``: N calls traced, stopped on another thread while the calls go on (what the probe's guard does).

    python benchmarks/profiler_residue.py [--rounds R] [--calls N ...]

Cases are interleaved round by round, so a machine getting busier weighs on all alike. A ratio near 1.00
for ``control`` is the check that the measurement itself holds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import sys, threading, time
import jax, jax.numpy as jnp
from jax._src.lib import _profiler

mode, calls = sys.argv[1], int(sys.argv[2])
step = jax.jit(lambda x: x * 1.01 + 0.001)
x = jnp.float32(0.5)


def chunk(n=100_000):
    global x
    started = time.thread_time()
    for _ in range(n):
        x = step(x)
    x.block_until_ready()
    return (time.thread_time() - started) / n


for _ in range(2):
    chunk()
before = min(chunk() for _ in range(5))
if mode == "control":
    for _ in range(calls):
        x = step(x)
else:
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.enable_hlo_proto = False
    session = _profiler.ProfilerSession(options)
    for _ in range(calls):
        x = step(x)
    if mode == "main":
        session.stop()
    else:
        stopper = threading.Thread(target=session.stop)
        stopper.start()
        while stopper.is_alive():
            x = step(x)
    del session
after = min(chunk() for _ in range(5))
print(after / before)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, nargs="+", default=[1000, 9000])
    args = parser.parse_args()
    cases = [("control", max(args.calls))] + [(mode, n) for n in args.calls for mode in ("main", "thread")]
    ratios: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for mode, calls in cases:
            name = "control" if mode == "control" else f"{mode}-{calls}"
            done = subprocess.run([sys.executable, "-c", CHILD, mode, str(calls)], capture_output=True, text=True,
                                  check=True)
            ratios.setdefault(name, []).append(float(done.stdout.split()[-1]))
    print(f"{'case':<14} {'after / before':>14}   (each process)")
    for name, values in ratios.items():
        print(f"{name:<14} {statistics.median(values):>14.3f}   {' '.join(f'{v:.3f}' for v in values)}")


if __name__ == "__main__":
    main()
