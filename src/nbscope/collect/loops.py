"""The loop sweep behind ``nbscope loops``: the cost of one loop iteration, per device, from a sweep of trip counts.

A loop's time is ``a + b·n``: ``a`` is what a call costs whatever its length (dispatch, launch, copying
the result), ``b`` what one more iteration costs. On a CPU, XLA compiles a small ``lax.scan`` into one
kernel and ``b`` is nanoseconds; on a GPU, XLA runs dynamic loops with the host involved each iteration
and ``b`` is microseconds (the original investigation: a 10 M-step scan took 82 s on a T4 and 0.06 s on
a CPU). The sweep measures ``b`` by least squares over trip counts from 1 k to 1 M, on the default
device and pinned to the CPU, and extrapolates to the trip count a notebook uses.

The sweep runs in a fresh Python process (``python -m nbscope.collect.loops``) so JAX starts clean: no
compile caches, no devices initialised by nbscope, ``XLA_FLAGS`` (``--xla-dump``) applied from the start.

A user loop is named ``MODULE:FUNCTION`` (a module importable from the working directory, or a
``path/to/file.py``). ``FUNCTION(n)`` is called with the trip count; it runs the loop and returns the
result (JAX arrays are waited for). It may be jitted with ``n`` static: each trip count is compiled
once before it is timed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope._redact import shorten
from nbscope.schema import process_environment
from nbscope.schema.codec import decode, decode_optional
from nbscope.schema.loop_worker import WorkerOutcome

if TYPE_CHECKING:
    from jax import Array, Device

    from nbscope.schema.suite import LoopFit

BUILTIN_TARGET = "builtin:logistic-map"
BUILTIN_DESCRIPTION = "logistic map x ← 4·x·(1 − x), lax.scan over jnp.arange(n) (the lecture's qm_jax)"
DEFAULT_TRIPS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
QUICK_TRIPS = (1_000, 10_000, 100_000, 300_000, 1_000_000)
DEFAULT_AT = 10_000_000  # the lecture's trip count
PLACEMENTS = ("default", "cpu")
# Grow the sweep until the longest loop costs this many times the shortest: below that, the fixed
# cost (dispatch) dominates every point and the slope is noise.
DOMINANCE = 5.0
MAX_TRIPS = 30_000_000
# Sampling continues (within limits) until the fit explains this much of the variance.
STEADY_R2 = 0.995


@dataclass
class LoopOptions:
    """What ``nbscope loops`` sweeps; stored as the record's ``settings``."""

    target: str | None = None  # MODULE:FUNCTION; None for the built-in example
    quick: bool = False
    trip_counts: list[int] | None = None  # default: DEFAULT_TRIPS (QUICK_TRIPS with quick)
    at: int = DEFAULT_AT
    placements: list[str] = field(default_factory=lambda: list(PLACEMENTS))
    samples: int | None = None  # per trip count; default 9 (5 with quick)
    min_sample_s: float | None = None  # one sample repeats the call until it lasts this long
    call_limit_s: float = 2.0  # stop growing n once one call takes longer
    budget_s: float = 120.0  # per sweep
    xla_dump: Path | None = None
    jax_platform: str | None = None
    timeout_s: float = 900.0

    def validate(self) -> None:
        if self.target is not None:
            check_target(self.target)
        if self.trip_counts is not None:
            if len(self.trip_counts) < 2 or any(n < 1 for n in self.trip_counts):
                raise NbscopeError("--trips needs at least two positive trip counts")
        if self.at < 1:
            raise NbscopeError("--at must be a positive trip count")
        unknown = [p for p in self.placements if p not in PLACEMENTS]
        if unknown or not self.placements:
            raise NbscopeError(f"--device takes {' and/or '.join(PLACEMENTS)}, not {','.join(unknown) or 'nothing'}")
        if self.samples is not None and self.samples < 1:
            raise NbscopeError("--samples must be at least 1")

    def resolved(self) -> dict[str, Any]:
        """The settings as the worker uses them (defaults filled in)."""
        settings = asdict(self)
        settings["trip_counts"] = sorted(set(self.trip_counts or (QUICK_TRIPS if self.quick else DEFAULT_TRIPS)))
        settings["samples"] = self.samples or (5 if self.quick else 9)
        settings["min_sample_s"] = self.min_sample_s or (0.005 if self.quick else 0.01)
        settings["xla_dump"] = str(self.xla_dump.resolve()) if self.xla_dump else None
        return settings


def parse_target(target: str) -> tuple[str, str]:
    """``MODULE:FUNCTION`` → (module, function), with a one-line error for anything else."""
    module, sep, function = target.rpartition(":")
    if not sep or not module or not function.isidentifier():
        raise NbscopeError(f"loop target {target!r}: expected MODULE:FUNCTION (e.g. mymodule:run_loop)")
    return module, function


