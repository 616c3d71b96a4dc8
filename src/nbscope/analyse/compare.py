"""``nbscope compare``: two profile runs of a notebook side by side.

Cells are paired by the cell model's one pairing function (:func:`nbscope.record.cells.pair_cells`):
by source hash, moved cells by hash elsewhere, edited cells by position and similarity. For each
pair the wall, compile and run times of both sides, their ratio and the winner; then the totals; then
every difference in settings and machine fingerprint that could explain the figures.

A winner whose difference the machine's own noise explains (:mod:`nbscope.analyse.noise`: the wait for a
CPU left out, and the floor of the cell's kind and size) is shown as ``within noise``, never as a speed-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.analyse import noise
from nbscope.collect import fingerprint as fp
from nbscope.record.cells import CellPair, pair_cells, same_notebook, shown_line
from nbscope.record.run import PROFILE_KINDS, RunRecord, backend_of
from nbscope.record.sources import sources_of

# A difference below both of these is noise on a shared machine (facts: ±20 % between runs).
TIE_RATIO = 1.10
TIE_SECONDS = 0.005

TOTAL_KEYS = (
    "wall_s",
    "compile_s",
    "run_s",
    "compiles",
    "user_compiles",
    "eager_compiles",
    "numba_compiles",
    "cache_hits",
    "kernel_start_s",
    "peak_rss_bytes",
)

# Why a difference in a fingerprint or settings field can change timings; first matching prefix wins.
_WHY: tuple[tuple[str, str], ...] = (
    ("settings.jax_platform", "JAX backend: CPU and GPU differ per cell (compile, dispatch, loops, float64)"),
    ("derived.platform", "JAX backend: CPU and GPU differ per cell (compile, dispatch, loops, float64)"),
    ("settings.jax_cache", "persistent compile cache: a warm cache turns backend compiles into retrievals"),
    ("derived.cache_state", "persistent compile cache state at the start of the run"),
    ("settings.env", "environment overrides given to the kernel"),
    ("settings.pathway", "how the notebook ran (kernel, script, book): start-up and per-cell overheads differ"),
    ("settings.repeat", "figures are medians over repeats on one side"),
    ("settings.timeline", "a per-cell jax.profiler trace adds overhead"),
    ("derived.x64", "float64 vs float32: float64 doubles memory traffic and is slow on consumer GPUs"),
    ("cpu.model", "CPU model: single-thread speed and vector width"),
    ("cpu.logical_cores", "core count: BLAS, XLA:CPU and Numba parallel threads"),
    ("cpu.physical_cores", "core count: BLAS, XLA:CPU and Numba parallel threads"),
    ("cpu.affinity_cores", "cores this process may use"),
    ("cpu.cgroup_cpu_limit", "container CPU quota: caps parallel speed-ups"),
    ("cpu.max_mhz", "CPU clock"),
    ("cpu.load_average", "other load on the machine during the run"),
    ("memory.", "RAM: large arrays may swap"),
    ("blas.", "BLAS library or threads: NumPy matmul and linear algebra speed"),
    ("numba_threading.", "Numba threading layer or threads: parallel=True speed"),
    ("gpu.", "GPU model, memory or driver"),
    ("versions.jax", "JAX/XLA version: compiler and runtime changes"),
    ("versions.numba", "Numba version"),
    ("versions.numpy", "NumPy version"),
    ("versions.python", "Python version: interpreter speed"),
    ("versions.", "library version"),
    ("environment.JAX_ENABLE_X64", "float64 on or off for JAX"),
    ("environment.JAX_PLATFORM", "JAX backend selection"),
    ("environment.JAX_COMPILATION_CACHE", "persistent compile cache"),
    ("environment.XLA_PYTHON_CLIENT", "GPU memory preallocation"),
    ("environment.XLA_FLAGS", "XLA compiler flags"),
    ("environment.", "environment variable that changes numerical libraries"),
    ("host.", "operating system"),
)


def why(path: str) -> str:
    for prefix, reason in _WHY:
        if path == prefix or path.startswith(prefix):
            return reason
    return ""


def check_profile(record: RunRecord, name: str = "run") -> None:
    """Refuse records that hold no per-cell figures (bench, audit, ...)."""
    if record.kind not in PROFILE_KINDS:
        raise NbscopeError(f"{name} is a {record.kind!r} run; compare and diagnose need a profile run")
    if not isinstance(record.measurements.get("cells"), list):
        raise NbscopeError(f"{name} has no per-cell measurements (measurements.cells is missing)")


def label(record: RunRecord, fallback: str) -> str:
    return f"run {record.run_id}" if record.run_id else fallback


# ---- platform and dtype -------------------------------------------------------------------------


def platform_of(record: RunRecord) -> dict[str, Any]:
    """The JAX backend a run used, and how we know (see :func:`nbscope.record.run.backend_of`)."""
    return backend_of(record)


def x64_of(record: RunRecord) -> dict[str, Any]:
    """Whether JAX ran in float64, from the strongest evidence the record holds."""
    runtime = record.fingerprint.get("jax_runtime")
    env = {**(record.fingerprint.get("environment") or {}), **((record.settings or {}).get("env") or {})}
    float64_cells = sorted(
        {
            cell["index"]
            for cell in record.measurements.get("cells", [])
            for function in ((cell.get("jax") or {}).get("functions") or [])
            if any("float64" in str(shape) or "complex128" in str(shape) for shape in function.get("shapes") or [])
        }
    )
    float32_seen = any(
        "float32" in str(shape)
        for cell in record.measurements.get("cells", [])
        for function in ((cell.get("jax") or {}).get("functions") or [])
        for shape in function.get("shapes") or []
    )
    if float64_cells:
        return {"x64": True, "source": "float64 argument shapes in JAX compiles", "cells": float64_cells}
    if isinstance(runtime, Mapping) and "x64" in runtime:
        return {"x64": bool(runtime["x64"]), "source": "fingerprint.jax_runtime.x64", "cells": []}
    flag = env.get("JAX_ENABLE_X64")
    if flag is not None:
        return {"x64": flag.strip().lower() in ("1", "true", "yes", "on"), "source": "JAX_ENABLE_X64", "cells": []}
    if float32_seen:
        return {"x64": False, "source": "only float32 argument shapes in JAX compiles", "cells": []}
    return {"x64": None, "source": "no JAX compile shapes and no x64 setting recorded", "cells": []}


# ---- comparison ---------------------------------------------------------------------------------


def winner(a: float | None, b: float | None) -> dict[str, Any]:
    """Who is faster, by how much: ``{"winner": "A"|"B"|"tie"|None, "factor": x, "text": "B 3.1× faster"}``."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return {"winner": None, "factor": None, "text": "–"}
    if a <= 0 and b <= 0:
        return {"winner": "tie", "factor": 1.0, "text": "tie"}
    slow, fast = max(a, b), min(a, b)
    factor = slow / fast if fast > 0 else float("inf")
    if factor < TIE_RATIO or slow - fast < TIE_SECONDS:
        return {"winner": "tie", "factor": round(factor, 3), "text": "tie"}
    side = "B" if b < a else "A"
    shown = f"{factor:.1f}" if factor < 100 else f"{factor:.0f}"
    return {"winner": side, "factor": round(factor, 3), "text": f"{side} {shown}× faster"}


