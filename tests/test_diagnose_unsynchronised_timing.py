"""Rule unsynchronised-timing: timing JAX work without block_until_ready, on real CPU kernels, and the
static reading of timed regions."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag_support import assert_compact, fired, profile_notebook, with_code
from nbscope.analyse.diagnose import _source, diagnose
from nbscope.record import run as record_module

DEVICE = Path(__file__).resolve().parent / "files" / "device" / "tpu_v5e"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("unsync")
    return {name: profile_notebook(name, folder) for name in ("diag_unsync_timing", "diag_unsync_timing_fixed")}


@pytest.mark.slow
def test_fires_on_the_unsynchronised_cells_only(runs: dict) -> None:
    findings = fired(diagnose(runs["diag_unsync_timing"]), "unsynchronised-timing")
    assert_compact(findings, runs["diag_unsync_timing"])
    by_cell = {f.cell_index: f for f in findings}
    assert set(by_cell) == {2, 3}  # perf_counter around step(a); %timeit step(a). Not the NumPy cell 4.
    assert by_cell[2].evidence["regions"][0]["jax_calls"] == ["step"]
    assert by_cell[2].evidence["regions"][0]["how"] == "time.perf_counter"
    assert by_cell[3].evidence["regions"][0]["how"] == "%timeit"
    assert "block_until_ready" in by_cell[2].fix
    assert "not checked" in by_cell[2].evidence["reported_times"]  # outputs are not in records: says so


@pytest.mark.slow
def test_silent_on_the_corrected_notebook(runs: dict) -> None:
    assert not fired(diagnose(runs["diag_unsync_timing_fixed"]), "unsynchronised-timing")


def _unsynced(source: str, jitted: set[str] | None = None) -> list[str]:
    tree = _source.parse(source)
    assert tree is not None
    hits = []
    for region in _source.timed_regions(tree):
        if _source.jax_calls(region.nodes, jitted or set(), {"jax", "jnp", "lax"}) and not _source.synchronisations(
            region.nodes
        ):
            hits.append(region.how)
    return hits


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("with qe.Timer():\n    y = jnp.cos(x)", ["with qe.Timer"]),
        ("with qe.Timer():\n    y = jnp.cos(x)\n    jax.block_until_ready(y)", []),
        ("with qe.Timer():\n    z = jnp.max(f(x)).block_until_ready()", []),
        ("%%timeit\ny = jnp.cos(x)", ["%%timeit"]),
        ("%time y = jnp.cos(x).block_until_ready()", []),
        ("t = timeit.timeit(lambda: jnp.cos(x), number=10)", ["timeit.timeit"]),
        ("t0 = time.time()\ny = np.cos(x)\nprint(time.time() - t0)", []),  # NumPy: synchronous
        ("t0 = time.time()\ny = jnp.cos(x)\nprint(float(y[0]))\nt1 = time.time()", []),  # float() waits
        ("t0 = time.time()\ny = g(x)\nt1 = time.time()", ["time.time"]),  # g is a jitted function
        ("for n in sizes:\n    s = perf_counter()\n    jnp.ones(n)\n    e = perf_counter()", ["perf_counter"]),
    ],
)
def test_timed_regions(source: str, expected: list[str]) -> None:
    assert _unsynced(source, {"g"}) == expected


@pytest.mark.slow
def test_no_sources_is_reported_not_guessed(runs: dict) -> None:
    record = with_code(runs["diag_unsync_timing"], {})  # a record without code, whose notebook is not here
    findings = diagnose(record)
    assert not fired(findings, "unsynchronised-timing")
    assert any(s.rule == "unsynchronised-timing" for s in findings.skipped)  # type: ignore[attr-defined]


def test_writing_into_a_numpy_array_waits_for_the_value() -> None:
    # lecture-jax's jax_intro on the TPU: `%%time` around `z_loops[i, j] = f(x[i], y[j])`, where `z_loops =
    # np.empty((n, n))`: each element is copied to the host as it is stored, so the timing is synchronised.
    run = record_module.load(DEVICE / "tpu_lecture_jax_intro.json")
    cells = run.measurements["cells"]
    assert "z_loops[i, j] = f(x[i], y[j])" in cells[64]["source"] and "np.empty" in cells[63]["source"]
    assert not fired(diagnose(run), "unsynchronised-timing", 64)
    # The same loop writing into an array the notebook did not make with NumPy: nothing in it waits.
    sources = {c["source_hash"]: c["source"] for c in cells if c.get("source") is not None}
    sources[cells[63]["source_hash"]] = cells[63]["source"].replace("np.empty((n, n))", "make_grid(n)")
    assert [f.cell_index for f in fired(diagnose(with_code(run, sources)), "unsynchronised-timing", 64)] == [64]


def test_a_store_into_a_host_array_is_a_synchronisation() -> None:
    tree = _source.parse("%%time\nfor i in range(n):\n    z[i] = f(x[i])\n    w[i] = f(x[i])")
    assert tree is not None
    [region] = _source.timed_regions(tree)
    assert _source.synchronisations(region.nodes) == []
    assert _source.synchronisations(region.nodes, {"z"}) == ["z[...] ="]  # `w` is not known to be a NumPy array


def test_a_constant_written_into_a_numpy_array_waits_for_nothing() -> None:
    tree = _source.parse("%%time\nout[0] = 1.0\ny = f(x)\n")
    assert tree is not None
    [region] = _source.timed_regions(tree)
    assert _source.synchronisations(region.nodes, {"out"}) == []  # `f(x)` is still not waited for