def check_target(target: str) -> None:
    """Refuse a target whose module cannot exist, without importing anything (the worker imports it)."""
    module, _ = parse_target(target)
    if module.endswith(".py") or os.sep in module:
        if not Path(module).is_file():
            raise NbscopeError(f"loop target {target!r}: no such file {module}")
    elif "." not in module:  # a dotted name would import its parent packages here: the worker checks it
        import importlib.machinery

        if importlib.machinery.PathFinder.find_spec(module, [os.getcwd(), *sys.path]) is None and (
            module not in sys.builtin_module_names
        ):
            raise NbscopeError(f"loop target {target!r}: no module named {module!r}")


# ---- the fit -----------------------------------------------------------------------------------


def linear_fit(trips: Sequence[float], seconds: Sequence[float]) -> dict[str, float | None]:
    """Least-squares ``seconds = a + b·trips``: a_s, b_s, us_per_iter and R²."""
    if len(trips) != len(seconds) or len(trips) < 2:
        raise ValueError("a fit needs at least two points")
    mean_n, mean_t = statistics.fmean(trips), statistics.fmean(seconds)
    sxx = sum((n - mean_n) ** 2 for n in trips)
    if sxx == 0:
        raise ValueError("a fit needs at least two different trip counts")
    sxy = sum((n - mean_n) * (t - mean_t) for n, t in zip(trips, seconds, strict=True))
    b = sxy / sxx
    a = mean_t - b * mean_n
    ss_res = sum((t - (a + b * n)) ** 2 for n, t in zip(trips, seconds, strict=True))
    ss_tot = sum((t - mean_t) ** 2 for t in seconds)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    return {"a_s": a, "b_s": b, "us_per_iter": b * 1e6, "r2": r2}


def extrapolate(fit: LoopFit, trips: int) -> float | None:
    """The fit's time at ``trips`` (None: a fit without its line's figures)."""
    return None if fit.a_s is None or fit.b_s is None else float(fit.a_s + fit.b_s * trips)


# ---- the parent: run the worker, build the record ------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopsProgress:
    """A line the worker prints as it goes: a placement's sweep starting (``sweep``, on ``device``), or the time
    of ``n`` trips (``point``)."""

    event: str
    placement: str
    device: str = ""
    n: int = 0
    seconds: float = 0.0


Progress = Callable[[LoopsProgress], None]


def _progress_event(line: str) -> LoopsProgress | None:
    """The worker's progress line, or None for anything else on its output (the target's own prints)."""
    try:
        document = json.loads(line)
    except json.JSONDecodeError:
        return None
    event = decode_optional(LoopsProgress, document)
    return event if event is not None and event.event in ("sweep", "point") else None


def worker_env(options: LoopOptions) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # progress lines arrive as they happen
    if options.jax_platform:
        env["JAX_PLATFORMS"] = options.jax_platform
    if options.xla_dump is not None:
        flags = process_environment.read().xla_flags or ""
        env["XLA_FLAGS"] = f"{flags} --xla_dump_to={options.xla_dump.resolve()}".strip()
    return env


