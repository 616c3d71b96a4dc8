"""What a stopped JAX profiler session leaves in a kernel, counted rather than timed (issue 24's 5 % bound).

Timing cannot settle a 1–5 % effect on a shared 2-core VM. Valgrind can count it: callgrind, collecting
only inside JAX's C++ dispatch of a jitted call (``PjitFunction::Call``: argument handling, the XLA:CPU
execution, the output), counts its instructions and simulated L1 misses per call, with the kernel's other
threads and Python's loop left out (whole-process counts varied by ±1.5 % from one kernel to the next).
Each case is a real Jupyter kernel run by nbscope under valgrind (a kernelspec of its own, in a temporary
folder):

1. the first cell imports JAX and makes 2,000 calls of a small jitted function;
2. the second opens a bare profiler session as the probe does (no Python tracer), makes N calls under it
   and stops it on another thread (``--calls``: N per case; 0 is a start and a stop with nothing recorded);
3. the third makes the calls that are counted, then ends the kernel with ``os._exit`` so that valgrind
   writes its totals (nbscope stops a kernel at once, which would lose them).

Each case runs twice, with 0 and with ``--after`` calls in the third cell, side by side; the difference over
``--after`` is per call. ``PYTHONHASHSEED=0`` and one OpenBLAS thread keep two runs of one case alike.
Two control kernels gave 34,234 and 34,184 instructions and 378 and 357 L1 read misses per call; after a
session of 1,200 calls, 34,264 and 365: the dispatch itself does no more work and misses no more after it.

    python benchmarks/residue_callgrind.py [--calls N ...] [--after CALLS]

It needs ``valgrind`` on PATH and takes about 3½ minutes per case on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOTEBOOK = """---
kernelspec:
  display_name: callgrind
  language: python
  name: nbscope-callgrind
---

```{code-cell} ipython3
import os, threading
import jax, jax.numpy as jnp
from jax._src.lib import _profiler

@jax.jit
def step(x):
    return x * 0.5 + 1.0

x = step(jnp.float32(1.0)).block_until_ready()
for _ in range(2000):
    x = step(x)
x.block_until_ready()
```

```{code-cell} ipython3
options = jax.profiler.ProfileOptions()
options.python_tracer_level = 0
session = _profiler.ProfilerSession(options)
for _ in range(int(os.environ["RESIDUE_CALLS"])):
    x = step(x)
stopping = threading.Thread(target=session.stop)
stopping.start()
stopping.join()
with open(os.environ["RESIDUE_PID"], "w") as handle:
    handle.write(str(os.getpid()))
```

```{code-cell} ipython3
for _ in range(int(os.environ["RESIDUE_AFTER"])):
    x = step(x)
x.block_until_ready()
os._exit(0)
```
"""
DISPATCH = "*PjitFunction*Call*"  # jaxlib's C++ entry of a jitted call: what is collected
EVENTS = {"Ir": "instructions", "D1mr": "L1 read misses", "D1mw": "L1 write misses"}


def _child(folder: str, calls: str, after: str) -> int:
    """One kernel under valgrind, profiled by nbscope (run in a process of its own, for its environment)."""
    os.environ.update(JUPYTER_PATH=folder, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", RESIDUE_CALLS=calls,
                      RESIDUE_AFTER=after, RESIDUE_PID=str(Path(folder) / f"pid-{calls}-{after}"))
    from nbscope.api.profile import ProfileOptions, profile

    profile(Path(folder) / "residue.md", ProfileOptions(kernel="nbscope-callgrind", jax_platform="cpu", timeout=3600),
            fingerprint={"digest": "bench"})
    return 0


def _totals(folder: Path, calls: int, after: int) -> dict[str, int]:
    pid = (folder / f"pid-{calls}-{after}").read_text().strip()
    text = (folder / f"callgrind.{pid}").read_text()
    names = re.search(r"^events: (.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    values = re.search(r"^summary: (.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    return {name: int(value) for name, value in zip(names, values, strict=True)}


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return _child(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[0, 50, 1200],
                        help="calls recorded by the session, per case (default 0 50 1200)")
    parser.add_argument("--after", type=int, default=100_000, help="calls counted after the stop (default 100000)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("residue_callgrind: valgrind is not on PATH", file=sys.stderr)
        return 2
    per_call: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="nbscope-callgrind-") as name:
        folder = Path(name)
        (folder / "residue.md").write_text(NOTEBOOK)
        spec = folder / "kernels" / "nbscope-callgrind"
        spec.mkdir(parents=True)
        spec.joinpath("kernel.json").write_text(json.dumps({
            "argv": ["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--toggle-collect={DISPATCH}",
                     f"--callgrind-out-file={folder}/callgrind.%p", sys.executable, "-m", "ipykernel_launcher",
                     "-f", "{connection_file}"],
            "display_name": "callgrind", "language": "python"}))
        for calls in args.calls:
            children = [subprocess.Popen([sys.executable, __file__, "--child", name, str(calls), str(after)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        for after in (0, args.after)]
            # A kernel that failed under valgrind leaves no totals: say which case, in one line.
            codes = [child.wait() for child in children]
            if any(codes) or not all(
                    (folder / f"pid-{calls}-{after}").exists() for after in (0, args.after)):
                raise SystemExit(f"residue_callgrind: the kernels of the {calls}-call case did not finish under valgrind")
            base, counted = _totals(folder, calls, 0), _totals(folder, calls, args.after)
            per_call[calls] = {event: (counted[event] - base[event]) / args.after for event in EVENTS}
            print(f"{calls} calls recorded: " + ", ".join(f"{EVENTS[e]} {v:.1f}" for e, v in per_call[calls].items())
                  + " per call", file=sys.stderr)
    reference = per_call[args.calls[0]]
    print(f"{'recorded':>9} " + " ".join(f"{label:>20}" for label in EVENTS.values()) + f"   (per call; ÷ {args.calls[0]} recorded)")
    for calls, figures in per_call.items():
        print(f"{calls:>9} " + " ".join(f"{figures[e]:>12.1f} ×{figures[e] / reference[e]:.3f}" for e in EVENTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
