"""Issue AE: every loop that ran is counted, every second of XLA's is named, on small notebooks built for each
defect (tests/files/forecast_while_converge.md, ...). Assertions rest on counts and on shares of one run's own
time, never on this machine's speed."""

from __future__ import annotations

from typing import Any

import pytest

from diag_support import profile_with_programs
from nbscope.analyse.forecast import forecast

pytest.importorskip("jax")


def _loops(result: dict[str, Any], index: int, device: str) -> list[dict[str, Any]]:
    return [t for t in result["cells"][index]["gpu"][device]["terms"] if t["kind"] == "loop"]


@pytest.mark.slow
def test_a_converging_while_loop_is_counted_in_every_cell_that_ran_it_trace_or_not() -> None:
    # The solver's iterations, as this process runs the same program.
    import jax
    import jax.numpy as jnp
    from jax import lax

    with jax.enable_x64(True):
        p, r = jnp.full((200, 200), 1 / 200), jnp.linspace(0.0, 1.0, 200)

        def body(state: Any) -> Any:
            new = r + 0.999 * p @ state[0]
            return new, jnp.max(jnp.abs(new - state[0])), state[2] + 1

        expected = int(jax.jit(lambda: lax.while_loop(lambda s: s[1] > 1e-8, body, (jnp.zeros(200), jnp.inf, 0)))()[2])
    # Cell 1 imports jax and calls the solver (no trace: before, "an unknown number of iterations", no upper
    # bound); cell 2 calls it again under a trace that a memory budget cuts (before: 3,228-3,693 "observed").
    record = profile_with_programs("forecast_while_converge.md")
    result = forecast(record, ["t4", "tpu-v5e"]).to_dict()
    for index in (0, 1):
        for device in ("t4", "tpu-v5e"):
            (loop,) = _loops(result, index, device)
            assert loop["trip_count_basis"] == "observed" and loop["iterations"] == expected
            assert result["cells"][index]["gpu"][device]["high_s"] is not None


@pytest.mark.slow
def test_programs_running_on_into_the_next_cell_are_forecast_once_where_they_were_dispatched() -> None:
    # Cell 1 dispatches a ~6 s loop and ends; cell 2 reads its result, waiting for it (before: "JAX time of
    # programs an earlier cell dispatched ...: GPU time unknown", and no upper bound for the notebook).
    record = profile_with_programs("forecast_in_flight.md")
    waited = record.measurements["cells"][1]["collection"]["in_flight_wait_s"]
    assert waited > 0.1
    result = forecast(record, ["t4", "tpu-v5e"]).to_dict()
    for device in ("t4", "tpu-v5e"):
        outcome = result["cells"][1]["gpu"][device]
        (ran_on,) = [t for t in outcome["terms"] if "an earlier cell dispatched" in t["words"]]
        assert ran_on["high_s"] == 0 and "forecast in that cell" in ran_on["words"]
        assert outcome["high_s"] is not None and result["cells"][1]["cpu"]["host_s"] < waited
        assert result["cells"][0]["gpu"][device]["terms"]  # the loop is the dispatching cell's


@pytest.mark.slow
def test_a_jitted_solver_called_from_a_python_loop_is_xla_time_not_host_work() -> None:
    # Five solves, each read back on the host: the cell's thread waits while XLA runs them (before: 69-75 % of the
    # cell carried over as "host work (Python, NumPy, Numba)", as the trace was cut in the second solve).
    record = profile_with_programs("forecast_solver_loop.md")
    result = forecast(record, ["t4", "tpu-v5e"]).to_dict()
    cell = result["cells"][1]
    assert cell["cpu"]["host_s"] < 0.25 * cell["cpu"]["wall_s"], cell["cpu"]
    for device in ("t4", "tpu-v5e"):
        (loop,) = _loops(result, 1, device)
        assert loop["trip_count_basis"] == "observed" and loop["calls"] == 5
        assert cell["gpu"][device]["high_s"] is not None


@pytest.mark.slow
def test_calls_the_host_waits_for_pay_the_tpus_round_trip_and_chained_calls_do_not() -> None:
    # 200 calls of one step, chained in cell 2, each read back in cell 3 (before: 120-565 µs a call for both).
    record = profile_with_programs("forecast_sync_calls.md")
    result = forecast(record, "tpu-v5e").to_dict()

    def dispatch(index: int) -> dict[str, Any]:
        (term,) = [
            t
            for t in result["cells"][index]["gpu"]["tpu-v5e"]["terms"]
            if t["function"] == "newton_step" and t["kind"] == "dispatch"
        ]
        return term

    chained, waited = dispatch(1), dispatch(2)
    assert "waited for by the host" in chained["words"] and "waited for by the host" in waited["words"]
    assert chained["calls"] == waited["calls"] == 200
    assert waited["low_s"] > 4 * chained["high_s"]  # 0.57 ms a round trip against 0.12 ms a chained call
