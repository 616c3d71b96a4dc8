"""Calibrated repeated timing and the statistics reported with every steady-state figure.

Pure Python (no numpy) so the parent process, the workers and the tests share one definition.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NotRequired, TypedDict

from nbscope.collect.bench._config import Budget
from nbscope.schema.suite import Steadiness

MIN_SAMPLES = 5
SPREAD_WARN = 0.10  # relative spread (MAD / median) above which a figure is flagged

_clock = time.perf_counter


def _calibrate(timed: Callable[[int], float], min_sample_s: float, max_inner: int) -> tuple[int, float]:
    """How many calls make one sample last ``min_sample_s``; also the per-call time of the last trial.

    The trial runs are warm-up too. The last trial used the returned count, so its time is a valid sample.
    """
    inner = 1
    while True:
        elapsed = timed(inner)
        if elapsed >= min_sample_s or inner >= max_inner:
            return inner, elapsed / inner
        # Aim a little past the target so one more trial usually suffices; grow at least ×2.
        guess = math.ceil(inner * min_sample_s / max(elapsed, 1e-9) * 1.2)
        inner = min(max_inner, max(inner * 2, min(guess, inner * 100)))


def _time_calls(fn: Callable[[], object], inner: int) -> float:
    start = _clock()
    for _ in range(inner):
        fn()
    return _clock() - start


class Sampler:
    """Calibrated repeated timing of one operation, one sample at a time.

    Samples are taken interleaved with other operations' samples (:func:`sample_interleaved`). On a
    virtual machine the speed drifts over seconds, so back-to-back samples agree with each other better
    than with a later run: interleaving spreads each figure's samples over the group's whole run, and its
    spread then shows that drift.

    With ``setup``, every call gets a fresh argument from it, made before the timed block (for
    operations that cache their result, like a device-to-host copy); ``max_inner`` then bounds how many
    such arguments one sample holds at once (memory).
    """

    def __init__(
        self,
        fn: Callable[..., object],
        budget: Budget,
        *,
        setup: Callable[[], object] | None = None,
        max_inner: int = 1_000_000,
    ) -> None:
        self.fn, self.setup, self.budget = fn, setup, budget
        with _gc_paused():
            self.inner, first = _calibrate(self._timed, budget.min_sample_s, max_inner)
        self.samples = [first]
        self.spent = first * self.inner  # wall time spent sampling, against budget.target_s

    def _timed(self, inner: int) -> float:
        if self.setup is None:
            return _time_calls(self.fn, inner)
        arguments = [self.setup() for _ in range(inner)]
        start = _clock()
        for argument in arguments:
            self.fn(argument)
        return _clock() - start

    @property
    def done(self) -> bool:
        if len(self.samples) >= self.budget.max_samples:
            return True
        return len(self.samples) >= MIN_SAMPLES and self.spent >= self.budget.target_s

    def take(self) -> None:
        start = _clock()
        elapsed = self._timed(self.inner)
        self.samples.append(elapsed / self.inner)
        self.spent += _clock() - start  # with the untimed setup: the budget is wall time

    def summary(self) -> Summary:
        return summarise(self.samples, self.inner)


def sample_interleaved(samplers: Sequence[Sampler], probe: Callable[[], object] | None = None) -> None:
    """Take samples round-robin over ``samplers`` until each has its budget; ``probe()`` once a round."""
    with _gc_paused():
        active = [s for s in samplers if not s.done]
        while active:
            if probe is not None:
                probe()
            for sampler in active:
                sampler.take()
            active = [s for s in active if not s.done]


# The machine's own steadiness: a fixed pure-Python workload timed now and then during every group.
# On a shared virtual machine its speed can flip by 2× for seconds at a time (a busy neighbour on the
# same physical core, invisible from inside); no figure measured then is better known than that.
REFERENCE_N = 20_000


def reference_workload() -> int:
    total = 0
    for i in range(REFERENCE_N):
        total += i
    return total


def time_reference() -> float:
    start = _clock()
    reference_workload()
    return _clock() - start


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def steadiness(reference_s: Sequence[float]) -> Steadiness | None:
    """How much the reference workload's time varied: half the 10–90 % range over the median.

    Not the MAD: a slow state that lasts a third of the run leaves the MAD small but moves a figure
    measured during it by the whole difference.
    """
    if len(reference_s) < MIN_SAMPLES:
        return None
    median = statistics.median(reference_s)
    low, high = quantile(reference_s, 0.1), quantile(reference_s, 0.9)
    return Steadiness(
        workload=f"pure-Python loop of {REFERENCE_N:,} additions",
        samples=len(reference_s),
        median_s=median,
        p10_s=low,
        p90_s=high,
        min_s=min(reference_s),
        max_s=max(reference_s),
        spread=(high - low) / 2 / median if median > 0 else None,
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()  # a collection inside one sample is noise, not the operation's cost
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Summary(TypedDict):
    """A figure's steady state: its per-call times' statistics (``warnings``: taken out into the figure's)."""

    median_s: float
    min_s: float
    max_s: float
    mad_s: float
    spread: float | None
    samples: int
    inner: int
    samples_s: list[float]
    warnings: NotRequired[list[str]]


class Fit(TypedDict):
    slope: float
    intercept: float
    slope_stderr: float | None
    residual_stderr: float | None
    propagated_stderr: float | None
    r2: float
    points: int


def summarise(samples: Sequence[float], inner: int = 1) -> Summary:
    """Median, min, max, MAD and relative spread (MAD / median) of per-call times, with warnings."""
    values = [float(v) for v in samples]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    spread = mad / median if median > 0 else None
    summary: Summary = {
        "median_s": median,
        "min_s": min(values),
        "max_s": max(values),
        "mad_s": mad,
        "spread": spread,
        "samples": len(values),
        "inner": inner,
        "samples_s": [float(f"{v:.6g}") for v in values],
    }
    summary["warnings"] = warnings_for(len(values), spread)
    return summary


def warnings_for(samples: int, spread: float | None) -> list[str]:
    """What makes a steady figure less trustworthy: too few samples, or too wide a spread."""
    notes = []
    if samples < MIN_SAMPLES:
        notes.append(f"only {samples} samples (< {MIN_SAMPLES})")
    if spread is not None and spread > SPREAD_WARN:
        notes.append(f"spread {spread:.0%} > {SPREAD_WARN:.0%}")
    return notes


def linear_fit(xs: Sequence[float], ys: Sequence[float], y_errors: Sequence[float] | None = None) -> Fit:
    """Ordinary least squares ``y = intercept + slope·x``, with r² and the slope's standard error.

    The standard error is the larger of the one from the residuals and, when ``y_errors`` (absolute
    uncertainties of the ys) are given, the one they propagate to the slope: with four points that lie
    on a line the residuals alone would claim a precision the medians do not have.
    """
    n = len(xs)
    if n < 2 or n != len(ys):
        raise ValueError("a linear fit needs at least two (x, y) points")
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    total = sum((y - mean_y) ** 2 for y in ys)
    residual_stderr = math.sqrt(residual / (n - 2) / sxx) if n > 2 else None
    propagated = None
    if y_errors is not None:
        propagated = math.sqrt(sum(((x - mean_x) / sxx * e) ** 2 for x, e in zip(xs, y_errors, strict=True)))
    candidates = [v for v in (residual_stderr, propagated) if v is not None]
    return {
        "slope": slope,
        "intercept": intercept,
        "slope_stderr": max(candidates) if candidates else None,
        "residual_stderr": residual_stderr,
        "propagated_stderr": propagated,
        "r2": 1 - residual / total if total > 0 else 1.0,
        "points": n,
    }
