"""How a trial compares the values a cell binds (``nbscope.analyse.trial``) and refuses a remedy that cannot apply
(``nbscope.collect.remedies``), without a kernel: plain forms as the in-kernel capture writes them."""

from __future__ import annotations

import numpy as np
import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse.trial import compare_values
from nbscope.collect.remedies import bound_names, called_names, capture, clock_names, parse, read_names


def _verdicts(as_is: list[dict], remedied: list[dict]) -> dict[str, tuple]:
    return {v.name: (v.verdict, v.abs_diff, v.rel_diff, v.note) for v in compare_values(as_is, remedied)}


def test_arrays_are_equal_close_or_different_with_their_largest_differences() -> None:
    a = np.array([1.0, 2.0, 1000.0])
    found = _verdicts(
        [{"same": ("a", a), "close": ("a", a), "far": ("a", a), "shape": ("a", a)}],
        [
            {
                "same": ("a", a.copy()),
                "close": ("a", a * (1 + 1e-9)),
                "far": ("a", a.astype(np.float32) + 1),
                "shape": ("a", a[:2]),
            }
        ],
    )
    assert found["same"][0] == "equal" and found["close"][0] == "close"
    assert found["far"][:3] == ("differs", 1.0, 0.5) and found["far"][3] == "dtype float64 → float32"
    assert found["shape"][0] == "differs" and "shape" in found["shape"][3]


def test_values_that_vary_as_they_are_or_cannot_be_pickled_are_not_judged() -> None:
    runs = [{"noise": ("v", 0.1), "handle": ("u", "TypeError"), "n": ("v", 3)}, {"noise": ("v", 0.7), "n": ("v", 3)}]
    found = _verdicts(runs, [{"noise": ("v", 0.4), "handle": ("u", "TypeError"), "n": ("s", [("v", 3)])}])
    assert found["noise"][0] == "varies" and found["handle"][0] == "not compared" and found["n"][0] == "differs"


def test_the_names_a_cell_binds() -> None:
    source = "import jax\nx, (y, z) = 1, (2, 3)\nfor i in range(3):\n    w += i\nv = [q for q in x]\ndef f(a):\n    b = a\n_ = 5\nm.p[0] = 1"
    assert bound_names(source) == ["x", "y", "z", "i", "w", "v", "m"]


def test_timed_statements_are_the_cells_own() -> None:
    timed = "%%time\nfor i in range(n):\n    z[i] = f(x[i])\n"
    assert bound_names(timed) == ["i", "z"]
    assert "f" in called_names("%time f(x)")
    assert "g" in called_names("%timeit -n 3 -r 1 g(x)")
    assert set(read_names(timed)) == {"range", "n", "z", "i", "f", "x"}
    assert set(read_names("%time y = g(a) + b\nprint(y)")) == {"g", "a", "b", "print", "y"}
    assert read_names("%%bash\necho $x") == [] and bound_names("%%writefile f.py\nx = 1") == []


def test_clock_readings_are_named_so_that_no_remedy_is_judged_by_them() -> None:
    cell = "start = time()\nv = solve(A, b)\nelapsed = time() - start\nrate = n / elapsed\nprint(elapsed)\n"
    assert clock_names(cell) == ["start", "elapsed", "rate"]
    assert clock_names("%%time\nt0 = time.perf_counter()\nz = f(x)\n") == ["t0"]
    assert clock_names("v = solve(A, b)\ntimes = [1, 2]\n") == []
    timings = (
        "times = []\nfor i in range(3):\n    t0 = perf_counter()\n    f(x)\n    times.append(perf_counter() - t0)\n"
    )
    assert clock_names(timings + "best = min(times)\n") == ["t0", "times", "best"]
    assert clock_names("def timed(g):\n    start = time.time()\n    return g()\nv = timed(h)\n") == []  # a local


def test_the_cpu_remedy_moves_the_arrays_the_cell_reads_to_the_cpu() -> None:
    source = "%%time\nfor i in range(n):\n    z[i, 0] = f(x[i], y[0])\n"
    remedy = parse("cpu", source, 1, "tpu", {})
    compile(remedy.before, "before", "exec")
    compile(remedy.after, "after", "exec")
    listed = next(line for line in remedy.before.splitlines() if line.strip().startswith("for name in"))
    assert all(repr(name) in listed for name in ("n", "z", "f", "x", "y"))
    assert "jax.device_put" in remedy.before and "jax_default_device" in remedy.before
    assert "'moved'" in remedy.after  # what the trial reports it moved


@pytest.mark.parametrize(
    ("text", "backend", "words"),
    [
        ("cpu:solve", "tpu", "calls no function named 'solve'"),
        ("xla-flags:--xla_tpu_enable_foo=true", "gpu", "is a TPU flag"),
        ("xla-flags:xla_gpu_foo", "gpu", "is not an XLA flag"),
        ("threads:0", "cpu", "threads: takes a number"),
        ("x64:on", "cpu", "is not a remedy nbscope can try"),
    ],
)
def test_a_remedy_that_cannot_apply_is_one_line(text: str, backend: str, words: str) -> None:
    with pytest.raises(NbscopeError, match=words):
        parse(text, "y = f(x)", 2, backend, {})


def test_tpu_flags_go_to_libtpu_and_the_host_flags_stay_in_xla_flags() -> None:
    remedy = parse("xla-flags:--xla_tpu_x=1 --xla_dump_to=/tmp/d", "y = f(x)", 2, "tpu", {"XLA_FLAGS": "--xla_a=1"})
    assert remedy.env == {"XLA_FLAGS": "--xla_a=1 --xla_dump_to=/tmp/d", "LIBTPU_INIT_ARGS": "--xla_tpu_x=1"}


@pytest.mark.parametrize("text", ["cpu", "cpu:f", "unroll:4", "x64:off", "matmul-precision:highest", "threads:1"])
def test_the_code_run_around_the_cell_is_python(text: str) -> None:
    remedy = parse(text, "y = f(x)", 2, "tpu", {})
    for code in (remedy.before, remedy.after, capture(["y"], "/tmp/values.pickle", "{}")):
        compile(code, text, "exec")


def test_a_cell_nbscope_cannot_parse_binds_and_calls_nothing() -> None:
    deep = "x = " + "+".join(["1"] * 100_000)  # RecursionError in the parser
    assert bound_names(deep) == [] and called_names(deep) == set() and clock_names(deep) == []
