"""``nbscope history``: series per environment, change points with their size, sparklines."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse.history import ChangeOptions, detect_changes, find_cell, history, noise_sigma, sparkline
from nbscope.record.run import RunRecord
from nbscope.record.store import Store


def make_record(
    total: float,
    *,
    digest: str = "d1",
    day: int = 1,
    target: str = "lecture.md",
    kind: str = "profile",
    cell_wall: float | None = None,
) -> RunRecord:
    cells = [
        {"index": 0, "source_hash": "aaaa111122223333", "first_line": "import numpy as np", "wall_s": 0.2},
        {
            "index": 1,
            "source_hash": "bbbb111122223333",
            "first_line": "result = simulate(10_000)",
            "wall_s": cell_wall if cell_wall is not None else total - 0.2,
            "samples": {"wall_s": [total - 0.2]},
        },
    ]
    return RunRecord(
        kind=kind,
        target=target,
        fingerprint={"digest": digest, "cpu": {"model": f"CPU {digest}", "logical_cores": 2}},
        measurements={"totals": {"wall_s": total, "compile_s": total / 10}, "cells": cells},
        command=["test"],
        started_at=f"2026-01-{day:02d}T10:00:00.000Z",
    )


def noisy(level: float, count: int, rng: random.Random, noise: float = 0.02) -> list[float]:
    return [level * (1 + rng.gauss(0, noise)) for _ in range(count)]


def test_detects_a_step_with_its_size() -> None:
    rng = random.Random(3)
    values = noisy(10.0, 8, rng) + noisy(15.0, 8, rng)
    changes = detect_changes(values)
    assert [index for index, _ in changes] == [8]


def test_detects_two_steps_and_ignores_noise() -> None:
    rng = random.Random(5)
    values = noisy(2.0, 6, rng) + noisy(4.0, 6, rng) + noisy(3.0, 6, rng)
    assert [i for i, _ in detect_changes(values)] == [6, 12]
    assert detect_changes(noisy(2.0, 30, random.Random(9), noise=0.05)) == []
    assert detect_changes([10.0] * 6 + [30.0] + [10.0] * 6) == []  # one outlier is not a level
    assert detect_changes([10.0, 10.2, 9.9, 10.1, 10.1, 30.0]) == []  # nor is a last-run jump (tentative)


def test_a_step_is_found_at_the_run_where_it_happens() -> None:
    """A step's change point is the first run of the new level, wherever the step lies in the series: the
    best-scored split alone, weighted towards balanced sides, landed one to several runs early or late in
    about two series of five."""
    rng = random.Random(37)
    for _ in range(200):
        size = rng.randint(8, 60)
        step = rng.randint(3, size - 3)
        ratio = rng.choice((1.5, 1.2, 0.7))
        values = [(1.0 if i < step else ratio) * (1 + rng.uniform(-0.03, 0.03)) for i in range(size)]
        assert [index for index, _ in detect_changes(values)] == [step], (step, values)


def test_floors_suppress_tiny_but_clean_shifts() -> None:
    values = [1.0] * 5 + [1.03] * 5  # perfectly clean, 3 % shift: below the 10 % relative floor
    assert detect_changes(values) == []
    assert [i for i, _ in detect_changes(values, ChangeOptions(rel_floor=0.01, abs_floor=0.0))] == [5]


def test_noise_sigma_ignores_the_level_shift() -> None:
    assert noise_sigma([1.0] * 10 + [5.0] * 10) == 0.0
    assert noise_sigma([]) == 0.0


def test_sparkline() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1.0, None, 1.0]) == "▄ ▄"
    assert sparkline([]) == ""


def test_find_cell_selectors() -> None:
    cells = make_record(1.0).notebook_run().cells
    assert find_cell(cells, "#2").index == 1
    assert find_cell(cells, "2").index == 1
    assert find_cell(cells, "bbbb1111").index == 1
    assert find_cell(cells, "simulate").index == 1
    assert find_cell(cells, "nothing like it") is None


@pytest.fixture
def store(tmp_db: Path) -> Store:
    """lecture.md: 6 runs at 10 s then 6 at 20 s on digest d1, and 3 runs on another machine d2."""
    store = Store(tmp_db)
    rng = random.Random(11)
    for day, total in enumerate(noisy(10.0, 6, rng) + noisy(20.0, 6, rng), start=1):
        store.save(make_record(total, day=day))
    for day in range(1, 4):
        store.save(make_record(3.0, digest="d2", day=day))
    store.save(make_record(1.0, target="other.md"))
    return store


def test_history_groups_per_digest_and_finds_the_change(store: Store) -> None:
    result = history(store, "lecture.md")
    assert [s.digest for s in result.series] == ["d1", "d2"] or {s.digest for s in result.series} == {"d1", "d2"}
    d1 = next(s for s in result.series if s.digest == "d1")
    assert len(d1.points) == 12 and d1.machine == "CPU d1 ×2"
    assert [c.index for c in d1.changes] == [6]
    change = d1.changes[0]
    assert change.ratio == pytest.approx(2.0, rel=0.05) and change.delta == pytest.approx(10.0, rel=0.05)
    assert change.run_id == d1.points[6].run_id and not change.tentative
    d2 = next(s for s in result.series if s.digest == "d2")
    assert d2.changes == []


def test_history_tentative_change_on_the_newest_run(tmp_db: Path) -> None:
    store = Store(tmp_db)
    for day, total in enumerate([10.0, 10.2, 9.9, 10.1, 30.0], start=1):
        store.save(make_record(total, day=day))
    (series,) = history(store, "lecture.md").series
    assert len(series.changes) == 1 and series.changes[0].tentative and series.changes[0].index == 4


def test_history_of_one_cell(store: Store) -> None:
    result = history(store, "lecture.md", cell="#1", digest="d1")
    (series,) = result.series
    assert all(p.value == pytest.approx(0.2) for p in series.points) and series.changes == []
    with pytest.raises(NbscopeError, match="no cell"):
        history(store, "lecture.md", cell="no such source")


def test_history_errors(store: Store) -> None:
    with pytest.raises(NbscopeError, match="stored targets"):
        history(store, "missing.md")
    with pytest.raises(NbscopeError, match="no figure"):
        history(store, "lecture.md", metric="no_such_total")


def test_history_cli(store: Store, run_cli: Any) -> None:
    done = run_cli("history", "lecture.md", "--db", store.path)
    assert done.returncode == 0, done.stderr
    assert "d1" in done.stdout and "change" in done.stdout and "×2.0" in done.stdout
    assert any(ch in done.stdout for ch in "▁▂▇█")
    done = run_cli("history", "lecture.md", "--db", store.path, "--json", "--digest", "d1")
    data = json.loads(done.stdout)
    (series,) = data["series"]
    assert series["runs"] == 12 and len(series["sparkline"]) == 12 and series["changes"][0]["index"] == 6
    done = run_cli("history", "lecture.md", "--db", store.path, "--markdown")
    assert done.stdout.startswith("### nbscope history: `lecture.md`") and "| Run |" in done.stdout
    done = run_cli("history", "nope.md", "--db", store.path)
    assert done.returncode == 2 and "no runs of 'nope.md'" in done.stderr


def test_history_series_are_split_by_measurement_settings(tmp_db: Path, run_cli: Any) -> None:
    store = Store(tmp_db)
    for day in range(1, 5):
        store.save(make_record(10.0, day=day))
        repeated = make_record(12.0, day=day + 10)
        repeated.settings = {"repeat": 4, "jax_cache": "warm"}
        store.save(repeated)
    nan_run = make_record(10.0, day=20)
    nan_run.measurements["totals"]["wall_s"] = float("nan")
    store.save(nan_run)
    result = history(store, "lecture.md")
    assert sorted((s.settings["repeat"], s.settings["jax_cache"], len(s.points)) for s in result.series) == [
        (1, "off", 5),
        (4, "warm", 4),
    ]
    plain = next(s for s in result.series if s.settings["repeat"] == 1)
    assert plain.points[-1].value is None and plain.changes == []  # NaN is a gap, not a level
    done = run_cli("history", "lecture.md", "--db", tmp_db)
    assert done.returncode == 0, done.stderr
    # Each series is labelled by what sets it apart, as the options that set it (the text may wrap at 80 columns).
    shown = " ".join(done.stdout.split())
    assert "--jax-cache warm · --repeat 4 · 4 runs" in shown
    assert "no persistent cache · --repeat 1 · 5 runs" in shown
    data = json.loads(run_cli("history", "lecture.md", "--db", tmp_db, "--json").stdout)
    assert {s["settings"]["repeat"] for s in data["series"]} == {1, 4}


def _consistent(side: list[float], own: float, other: float) -> bool:
    """More than half of a side's values lie nearer its own level than the other side's, judged one by one."""
    return sum(abs(v - own) < abs(v - other) for v in side) * 2 > len(side)


def _reference_changes(values: list[float], options: ChangeOptions) -> list[tuple[int, float]]:
    """The change-point search written plainly (sort and scan both sides at every split)."""
    import math
    import statistics

    sigma = noise_sigma(values)
    found: list[tuple[int, float]] = []

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2 * options.min_size or len(found) >= options.max_changes:
            return
        candidates = []
        for split in range(lo + options.min_size, hi - options.min_size + 1):
            left, right = values[lo:split], values[split:hi]
            low, high = statistics.median(left), statistics.median(right)
            if _consistent(left, low, high) and _consistent(right, high, low):
                weight = math.sqrt(len(left) * len(right) / (hi - lo))
                deviation = sum(abs(v - low) for v in left) + sum(abs(v - high) for v in right)
                candidates.append((abs(high - low) * weight / (sigma or 1e-12), split, deviation))
        if candidates:
            score, best, _ = max(candidates, key=lambda c: c[0])  # the first of equal scores
            # The step: of the splits scoring at least half the best, the least deviation (then the nearest).
            split = min((d, abs(at - best), at) for value, at, d in candidates if value >= score / 2)[2]
            shift = statistics.median(values[split:hi]) - statistics.median(values[lo:split])
            floor = max(options.abs_floor, options.rel_floor * abs(statistics.median(values[lo:split])))
            if score >= options.k and abs(shift) >= floor:
                found.append((split, score))
                search(lo, split)
                search(split, hi)

    search(0, len(values))
    return sorted(found)


def test_change_points_match_the_plain_search_on_random_series() -> None:
    """The sorted-sides search finds exactly what sorting and scanning at every split finds: levels, noise,
    outliers, ties at the midpoint (small integers) and identical repeats."""
    from nbscope.analyse.history import _consistent_sorted

    rng = random.Random(22)
    options = ChangeOptions()
    for trial in range(300):
        size = rng.randint(2, 60)
        kind = trial % 3
        if kind == 0:  # levels with noise
            values = [rng.choice((1.0, 2.0, 3.0)) * 10 + rng.gauss(0, 0.3) for _ in range(size)]
        elif kind == 1:  # small integers: many values at the midpoint of two levels
            values = [float(rng.randint(0, 4)) for _ in range(size)]
        else:  # a level shift with outliers
            values = [(10.0 if i < size // 2 else 14.0) + (20.0 if rng.random() < 0.1 else 0.0) for i in range(size)]
        assert detect_changes(values, options) == _reference_changes(values, options), values
        own, other = rng.choice(values), rng.choice(values)
        assert _consistent_sorted(sorted(values), own, other) == _consistent(values, own, other)
