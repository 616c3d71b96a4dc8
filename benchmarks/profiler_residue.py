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

``--kernel`` measures the same inside real Jupyter kernels, as ``nbscope profile`` runs them (a bare process
could not resolve it on a shared 2-core VM: its control alone ranged 0.87–1.38). Each case is one profile of
a two-cell notebook: the first compiles the function, the second makes the case's calls and then times
twelve 40,000-call chunks (the thread's CPU time). The figure per case is the median over rounds of
(fastest chunk) / (the same round's fastest chunk of ``none``), and how many rounds came out above 1:

* ``none``: nothing traced (the reference);
* ``hlo`` (with ``--hlo``): an empty session that collects every program's HLO, as the probe opens after a
  cell that compiled;
* ``trace-N``: the cell opens a bare profiler session, makes N calls, and stops it on another thread while
  its calls go on (``--calls 0``: a start and a stop with nothing recorded);
* ``forecast``: nothing in the cell's code, the kernel run with program data (``--forecast``), so the
  probe's own session, its guard and its cut.

    python benchmarks/profiler_residue.py --kernel [--rounds R] [--calls N ...] [--hlo] [--glibc-tunables T]

``--glibc-tunables T`` runs every case a second time with the kernel's malloc tuned so (``GLIBC_TUNABLES``),
against ``none`` tuned alike: whether the residue follows malloc's per-thread caches or its arenas.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
hlo, mode = mode.startswith("hlo+"), mode.removeprefix("hlo+")


def open_session(hlo_protos=False):
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.enable_hlo_proto = hlo_protos
    return _profiler.ProfilerSession(options)


if hlo:  # what the probe does after a cell that compiled: an empty session that collects every program's HLO
    open_session(hlo_protos=True).stop()
if mode == "control":
    for _ in range(calls):
        x = step(x)
else:
    session = open_session()
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


KERNEL_NOTEBOOK = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

```{code-cell} ipython3
import json, os, threading, time
import jax, jax.numpy as jnp
from jax._src.lib import _profiler

@jax.jit
def step(x):
    return x * 0.5 + 1.0

x = step(jnp.float32(1.0)).block_until_ready()
```

```{code-cell} ipython3
case = os.environ["NBSCOPE_RESIDUE_CASE"]
if case == "hlo":  # what the probe does after a compiling cell: an empty session that collects the HLO
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.enable_hlo_proto = True
    _profiler.ProfilerSession(options).stop()
if case.startswith("trace-"):
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.enable_hlo_proto = False
    session = _profiler.ProfilerSession(options)
    for _ in range(int(case.removeprefix("trace-"))):
        x = step(x)
    threading.Thread(target=session.stop).start()
chunks = []
for _ in range(12):
    started = time.thread_time()
    for _ in range(40_000):
        x = step(x)
    x.block_until_ready()
    chunks.append((time.thread_time() - started) / 40_000)
with open(os.environ["NBSCOPE_RESIDUE_OUT"], "w") as handle:
    json.dump(chunks, handle)
```
"""


def in_kernels(rounds: int, calls: list[int], *, hlo: bool = False, tunables: str | None = None) -> None:
    from nbscope.api.profile import ProfileOptions, profile

    kinds = ["none"] + (["hlo"] if hlo else []) + [f"trace-{n}" for n in calls] + ["forecast"]
    # With tunables, every case runs a second time with the kernel's malloc so tuned, judged against the
    # same round's ``none`` so tuned: whether the residue follows malloc's caches or arenas.
    cases = [(kind, None) for kind in kinds] + ([(kind, tunables) for kind in kinds] if tunables else [])
    fastest: dict[tuple[str, str | None], list[float]] = {case: [] for case in cases}
    outside = os.environ.get("GLIBC_TUNABLES")
    with tempfile.TemporaryDirectory(prefix="nbscope-residue-") as folder:
        notebook, out = Path(folder) / "residue.md", Path(folder) / "chunks.json"
        notebook.write_text(KERNEL_NOTEBOOK)
        try:
            for index in range(rounds):
                for kind, tuned in cases if index % 2 == 0 else cases[::-1]:
                    os.environ.update(NBSCOPE_RESIDUE_CASE=kind, NBSCOPE_RESIDUE_OUT=str(out))
                    _set_tunables(tuned or outside)
                    out.unlink(missing_ok=True)
                    profile(
                        notebook,
                        ProfileOptions(programs=kind == "forecast", jax_platform="cpu"),
                        fingerprint={"digest": "bench"},
                    )
                    fastest[(kind, tuned)].append(min(json.loads(out.read_text())))
                print(
                    f"round {index + 1}/{rounds}: "
                    + ", ".join(f"{_label(case)} {values[-1] * 1e6:.2f} µs" for case, values in fastest.items()),
                    file=sys.stderr,
                )
        finally:
            _set_tunables(outside)
    width = max(len(_label(case)) for case in cases)
    print(f"{'case':<{width}} {'per call':>9} {'÷ none':>7} {'> 1':>6}   (each round's ÷ none)")
    for (kind, tuned), values in fastest.items():
        base = fastest[("none", tuned)]
        ratios = [value / reference for value, reference in zip(values, base, strict=True)]
        print(
            f"{_label((kind, tuned)):<{width}} {statistics.median(values) * 1e6:>7.2f}µs {statistics.median(ratios):>7.3f} "
            f"{sum(r > 1 for r in ratios):>3}/{len(ratios):<2}   {' '.join(f'{r:.2f}' for r in sorted(ratios))}"
        )


def _set_tunables(value: str | None) -> None:
    """The GLIBC_TUNABLES the next kernel inherits (none where None)."""
    if value is None:
        os.environ.pop("GLIBC_TUNABLES", None)
    else:
        os.environ["GLIBC_TUNABLES"] = value


def _label(case: tuple[str, str | None]) -> str:
    kind, tuned = case
    return f"{kind} [{tuned}]" if tuned else kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, nargs="+", default=[1000, 9000])
    parser.add_argument(
        "--hlo",
        action="store_true",
        help="also the cases after an empty HLO-collecting session (hlo+control, hlo+thread-N)",
    )
    parser.add_argument("--kernel", action="store_true", help="measure inside Jupyter kernels run by nbscope")
    parser.add_argument(
        "--glibc-tunables",
        metavar="TUNABLES",
        help="with --kernel: every case also with the kernel's GLIBC_TUNABLES set so, e.g. glibc.malloc.tcache_count=0",
    )
    args = parser.parse_args()
    if args.kernel:
        in_kernels(args.rounds, args.calls, hlo=args.hlo, tunables=args.glibc_tunables)
        return
    cases = [("control", max(args.calls))] + [(mode, n) for n in args.calls for mode in ("main", "thread")]
    if args.hlo:
        cases += [("hlo+control", max(args.calls))] + [("hlo+thread", n) for n in args.calls]
    ratios: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for mode, calls in cases:
            name = mode if mode.endswith("control") else f"{mode}-{calls}"
            done = subprocess.run(
                [sys.executable, "-c", CHILD, mode, str(calls)], capture_output=True, text=True, check=True
            )
            ratios.setdefault(name, []).append(float(done.stdout.split()[-1]))
    print(f"{'case':<14} {'after / before':>14}   (each process)")
    for name, values in ratios.items():
        print(f"{name:<14} {statistics.median(values):>14.3f}   {' '.join(f'{v:.3f}' for v in values)}")


if __name__ == "__main__":
    main()
