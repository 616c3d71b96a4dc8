"""The forecast's result and the backend recommendation are typed, frozen results whose ``to_dict()`` is
exactly the JSON the commands print: ``nbscope forecast --json``, and the recommendation in ``diagnose
--json`` and ``compare --json``.

The runs are real (small notebooks profiled here with program data, JAX pinned to the CPU); the GPU run is
the synthetic T4 fixture of tests/files/records. Nothing asserted depends on this machine's speed: each
document is compared with the typed result made from the same record file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from diag_support import FILES
from nbscope.analyse.forecast import CellForecast, Forecast, NotebookForecast, Outcome, Term, forecast
from nbscope.analyse.forecast.measured import forecast_vs_measured
from nbscope.analyse.recommend import Recommendation, recommend, recommend_forecast
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record import run as record_module
from nbscope.record.run import RunRecord

pytest.importorskip("jax")
pytestmark = pytest.mark.slow
GPU_RUN = FILES / "records" / "synthetic_t4_latency_loop.json"


def _saved(name: str, folder: Path) -> Path:
    """A profile of ``name`` on this CPU with program data, written as a run file (what the commands read)."""
    record = profile(
        FILES / name,
        ProfileOptions(programs=True, jax_platform="cpu"),
        fingerprint={"digest": "test"},
        live_path=folder / f"{Path(name).stem}.jsonl",
    )
    path = folder / f"{Path(name).stem}.json"
    path.write_text(record.to_json())
    return path


@pytest.fixture(scope="module")
def honest_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """forecast_honest.md: loops, a cell that raises after its JAX work and one whose kernel dies."""
    return _saved("forecast_honest.md", tmp_path_factory.mktemp("honest"))


@pytest.fixture(scope="module")
def loop_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """diag_latency_loop.ipynb: the notebook the synthetic T4 run measured."""
    return _saved("diag_latency_loop.ipynb", tmp_path_factory.mktemp("loop"))


def _load(path: Path) -> RunRecord:
    return record_module.load(path)


def _json(result: Any) -> Any:
    """A document as the commands print it and read back (``json.dumps(..., default=str)``)."""
    return json.loads(json.dumps(result, default=str))


def test_to_dict_is_what_forecast_json_prints(honest_file: Path, run_cli: Any) -> None:
    shown = run_cli("forecast", honest_file, "--gpu", "t4,a100", "--json")
    assert shown.returncode == 0, shown.stderr
    result = forecast(_load(honest_file), "t4,a100")
    assert isinstance(result, Forecast)
    assert json.loads(shown.stdout) == _json(result.to_dict())
    # And the text is the document's own: the same dump, byte for byte.
    assert shown.stdout == json.dumps(result.to_dict(), indent=1, default=str) + "\n"


def test_forecast_measured_json_adds_the_typed_comparisons(honest_file: Path, run_cli: Any) -> None:
    from nbscope.analyse.forecast.measured import against_measured

    shown = run_cli("forecast", honest_file, "--gpu", "t4", "--measured", honest_file, "--json")
    assert shown.returncode == 0, shown.stderr
    record = _load(honest_file)
    result = forecast(record, "t4")
    measured = result.with_measured((against_measured(result, record, "t4"),))
    assert result.measured is None and "measured" not in result.to_dict()
    assert json.loads(shown.stdout) == _json(measured.to_dict())


def test_the_result_is_frozen(honest_file: Path) -> None:
    result = forecast(_load(honest_file), "t4")
    cell = result.cells[0]
    outcome = cell.gpu["t4"]
    notebook = result.notebook["t4"]
    assert isinstance(cell, CellForecast) and isinstance(outcome, Outcome)
    assert isinstance(notebook, NotebookForecast) and all(isinstance(t, Term) for t in outcome.terms)
    for part, name in (
        (result, "cells"),
        (cell, "index"),
        (outcome, "verdict"),
        (notebook, "verdict"),
        (outcome.terms[0], "low_s"),
        (result.devices[0], "name"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, name, None)
    assert isinstance(result.cells, tuple) and isinstance(outcome.terms, tuple) and isinstance(notebook.ranking, tuple)


def test_a_cell_that_raised_is_not_forecast_with_its_reason(honest_file: Path) -> None:
    result = forecast(_load(honest_file), "t4")
    failed = {f.status: f for f in result.not_forecast}
    assert set(failed) == {"error", "kernel-died"}
    raised = failed["error"]
    assert raised.reason.startswith("not forecast: the cell raised (ValueError")
    assert raised.first_line.startswith("y = jnp.cos(")
    assert result.cell(raised.index) is None  # not among the cells forecast
    assert raised.index in result.notebook["t4"].not_forecast
    assert failed["kernel-died"].reason.startswith("not forecast: the cell died")
    document = result.to_dict()
    assert [f["reason"] for f in document["not_forecast"]] == [f.reason for f in result.not_forecast]


def test_the_recommendation_is_what_diagnose_json_prints(honest_file: Path, run_cli: Any) -> None:
    shown = run_cli("diagnose", honest_file, "--json")
    assert shown.returncode == 0, shown.stderr
    recommendation = recommend_forecast(_load(honest_file))
    assert isinstance(recommendation, Recommendation) and recommendation.basis == "forecast"
    assert json.loads(shown.stdout)["recommendation"] == _json(recommendation.to_dict())
    with pytest.raises(dataclasses.FrozenInstanceError):
        recommendation.reason = ""  # type: ignore[misc]


def test_the_recommendation_and_forecast_vs_measured_are_what_compare_json_prints(
    loop_file: Path, run_cli: Any
) -> None:
    shown = run_cli("compare", loop_file, GPU_RUN, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    cpu, gpu = _load(loop_file), _load(GPU_RUN)
    recommendation = recommend(cpu, gpu)
    assert recommendation.basis == "measured" and recommendation.accelerator == "gpu"
    assert document["recommendation"] == _json(recommendation.to_dict())
    assert [p.cell for p in recommendation.pinned] == [p["cell"] for p in document["recommendation"]["pinned"]]
    assert recommendation.estimate("cpu") == document["recommendation"]["estimates"]["cpu_s"]
    measured = forecast_vs_measured(cpu, gpu)
    assert measured is not None and measured.comparison is not None
    assert document["forecast_vs_measured"] == _json(measured.to_dict())
