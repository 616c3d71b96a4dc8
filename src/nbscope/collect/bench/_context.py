"""What a group sees inside its worker: its sizes, its budget, and ``bench()`` that records one figure."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from nbscope.collect.bench import _stats
from nbscope.collect.bench._config import BUDGETS, Budget, sizes_for

# A compile probe wraps the first call and fills the dict with compile_s (and details) on exit.
CompileProbe = Callable[[], AbstractContextManager[dict[str, float]]]


class BenchContext:
    """Figures and facts collected by one group run (one group, one dtype)."""

    def __init__(self, group: str, dtype: str, size: str, overrides: dict[str, Any] | None = None) -> None:
        self.group = group
        self.dtype = dtype
        self.size = size
        self.budget: Budget = BUDGETS[size]
        self.sizes = sizes_for(size, overrides)
        self.figures: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {}
        self.notes: list[str] = []
        self.reference_s: list[float] = []  # the machine-steadiness probe, see _stats.steadiness
        self._pending: list[tuple[dict[str, Any], _stats.Sampler, tuple[float, str] | None]] = []

    def param(self, name: str) -> Any:
        return self.sizes[f"{self.group}.{name}"]

    def count(self, name: str) -> int:
        """A size parameter: how many elements or calls (a whole number; --param may give anything)."""
        return _whole(self.param(name), f"{self.group}.{name}")

    def counts(self, name: str) -> list[int]:
        return [_whole(n, f"{self.group}.{name}") for n in self.param(name)]

    def bench(
        self,
        name: str,
        label: str,
        fn: Callable[..., object],
        *,
        dtype: str | None = None,
        params: dict[str, Any] | None = None,
        device: str | None = None,
        compile_probe: CompileProbe | None = None,
        setup: Callable[[], object] | None = None,
        work: tuple[float, str] | None = None,
        first: bool = True,
        steady: bool = True,
        max_inner: int = 1_000_000,
        note: str | None = None,
    ) -> dict[str, Any]:
        """Time ``fn``: its first call in this process (split into compile and run when a probe is
        given) now, and (unless ``steady`` is false) its steady state from calibrated samples at the
        next :meth:`flush`. ``work`` = (amount, unit) per call gives a throughput (amount / median)."""
        figure = self.new_figure(name, label, dtype=dtype, params=params, device=device, note=note)
        self.probe()
        if first:
            figure["first"] = first_call(fn, compile_probe=compile_probe, setup=setup)
        if steady:
            # Calibrate now (right after the first call, as warm-up); sample later, interleaved.
            sampler = _stats.Sampler(fn, self.budget, setup=setup, max_inner=max_inner)
            self._pending.append((figure, sampler, work))
        self.figures.append(figure)
        return figure

    def probe(self) -> None:
        self.reference_s.append(_stats.time_reference())

    def flush(self) -> None:
        """Take the steady-state samples of every figure benched since the last flush, round-robin,
        and fill in their statistics. Groups call it before using a steady figure; the worker after."""
        pending, self._pending = self._pending, []
        _stats.sample_interleaved([sampler for _, sampler, _ in pending], probe=self.probe)
        for figure, sampler, work in pending:
            summary = sampler.summary()
            figure["warnings"].extend(summary.pop("warnings"))
            figure["steady"] = summary
            if work is not None and summary["median_s"] > 0:
                amount, unit = work
                figure["throughput"] = {"value": amount / summary["median_s"], "unit": unit}

    def new_figure(
        self,
        name: str,
        label: str,
        *,
        dtype: str | None = None,
        params: dict[str, Any] | None = None,
        device: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        dtype = dtype or self.dtype
        return {
            "key": f"{self.group}.{name}[{dtype}]",
            "group": self.group,
            "name": name,
            "label": label,
            "dtype": dtype,
            "params": params or {},
            "device": device,
            "first": None,
            "steady": None,
            "fit": None,
            "throughput": None,
            "warnings": [],
            "note": note,
        }

    def add(self, figure: dict[str, Any]) -> None:
        self.figures.append(figure)


def _whole(value: object, name: str) -> int:
    if isinstance(value, int):
        return value
    raise TypeError(f"{name} is {value!r}, not a whole number")


def count_label(n: int) -> str:
    """1_000_000 -> "1M", 200_000 -> "200k": short row labels that still say the size."""
    for factor, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= factor and n % (factor // 10) == 0:
            return f"{n / factor:g}{suffix}"
    return f"{n:,}"


def first_call(
    fn: Callable[..., object], *, compile_probe: CompileProbe | None = None, setup: Callable[[], object] | None = None
) -> dict[str, float | None]:
    """Wall time of one call; with a probe, split into compile (what the probe saw) and run (the rest)."""
    argument = setup() if setup is not None else None
    nothing: dict[str, float] = {}
    probe = compile_probe() if compile_probe is not None else nullcontext(nothing)
    with probe as compiled:
        start = time.perf_counter()
        if setup is not None:
            fn(argument)
        else:
            fn()
        wall = time.perf_counter() - start
    result: dict[str, float | None] = {"wall_s": wall, "compile_s": None, "run_s": None}
    if compile_probe is not None:
        compile_s = float(compiled.get("compile_s", 0.0))
        # Compile events are measured inside the call, so they cannot exceed it; clamp rounding only.
        result.update(compiled)
        result["compile_s"] = min(compile_s, wall)
        result["run_s"] = max(wall - compile_s, 0.0)
    return result
