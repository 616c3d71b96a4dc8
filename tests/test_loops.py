"""``nbscope loops``: trip-count sweeps, the linear fit and the loops run record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.api.loops import run_loops
from nbscope.collect.loops import (
    LoopOptions,
    LoopsProgress,
    extrapolate,
    linear_fit,
    load_target,
    parse_target,
    run_worker,
)
from nbscope.record.store import Store
from nbscope.schema.codec import decode
from nbscope.schema.suite import LoopFit


def test_linear_fit_recovers_a_line() -> None:
    trips = [1_000.0, 10_000.0, 100_000.0, 1_000_000.0]
    fit = linear_fit(trips, [40e-6 + 5e-9 * n for n in trips])
    assert fit["a_s"] == pytest.approx(40e-6)
    assert fit["b_s"] == pytest.approx(5e-9)
    assert fit["us_per_iter"] == pytest.approx(0.005)
    assert fit["r2"] == pytest.approx(1.0)
    assert extrapolate(decode(LoopFit, fit), 10_000_000) == pytest.approx(40e-6 + 0.05)


def test_linear_fit_quality_drops_with_noise() -> None:
    fit = linear_fit([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert 0 < fit["r2"] < 0.9
    assert linear_fit([1.0, 2.0], [1.0, 1.0])["r2"] is None  # no variance to explain
    with pytest.raises(ValueError):
        linear_fit([5.0, 5.0], [1.0, 2.0])


@pytest.mark.parametrize("target", ["nocolon", ":f", "mod:", "mod:not-a-name"])
def test_malformed_target_is_refused(target: str) -> None:
    with pytest.raises(NbscopeError, match="MODULE:FUNCTION"):
        parse_target(target)


@pytest.mark.parametrize(
    "options, message",
    [
        (LoopOptions(trip_counts=[1000]), "at least two"),
        (LoopOptions(at=0), "--at"),
        (LoopOptions(placements=["gpu"]), "--device"),
        (LoopOptions(samples=0), "--samples"),
    ],
)
def test_bad_options_are_refused(options: LoopOptions, message: str) -> None:
    with pytest.raises(NbscopeError, match=message):
        options.validate()


def test_missing_module_is_a_one_line_error() -> None:
    # The worker checks the target before importing JAX: this fails in a fraction of a second.
    with pytest.raises(NbscopeError, match="no module named 'nosuchmodule'") as caught:
        run_loops(LoopOptions(target="nosuchmodule:f"), fingerprint={"digest": "0"})
    assert "\n" not in str(caught.value)


def test_worker_loads_targets_by_module_or_file(tmp_path: Path) -> None:
    # What the worker does first, before it imports JAX.
    with pytest.raises(NbscopeError, match="no module named 'nosuchpackage'"):
        load_target("nosuchpackage.sub:f")
    with pytest.raises(NbscopeError, match="has no nosuch"):
        load_target("json:nosuch")
    with pytest.raises(NbscopeError, match="not callable"):
        load_target("json:__doc__")
    script = tmp_path / "loopfile.py"
    script.write_text('def run(n):\n    """Counts."""\n    return n\n')
    function, loop = load_target(f"{script}:run")
    assert function(3) == 3 and loop == {"target": f"{script}:run", "description": "Counts."}


def test_cli_bad_targets(run_cli: Any, tmp_db: Path) -> None:
    for target, message in (("nosuchmodule:f", "no module named"), ("json:nosuch", "has no nosuch")):
        done = run_cli("loops", target, "--db", tmp_db)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nbscope: error: ") and message in lines[0]


@pytest.mark.slow
def test_builtin_sweep_on_the_default_device_and_the_cpu(run_cli: Any, tmp_db: Path) -> None:
    done = run_cli("loops", "--quick", "--json", "--db", tmp_db, timeout=300)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["kind"] == "loops" and record["target"] == "builtin:logistic-map"
    measurements = record["measurements"]
    sweeps = measurements["sweeps"]
    default_platform = measurements["jax"]["platform"]  # what JAX found on this machine
    if default_platform == "cpu":
        # No accelerator: the pinned-CPU sweep would repeat the default one.
        assert [s["placement"] for s in sweeps] == ["default"]
        assert any("default device is the CPU" in note for note in measurements["notes"])
    else:
        # An accelerator is the default device: the loop is swept there and again pinned to the CPU.
        assert [s["placement"] for s in sweeps] == ["default", "cpu"]
        assert sweeps[1]["platform"] == "cpu"
        assert not any("default device is the CPU" in note for note in measurements["notes"])
    assert sweeps[0]["platform"] == default_platform
    for sweep in sweeps:
        assert len(sweep["trip_counts"]) == len(sweep["seconds"]) >= 2
        assert sweep["trip_counts"] == sorted(sweep["trip_counts"])
        assert set(sweep["fit"]) >= {"a_s", "b_s", "us_per_iter", "r2"}
        assert sweep["fit"]["us_per_iter"] > 0
        assert sweep["fit"]["r2"] >= 0.98
    sweep = sweeps[0]
    if default_platform == "cpu":
        assert len(sweep["trip_counts"]) >= 5  # every quick trip count (a GPU may stop early: long calls)
    fit = sweep["fit"]
    estimate = measurements["extrapolation"]["estimates"][0]
    assert measurements["extrapolation"]["trip_count"] == 10_000_000
    assert estimate["seconds"] == pytest.approx(fit["a_s"] + fit["b_s"] * 10_000_000)
    assert measurements["totals"]["us_per_iter"] == fit["us_per_iter"]
    assert Store(tmp_db).runs(kind="loops")

    shown = run_cli("show", "1", "--db", tmp_db)
    assert shown.returncode == 0, shown.stderr
    assert "µs/iteration" in shown.stdout and "R²" in shown.stdout


USER_LOOP = '''
import jax
from jax import lax


@jax.jit
def _loop(n):
    return lax.fori_loop(0, n, lambda i, x: x * 0.5 + 1.0, 0.0)


def run(n):
    """fori_loop with a traced trip count."""
    return _loop(n)
'''


@pytest.mark.slow
def test_user_loop_pinned_to_cpu_with_xla_dump(run_cli: Any, tmp_path: Path, tmp_db: Path) -> None:
    (tmp_path / "userloop.py").write_text(USER_LOOP)
    done = run_cli(
        "loops",
        "userloop:run",
        "--trips",
        "10000,100000,1000000",
        "--device",
        "cpu",
        "--samples",
        "3",
        "--at",
        "5000000",
        "--xla-dump",
        "dump",
        "--json",
        "--db",
        tmp_db,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    measurements = json.loads(done.stdout)["measurements"]
    assert measurements["loop"]["description"] == "fori_loop with a traced trip count."
    sweep = measurements["sweeps"][0]
    assert sweep["placement"] == "cpu" and sweep["loop"] == "userloop:run"
    assert sweep["trip_counts"][:3] == [10_000, 100_000, 1_000_000]
    assert sweep["fit"]["r2"] >= 0.98
    assert measurements["xla_dump"]["files"] > 0
    assert any((tmp_path / "dump").iterdir())


PRINTING_LOOP = """
import jax
from jax import lax


@jax.jit
def _loop(n):
    return lax.fori_loop(0, n, lambda i, x: x * 0.5 + 1.0, 0.0)


def run(n):
    print(7)  # the target's own output, a JSON number, on the worker's standard output
    print('{"event": "sweep"}x')
    return _loop(n)
"""


def test_progress_comes_typed_and_a_target_printing_to_stdout_is_no_progress(tmp_path: Path) -> None:
    script = tmp_path / "printing_loop.py"
    script.write_text(PRINTING_LOOP)
    events: list[LoopsProgress] = []
    run_worker(
        LoopOptions(
            target=f"{script}:run",
            trip_counts=[1000, 10000],
            placements=["cpu"],
            samples=2,
            budget_s=60.0,
            timeout_s=300.0,
        ),
        events.append,
    )
    assert [e.event for e in events[:1]] == ["sweep"] and events[0].placement == "cpu" and events[0].device
    points = [e for e in events if e.event == "point"]
    assert [p.n for p in points][:2] == [1000, 10000] and all(p.seconds > 0 for p in points)
