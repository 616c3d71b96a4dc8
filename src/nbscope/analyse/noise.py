"""How much of a change in a cell's time the machine alone explains, when nothing but two runs are known.

A cell's wall time on a shared machine moves for two reasons the notebook does not control:

* **waiting for a CPU.** The probe records, per cell, how long the cell's thread was ready to run but
  another process had the CPU (``sched.wait_s``, from ``/proc/thread-self/schedstat``). That time is the
  machine's, not the code's: the gate and ``compare`` judge ``wall − wait`` (the *unwaited* time). On a
  2-core machine at load 4–12, a single-threaded cell's wall moved 1.2–2.7 s between runs while its
  unwaited time stayed within ±6 %.
* **what waiting does not show**: BLAS / XLA / Numba worker threads that contend for cores (their
  spinning inflates the cell's own CPU time), the page cache and disk behind an import, the first call
  of a library, timer ticks in a short cell. For these, a relative floor by the cell's type and size,
  widened by the share of the cell spent waiting for a CPU when other threads did work in it.

The floors below were set from the gate benchmark (``benchmarks/gate_false_alarms.py``): pairs of
unchanged runs, idle and with a busy loop on one core, on a shared 2-core machine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from nbscope.schema import _fields
from nbscope.schema.model import Cell

time_of = _fields.time  # a time figure: finite and not negative, else None

# Relative run-to-run noise by kind of cell (a fraction of the faster side's time), for one sample a side
# and no history. "plain": one thread of Python or NumPy; "threaded": other threads of the kernel did work
# (BLAS, XLA, Numba parallel); "import": mostly importing (page cache, disk, first use of a library);
# "first-call": mostly compiling (JIT compile times move with the machine like imports do).
RELATIVE = {"plain": 0.5, "threaded": 1.0, "import": 1.0, "first-call": 1.0}
# Absolute jitter a cell gets from the scheduler and timers whatever its size.
JITTER_S = 0.03
# Short cells move more, relatively: the relative floor grows by 1 + sqrt(SIZE_REF_S / t) for a cell of t s
# (×2 at 0.25 s, ×1.5 at 1 s, ×1.2 at 6 s). Even time on the CPU varies with what shares the core (a
# busy SMT sibling, caches, memory bandwidth): a 0.5 s Python loop's unwaited time moved ×1.5 between runs.
SIZE_REF_S = 0.25
# Judging walls (a record without the wait for a CPU: older, or not Linux), the wait is part of the
# figure: a shared machine at a load of twice its cores doubles a cell's wall and more.
WALL_FACTOR = 2.0
# With history: the floor is mad_k × the σ of a difference of two runs (σ ≈ 1.4826 × MAD, √2 for two runs),
# and at least HISTORY_RELATIVE of the smaller side (timings on a shared machine: ±20 %).
SIGMA_OF_DIFFERENCE = 1.4826 * math.sqrt(2)
HISTORY_RELATIVE = 0.10
THREADED_CPU_SHARE = 1.3  # the kernel's CPU time above this × the cell thread's: other threads worked
OTHER_THREADS_SHARE = 0.25  # and the other threads' CPU time is at least this share of the cell's wall

_IMPORT = re.compile(r"^\s*(import\s|from\s+\S+\s+import\s|%|!|#|$)")


def wait_of(cell: Cell | None) -> float | None:
    """Seconds the cell waited for a CPU, when the record has a plausible figure (0 ≤ wait ≤ wall)."""
    if cell is None:
        return None
    wall = time_of(cell.wall_s)
    wait = cell.sched.wait_s if cell.sched is not None else None
    if wait is None or wall is None or wait > wall * 1.01 + 0.005:
        return None
    return min(wait, wall)


def unwaited(cell: Cell | None) -> float | None:
    """The cell's wall time less its wait for a CPU; None when either is unknown."""
    wall = time_of(cell.wall_s) if cell is not None else None
    wait = wait_of(cell)
    return None if wall is None or wait is None else max(0.0, wall - wait)


