"""Loop lengths a finding states come from what ran: the default a ``def`` bound (the issue-15 pattern of a
shadowed ``n``), the static argument of each call, the global when the function was traced; "unknown"
otherwise, and the proposed code keeps the bounds as written."""

from __future__ import annotations

import pytest

from diag_support import CORPUS, assert_compact, fired, profile_notebook, sources_of
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.diagnose._bindings import Bindings, LoopResolver
from nbscope.analyse.diagnose._source import analyse
from nbscope.collect import notebook as notebook_module

# Far below what compiling 20 unrolled steps takes on any machine (~0.2 s here): the rule fires on the loop in
# the source, and these tests check the numbers it states, not this machine's speed.
LOW = {"unrolled-loop": {"min_compile_s": 0.001, "min_compile_s_long_loop": 0.001}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("lengths")
    return {name: profile_notebook(name, folder) for name in ("diag_shadowed_default", "diag_static_loop")}


@pytest.mark.slow
def test_shadowed_default_has_the_20_steps_the_def_bound(runs: dict) -> None:
    record = runs["diag_shadowed_default"]
    assert all(c["status"] == "ok" for c in record.measurements["cells"])
    [finding] = fired(diagnose(record, thresholds=LOW), "unrolled-loop")
    assert_compact([finding], record)
    loop = finding.evidence["loop"]
    assert loop["trips"] == 20 and loop["lengths_seen"] == [20]
    assert "default `n=n`" in loop["trips_from"] and "cell 3" in loop["trips_from"]
    assert "20 steps" in finding.summary and "50000000" not in finding.summary + finding.fix
    assert "fori_loop(0, n, " in finding.fix  # the bound as written: right whatever n is
    assert "50_000_000" not in finding.fix and "50000000" not in str(finding.evidence)
    assert dict(finding.evidence_highlights())["steps"].startswith("20 steps")


@pytest.mark.slow
def test_static_argument_lengths_come_from_each_call(runs: dict) -> None:
    record = runs["diag_static_loop"]
    [finding] = fired(diagnose(record, thresholds=LOW), "unrolled-loop")
    assert_compact([finding], record)
    loop = finding.evidence["loop"]
    # Two calls, two programs: 30 and 60 steps; never the `steps = 5_000` of another cell.
    assert loop["lengths_seen"] == [30, 60] and loop["trips"] is None
    assert "static argument `steps` = 30" in loop["trips_from"] and "= 60" in loop["trips_from"]
    assert "30–60 steps" in finding.summary and "5000" not in finding.summary
    assert "fori_loop(0, steps, " in finding.fix
    assert finding.evidence["compiles"] == 2


# ---- the bindings alone (no kernel) ------------------------------------------------------------------


def _lengths(cells: dict[int, str], name: str, compiled_in: list[int]) -> list:
    code = analyse(cells)
    function = code.function_at(name, max(compiled_in))
    assert function is not None
    resolver = LoopResolver(Bindings(cells), code, function, compiled_in)
    return [resolver.length(loop) for loop in code.loops_in(name, max(compiled_in))]


def test_the_source_notebooks_as_written() -> None:
    cells = dict(enumerate(sources_of("diag_shadowed_default").values()))
    [length] = _lengths(cells, "iterate", [2])
    assert length.trips == 20 and (length.start, length.stop) == ("0", "n")


def test_a_global_is_read_when_the_function_is_traced() -> None:
    cells = {
        0: "import jax",
        1: "N = 10",
        2: "@jax.jit\ndef f(x):\n    for _ in range(N):\n        x = x + 1\n    return x",
        3: "N = 40\ny = f(1.0)",  # traced here, after N changed
        4: "N = 99",  # later: not what the program holds
    }
    [length] = _lengths(cells, "f", [3])
    assert length.trips == 40 and "global `N` = 40 when cell 4 traced `f`" in length.origin


def test_unknown_when_the_value_depends_on_how_the_notebook_ran() -> None:
    cells = {
        0: "import jax\nimport numpy as np",
        1: "for n in (10, 20):\n    pass",  # n bound by a loop
        2: "@jax.jit\ndef f(x):\n    for _ in range(n):\n        x = x + 1\n    return x\n\ny = f(1.0)",
        3: "m = len(np.ones(7))\n\n@jax.jit\ndef g(x, m=m):\n    for _ in range(m):\n        x = x + 1\n    return x\n\ng(1.0)",
    }
    [length] = _lengths(cells, "f", [2])
    assert length.trips is None and not length.values and "for statement" in length.origin
    [computed] = _lengths(cells, "g", [3])
    assert computed.trips is None and "computed when the notebook runs" in computed.origin


def test_timing_magics_run_their_statement_in_the_notebook() -> None:
    cells = {
        0: "import jax\nfrom functools import partial",
        1: "@partial(jax.jit, static_argnums=1)\ndef f(x, k):\n    for _ in range(2, k):\n        x = x + 1\n    return x",
        2: "k = 12\n%time f(1.0, k)",
        3: "%%time\nf(1.0, 2 * k)",
    }
    [length] = _lengths(cells, "f", [2, 3])
    assert length.values == [10, 22] and (length.start, length.stop) == ("2", "k")


def test_the_real_lectures_default_binds_the_n_of_its_own_cell() -> None:
    """jax_intro.md sets `n = 50_000_000` in earlier cells; the exercise's cell sets `n, β, K = 20, 0.99, 100`
    and defines `compute_call_price_jax(..., n=n, ...)`: its default is 20 (issue 15)."""
    lecture = CORPUS / "jax_intro.md"
    if not lecture.is_file():
        pytest.skip(f"{lecture} is not there (the shared corpus of real lectures)")
    cells = {c.index: c.source for c in notebook_module.read(lecture).code_cells}
    code = analyse(cells)
    function = code.function_at("compute_call_price_jax")
    assert function is not None and function.node is not None
    bindings = Bindings(cells)
    assert bindings.at(function.cell, function.line)["n"].value == 20
    assert bindings.at(function.cell, function.line)["M"].value == 10_000_000
    assert any(bindings.start(i).get("n", None) and bindings.start(i)["n"].value == 50_000_000 for i in cells)
    resolver = LoopResolver(bindings, code, function, [function.cell + 1])
    default = resolver._parameter("n", function, resolver.sites[0])
    assert default.value == 20 and "default `n=n` = 20" in default.origin
