"""nbscope bench: statistics, worker protocol, skips without jax/numba, CLI, and no dead-code kernels."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.api.bench import count_figures, run_bench
from nbscope.collect.bench import _stats
from nbscope.collect.bench._config import Budget, parse_groups
from nbscope.collect.bench._runner import run_worker
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.render.bench import bench_markdown, print_bench
from nbscope.schema.codec import decode
from nbscope.schema.suite import GroupFigure

FAKE_FINGERPRINT = {"digest": "0123456789ab", "cpu": {"model": "test CPU", "logical_cores": 2}, "gpu": {}}


# --- statistics -------------------------------------------------------------------------------------


def test_summarise_reports_median_min_mad_and_relative_spread() -> None:
    summary = _stats.summarise([1.0, 1.1, 0.9, 1.0, 5.0])
    assert summary["median_s"] == 1.0
    assert summary["min_s"] == 0.9
    assert summary["max_s"] == 5.0
    assert summary["mad_s"] == pytest.approx(0.1)
    assert summary["spread"] == pytest.approx(0.1)
    assert summary["samples"] == 5
    assert summary["warnings"] == []


def test_summarise_warns_on_high_spread_and_on_too_few_samples() -> None:
    noisy = _stats.summarise([1.0, 1.5, 0.5, 1.0, 1.4])
    assert any("spread" in w for w in noisy["warnings"])
    few = _stats.summarise([1.0, 1.0, 1.0])
    assert any("only 3 samples" in w for w in few["warnings"])


def _sample(fn: Callable[..., Any], budget: Budget, **options: Any) -> tuple[list[float], int]:
    """Per-call times of one operation's samples and the calls per sample, taken as a group takes them."""
    sampler = _stats.Sampler(fn, budget, **options)
    _stats.sample_interleaved([sampler])
    return sampler.samples, sampler.inner


def test_calibration_repeats_a_fast_call_until_a_sample_is_long_enough() -> None:
    calls = []
    calibrated = _stats.Sampler(lambda: calls.append(1), Budget(min_sample_s=0.002, target_s=0.0, max_samples=1))
    assert calibrated.inner > 10
    assert calibrated.samples[0] > 0  # the last trial's per-call time
    samples, inner = _sample(lambda: None, Budget(min_sample_s=0.001, target_s=0.01, max_samples=8))
    assert _stats.MIN_SAMPLES <= len(samples) <= 8
    assert inner > 1


def test_sampling_takes_at_least_five_samples_of_a_slow_call() -> None:
    import time

    samples, inner = _sample(lambda: time.sleep(0.004), Budget(min_sample_s=0.001, target_s=0.0, max_samples=50))
    assert len(samples) == _stats.MIN_SAMPLES
    assert inner == 1
    assert min(samples) >= 0.004


def test_setup_gives_every_call_a_fresh_untimed_argument() -> None:
    made = []

    def setup() -> int:
        made.append(1)
        return len(made)

    seen = []
    samples, inner = _sample(seen.append, Budget(0.001, 0.0, 10), setup=setup, max_inner=4)
    assert 1 <= inner <= 4
    assert seen == list(range(1, len(made) + 1))  # each call had its own argument
    assert len(seen) >= len(samples) * inner


def test_linear_fit_recovers_slope_and_intercept() -> None:
    xs = [1e3, 1e4, 3e4, 1e5]
    fit = _stats.linear_fit(xs, [2e-5 + 4e-9 * n for n in xs])
    assert fit["slope"] == pytest.approx(4e-9)
    assert fit["intercept"] == pytest.approx(2e-5)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["slope_stderr"] == pytest.approx(0.0, abs=1e-15)
    # Points exactly on a line still carry their medians' uncertainty into the slope.
    fit = _stats.linear_fit(xs, [2e-5 + 4e-9 * n for n in xs], [1e-5] * 4)
    assert fit["slope_stderr"] == fit["propagated_stderr"] > 0


def test_a_figure_is_read_with_its_spread() -> None:
    steady = {"steady": {"median_s": 2.0, "spread": 0.1}}
    fit = {"fit": {"per_iter_s": 3e-9, "spread": 0.02}}
    assert decode(GroupFigure, steady).reported() == (2.0, 0.1)
    assert decode(GroupFigure, fit).reported() == (3e-9, 0.02)
    assert decode(GroupFigure, {"first": {"wall_s": 1.0}}).reported() is None
    raised = {"steady": {"median_s": 2.0, "spread": 0.01, "uncertainty": 0.3}}
    assert decode(GroupFigure, raised).reported() == (2.0, 0.3)
    assert decode(GroupFigure, raised).reported(machine=False) == (2.0, 0.01)


