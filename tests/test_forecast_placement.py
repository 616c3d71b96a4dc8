"""Calls a notebook pins to the CPU are forecast on the CPU, as measured, and said so: a function jitted
with a device or backend, calls under ``jax.default_device``, arrays committed to a device, and
``jax_platform_name`` / ``JAX_PLATFORMS``. Assertions rest on terms and words, not on speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from diag_support import profile_with_programs
from nbscope.analyse.forecast import forecast, placement

FILES = Path(__file__).resolve().parent / "files"


def _profile(name: str) -> Any:
    pytest.importorskip("jax")
    return profile_with_programs(name)


def _by_function(result: dict[str, Any], function: str) -> dict[str, Any]:
    return next(c for c in result["cells"] if any(p["function"] == function for p in c["programs"]))


@pytest.mark.parametrize(
    ("function", "how"),
    [
        ("path_on_device", "device=cpu"),
        ("path", 'backend="cpu"'),
        ("path_default", "default_device(cpu)"),
        ("path_committed", "device_put"),
    ],
)
def test_each_placement_form_is_forecast_on_the_cpu(pinned_run: Any, function: str, how: str) -> None:
    record, result = pinned_run
    cell = _by_function(result, function)
    outcome = cell["gpu"]["t4"]
    assert not [t for t in outcome["terms"] if t["kind"] == "loop"]  # no GPU loop: it stays on the CPU
    (cpu,) = [t for t in outcome["terms"] if t["kind"] == "cpu"]
    assert "pinned to the CPU at line" in cpu["words"] and how in cpu["words"]
    execution = next(e for e in cell["programs"] if e["function"] == function)
    assert cpu["low_s"] == cpu["high_s"] == pytest.approx(execution["cpu_s"])  # as measured
    if all(e["function"] == function for e in cell["programs"]):
        # A cell whose every call is pinned keeps what it measured and gains nothing: never forecast longer.
        assert outcome["low_s"] <= cell["cpu"]["wall_s"] + 1e-9
        assert outcome["verdict"] != "slower"
    assert function not in [k["function"] for k in result["notebook"]["t4"]["keep_on_cpu"]]


def test_an_unpinned_call_beside_them_is_forecast_on_the_gpu(pinned_run: Any) -> None:
    _, result = pinned_run
    outcome = _by_function(result, "path_free")["gpu"]["t4"]
    (loop,) = [t for t in outcome["terms"] if t["kind"] == "loop"]
    assert "200,000 iterations" in loop["words"]
    assert not [t for t in outcome["terms"] if t["kind"] == "cpu"]
    assert "path_free" in [k["function"] for k in result["notebook"]["t4"]["keep_on_cpu"]]


def test_pin_names_the_notebook_line(pinned_run: Any) -> None:
    record, result = pinned_run
    text = (FILES / "forecast_placement.md").read_text().splitlines()
    cell = _by_function(result, "path_on_device")
    (cpu,) = [t for t in cell["gpu"]["t4"]["terms"] if t["kind"] == "cpu"]
    line = int(cpu["words"].split("at line ")[1].split()[0])
    assert "device=cpu" in text[line - 1]


def test_platform_name_pins_the_whole_notebook() -> None:
    record = _profile("forecast_platform.md")
    result = forecast(record, "t4").to_dict()
    outcome = _by_function(result, "path")["gpu"]["t4"]
    assert not [t for t in outcome["terms"] if t["kind"] == "loop"]
    assert [t for t in outcome["terms"] if t["kind"] == "cpu"]
    assert any("jax_platform_name" in note for note in result["notes"])
    assert result["notebook"]["t4"]["keep_on_cpu"] == []


def test_jax_platforms_environment_forms_are_read() -> None:
    for source in (
        'import os\nos.environ["JAX_PLATFORMS"] = "cpu"\nimport jax',
        "%env JAX_PLATFORMS=cpu",
        'jax.config.update("jax_platforms", "cpu")',
    ):
        found = placement.read({0: source, 1: "y = f(x)"})
        assert found.platform is not None and found.pin_of(1, "f") is not None, source
    assert placement.read({0: 'os.environ["JAX_PLATFORMS"] = "cuda"'}).platform is None


@pytest.fixture(scope="module")
def pinned_run() -> tuple[Any, dict[str, Any]]:
    record = _profile("forecast_placement.md")
    return record, forecast(record, "t4").to_dict()