def run_worker(options: LoopOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Run the sweep in a fresh process; returns its result document or raises NbscopeError."""
    settings = options.resolved()
    with tempfile.TemporaryDirectory(prefix="nbscope-loops-") as tmp:
        spec, out, log = Path(tmp) / "spec.json", Path(tmp) / "result.json", Path(tmp) / "stderr.txt"
        spec.write_text(json.dumps(settings))
        if options.xla_dump is not None:
            options.xla_dump.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "nbscope.collect.loops", "--spec", str(spec), "--out", str(out)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=worker_env(options),
                text=True,
            )
            deadline = time.monotonic() + options.timeout_s
            try:
                assert process.stdout is not None
                for line in process.stdout:  # progress, one JSON object a line
                    if progress is not None and (event := _progress_event(line)) is not None:
                        progress(event)
                    if time.monotonic() > deadline:
                        break
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
                if time.monotonic() > deadline:
                    raise NbscopeError(f"loop sweep exceeded {options.timeout_s:g} s") from None
                raise
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        result: dict[str, Any] | None = None
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            result = json.loads(out.read_text())
        error = decode(WorkerOutcome, result).error if result is not None else None
        if error:
            raise NbscopeError(error)
        if result is None or process.returncode != 0:
            tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            why = tail[-1] if tail else f"exit status {process.returncode}"
            raise NbscopeError(f"loop sweep failed: {shorten(why, 300)}")
        return result


# ---- the worker: runs in a fresh process ----------------------------------------------------------


def _emit(event: dict[str, Any]) -> None:
    print(json.dumps(event, default=str), flush=True)


def load_target(target: str | None) -> tuple[Callable[[int], Any], dict[str, Any]]:
    """The loop function and its description; raises NbscopeError for a bad target (before JAX loads)."""
    if target is None:
        return _builtin_loop(), {"target": BUILTIN_TARGET, "description": BUILTIN_DESCRIPTION}
    module_name, function_name = parse_target(target)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise NbscopeError(f"loop target {target!r}: no such file {module_name}")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise NbscopeError(f"loop target {target!r}: cannot load {module_name}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except NbscopeError:
        raise
    except ModuleNotFoundError as exc:
        raise NbscopeError(f"loop target {target!r}: no module named {exc.name or module_name!r}") from None
    except Exception as exc:
        raise NbscopeError(
            f"loop target {target!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, function_name, None)
    if function is None:
        raise NbscopeError(f"loop target {target!r}: {module_name} has no {function_name}")
    if not callable(function):
        raise NbscopeError(f"loop target {target!r}: {function_name} is not callable")
    doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
    return function, {"target": target, "description": doc[0] if doc else None}


def _builtin_loop() -> Callable[[int], Any]:
    from functools import partial

    import jax
    import jax.numpy as jnp
    from jax import lax

    # As in the lecture (numpy_vs_numba_vs_jax): n is static, so each trip count compiles once.
    @partial(jax.jit, static_argnums=(1,))
    def qm_jax(x0: Array, n: int, alpha: float = 4.0) -> Array:
        def update(x: Array, t: Array) -> tuple[Array, Array]:
            x_new = alpha * x * (1 - x)
            return x_new, x_new

        _, x = lax.scan(update, x0, jnp.arange(n))
        return jnp.concatenate([jnp.array([x0]), x])

    return lambda n: qm_jax(0.1, n)


@dataclass
class _Sweeper:
    """Times one loop function at several trip counts on one placement."""

    jax: ModuleType
    function: Callable[[int], Any]
    placement: str
    device: Device | None
    settings: dict[str, Any]
    current: int = 0  # the trip count being measured (for an error message)

    def call(self, n: int) -> float:
        self.current = n
        # Uncommitted inputs (Python scalars, jnp.arange) land on the default device: pin the chosen one.
        pinned = self.jax.default_device(self.device) if self.device is not None else contextlib.nullcontext()
        start = time.perf_counter()
        with pinned:
            self.jax.block_until_ready(self.function(n))
        return time.perf_counter() - start

    def warm(self, n: int) -> dict[str, Any]:
        """Compile this trip count (n is usually static) and estimate one call's time."""
        first = self.call(n)
        single = min(self.call(n) for _ in range(3))  # the least disturbed of a few calls
        inner = max(1, min(10_000, math.ceil(self.settings["min_sample_s"] / max(single, 1e-9))))
        return {"n": n, "first_s": first, "single_s": single, "inner": inner, "samples": [], "cpu_samples": []}

    def sample(self, point: dict[str, Any]) -> None:
        n, inner = point["n"], point["inner"]
        cpu_start, start = time.process_time(), time.perf_counter()
        for _ in range(inner):
            self.call(n)
        point["samples"].append((time.perf_counter() - start) / inner)
        # Process CPU time leaves out the time other processes held the cores: on a CPU device it is
        # the loop's cost without the machine's load (on a GPU it is only the host's part).
        point["cpu_samples"].append((time.process_time() - cpu_start) / inner)

    def fit(self, points: list[dict[str, Any]], key: str = "samples") -> dict[str, Any]:
        return linear_fit([float(p["n"]) for p in points], [statistics.median(p[key]) for p in points])

    def _warm_points(self, trips: list[int], started: float, notes: list[str]) -> list[dict[str, Any]]:
        """Phase 1, in increasing n: compile and warm each trip count; stop growing n when one call gets long (a
        GPU at µs per iteration), and grow it when the fixed cost still hides the slope."""
        limit, budget = self.settings["call_limit_s"], self.settings["budget_s"]
        points: list[dict[str, Any]] = []
        pending = list(trips)
        while pending:
            n = pending.pop(0)
            point = self.warm(n)
            points.append(point)
            if max(point["first_s"], point["single_s"]) > limit:
                if pending:
                    notes.append(f"{self.placement}: stopped at {n} trips (a call took > {limit:g} s)")
                break
            if time.perf_counter() - started > budget / 2:
                if pending:
                    notes.append(f"{self.placement}: stopped at {n} trips (sweep budget {budget:g} s)")
                break
            if not pending and len(points) >= 2 and n * 3 <= MAX_TRIPS:
                # The per-iteration cost must dominate the fixed cost somewhere, or the slope is noise.
                if points[-1]["single_s"] < DOMINANCE * points[0]["single_s"]:
                    pending.append(n * 3)
                    notes.append(f"{self.placement}: added {n * 3} trips (the fixed cost still dominated)")
        return points

    def _sample_rounds(self, points: list[dict[str, Any]], started: float, notes: list[str]) -> int:
        """Phase 2: samples in rounds over all trip counts, so that a burst of load from elsewhere on the machine
        lands on every trip count alike instead of bending one point of the line. On a busy machine, more rounds
        follow (up to 4× as many) until the medians lie on a line. How many rounds ran."""
        limit, budget = self.settings["call_limit_s"], self.settings["budget_s"]
        gc_enabled = gc.isenabled()
        gc.disable()  # a collection inside one sample is noise, not the loop's cost
        rounds, most = 0, self.settings["samples"] * 4
        try:
            while rounds < most:
                for point in points:
                    if point["single_s"] > limit / 4 and len(point["samples"]) >= 3:
                        continue  # long calls: three samples are enough
                    self.sample(point)
                rounds += 1
                if time.perf_counter() - started > budget:
                    notes.append(
                        f"{self.placement}: stopped sampling after {rounds} rounds (sweep budget {budget:g} s)"
                    )
                    break
                if rounds >= self.settings["samples"] and (
                    len(points) < 2 or (self.fit(points)["r2"] or 0.0) >= STEADY_R2
                ):
                    break
        finally:
            if gc_enabled:
                gc.enable()
        if rounds > self.settings["samples"]:
            notes.append(f"{self.placement}: {rounds} sampling rounds (the machine was busy: first fits were noisy)")
        return rounds

    def sweep(self, trips: list[int]) -> dict[str, Any]:
        started = time.perf_counter()
        notes: list[str] = []
        points = self._warm_points(trips, started, notes)
        rounds = self._sample_rounds(points, started, notes)
        for point in points:
            point["seconds"] = statistics.median(point["samples"])
            _emit({"event": "point", "placement": self.placement, "n": point["n"], "seconds": point["seconds"]})
        sweep: dict[str, Any] = {
            "placement": self.placement,
            "trip_counts": [p["n"] for p in points],
            "seconds": [p["seconds"] for p in points],
            "first_call_s": [p["first_s"] for p in points],
            "samples": [p["samples"] for p in points],
            "cpu_seconds": [statistics.median(p["cpu_samples"]) for p in points],
            "inner": [p["inner"] for p in points],
            "rounds": rounds,
            "notes": notes,
            "fit": None,
        }
        if len(points) >= 2:
            fit = self.fit(points)
            sweep["cpu_fit"] = self.fit(points, "cpu_samples")
            # The slope that the two longest loops give alone: a check on the fit's own slope.
            last, before = points[-1], points[-2]
            fit["us_per_iter_top"] = (last["seconds"] - before["seconds"]) / (last["n"] - before["n"]) * 1e6
            sweep["fit"] = fit
        else:
            notes.append(f"{self.placement}: fewer than two trip counts measured, no fit")
        return sweep


def worker(settings: dict[str, Any]) -> dict[str, Any]:
    """The sweep itself (in the fresh process); returns the result document."""
    function, loop = load_target(settings["target"])  # a bad target fails before JAX loads
    import jax

    default = jax.devices()[0]
    notes: list[str] = []
    placements: list[tuple[str, Any]] = []
    for placement in settings["placements"]:
        if placement == "default":
            placements.append(("default", None))
            continue
        try:
            cpu = jax.devices("cpu")[0]
        except RuntimeError as exc:  # JAX_PLATFORMS without cpu
            notes.append(f"cpu: not run, no CPU device ({exc})")
            continue
        if cpu == default and "default" in settings["placements"]:
            notes.append("cpu: not run separately, the default device is the CPU")
            continue
        placements.append(("cpu", cpu))
    sweeps = []
    for placement, device in placements:
        _emit({"event": "sweep", "placement": placement, "device": str(device or default)})
        sweeper = _Sweeper(jax, function, placement, device, settings)
        try:
            sweep = sweeper.sweep(list(settings["trip_counts"]))
        except NbscopeError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()
            raise NbscopeError(
                shorten(
                    f"{loop['target']}({sweeper.current}) on {placement} raised {type(exc).__name__}: "
                    f"{text[0] if text else ''}",
                    300,
                )
            ) from None
        shown = device or default
        sweep.update(
            device=str(shown),
            platform=getattr(shown, "platform", None),
            device_kind=getattr(shown, "device_kind", None),
        )
        sweep["loop"] = loop["target"]
        notes.extend(sweep["notes"])
        sweeps.append(sweep)
    return {
        "loop": loop,
        "jax": {
            "version": jax.__version__,
            "default_device": str(default),
            "platform": default.platform,
            "x64": bool(jax.config.read("jax_enable_x64")),
        },
        "sweeps": sweeps,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbscope.collect.loops", description="nbscope loop-sweep worker")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    settings = json.loads(args.spec.read_text())
    try:
        result = worker(settings)
    except NbscopeError as exc:
        result = {"error": str(exc)}
    args.out.write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