def test_steadiness_sees_a_slow_state_that_the_mad_would_hide() -> None:
    fast, slow = [7e-3] * 14, [13e-3] * 6  # 30 % of the probes in a 1.9x slower state
    machine = _stats.steadiness(fast + slow)
    assert machine is not None and machine.median_s == 7e-3
    assert _stats.summarise(fast + slow)["spread"] == 0.0  # the MAD does not see it
    assert machine.spread == pytest.approx((13e-3 - 7e-3) / 2 / 7e-3)
    steady = _stats.steadiness([1e-3] * 20)
    assert steady is not None and steady.spread == 0.0
    assert _stats.steadiness([1e-3] * 3) is None  # too few probes to say
    assert _stats.time_reference() > 0


# --- options --------------------------------------------------------------------------------------


def test_groups_parse_in_suite_order_with_comma_lists() -> None:
    assert parse_groups(["jax,numpy", "multi_size"]) == ["numpy", "jax", "multi-size"]
    assert parse_groups(None)[0] == "python"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"only": ["numpy,gpu"]}, "unknown benchmark group 'gpu'"),
        ({"dtype": "float16"}, "unknown --dtype 'float16'"),
        ({"size": "huge"}, "unknown --size 'huge'"),
        ({"overrides": {"numba.m": 3}}, "unknown size parameter 'numba.m'"),
    ],
)
def test_user_errors_are_one_line_nbscope_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(NbscopeError, match=message) as info:
        run_bench(fingerprint=FAKE_FINGERPRINT, **kwargs)
    assert "\n" not in str(info.value)


def test_cli_user_error_prints_one_line_and_exits_2(run_cli, tmp_db: Path) -> None:
    result = run_cli("bench", "--only", "python,nope", "--db", tmp_db)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "nbscope: error: unknown benchmark group 'nope' for --only; choose from python, numpy, numba, jax, "
        "multi-size, dispatch, transfer, loops"
    ]
    result = run_cli("bench", "--dtype", "half", "--db", tmp_db)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not tmp_db.exists()


# --- worker and record --------------------------------------------------------------------------


def _figure_ok(figure: dict) -> None:
    assert figure["dtype"]
    assert figure["key"].endswith(f"[{figure['dtype']}]")
    if figure["steady"] is not None:
        steady = figure["steady"]
        assert steady["samples"] >= _stats.MIN_SAMPLES
        assert steady["min_s"] <= steady["median_s"] <= steady["max_s"]
        assert len(steady["samples_s"]) == steady["samples"]


def test_python_and_numpy_in_both_dtypes_give_a_valid_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = []
    record = run_bench(
        only=["python,numpy"],
        dtype="both",
        size="quick",
        fingerprint=FAKE_FINGERPRINT,
        overrides={
            "python.int_sum_n": 100_000,
            "python.sqrt_n": 50_000,
            "numpy.matmul_n": 100,
            "numpy.elementwise_n": 10_000,
        },
        progress=lambda event: events.append((event.event, event.group, event.dtype)),
    )
    assert record.kind == "bench" and record.target == "suite:quick" and record.status == "ok"
    document = json.loads(record.to_json())
    assert RunRecord.from_dict(document).measurements["totals"]["figures"] == record.measurements["totals"]["figures"]
    groups = record.measurements["groups"]
    assert list(groups) == ["python", "numpy"]
    # python does not depend on the dtype: one process; numpy runs once per dtype.
    assert [run["dtype"] for run in groups["python"]["runs"]] == ["float32"]
    assert [run["dtype"] for run in groups["numpy"]["runs"]] == ["float32", "float64"]
    assert {f["dtype"] for f in groups["python"]["figures"]} == {"int", "float64"}
    assert [f["key"] for f in groups["numpy"]["figures"]] == [
        "numpy.matmul[float32]",
        "numpy.elementwise[float32]",
        "numpy.matmul[float64]",
        "numpy.elementwise[float64]",
    ]
    for group in groups.values():
        assert group["status"] == "ok"
        assert group["peak_rss_bytes"] > 10 * 2**20  # a whole Python process
        for figure in group["figures"]:
            _figure_ok(figure)
            assert figure["first"]["wall_s"] > 0  # the first call is its own figure
    totals = record.measurements["totals"]
    assert (
        totals["figures"] == count_figures(decode(GroupFigure, f) for g in groups.values() for f in g["figures"]) == 12
    )
    assert totals["wall_s"] > 0 and totals["groups_ok"] == 2
    assert ("start", "numpy", "float64") in events
    machine = record.measurements["machine"]
    assert machine["samples"] >= 5 and machine["spread"] >= 0
    for figure in groups["numpy"]["figures"]:
        assert figure["steady"]["uncertainty"] == max(figure["steady"]["spread"], machine["spread"])

    markdown = bench_markdown(record)
    assert "| Benchmark | time | first call | compile | spread | samples | throughput | dtype |" in markdown
    assert "| NumPy matmul 100 " in markdown and "| float64 |" in markdown  # a ⚠ may follow the label
    from nbscope.render import terminal

    monkeypatch.setattr(terminal.console, "width", 200)
    print_bench(record)
    assert "NumPy matmul 100" in capsys.readouterr().out


