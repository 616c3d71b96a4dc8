"""What the GPU would run: each program is lowered for CUDA in the kernel (no GPU needed), so loops
only XLA:CPU builds (threefry rounds of jax.random, LU loops of jnp.linalg.solve) are no GPU cost, and
cuSOLVER calls get a term of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag_support import profile_with_programs
from nbscope.analyse.forecast import forecast

FILES = Path(__file__).resolve().parent / "files"


def test_random_and_solve_have_no_loop_term_from_threefry_or_lu() -> None:
    pytest.importorskip("jax")
    record = profile_with_programs("forecast_random_solve.md")
    programs = record.measurements["programs"]["programs"]
    program = next(p for p in programs.values() if p["function"] == "draw_and_solve")
    assert program["gpu"]["source"] == "lower (cuda)"
    assert program["gpu"]["loops"] == 1  # the scan; threefry and LU are no loops on the GPU
    assert any(t.startswith("cusolver") for t in program["gpu"]["custom_calls"])
    cpu_only = [loop for loop in program["loops"] if loop["cpu_only"]]
    assert len(program["loops"]) > 1 and cpu_only  # XLA:CPU built more loops than the GPU would
    result = forecast(record, "t4").to_dict()
    cell = next(c for c in result["cells"] if any(p["function"] == "draw_and_solve" for p in c["programs"]))
    terms = cell["gpu"]["t4"]["terms"]
    loops = [t for t in terms if t["kind"] == "loop"]
    assert len(loops) == 1 and "100 iterations" in loops[0]["words"] and "lax.scan" in loops[0]["words"]
    (library,) = [t for t in terms if t["kind"] == "library"]
    assert "cuSOLVER" in library["words"]
    collect = next(c for c in record.measurements["cells"] if c["index"] == cell["index"])["programs"]["collect_s"]
    assert collect["gpu_lowering_s"] is not None  # measured, after the cell's timed code


def test_lowering_for_cuda_gives_the_module_jax_export_gives() -> None:
    """The probe lowers the traced function for CUDA instead of exporting it (cheaper: nothing is
    serialised and parsed back); the loops, branches and library calls it reads must be the same."""
    jax = pytest.importorskip("jax")
    import sys

    import jax.numpy as jnp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe"))
    import _nbscope_program as recorder

    def draw_and_solve(key, a, x):
        noise = jax.random.normal(key, (11,), dtype=jnp.float32)
        solved = jnp.linalg.solve(a, noise)
        scanned, _ = jax.lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=10)
        counted = jax.lax.while_loop(lambda s: s[0] < 20, lambda s: (s[0] + 1, s[1] * 2.0), (0, x))[1]
        return solved.sum() + scanned + counted

    function = jax.jit(draw_and_solve)
    avals = [
        jax.ShapeDtypeStruct((), jax.random.key(0).dtype),
        jax.ShapeDtypeStruct((11, 11), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
    ]
    entry: dict = {}
    text = recorder._cuda_module(jax, function, avals, entry)
    assert entry["source"] == "lower (cuda)"
    exported = jax.export.export(function, platforms=["cuda"])(*avals).mlir_module()
    lowered, through_export = recorder._summarise(text), recorder._summarise(exported)
    assert lowered == through_export
    assert len(lowered["loops"]) == 2 and any(t.startswith("cusolver") for t in lowered["custom_calls"])
    assert all(loop["line"] for loop in lowered["loops"])


def test_the_hlo_written_after_a_cell_is_what_it_compiled_with_the_ids_its_trace_names(tmp_path: Path) -> None:
    """After a compiling cell the probe writes the HLO of the programs that cell compiled, one at a time,
    not that of every program alive in the kernel (a profiler session's XSpace holds them all, about three
    times over while it is stopped); each keeps the program id the trace's events carry."""
    jax = pytest.importorskip("jax")
    import sys

    import jax.numpy as jnp
    from jax._src import compiler
    from jax._src.interpreters import pxla

    from nbscope.collect._xla import XlaTools
    from nbscope.collect._xspace import hlo_modules, hlo_programs

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "nbscope" / "collect" / "probe"))
    import _nbscope_program as recorder

    x = jnp.arange(8.0)
    earlier = jax.jit(lambda v: v - 1)
    earlier(x).block_until_ready()  # alive, compiled before the cell
    hooked = compiler.compile_or_get_cached, pxla.lower_sharding_computation
    programs = recorder.Programs(str(tmp_path))
    try:
        programs.start(1)
        programs.stop(1, compiled=False)

        def halve(v: jax.Array) -> jax.Array:
            return v / 2

        def scan_sum(v: jax.Array) -> jax.Array:
            return jax.lax.scan(lambda c, e: (c + e, None), 0.0, v)[0]

        programs.start(2)
        jitted = jax.jit(halve), jax.jit(scan_sum)  # kept alive, as the session reads only live programs
        for function in jitted:
            function(x).block_until_ready()
        result = programs.stop(2, compiled=True)
    finally:
        compiler.compile_or_get_cached, pxla.lower_sharding_computation = hooked
    assert result is not None and str(result["programs"]).endswith(".hlo"), result
    written = {p.module: p for p in hlo_modules(Path(result["programs"]).read_bytes())}
    assert set(written) == {"jit_halve", "jit_scan_sum"}
    alive = {p.module: p for p in hlo_programs(recorder._session(hlo_protos=True).stop())}
    tools = XlaTools()
    for name, program in written.items():
        assert program.program_id == alive[name].program_id
        if tools.available:  # the same module (its serialised bytes may order a map differently)
            assert tools.module_text(program.module_proto) == tools.module_text(alive[name].module_proto)
    assert "jit__lambda" in alive and earlier is not None  # what the session would have written again
