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

``--probe`` counts, instead, everything the cell's thread does per call (Python's loop, the dispatch, the
result's release) in kernels with and without nbscope's own probe recording program data: its session
started in ``pre_run_cell``, the HLO collected after the compiling cell, its lowering hook, its guard
polling. Only the moment of the cut is the notebook's. Under valgrind the guard's rules never fired
(32,000 calls recorded and the session still open; a call is ~50× slower there, so the heap likely did
not grow at nearly every poll as the rules ask). So after ``--before`` calls the second cell does what
the guard does when they fire, on a thread of its own. It then runs ``--after`` counted calls inside one
``eval``, the only function collected (``--toggle-collect=builtin_eval``; IPython runs a cell with
``exec``), and simulates the caches and branch prediction too. Two kernels of each kind run at once: the
pair without program data shows how far two alike kernels differ. Measured: 40,394 and 41,079
instructions per call without program data, 41,195 and 41,157 with; L1 read misses 659 / 662 against
669 / 665; mispredicted branches 286 / 298 against 292 / 293.

    python benchmarks/residue_callgrind.py [--calls N ...] [--after CALLS]
    python benchmarks/residue_callgrind.py --probe [--before CALLS] [--after CALLS]

It needs ``valgrind`` on PATH and takes about 3½ minutes per case on 2 cores (``--probe``: about 18).
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

# Both kinds of case: the kernelspec, JAX imported, a small jitted function compiled and warmed up.
WARM_UP = """---
kernelspec:
  display_name: callgrind
  language: python
  name: nbscope-callgrind
---

```{code-cell} ipython3
import os, threading, time
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

"""
NOTEBOOK = (
    WARM_UP
    + """```{code-cell} ipython3
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
)
PROBE_NOTEBOOK = (
    WARM_UP
    + """```{code-cell} ipython3
import _nbscope_probe

guard = getattr(getattr(_nbscope_probe._PROBE, "programs", None), "guard", None)  # None: no program data
for _ in range(int(os.environ["RESIDUE_BEFORE"])):
    x = step(x)
x.block_until_ready()


def cut():
    # What the guard does when its rule fires, on a thread of its own as the guard's is.
    with guard.lock:
        if not guard.done.is_set():
            guard.cut_after = time.perf_counter() - guard.started
            guard.data = guard.session.stop()
            guard.done.set()


if guard is not None:
    stopping = threading.Thread(target=cut)
    stopping.start()
    stopping.join()
    guard.thread.join()
eval(compile("for _ in range(int(os.environ['RESIDUE_AFTER'])):\\n    x = step(x)\\nx.block_until_ready()\\n", "<counted>", "exec"))
with open(os.environ["RESIDUE_PID"], "w") as handle:
    handle.write(f"{os.getpid()} {guard is not None}")
os._exit(0)
```
"""
)
DISPATCH = "*PjitFunction*Call*"  # jaxlib's C++ entry of a jitted call: what is collected
EVENTS = {"Ir": "instructions", "D1mr": "L1 read misses", "D1mw": "L1 write misses"}
PROBE_EVENTS = {**EVENTS, "I1mr": "L1 instruction misses", "Bcm": "mispredicted branches"}


def _child(folder: str, tag: str, programs: str) -> int:
    """One kernel under valgrind, profiled by nbscope (run in a process of its own, for its environment)."""
    os.environ.update(
        JUPYTER_PATH=folder, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", RESIDUE_PID=str(Path(folder) / f"pid-{tag}")
    )
    import nbscope.collect.runner as runner
    from nbscope.api.profile import ProfileOptions, profile

    # A kernel importing JAX under valgrind, several at once, can take longer than nbscope's 120 s to start.
    start = runner.ExecutionOptions.__init__

    def patient(self: runner.ExecutionOptions, *args: object, **kwargs: object) -> None:
        start(self, *args, **kwargs)
        self.startup_timeout = 1800.0

    runner.ExecutionOptions.__init__ = patient  # type: ignore[method-assign]
    profile(
        Path(folder) / "residue.md",
        ProfileOptions(kernel="nbscope-callgrind", jax_platform="cpu", timeout=3600, programs=programs == "on"),
        fingerprint={"digest": "bench"},
    )
    return 0


def _totals(folder: Path, tag: str) -> tuple[dict[str, int], list[str]]:
    """The collected totals of one kernel, and what its notebook wrote after its pid."""
    pid, *rest = (folder / f"pid-{tag}").read_text().split()
    text = (folder / f"callgrind.{pid}").read_text()
    names = re.search(r"^events: (.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    values = re.search(r"^summary: (.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    return {name: int(value) for name, value in zip(names, values, strict=True)}, rest


def _run(folder: Path, notebook: str, valgrind: list[str], cases: dict[str, tuple[dict[str, str], str]]) -> None:
    """Each case's kernel at once (its environment, with or without program data); one line if any failed."""
    (folder / "residue.md").write_text(notebook)
    spec = folder / "kernels" / "nbscope-callgrind"
    spec.mkdir(parents=True, exist_ok=True)
    spec.joinpath("kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    "valgrind",
                    "--tool=callgrind",
                    *valgrind,
                    f"--callgrind-out-file={folder}/callgrind.%p",
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "callgrind",
                "language": "python",
            }
        )
    )
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(folder), tag, programs],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for tag, (env, programs) in cases.items()
    ]
    # A kernel that failed under valgrind leaves no totals: say which case, in one line.
    codes = [child.wait() for child in children]
    missing = [tag for tag, code in zip(cases, codes, strict=True) if code or not (folder / f"pid-{tag}").exists()]
    if missing:
        raise SystemExit(f"residue_callgrind: the kernels of {', '.join(missing)} did not finish under valgrind")