def within_noise(result: dict[str, Any], floor_s: float, delta_s: float | None, judged: str) -> dict[str, Any]:
    """A winner that the machine's own noise explains becomes ``within noise``: a tie, with the factor kept."""
    if result.get("winner") not in ("A", "B") or delta_s is None or abs(delta_s) >= floor_s:
        return {**result, "within_noise": False}
    what = "" if judged == "unwaited" else " (walls)"
    return {**result, "winner": "tie", "within_noise": True,
            "text": f"within noise{what}", "noise_floor_s": round(floor_s, 6)}


def cell_figures(cell: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The figures of one cell that a comparison shows (None for a cell absent from a run)."""
    if cell is None:
        return None
    jax = cell.get("jax") or {}
    numba = cell.get("numba") or {}
    return {
        "index": cell.get("index"),
        "line": cell.get("line"),
        "status": cell.get("status"),
        "wall_s": cell.get("wall_s"),
        "compile_s": cell.get("compile_s"),
        "run_s": cell.get("run_s"),
        "compiles": (jax.get("compiles") or 0) + (numba.get("compiles") or 0) if (jax or numba) else 0,
        "cache_hits": jax.get("cache_hits") or 0,
        "timeline": (cell.get("timeline") or {}).get("classification") if isinstance(cell.get("timeline"), Mapping) else None,
    }


@dataclass
class Comparison:
    """Two runs side by side; ``to_dict`` is what ``--json`` prints."""

    a: RunRecord
    b: RunRecord
    pairs: list[CellPair]
    differences: list[dict[str, Any]]
    label_a: str = "A"
    label_b: str = "B"
    rows: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)
    same_notebook: bool = True  # False: two different notebooks, compared because the caller allowed it

    @property
    def paired_all(self) -> bool:
        return all(p.a is not None and p.b is not None for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": _run_summary(self.a, self.label_a),
            "b": _run_summary(self.b, self.label_b),
            "same_notebook": self.same_notebook,
            "pairing": {
                "cells_a": len(self.a.measurements.get("cells", [])),
                "cells_b": len(self.b.measurements.get("cells", [])),
                "by_hash": sum(p.match == "hash" for p in self.pairs),
                "by_order": sum(p.match == "edited" for p in self.pairs),
                "by_move": sum(p.match == "moved" for p in self.pairs),
                "by_similarity": sum(p.match == "similar" for p in self.pairs),
                "only_a": sum(p.match == "only-a" for p in self.pairs),
                "only_b": sum(p.match == "only-b" for p in self.pairs),
                "all_paired": self.paired_all,
            },
            "cells": self.rows,
            "totals": self.totals,
            "differences": self.differences,
        }


def _run_summary(record: RunRecord, name: str) -> dict[str, Any]:
    return {
        "label": name,
        "run_id": record.run_id,
        "target": record.target,
        "status": record.status,
        "started_at": record.started_at,
        "machine": fp.summary(record.fingerprint),
        "digest": record.digest,
        "platform": platform_of(record)["platform"],
        "settings": record.settings,
    }


def compare(
    a: RunRecord, b: RunRecord, *, allow_different: bool = False
) -> Comparison:
    """Compare two profile runs of one notebook (under different machines, settings or versions).

    Runs of two different notebooks (:func:`nbscope.record.cells.same_notebook`) are refused: their
    totals and paired cells would read as a speed-up. ``allow_different`` compares them anyway, and the
    comparison says so. Cells are paired with the code that ran (``record.sources``).
    """
    check_profile(a, "A")
    check_profile(b, "B")
    same = same_notebook(a, b)
    if not same and not allow_different:
        raise NbscopeError(
            f"{label(a, 'A')} is of {a.target} and {label(b, 'B')} of {b.target}: different notebooks "
            "(pass --allow-different to compare them anyway)"
        )
    pairs = pair_cells(a.measurements["cells"], b.measurements["cells"], sources=sources_of(a, b))
    floors: list[float] = []
    comparison = Comparison(a=a, b=b, pairs=pairs, differences=differences(a, b),
                            label_a=label(a, "A"), label_b=label(b, "B"), same_notebook=same)
    for pair in pairs:
        fa, fb = cell_figures(pair.a), cell_figures(pair.b)
        ref = pair.a or pair.b or {}
        row: dict[str, Any] = {
            "index_a": fa["index"] if fa else None,
            "index_b": fb["index"] if fb else None,
            "line": ref.get("line"),
            "first_line": ref.get("first_line"),
            "code_line": shown_line(ref),
            "source_hash": ref.get("source_hash"),
            "match": pair.match,
            "similarity": pair.similarity,
            "a": fa,
            "b": fb,
        }
        wall_a, wall_b = (fa or {}).get("wall_s"), (fb or {}).get("wall_s")
        row["ratio_b_over_a"] = (
            round(wall_b / wall_a, 4) if isinstance(wall_a, (int, float)) and isinstance(wall_b, (int, float)) and wall_a > 0 else None
        )
        row["delta_s"] = wall_b - wall_a if isinstance(wall_a, (int, float)) and isinstance(wall_b, (int, float)) else None
        row.update(winner(wall_a, wall_b))
        if pair.a is not None and pair.b is not None:
            pair_noise = noise.pair_noise(pair.a, pair.b)
            judged_delta = (pair_noise.cand_s - pair_noise.base_s
                            if pair_noise.base_s is not None and pair_noise.cand_s is not None else None)
            row.update(within_noise(row, pair_noise.floor_s, judged_delta, pair_noise.judged))
            floors.append(pair_noise.floor_s)
        comparison.rows.append(row)
    comparison.totals = compare_totals(a, b)
    # The machine slows every cell of a run together: the totals' noise is the sum of the cells'.
    if comparison.paired_all and floors:
        wall = comparison.totals["wall_s"]
        delta = (wall["b"] - wall["a"]) if all(noise.time_of(wall[k]) is not None for k in ("a", "b")) else None
        comparison.totals["wall_s"] = within_noise(wall, sum(floors), delta, "wall")
    return comparison


def compare_totals(a: RunRecord, b: RunRecord) -> dict[str, Any]:
    ta, tb = a.measurements.get("totals") or {}, b.measurements.get("totals") or {}
    result: dict[str, Any] = {}
    for key in TOTAL_KEYS:
        va, vb = ta.get(key), tb.get(key)
        entry: dict[str, Any] = {"a": va, "b": vb}
        if key.endswith("_s"):
            entry.update(winner(va, vb))
        result[key] = entry
    return result


# ---- differences ------------------------------------------------------------------------------------


def _settings_rows(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    rows = []
    sa, sb = a.settings or {}, b.settings or {}
    for key in sorted(set(sa) | set(sb)):
        va, vb = sa.get(key), sb.get(key)
        if key == "env":
            env_a, env_b = va or {}, vb or {}
            for name in sorted(set(env_a) | set(env_b)):
                if env_a.get(name) != env_b.get(name):
                    rows.append(_row(f"settings.env.{name}", env_a.get(name), env_b.get(name), "setting"))
        elif va != vb:
            rows.append(_row(f"settings.{key}", va, vb, "setting"))
    return rows


def _derived_rows(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    rows = []
    pa, pb = platform_of(a), platform_of(b)
    if pa["platform"] != pb["platform"]:
        rows.append(_row("derived.platform", pa["platform"], pb["platform"], "derived",
                         note=f"A from {pa['source']}; B from {pb['source']}"))
    ca = (a.measurements.get("totals") or {}).get("cache_state")
    cb = (b.measurements.get("totals") or {}).get("cache_state")
    if ca != cb:
        rows.append(_row("derived.cache_state", ca, cb, "derived"))
    xa, xb = x64_of(a), x64_of(b)
    if xa["x64"] is not None and xb["x64"] is not None and xa["x64"] != xb["x64"]:
        rows.append(_row("derived.x64", xa["x64"], xb["x64"], "derived", note=f"A: {xa['source']}; B: {xb['source']}"))
    pathway_a = (a.measurements.get("runner") or {}).get("pathway")
    pathway_b = (b.measurements.get("runner") or {}).get("pathway")
    if pathway_a != pathway_b and "pathway" not in (a.settings or {}):
        rows.append(_row("derived.pathway", pathway_a, pathway_b, "derived"))
    if a.target != b.target:
        rows.append(_row("target", a.target, b.target, "run", note="different notebooks"))
    if a.tool_version != b.tool_version:
        rows.append(_row("tool_version", a.tool_version, b.tool_version, "run"))
    return rows


def _load_rows(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    """The load average is volatile (not in the digest), but a busy machine explains slow cells."""
    loads = []
    for record in (a, b):
        cpu = record.fingerprint.get("cpu") or {}
        load, cores = cpu.get("load_average"), cpu.get("logical_cores")
        loads.append(load[0] / cores if isinstance(load, list) and load and isinstance(cores, int) and cores else None)
    if any(x is not None and x >= 0.5 for x in loads) and loads[0] != loads[1]:
        la = (a.fingerprint.get("cpu") or {}).get("load_average")
        lb = (b.fingerprint.get("cpu") or {}).get("load_average")
        return [_row("cpu.load_average", la, lb, "machine", note="1-minute load at the start, per core ≥ 0.5 on one side")]
    return []


def _row(path: str, a: Any, b: Any, kind: str, *, note: str | None = None) -> dict[str, Any]:
    row = {"field": path, "a": a, "b": b, "kind": kind, "why": why(path)}
    if note:
        row["note"] = note
    return row


def _kind_of(path: str) -> str:
    if path.startswith("versions."):
        return "software"
    if path.startswith("environment."):
        return "environment"
    return "machine"


def differences(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    """Settings, derived state and fingerprint fields that differ, settings first."""
    rows = _settings_rows(a, b) + _derived_rows(a, b)
    for path, va, vb in fp.diff(a.fingerprint, b.fingerprint):
        if path in ("fingerprint_version",):
            continue
        rows.append(_row(path, va, vb, _kind_of(path)))
    rows += _load_rows(a, b)
    return rows
