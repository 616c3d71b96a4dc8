"""A device file (``devices.toml``: nbscope's own or one a user wrote), read from its TOML document into typed
entries, each value checked once here so that the forecast's table merges typed figures only.

The format is documented in docs/forecast.md. A malformed file is refused with :class:`InvalidDevicesFile`, one
line naming the file and the field; ``analyse.forecast.devices`` reports it as the user's error.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

DEVICE_FIGURES = (
    "fp32_tflops",
    "fp64_tflops",
    "memory_gbs",
    "host_link_gbs",
    "launch_us",
    "dispatch_us",
    "loop_iteration_us",
    "sync_iteration_us",
)
# Figures a device may give (the forecast falls back to the [model] figures without them): XLA:TPU compiles
# nothing like XLA:GPU, so a TPU entry gives its own compile figures, 32-bit and 64-bit programs apart.
OPTIONAL_DEVICE_FIGURES = (
    "compile_ratio",
    "compile_ratio_x64",
    "compile_each_s",
    "compile_each_x64_s",
    "compile_each_x64_user_s",
    "compile_each_x64_transcendental_s",
    "compile_mean_s",
    "compile_mean_x64_s",
    "compile_mean_x64_transcendental_s",
    "runtime_start_s",
    "memory_gb",  # the device memory a program may take (a compile for the target says what it takes)
    "target_compile_factor",  # the chip host's compile over this machine's, for programs compiled here for the target
    "target_compile_factor_total",  # the same over a notebook's programs compiled here, as a whole
    "sync_call_us",
)
PLATFORMS = ("gpu", "tpu")  # what a device is: its forecast's words and rules (a TPU's failing float64 ops)
MODEL_FIGURES = (
    "reference_body_kernels",
    "compute_efficiency",
    "memory_efficiency",
    "transcendental_flops_f32",
    "transcendental_flops_f64",
    "transfer_latency_us",
    "gpu_compile_ratio",
    "library_call_us",
)
BASES = ("published", "measured", "derived", "assumed", "calibrated", "user")
FIGURE_KEYS = {"value", "low", "high", "source", "basis"}


class InvalidDevicesFile(ValueError):
    """A device file this version cannot read; its message is one line naming the file and the field."""


@dataclass(frozen=True)
class Figure:
    """One figure of the table: a range (``low == high`` for a single value) and where it comes from."""

    low: float
    high: float
    basis: str
    source: str

    @property
    def mid(self) -> float:
        return math.sqrt(self.low * self.high) if self.low > 0 and self.high > 0 else (self.low + self.high) / 2

    def text(self, unit: str = "") -> str:
        """``8.0–8.2 µs`` or ``320 GB/s``."""
        if self.low == self.high:
            return f"{_number(self.low)}{unit}"
        return f"{_number(self.low)}–{_number(self.high)}{unit}"


def _number(value: float) -> str:
    return f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """One ``[devices.NAME]`` table as the file gives it: None (or no figure) where it leaves a field as it
    stands in the table it is laid over."""

    key: str  # NAME, lowered
    name: str | None
    match: list[str] | None
    compute_capability: str | None
    figures: dict[str, Figure]
    platform: str | None = None


@dataclass(frozen=True, slots=True)
class DevicesFile:
    model: dict[str, Figure]
    devices: tuple[DeviceEntry, ...]  # in the file's order


def read(document: Mapping[str, Any], path: str, *, known: Collection[str]) -> DevicesFile:
    """A device file's TOML ``document``, checked and typed. ``known`` are the device keys of the table it is
    laid over: a device not among them (nor earlier in the file) is new and needs every figure."""
    unknown = set(document) - {"devices", "model"}
    if unknown:
        raise InvalidDevicesFile(f"{path}: unknown table {sorted(unknown)[0]!r} (expected [devices.NAME] or [model])")
    model = document.get("model", {})
    if not isinstance(model, dict):
        raise InvalidDevicesFile(f"{path}: model must be a table")
    figures = {}
    for name, raw in model.items():
        if name not in MODEL_FIGURES:
            raise InvalidDevicesFile(f"{path}: model.{name}: unknown figure (known: {', '.join(MODEL_FIGURES)})")
        figures[name] = _figure(raw, f"{path}: model.{name}", path)
    devices = document.get("devices", {})
    if not isinstance(devices, dict):
        raise InvalidDevicesFile(f"{path}: devices must be a table of [devices.NAME] tables")
    seen = set(known)
    entries = []
    for key, raw in devices.items():
        entries.append(_device(key, raw, path, new=key.lower() not in seen))
        seen.add(key.lower())
    return DevicesFile(figures, tuple(entries))


def _device(key: str, raw: object, path: str, *, new: bool) -> DeviceEntry:
    where = f"{path}: devices.{key}"
    if not isinstance(raw, dict):
        raise InvalidDevicesFile(f"{where}: must be a table")
    texts: dict[str, str] = {}
    match = None
    figures = {}
    for name, value in raw.items():
        if name in ("name", "compute_capability", "platform"):
            if not isinstance(value, str):
                raise InvalidDevicesFile(f"{where}.{name}: must be text, got {value!r}")
            if name == "platform" and value not in PLATFORMS:
                raise InvalidDevicesFile(f"{where}.platform: must be one of {', '.join(PLATFORMS)}, got {value!r}")
            texts[name] = value
        elif name == "match":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidDevicesFile(f"{where}.match: must be a list of text, got {value!r}")
            match = value
        elif name in DEVICE_FIGURES or name in OPTIONAL_DEVICE_FIGURES:
            figures[name] = _figure(value, f"{where}.{name}", path)
        else:
            known = ", ".join(
                ("name", "match", "compute_capability", "platform", *DEVICE_FIGURES, *OPTIONAL_DEVICE_FIGURES)
            )
            raise InvalidDevicesFile(f"{where}.{name}: unknown field (known: {known})")
    missing = [name for name in DEVICE_FIGURES if name not in figures] if new else []
    if missing:
        raise InvalidDevicesFile(f"{where}.{missing[0]}: missing (a new device needs {', '.join(DEVICE_FIGURES)})")
    return DeviceEntry(
        key.lower(),
        texts.pop("name", None),
        match,
        texts.pop("compute_capability", None),
        figures,
        texts.pop("platform", None),
    )


def _figure(raw: object, where: str, source_file: str) -> Figure:
    """A figure from a number or a table ``{value | low, high, source, basis}``."""
    if isinstance(raw, bool):
        raise InvalidDevicesFile(f"{where}: expected a number or a table with value or low/high, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
        if not math.isfinite(value) or value <= 0:
            raise InvalidDevicesFile(f"{where}: must be a positive number, got {raw!r}")
        return Figure(value, value, "user", f"{source_file}")
    if not isinstance(raw, dict):
        raise InvalidDevicesFile(f"{where}: expected a number or a table with value or low/high, got {raw!r}")
    unknown = set(raw) - FIGURE_KEYS
    if unknown:
        raise InvalidDevicesFile(
            f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(sorted(FIGURE_KEYS))})"
        )
    numbers = {}
    for key in ("value", "low", "high"):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidDevicesFile(f"{where}.{key}: must be a positive number, got {value!r}")
            numbers[key] = float(value)
    if "value" in numbers:
        if "low" in numbers or "high" in numbers:
            raise InvalidDevicesFile(f"{where}: give either value or low and high, not both")
        low = high = numbers["value"]
    elif "low" in numbers and "high" in numbers:
        low, high = numbers["low"], numbers["high"]
        if low > high:
            raise InvalidDevicesFile(f"{where}: low ({low:g}) is above high ({high:g})")
    else:
        raise InvalidDevicesFile(f"{where}: needs value, or both low and high")
    basis = raw.get("basis", "user")
    if basis not in BASES:
        raise InvalidDevicesFile(f"{where}.basis: must be one of {', '.join(BASES)}, got {basis!r}")
    source = raw.get("source", source_file)
    if not isinstance(source, str):
        raise InvalidDevicesFile(f"{where}.source: must be text, got {source!r}")
    return Figure(low, high, basis, source)