def test_a_crashing_worker_is_an_error_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_worker("python", "float32", "quick", timeout_s=60, overrides={"python.int_sum_n": "not a number"})
    assert result["status"] == "error"
    assert "TypeError" in result["reason"]
    assert result["peak_rss_bytes"] > 0


def test_a_worker_past_its_timeout_is_killed() -> None:
    result = run_worker("python", "float32", "quick", timeout_s=0.5, overrides={"python.int_sum_n": 10**10})
    assert result["status"] == "error"
    assert result["reason"] == "timed out after 0 s" or result["reason"].startswith("timed out")


# --- missing libraries ---------------------------------------------------------------------------


@pytest.fixture
def without_jax_and_numba(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers start with jax and numba unimportable (a sitecustomize on PYTHONPATH), as if not installed."""
    site = tmp_path / "block"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nfor name in ('jax', 'jaxlib', 'numba'):\n    sys.modules[name] = None\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))


def test_groups_needing_missing_libraries_are_skipped_and_the_rest_runs(
    without_jax_and_numba: None, run_cli, tmp_db: Path
) -> None:
    result = run_cli(
        "bench", "--only", "python,numba,jax,loops", "--size", "quick", "--db", tmp_db, env={"COLUMNS": "160"}
    )
    assert result.returncode == 0, result.stderr
    assert "numba: skipped – numba is not importable" in result.stdout
    assert "jax: skipped – jax is not importable" in result.stdout
    assert "loops: skipped" in result.stdout
    assert "Python int sum" in result.stdout
    record = Store(tmp_db).get(1)
    groups = record.measurements["groups"]
    assert groups["python"]["status"] == "ok" and groups["python"]["figures"]
    for name in ("numba", "jax", "loops"):
        assert groups[name]["status"] == "skipped"
        assert "not importable" in groups[name]["reason"]
        assert groups[name]["figures"] == []
    assert record.measurements["totals"]["groups_skipped"] == 3
    assert record.status == "ok"


# --- whole suite and dead code -------------------------------------------------------------------


@pytest.mark.slow
def test_quick_suite_json_covers_every_group(run_cli, tmp_db: Path) -> None:
    result = run_cli("bench", "--size", "quick", "--json", "--db", tmp_db, timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    record = RunRecord.from_dict(document)
    groups = record.measurements["groups"]
    assert list(groups) == ["python", "numpy", "numba", "jax", "multi-size", "dispatch", "transfer", "loops"]
    for name, group in groups.items():
        assert group["status"] == "ok", (name, group.get("reason"))
        for figure in group["figures"]:
            _figure_ok(figure)
    keys = {f["key"] for g in groups.values() for f in g["figures"]}
    for key in (
        "jax.matmul_large[float32]",
        "multi-size.matmul_3000[float32]",
        "multi-size.total[float32]",
        "dispatch.round_trip[float32]",
        "transfer.host_to_device[float32]",
        "loops.scan_default_per_iter[float32]",
        "numba.prange[float32]",
    ):
        assert key in keys
    jax_first = next(f for f in groups["jax"]["figures"] if f["name"] == "matmul_large")["first"]
    assert jax_first["compile_s"] > 0 and jax_first["run_s"] > 0 and jax_first["compiles"] >= 1
    numba_first = next(f for f in groups["numba"]["figures"] if f["name"] == "prange")["first"]
    assert numba_first["compile_s"] > 0.05  # a real compile, apart from the steady state
    fit = next(f for f in groups["loops"]["figures"] if f["name"] == "scan_default_per_iter")["fit"]
    assert fit["per_iter_s"] > 0 and 0 <= fit["r2"] <= 1  # the fit quality depends on the load
    assert Store(tmp_db).count() == 1


@pytest.mark.slow
def test_steady_state_kernels_scale_with_n() -> None:
    """No dead code: four times n clearly lengthens the serial Numba and the JAX kernels (a folded loop would not).

    Other processes on a small shared machine slow a worker by a factor that changes from one run to the
    next. So sizes are compared within one worker where the group has two (its samples interleave), and
    across workers by the fastest sample of two alternating runs per size. Calls take a few to a few tens
    of ms: long enough that thread wake-ups and XLA's choice of how many threads to use cannot mask the
    growth (250 000 against 500 000 elements measured only 1.4× here). A factor of four in n, judged
    against a factor of two, leaves room for a busy machine (a folded loop stays near 1×).
    """

    def fastest(group: str, overrides: dict) -> dict[str, float]:
        # JAX on the CPU: on a GPU these sizes take microseconds, and launch latency would hide the doubling.
        result = run_worker(group, "float64", "quick", timeout_s=120, overrides=overrides, jax_platform="cpu")
        assert result["status"] == "ok", result.get("reason")
        if group == "jax":
            assert result["info"]["x64"] is True  # float64 really ran as float64
        assert {f["dtype"] for f in result["figures"]} == {"float64"}
        return {f["name"]: f["steady"]["min_s"] for f in result["figures"] if f["steady"]}

    def grown(group: str, key: str, n: int, fixed: dict) -> tuple[dict[str, float], dict[str, float]]:
        """Fastest figures at n and at 4n, from the runs n, 4n, n, 4n."""
        runs = [fastest(group, {**fixed, key: size}) for size in (n, 4 * n, n, 4 * n)]
        return (
            {name: min(r[name] for r in runs[0::2]) for name in runs[0]},
            {name: min(r[name] for r in runs[1::2]) for name in runs[1]},
        )

    small, large = grown("numba", "numba.n", 4_000_000, {})
    assert large["serial"] / small["serial"] > 2, (small["serial"], large["serial"])
    # prange's growth is not judged: its threads start and join whatever n, and on a busy 2-core runner a
    # descheduled thread inflated the small size's fastest sample 3× (5.7 ms against 6.8 ms at 4× n). What
    # dead code would show is a loop that costs nothing: here 4n elements on all cores still cost a clear share
    # of one core's serial pass (measured 1/6 on 2 cores; SIMD lets prange beat serial ÷ cores), where a
    # folded loop takes microseconds.
    cores = os.cpu_count() or 1
    assert large["prange"] > large["serial"] / (20 * cores), (large["serial"], large["prange"], cores)

    # Matrix products of 400 and 800 in one worker: 8× the flops.
    small, large = grown("jax", "jax.elementwise_n", 1_000_000, {"jax.matmul_small_n": 400, "jax.matmul_large_n": 800})
    # Judged against 1.5×, as prange once was: XLA's threads wake for the small size as for the large one, and a
    # CI run on a busy 2-core runner measured 1.94× (32 ms against 62 ms); a folded loop stays near 1×.
    assert large["elementwise"] / small["elementwise"] > 1.5, (small, large)
    for figures in (small, large):
        assert figures["matmul_large"] / figures["matmul_small"] > 3, figures


def test_worker_module_runs_as_a_script(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "r.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope.collect.bench._worker",
            "python",
            "--out",
            str(out),
            "--param",
            "python.int_sum_n=1000",
            "--param",
            "python.sqrt_n=1000",
        ],
        check=True,
        timeout=60,
    )
    document = json.loads(out.read_text())
    assert document["status"] == "ok" and len(document["figures"]) == 2
    assert document["self_peak_rss_bytes"] > 0


@pytest.mark.slow
def test_loops_pinned_to_the_cpu_and_fitted() -> None:
    result = run_worker(
        "loops",
        "float32",
        "quick",
        timeout_s=120,
        overrides={"loops.pin_cpu": "always", "loops.trips": [1_000, 10_000, 100_000]},
    )
    assert result["status"] == "ok", result.get("reason")
    names = {f["name"] for f in result["figures"]}
    assert {"scan_cpu_per_iter", "fori_loop_cpu_per_iter", "scan_default_per_iter", "fori_loop_default_1000"} <= names
    for figure in result["figures"]:
        if figure["fit"]:
            assert [p["trips"] for p in figure["fit"]["points"]] == [1_000, 10_000, 100_000]
            assert figure["fit"]["per_iter_s"] > 0
            assert figure["throughput"]["unit"] == "M iter/s"


def test_jax_platform_reaches_only_the_jax_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbscope.collect.bench._runner import worker_env

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert worker_env("loops", "cpu")["JAX_PLATFORMS"] == "cpu"
    assert "JAX_PLATFORMS" not in worker_env("numpy", "cpu")
    # A platform this machine lacks (no GPU here): the group fails with a one-line reason naming it.
    result = run_worker("dispatch", "float32", "quick", timeout_s=60, jax_platform="no_such_platform")
    assert result["status"] == "error"
    assert "JAX_PLATFORMS=no_such_platform" in result["reason"]


def test_a_workers_peak_memory_is_its_own_not_what_started_it() -> None:
    """A bench worker's peak is its own VmHWM: ru_maxrss, kept across execve, read at least what the process
    that started it held (nbscope's memory, not the benchmark's)."""
    import subprocess

    held = b"\x01" * (500 * 2**20)
    code = "from nbscope.collect.bench._worker import _own_peak_bytes; print(_own_peak_bytes())"
    peak = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < peak < 300 * 2**20 < len(held)
