"""A device entry for the forecast's table from runs measured on that GPU (``nbscope forecast
--calibrate-from RUN ...``).

* an ``nbscope loops`` run of the built-in loop (the lecture's ``lax.scan``, static length) gives
  ``loop_iteration_us``: the fitted slope on the default (GPU) device, as a range from the fit's slope
  to the slope of its two longest loops;
* an ``nbscope bench`` run gives, from its GPU figures: ``loop_iteration_us`` (``loops.scan`` slope),
  ``sync_iteration_us`` (``loops.fori_loop`` with a traced bound: a ``while`` whose trip count the
  GPU learns each iteration), ``fp32_tflops`` / ``fp64_tflops`` (the large matmul's achieved rate: a
  floor under the peak), ``memory_gbs`` (the elementwise kernel's bytes per second: a floor),
  ``host_link_gbs`` (``transfer.host_to_device``) and ``dispatch_us`` (``dispatch.round_trip``).

Figures the runs do not give come from ``--base`` (a device of the table) and keep their own source.
Every calibrated figure's source names the run, the GPU, the date and the nbscope version.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope.analyse.forecast.devices import DEVICE_FIGURES, Device, Figure
from nbscope.schema.codec import decode
from nbscope.schema.devices_file import OPTIONAL_DEVICE_FIGURES
from nbscope.schema.suite import BenchRun, GroupFigure, LoopsRun, Sweep

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord

# Any accelerator JAX runs on: a calibrated TPU entry is as good as a GPU one.
ACCELERATOR_PLATFORMS = ("gpu", "cuda", "rocm", "tpu")


def _provenance(record: RunRecord, what: str, device: str) -> str:
    run = f"run {record.run_id}" if record.run_id is not None else "an imported run"
    return (
        f"calibrated: {what} on {device}, nbscope {record.kind} {run} of {record.started_at[:10]} "
        f"(nbscope {record.tool_version}, fingerprint {record.digest or '?'})"
    )


def _gpu_sweep(run: LoopsRun) -> Sweep | None:
    for sweep in run.sweeps:
        if sweep.placement == "default" and (sweep.platform or "").lower() in ACCELERATOR_PLATFORMS:
            return sweep
    return None


def _from_loops(record: RunRecord, found: dict[str, Figure], names: list[str]) -> None:
    sweep = _gpu_sweep(decode(LoopsRun, record.measurements))
    if sweep is None:
        raise NbscopeError(
            f"{_label(record)}: no sweep on an accelerator (run `nbscope loops` on the GPU or TPU machine)"
        )
    if record.target != "builtin:logistic-map":
        raise NbscopeError(
            f"{_label(record)} timed {record.target}; calibration needs the built-in loop (`nbscope loops` "
            "without a target), whose body is the one the table's per-iteration figures describe"
        )
    fit = sweep.fit
    slopes = [v for v in ((fit.us_per_iter, fit.us_per_iter_top) if fit else ()) if v is not None and v > 0]
    if not slopes:
        raise NbscopeError(f"{_label(record)}: the GPU sweep has no fitted slope")
    device = sweep.device_kind or sweep.device or "the GPU"
    names.append(device)
    found["loop_iteration_us"] = Figure(
        min(slopes), max(slopes), "calibrated", _provenance(record, "lax.scan per-iteration slope", device)
    )


def _on_gpu(figure: GroupFigure) -> bool:
    return (figure.device or "").split(":", 1)[0].lower() in ACCELERATOR_PLATFORMS


def _device_of(figure: GroupFigure) -> str:
    text = figure.device or "the GPU"
    return text[text.find("(") + 1 : text.rfind(")")] if "(" in text and text.endswith(")") else text


def _from_bench(record: RunRecord, found: dict[str, Figure], names: list[str]) -> None:
    figures = {f.key or "": f for f in decode(BenchRun, record.measurements).figures if _on_gpu(f)}
    if not figures:
        raise NbscopeError(
            f"{_label(record)}: no figure measured on an accelerator (run `nbscope bench` on the GPU or TPU machine)"
        )

    def pick(prefix: str) -> GroupFigure | None:
        return next((figures[key] for key in sorted(figures) if key.startswith(prefix)), None)

    def add(name: str, low: float, high: float, what: str, figure: GroupFigure) -> None:
        device = _device_of(figure)
        names.append(device)
        found[name] = Figure(low, high, "calibrated", _provenance(record, what, device))

    def rate(figure: GroupFigure | None) -> float | None:
        value = figure.throughput.value if figure is not None and figure.throughput is not None else None
        return value if value is not None and value > 0 else None

    for name, prefix, what in (
        ("loop_iteration_us", "loops.scan_default_per_iter", "lax.scan per-iteration slope"),
        ("sync_iteration_us", "loops.fori_loop_default_per_iter", "fori_loop (traced bound) per-iteration slope"),
    ):
        figure = pick(prefix)
        fit = figure.fit if figure is not None else None
        if figure is not None and fit is not None and fit.per_iter_us is not None and fit.per_iter_us > 0:
            slope, spread = fit.per_iter_us, fit.spread or 0.0
            add(name, slope * (1 - min(spread, 0.5)), slope * (1 + min(spread, 0.5)), what, figure)
    for name, prefix, what in (
        ("fp32_tflops", "jax.matmul_large[float32]", "large matmul rate (a floor under the peak)"),
        ("fp64_tflops", "jax.matmul_large[float64]", "large matmul rate (a floor under the peak)"),
    ):
        figure = pick(prefix)
        flops = rate(figure)
        if figure is not None and flops is not None:
            add(name, flops / 1e3, flops / 1e3, what, figure)  # GFLOP/s → TFLOP/s
    figure = pick("jax.elementwise[")
    elements = rate(figure)
    if figure is not None and elements is not None:
        width = 8 if "float64" in (figure.key or "") else 4
        # Read x, write the result: two values per element (a floor: the kernel may not be memory-bound).
        add("memory_gbs", elements * 2 * width, elements * 2 * width, "elementwise bytes per second (a floor)", figure)
    figure = pick("transfer.host_to_device")
    link = rate(figure)
    if figure is not None and link is not None:
        add("host_link_gbs", link, link, "host→device copy rate", figure)
    figure = pick("dispatch.round_trip")
    median = figure.steady.median_s if figure is not None and figure.steady is not None else None
    if figure is not None and median is not None and median > 0:
        add("dispatch_us", median * 1e6, median * 1e6, "tiny jitted call round trip", figure)


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibratedDevice:
    """A device of the table in the ``devices.toml`` format (``--json`` writes its fields in this order): what
    calibration built, ``calibrated`` naming the figures it measured, ``base`` the device it took the rest from."""

    key: str
    name: str
    match: list[str]
    compute_capability: str | None = None
    platform: str = "gpu"
    figures: dict[str, Figure]
    calibrated: list[str] = field(default_factory=list)
    base: str | None = None


def _label(record: RunRecord) -> str:
    return f"run {record.run_id}" if record.run_id is not None else f"the {record.kind} run"


def calibrate(records: list[Any], key: str, base: Device | None) -> CalibratedDevice:
    """A device entry from loops and bench runs on one GPU."""
    found: dict[str, Figure] = {}
    names: list[str] = []
    for record in records:
        if record.kind == "loops":
            _from_loops(record, found, names)
        elif record.kind == "bench":
            _from_bench(record, found, names)
        else:
            raise NbscopeError(
                f"{_label(record)} is a {record.kind} run: calibration reads `nbscope loops` and "
                "`nbscope bench` runs made on the GPU"
            )
    if not found:
        raise NbscopeError("the runs hold no accelerator figure the forecast uses")
    gpu_names = sorted(set(names))
    figures: dict[str, Figure] = dict(base.figures) if base is not None else {}
    figures.update(found)
    missing = [name for name in DEVICE_FIGURES if name not in figures]
    if missing:
        raise NbscopeError(
            f"the runs do not give {', '.join(missing)}: pass --base DEVICE to take those from a device of the table"
        )
    return CalibratedDevice(
        key=key.lower(),
        name=gpu_names[0] if len(gpu_names) == 1 else (base.name if base else key),
        match=gpu_names or ([key] if base is None else base.match),
        compute_capability=base.compute_capability if base else None,
        platform="tpu" if any("tpu" in n.lower() for n in gpu_names) else (base.platform if base else "gpu"),
        figures=figures,
        calibrated=sorted(found),
        base=base.key if base else None,
    )


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's (a newline, a quote or a control character in a device's
    name stays inside its string: it never starts a table of its own in the user's device file)."""
    return json.dumps(text)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def to_toml(entry: CalibratedDevice) -> str:
    """The entry as a ``[devices.KEY]`` table for a device file."""
    lines = [
        f"[devices.{_toml_key(entry.key)}]",
        f"name = {_toml_string(entry.name)}",
        "match = [" + ", ".join(_toml_string(m) for m in entry.match) + "]",
    ]
    if entry.compute_capability:
        lines.append(f"compute_capability = {_toml_string(entry.compute_capability)}")
    if entry.platform != "gpu":
        lines.append(f"platform = {_toml_string(entry.platform)}")
    # the figures every device gives, then those a device may (a TPU base's compile and runtime figures)
    for name in (*DEVICE_FIGURES, *(n for n in OPTIONAL_DEVICE_FIGURES if n in entry.figures)):
        figure = entry.figures[name]
        amount = (
            f"value = {figure.low:.6g}"
            if figure.low == figure.high
            else f"low = {figure.low:.6g}, high = {figure.high:.6g}"
        )
        lines.append(
            f"{name} = {{ {amount}, basis = {_toml_string(figure.basis)}, source = {_toml_string(figure.source)} }}"
        )
    return "\n".join(lines) + "\n"
