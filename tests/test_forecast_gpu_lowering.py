"""What the GPU would run: each program is lowered for CUDA in the kernel (``jax.export``, no GPU
needed), so loops only XLA:CPU builds (threefry rounds of jax.random, LU loops of jnp.linalg.solve)
are no GPU cost, and cuSOLVER calls get a term of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbscope.analyse.forecast import forecast
from nbscope.api.profile import ProfileOptions, profile

FILES = Path(__file__).resolve().parent / "files"


def test_random_and_solve_have_no_loop_term_from_threefry_or_lu() -> None:
    pytest.importorskip("jax")
    record = profile(FILES / "forecast_random_solve.md", ProfileOptions(programs=True, jax_platform="cpu"),
                     fingerprint={"digest": "test"})
    programs = record.measurements["programs"]["programs"]
    program = next(p for p in programs.values() if p["function"] == "draw_and_solve")
    assert program["gpu"]["source"] == "jax.export (cuda)"
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
