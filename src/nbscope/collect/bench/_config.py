"""What the suite runs: its groups, the sizes of each preset, and the sampling budgets.

Imported by the parent process and by every worker, so it must not import numpy, numba or jax.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nbscope._errors import NbscopeError


@dataclass(frozen=True)
class GroupSpec:
    """One group of benchmarks, run in its own fresh subprocess."""

    name: str
    module: str  # nbscope.collect.bench.<module> defines ``run(ctx)``
    requires: tuple[str, ...]  # modules whose absence skips the group
    per_dtype: bool  # run once per requested dtype (False: dtype is fixed by the benchmark)
    uses_jax: bool  # gets JAX_PLATFORMS from --jax-platform
    title: str


GROUPS: dict[str, GroupSpec] = {
    spec.name: spec
    for spec in (
        GroupSpec("python", "_group_python", (), False, False, "Pure Python loops"),
        GroupSpec("numpy", "_group_numpy", ("numpy",), True, False, "NumPy"),
        GroupSpec("numba", "_group_numba", ("numpy", "numba"), True, False, "Numba (serial and prange)"),
        GroupSpec("jax", "_group_jax", ("numpy", "jax"), True, True, "JAX: first call and steady state"),
        GroupSpec("multi-size", "_group_multisize", ("numpy", "jax"), True, True, "JAX fresh jit per size"),
        GroupSpec("dispatch", "_group_dispatch", ("numpy", "jax"), False, True, "JAX dispatch latency"),
        GroupSpec("transfer", "_group_transfer", ("numpy", "jax"), True, True, "JAX host↔device transfers"),
        GroupSpec("loops", "_group_loops", ("numpy", "jax"), True, True, "JAX lax.scan / fori_loop"),
    )
}

DTYPES = ("float32", "float64")
DTYPE_CHOICES = ("float32", "float64", "both")
DEFAULT_DTYPE = "float32"  # JAX's own default: what JAX code runs unless it enables x64
SIZE_CHOICES = ("quick", "default", "seed")
DEFAULT_SIZE = "default"


@dataclass(frozen=True)
class Budget:
    """How long to sample one steady-state figure."""

    min_sample_s: float  # repeat the operation inside one sample until it lasts this long (timer noise)
    target_s: float  # keep sampling until this much time went by ...
    max_samples: int  # ... or this many samples were taken (never fewer than MIN_SAMPLES)


BUDGETS: dict[str, Budget] = {
    "quick": Budget(min_sample_s=0.002, target_s=0.15, max_samples=30),
    "default": Budget(min_sample_s=0.005, target_s=0.4, max_samples=50),
    "seed": Budget(min_sample_s=0.01, target_s=1.0, max_samples=100),
}

# Per-group wall-clock limit for one worker process.
TIMEOUTS_S: dict[str, float] = {"quick": 120.0, "default": 600.0, "seed": 1800.0}

MULTI_SIZES = [100, 500, 1000, 2000, 3000]  # the seed's "lecture simulation"

# Sizes every preset shares. The loop trips are bounded so that a GPU, which needs µs of host work per
# iteration, still finishes quickly.
_EVERY_PRESET: dict[str, object] = {
    "multi-size.sizes": MULTI_SIZES,
    "loops.trips": [1_000, 10_000, 30_000, 100_000],
    "loops.pin_cpu": "auto",  # "always": run the pinned-CPU variant even when the CPU is the default
}

# Problem sizes per preset, keyed "<group>.<parameter>". "seed" is the suite this project started from.
SIZES: dict[str, dict[str, object]] = {
    "quick": {
        "python.int_sum_n": 1_000_000,
        "python.sqrt_n": 200_000,
        "numpy.matmul_n": 500,
        "numpy.elementwise_n": 2_000_000,
        "numba.n": 2_000_000,
        "jax.matmul_small_n": 200,
        "jax.matmul_large_n": 1000,
        "jax.elementwise_n": 2_000_000,
        "multi-size.steady": False,  # first calls only: the steady matmul is the jax group's figure
        "transfer.bytes": 8 * 2**20,
    },
    "default": {
        "python.int_sum_n": 5_000_000,
        "python.sqrt_n": 1_000_000,
        "numpy.matmul_n": 2000,
        "numpy.elementwise_n": 10_000_000,
        "numba.n": 10_000_000,
        "jax.matmul_small_n": 1000,
        "jax.matmul_large_n": 2000,
        "jax.elementwise_n": 10_000_000,
        "multi-size.steady": True,
        "transfer.bytes": 64 * 2**20,
    },
    "seed": {
        "python.int_sum_n": 10_000_000,
        "python.sqrt_n": 1_000_000,
        "numpy.matmul_n": 3000,
        "numpy.elementwise_n": 50_000_000,
        "numba.n": 50_000_000,
        "jax.matmul_small_n": 1000,
        "jax.matmul_large_n": 3000,
        "jax.elementwise_n": 50_000_000,
        "multi-size.steady": True,
        "transfer.bytes": 64 * 2**20,  # the seed suite had no transfer figure: as "default"
    },
}

for _preset in SIZES.values():
    _preset.update(_EVERY_PRESET)

# A loop trip count whose first call takes longer than this ends the series (a slow device).
LOOP_CALL_LIMIT_S = 2.0


def parse_groups(only: Iterable[str] | None) -> list[str]:
    """Group names from ``--only`` values (each may hold a comma list), in suite order."""
    if not only:
        return list(GROUPS)
    wanted: list[str] = []
    for value in only:
        for raw in str(value).split(","):
            name = raw.strip().lower().replace("_", "-")
            if name == "multisize":
                name = "multi-size"
            if not name:
                continue
            if name not in GROUPS:
                raise NbscopeError(
                    f"unknown benchmark group {raw.strip()!r} for --only; choose from {', '.join(GROUPS)}"
                )
            wanted.append(name)
    if not wanted:
        raise NbscopeError(f"--only names no group; choose from {', '.join(GROUPS)}")
    return [name for name in GROUPS if name in wanted]


def parse_dtypes(dtype: str) -> list[str]:
    value = str(dtype).strip().lower()
    if value not in DTYPE_CHOICES:
        raise NbscopeError(f"unknown --dtype {dtype!r}; choose float32, float64 or both")
    return list(DTYPES) if value == "both" else [value]


def parse_size(size: str) -> str:
    value = str(size).strip().lower()
    if value not in SIZE_CHOICES:
        raise NbscopeError(f"unknown --size {size!r}; choose quick, default or seed")
    return value


def sizes_for(size: str, overrides: dict[str, object] | None = None) -> dict[str, object]:
    sizes = dict(SIZES[size])
    for key, value in (overrides or {}).items():
        if key not in sizes:
            raise NbscopeError(f"unknown size parameter {key!r}; known: {', '.join(sorted(sizes))}")
        sizes[key] = value
    return sizes


def dtypes_for(group: str, dtypes: Sequence[str]) -> list[str]:
    """The dtypes one group runs under: each requested one, or once for a dtype-fixed group."""
    return list(dtypes) if GROUPS[group].per_dtype else [dtypes[0]]