def _sessions(folder: Path, calls: list[int], after: int) -> dict[str, dict[str, float]]:
    """Per call after a bare session of each size: the difference of a run with and one without ``after`` calls."""
    per_call: dict[str, dict[str, float]] = {}
    for count in calls:
        cases = {f"{count}-{n}": ({"RESIDUE_CALLS": str(count), "RESIDUE_AFTER": str(n)}, "off") for n in (0, after)}
        _run(folder, NOTEBOOK, ["--cache-sim=yes", f"--toggle-collect={DISPATCH}"], cases)
        base, counted = _totals(folder, f"{count}-0")[0], _totals(folder, f"{count}-{after}")[0]
        per_call[f"{count} calls recorded"] = {e: (counted[e] - base[e]) / after for e in EVENTS}
        print(
            f"{count} calls recorded: "
            + ", ".join(f"{EVENTS[e]} {v:.1f}" for e, v in per_call[f"{count} calls recorded"].items())
            + " per call",
            file=sys.stderr,
        )
    return per_call


def _probe(folder: Path, before: int, after: int) -> dict[str, dict[str, float]]:
    """Per call, in two kernels without program data and two with nbscope's probe recording it."""
    env = {"RESIDUE_BEFORE": str(before), "RESIDUE_AFTER": str(after)}
    cases = {f"{programs}{n}": (env, programs) for programs in ("off", "on") for n in (1, 2)}  # the reference first
    _run(folder, PROBE_NOTEBOOK, ["--cache-sim=yes", "--branch-sim=yes", "--toggle-collect=builtin_eval"], cases)
    per_call = {}
    for tag, (_, programs) in cases.items():
        totals, rest = _totals(folder, tag)
        if rest != [str(programs == "on")]:  # the probe recorded program data where asked, and only there
            raise SystemExit(f"residue_callgrind: the kernel of {tag} did not record program data as asked")
        label = f"{'with' if programs == 'on' else 'without'} program data ({tag[-1]})"
        per_call[label] = {e: totals[e] / after for e in PROBE_EVENTS}
    return per_call


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return _child(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--calls",
        type=int,
        nargs="+",
        default=[0, 50, 1200],
        help="calls recorded by the session, per case (default 0 50 1200)",
    )
    parser.add_argument(
        "--after", type=int, default=None, help="calls counted after the stop (default 100000; --probe: 20000)"
    )
    parser.add_argument("--probe", action="store_true", help="nbscope's own probe, with and without program data")
    parser.add_argument(
        "--before",
        type=int,
        default=1_000,
        help="--probe: calls recorded before the cut (default 1000, as the guard's early rule)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("residue_callgrind: valgrind is not on PATH", file=sys.stderr)
        return 2
    after = args.after or (20_000 if args.probe else 100_000)
    with tempfile.TemporaryDirectory(prefix="nbscope-callgrind-") as name:
        per_call = _probe(Path(name), args.before, after) if args.probe else _sessions(Path(name), args.calls, after)
    events = PROBE_EVENTS if args.probe else EVENTS
    rows = list(per_call.items())
    reference = rows[0][1]
    width = max(len(label) for label, _ in rows)
    print(f"{'':>{width}} " + " ".join(f"{label:>24}" for label in events.values()) + f"   (per call; ÷ {rows[0][0]})")
    for label, figures in rows:
        print(f"{label:>{width}} " + " ".join(f"{figures[e]:>16.1f} ×{figures[e] / reference[e]:.3f}" for e in events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