def kind_of(cell: Cell | None) -> str:
    """``plain``, ``threaded``, ``import`` or ``first-call`` (see :data:`RELATIVE`)."""
    if cell is None:
        return "plain"
    wall = time_of(cell.wall_s) or 0.0
    compile_s = time_of(cell.compile_s) or 0.0
    if wall > 0 and compile_s >= 0.3 * wall:
        return "first-call"
    source = cell.source or ""
    lines = source.splitlines() if source else [cell.first_line]
    if lines and any(line.strip() for line in lines) and all(_IMPORT.match(line) for line in lines):
        return "import"
    sched = cell.sched
    if sched is not None and sched.cpu_s is not None and sched.on_cpu_s is not None:
        cpu, own = sched.cpu_s, sched.on_cpu_s
        if cpu > THREADED_CPU_SHARE * own:
            # Other threads count only when they did a share of the cell's work: a cell that sleeps or waits
            # on I/O has almost no CPU of its own, and the kernel's heartbeat and output threads then
            # outweigh it without making the cell any noisier.
            if cpu - own > max(0.02, OTHER_THREADS_SHARE * wall):
                return "threaded"
    return "plain"


@dataclass(frozen=True, slots=True)
class PairNoise:
    """What the machine explains of one cell's change between two runs, without history."""

    floor_s: float  # a change of the judged figure smaller than this is noise
    kind: str  # kind of cell (:func:`kind_of`), the worse of the two sides
    judged: str  # "unwaited" (wall less wait for a CPU, both sides) or "wall"
    base_s: float | None  # the judged figure, each side
    cand_s: float | None
    contention: float = 0.0  # the larger share of a side's wall spent waiting for a CPU


_ORDER = ("plain", "threaded", "first-call", "import")


def pair_noise(base: Cell | None, cand: Cell | None) -> PairNoise:
    """The noise floor of one cell's change between two single runs (no history, no repeats).

    Judged figure: the unwaited time when both sides have it, else the wall. Floor:
    ``JITTER_S + RELATIVE[kind] × (1 + sqrt(SIZE_REF_S / t)) × t`` for the smaller side's ``t``; for a threaded cell the relative part grows by
    ``1 / (1 − contention)``: when a cell's thread waited 90 % of its wall for a CPU, its worker threads
    were starved as much, and their spinning inflated even the unwaited time.
    """
    sides = (base, cand)
    kinds = [kind_of(c) for c in sides if c is not None]
    kind = max(kinds, key=_ORDER.index) if kinds else "plain"
    walls = tuple(time_of(c.wall_s) if c is not None else None for c in sides)
    free = (unwaited(sides[0]), unwaited(sides[1]))
    judged, figures = ("unwaited", free) if None not in free else ("wall", walls)
    contention = 0.0
    for wall, cell in zip(walls, sides, strict=True):
        wait = wait_of(cell)
        if wall and wait is not None:
            contention = max(contention, min(0.95, wait / wall))
    relative = RELATIVE[kind]
    if kind == "threaded":
        relative = relative / (1 - contention)
    if judged == "wall":
        relative *= WALL_FACTOR
    floor = model_floor(min((f for f in figures if f is not None), default=0.0), relative)
    return PairNoise(
        floor_s=floor, kind=kind, judged=judged, base_s=figures[0], cand_s=figures[1], contention=contention
    )


def model_floor(smaller: float, relative: float = RELATIVE["plain"]) -> float:
    """The floor of a change from ``smaller`` seconds for a relative noise ``relative`` (see :data:`SIZE_REF_S`)."""
    if smaller <= 0:
        return JITTER_S
    return JITTER_S + relative * smaller * (1 + math.sqrt(SIZE_REF_S / smaller))


def history_floor(mad_s: float, mad_k: float, smaller: float, range_s: float = 0.0) -> float:
    """The floor from the history's run-to-run noise: ``mad_k`` σ of a difference of two runs, and at least
    the range the history spanned (run-to-run noise on a shared machine has heavy tails that a MAD of ten
    runs misses: a value already seen in unchanged runs is noise) and ``HISTORY_RELATIVE`` of the smaller
    side plus the jitter."""
    return max(mad_k * SIGMA_OF_DIFFERENCE * mad_s, range_s, JITTER_S + HISTORY_RELATIVE * smaller)


def finite_ratio(a: float, b: float) -> float:
    """b / a, infinity for a zero a (and 1 when both are zero)."""
    return b / a if a > 0 else (math.inf if b > 0 else 1.0)
