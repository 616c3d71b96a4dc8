"""Rule host-loop: a Python loop that calls JAX on each iteration, on real CPU kernels (tests/files/diag_host_loop*)
and on runs of QuantEcon lecture-jax's jax_intro recorded on the lent TPU v5e and on a CPU
(tests/files/device/tpu_v5e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag_support import assert_compact, fired, profile_notebook
from nbscope.analyse.diagnose import _bindings, _host_loop, diagnose
from nbscope.analyse.diagnose._base import Context
from nbscope.analyse.trial import remedy_for
from nbscope.record import run as record_module
from nbscope.record.run import RunRecord

DEVICE = Path(__file__).resolve().parent / "files" / "device" / "tpu_v5e"

# The cells' run times (a fraction of a second here) are measured, not judged: with no floor on them the rule fires
# on the loop's length and its time per iteration (about 0.2 ms here; 5 ms by default is 20x away).
LOW = {"host-loop": {"min_run_s": 0.0}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    folder = tmp_path_factory.mktemp("host-loop")
    found = {name: profile_notebook(name, folder) for name in ("diag_host_loop", "diag_host_loop_fixed")}
    found["programs"] = profile_notebook("diag_host_loop", folder / "programs", programs=True)
    return found


def device_run(name: str) -> RunRecord:
    return record_module.load(DEVICE / f"{name}.json")


@pytest.mark.slow
def test_fires_on_the_nested_loop_cell(runs: dict) -> None:
    run = runs["diag_host_loop"]
    [finding] = fired(diagnose(run, thresholds=LOW), "host-loop")
    assert_compact([finding], run)
    assert finding.cell_index == 1
    evidence = finding.evidence
    assert evidence["iterations"] == 1600  # 40 × 40, from `n = 40` as cell 0 bound it
    assert "`n = 40`" in evidence["iterations_from"]
    assert evidence["loop"] == "for i in range(n)" and evidence["jax_calls"] == ["f"]
    assert evidence["platform"] == "cpu" and evidence["function"] is None
    assert evidence["executions"] is None  # no program data in this run
    assert 0 < evidence["per_iteration_s"] <= _host_loop.THRESHOLDS["max_per_iteration_s"]
    assert "jax.vmap" in finding.fix
    assert "default_device" not in finding.fix  # JAX runs on the CPU already: no advice to move it there
    assert remedy_for(finding, run) is None  # nor a `cpu` remedy to try


@pytest.mark.slow
def test_a_loop_in_a_called_function_without_program_data_is_a_skip(runs: dict) -> None:
    findings = diagnose(runs["diag_host_loop"], thresholds=LOW)
    assert not fired(findings, "host-loop", 2)
    [skip] = [s for s in findings.skipped if s.rule == "host-loop"]  # type: ignore[attr-defined]
    assert skip.cell_index == 2
    assert "`walk`" in skip.reason and "unknown" in skip.reason
    assert "--programs" in skip.reason


@pytest.mark.slow
def test_program_data_counts_the_loop_in_a_called_function(runs: dict) -> None:
    findings = diagnose(runs["programs"], thresholds=LOW)
    assert not [s for s in findings.skipped if s.rule == "host-loop"]  # type: ignore[attr-defined]
    by_cell = {f.cell_index: f for f in fired(findings, "host-loop")}
    assert set(by_cell) == {1, 2}
    walk = by_cell[2].evidence
    assert walk["function"] == "walk" and walk["iterations"] is None
    assert walk["executions"] >= 600  # walk(600): one call of `f` per step
    assert walk["programs_busy_s"] is not None and walk["programs_busy_s"] < walk["run_s"] / 2
    assert by_cell[1].evidence["iterations"] == 1600 and by_cell[1].evidence["executions"] >= 1600


@pytest.mark.slow
def test_silent_on_the_vectorised_notebook(runs: dict) -> None:
    run = runs["diag_host_loop_fixed"]
    assert not fired(diagnose(run, thresholds=LOW), "host-loop")
    ctx = Context(run)
    assert all(_host_loop.host_loops(ctx, cell) == [] for cell in ctx.run.cells)  # silent for want of a loop


@pytest.mark.slow
def test_the_time_per_iteration_is_a_threshold(runs: dict) -> None:
    strict = {"host-loop": {"min_run_s": 0.0, "max_per_iteration_s": 1e-9}}
    assert not fired(diagnose(runs["diag_host_loop"], thresholds=strict), "host-loop")


def test_fires_on_the_lectures_loop_on_the_tpu_with_the_cpu_as_a_remedy() -> None:
    run = device_run("tpu_lecture_jax_intro")
    [finding] = fired(diagnose(run), "host-loop")
    assert_compact([finding], run)
    assert finding.cell_index == 64  # the reader's cell 65: `z_loops[i, j] = f(x[i], y[j])`
    assert finding.evidence["iterations"] == 6400  # `n = 80`
    assert "`n = 80`" in finding.evidence["iterations_from"]
    assert finding.evidence["platform"] == "tpu"
    assert "TPU" in finding.summary
    assert "jax.vmap" in finding.fix
    assert "jax.default_device" in finding.fix and "jax.device_put" in finding.fix
    assert remedy_for(finding, run) == (65, "cpu")  # what `diagnose --try` tries


def test_fires_on_the_same_loop_on_a_cpu_without_the_cpu_advice() -> None:
    run = device_run("cpu_lecture_jax_intro")
    [finding] = fired(diagnose(run), "host-loop")
    assert finding.cell_index == 64 and finding.evidence["iterations"] == 6400
    assert finding.evidence["platform"] == "cpu"
    assert finding.evidence["executions"] >= 6400  # recorded with --programs: each iteration executed programs
    assert finding.evidence["programs_busy_s"] < finding.evidence["run_s"] / 2  # the loop is dispatch, not work
    assert "default_device" not in finding.fix
    assert remedy_for(finding, run) is None


def test_silent_where_the_programs_own_work_is_most_of_the_run() -> None:
    run = device_run("cpu_host_kesten_processes")
    loose = {"host-loop": {"min_run_s": 0.0, "min_iterations": 1, "max_per_iteration_s": 10.0}}
    for thresholds in (None, loose):
        findings = diagnose(run, thresholds=thresholds)
        assert not fired(findings, "host-loop"), thresholds
        assert not [s for s in findings.skipped if s.rule == "host-loop"], thresholds  # type: ignore[attr-defined]
    # What keeps it silent: cell 7's loop in `generate_cross_section` ran thousands of short programs, but their
    # own work (500,000 firms a step) took most of the cell's time.
    ctx = Context(run)
    cell = next(c for c in ctx.run.cells if c.index == 6)
    [loop] = _host_loop.host_loops(ctx, cell)
    assert loop.function == "generate_cross_section"
    executions, work, running = _host_loop._executions(cell), _host_loop._programs_work(cell), cell.run_s or 0.0
    assert executions is not None and executions >= _host_loop.THRESHOLDS["min_iterations"]
    assert running / executions <= _host_loop.THRESHOLDS["max_per_iteration_s"]
    assert work is not None and work >= running / 2


def test_a_loop_whose_steps_feed_each_other_is_moved_into_jit_not_vectorised() -> None:
    """`for _ in range(200000): x = step(x)` (tests/files/forecast_cut.md) is a recurrence: no wider call replaces it,
    a `lax.fori_loop` does; lecture-jax's grid loop writes each element once and is vectorised; autodiff's
    `while ε > tol` gradient descent becomes a `lax.while_loop`."""
    recurrence = record_module.load(Path(__file__).resolve().parent / "files" / "records" / "cpu_forecast_cut.json")
    [finding] = fired(diagnose(recurrence), "host-loop")
    assert finding.evidence["carried"] == ["x"] and finding.evidence["iterations"] == 200_000
    assert "lax.fori_loop" in finding.fix and "vmap" not in finding.fix
    [grid] = fired(diagnose(device_run("tpu_lecture_jax_intro")), "host-loop")
    assert grid.evidence["carried"] == [] and "lax.fori_loop" not in grid.fix
    [descent] = fired(diagnose(device_run("cpu_host_autodiff")), "host-loop")
    assert descent.evidence["function"] == "grad_descent" and "ε" in descent.evidence["carried"]
    assert "lax.while_loop" in descent.fix


def test_calls_that_run_jax_through_a_transform_or_a_local_function_count() -> None:
    """QuantEcon's `newton` (lecture-jax newtons_method) loops over `q`, a local function calling `f_prime =
    jax.grad(f)`: both run JAX, though neither is a jnp call or a jitted name."""
    import ast

    newton = ast.parse(
        "def newton(f, x_0, tol=1e-5):\n"
        "    f_prime = jax.grad(f)\n"
        "    def q(x):\n"
        "        return x - f(x) / f_prime(x)\n"
        "    def show(x):\n"
        "        print(x)\n"
        "    error, x = tol + 1, x_0\n"
        "    while error > tol:\n"
        "        y = q(x)\n"
        "        error = abs(x - y)\n"
        "        x = y\n"
        "    return x\n"
    ).body[0]
    assert isinstance(newton, ast.FunctionDef)
    assert _host_loop._jax_locals(newton, set(), {"jax", "jnp"}) == {"f_prime", "q"}
    [descent] = fired(diagnose(device_run("cpu_host_autodiff")), "host-loop")
    assert "f_grad" in descent.evidence["jax_calls"]  # `f_grad = jax.grad(f)` in `grad_descent`


def test_on_a_device_the_cpu_is_advised_only_for_a_loop_of_small_calls() -> None:
    """lecture-jax's grid loop calls `f` on scalars (its cell compiled arguments of at most 80 elements): the CPU is
    offered and tried. A loop whose calls work on 500,000 firms a step would do that work on the CPU too."""
    [grid] = fired(diagnose(device_run("tpu_lecture_jax_intro")), "host-loop")
    assert grid.evidence["largest_argument_elements"] == 80 and grid.evidence["cpu_advised"]
    big = {"host-loop": {"max_cpu_elements": 79}}
    [same] = fired(diagnose(device_run("tpu_lecture_jax_intro"), thresholds=big), "host-loop")
    assert not same.evidence["cpu_advised"] and "default_device" not in same.fix
    assert remedy_for(same, device_run("tpu_lecture_jax_intro")) is None
    ctx = Context(device_run("tpu_kesten_processes"))
    first = next(c for c in ctx.run.cells if c.index == 6)  # generate_cross_section's first call compiles its steps
    assert _host_loop._largest_argument(first) == 500_000


def test_a_tpu_run_with_program_data_counts_the_loop_in_a_function() -> None:
    """kesten_processes profiled on the TPU with --programs: `generate_cross_section`'s Python loop (500 steps of
    random draws over 500,000 firms) is counted there (7,504 executions in cell 8), its programs' own work is not
    timed on the TPU (unknown, not zero), and its fix is the lecture's own next step, a `lax.fori_loop` carrying
    `key` and `s`, with no CPU advice: each step's work on 500,000 firms would be the CPU's too."""
    run = device_run("tpu_programs_kesten_processes")
    found = {f.cell_index: f for f in fired(diagnose(run), "host-loop")}
    assert set(found) == {6, 7}
    second = found[7]
    assert second.evidence["platform"] == "tpu" and second.evidence["function"] == "generate_cross_section"
    assert second.evidence["executions"] == 7504 and second.evidence["iterations"] is None
    assert second.evidence["programs_busy_s"] is None
    assert second.evidence["carried"] == ["key", "s"]
    assert "lax.fori_loop" in second.fix and "default_device" not in second.fix
    assert remedy_for(second, run) is None


@pytest.mark.parametrize(
    ("loop", "iterations"),
    [
        ("for i in range(max_iter):\n    v = T(v)\n    if err(v) < tol:\n        break", None),  # may stop early
        ("for i in range(3):\n    for j in range(4):\n        if j:\n            break\n    v = T(v)", 3),
        ("for i in range(10**19):\n    v = T(v)", 10**19),  # past 2**63: no OverflowError from len(range(...))
        ("for i in range(10, 0, -3):\n    v = T(v)", 4),
        ("for x in [*grid, 1.0]:\n    v = T(v)", None),  # a starred list's length is the run's
    ],
)
def test_a_loops_trips_are_those_its_range_allows(loop: str, iterations: int | None) -> None:
    import ast

    node = ast.parse(loop).body[0]
    assert isinstance(node, ast.For)
    assert _host_loop._trips(node, {"max_iter": _bindings.Bound(10_000, "a literal")}).value == iterations


def test_a_value_a_branch_computes_before_use_is_not_handed_on() -> None:
    """In source order `v` is assigned before `g(v)` reads it in every step: a map, not a recurrence."""
    import ast

    loop = ast.parse(
        "for i in range(n):\n for j in range(m):\n  if mask[i, j]:\n   v = f(x[i], y[j])\n  else:\n   v = 0.0\n"
        "  z[i, j] = g(v)\n"
    ).body[0]
    assert isinstance(loop, ast.For)
    assert _host_loop._carried(loop) == ()
