"""The GPU table the forecast reads: nbscope's own (``devices.toml`` beside this file) plus a user's.

A user file has the same format (docs/forecast.md) and adds devices or overrides single figures of
existing ones; it is ``--devices FILE``, else ``$NBSCOPE_DEVICES``, else
``$XDG_CONFIG_HOME/nbscope/devices.toml`` (``~/.config/nbscope/devices.toml``) when it exists. A
malformed file is refused with one line naming the file and the field.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.schema import process_environment

BUILTIN = Path(__file__).with_name("devices.toml")
DEVICE_FIGURES = (
    "fp32_tflops", "fp64_tflops", "memory_gbs", "host_link_gbs", "launch_us", "dispatch_us",
    "loop_iteration_us", "sync_iteration_us",
)
MODEL_FIGURES = (
    "reference_body_kernels", "compute_efficiency", "memory_efficiency", "transcendental_flops_f32",
    "transcendental_flops_f64", "transfer_latency_us", "gpu_compile_ratio", "library_call_us",
)
BASES = ("published", "measured", "derived", "assumed", "calibrated", "user")
FIGURE_KEYS = {"value", "low", "high", "source", "basis"}


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
class Device:
    """One GPU of the table: its names and figures (a forecast's result holds these as they were)."""

    key: str
    name: str
    match: list[str]
    compute_capability: str | None
    origin: str  # the file its figures (last) came from
    figures: dict[str, Figure]

    def figure(self, name: str) -> Figure:
        return self.figures[name]


@dataclass
class DeviceTable:
    devices: dict[str, Device]
    model: dict[str, Figure]
    files: list[str] = field(default_factory=list)

    def known(self) -> str:
        return ", ".join(sorted(self.devices))


def _figure(raw: object, where: str, source_file: str) -> Figure:
    """A figure from a number or a table ``{value | low, high, source, basis}``."""
    if isinstance(raw, bool):
        raise NbscopeError(f"{where}: expected a number or a table with value or low/high, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
        if not math.isfinite(value) or value <= 0:
            raise NbscopeError(f"{where}: must be a positive number, got {raw!r}")
        return Figure(value, value, "user", f"{source_file}")
    if not isinstance(raw, dict):
        raise NbscopeError(f"{where}: expected a number or a table with value or low/high, got {raw!r}")
    unknown = set(raw) - FIGURE_KEYS
    if unknown:
        raise NbscopeError(f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(sorted(FIGURE_KEYS))})")
    numbers = {}
    for key in ("value", "low", "high"):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise NbscopeError(f"{where}.{key}: must be a positive number, got {value!r}")
            numbers[key] = float(value)
    if "value" in numbers:
        if "low" in numbers or "high" in numbers:
            raise NbscopeError(f"{where}: give either value or low and high, not both")
        low = high = numbers["value"]
    elif "low" in numbers and "high" in numbers:
        low, high = numbers["low"], numbers["high"]
        if low > high:
            raise NbscopeError(f"{where}: low ({low:g}) is above high ({high:g})")
    else:
        raise NbscopeError(f"{where}: needs value, or both low and high")
    basis = raw.get("basis", "user")
    if basis not in BASES:
        raise NbscopeError(f"{where}.basis: must be one of {', '.join(BASES)}, got {basis!r}")
    source = raw.get("source", source_file)
    if not isinstance(source, str):
        raise NbscopeError(f"{where}.source: must be text, got {source!r}")
    return Figure(low, high, basis, source)


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NbscopeError(f"{path}: no such device file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NbscopeError(f"{path}: cannot read ({exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NbscopeError(f"{path}: not valid TOML ({exc})") from None


def _merge(table: DeviceTable, document: dict[str, Any], path: Path, *, builtin: bool) -> None:
    source_file = str(path)
    unknown = set(document) - {"devices", "model"}
    if unknown:
        raise NbscopeError(f"{path}: unknown table {sorted(unknown)[0]!r} (expected [devices.NAME] or [model])")
    model = document.get("model", {})
    if not isinstance(model, dict):
        raise NbscopeError(f"{path}: model must be a table")
    for name, raw in model.items():
        if name not in MODEL_FIGURES:
            raise NbscopeError(f"{path}: model.{name}: unknown figure (known: {', '.join(MODEL_FIGURES)})")
        table.model[name] = _figure(raw, f"{path}: model.{name}", source_file)
    devices = document.get("devices", {})
    if not isinstance(devices, dict):
        raise NbscopeError(f"{path}: devices must be a table of [devices.NAME] tables")
    for key, raw in devices.items():
        where = f"{path}: devices.{key}"
        if not isinstance(raw, dict):
            raise NbscopeError(f"{where}: must be a table")
        key = key.lower()
        existing = table.devices.get(key)  # None: a new device
        # The device's fields as it stands (a new one's: its key), each field the file gives read over them.
        device_name = existing.name if existing else key
        match = existing.match if existing else [key]
        compute_capability = existing.compute_capability if existing else None
        figures = dict(existing.figures) if existing else {}
        for name, value in raw.items():
            if name in ("name", "compute_capability"):
                if not isinstance(value, str):
                    raise NbscopeError(f"{where}.{name}: must be text, got {value!r}")
                if name == "name":
                    device_name = value
                else:
                    compute_capability = value
            elif name == "match":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise NbscopeError(f"{where}.match: must be a list of text, got {value!r}")
                match = value
            elif name in DEVICE_FIGURES:
                figures[name] = _figure(value, f"{where}.{name}", source_file)
            else:
                raise NbscopeError(f"{where}.{name}: unknown field (known: name, match, compute_capability, "
                                   f"{', '.join(DEVICE_FIGURES)})")
        missing = [name for name in DEVICE_FIGURES if name not in figures]
        if missing:
            raise NbscopeError(f"{where}.{missing[0]}: missing (a new device needs {', '.join(DEVICE_FIGURES)})")
        table.devices[key] = Device(
            key=key,
            name=device_name,
            match=list(match),
            compute_capability=compute_capability,
            figures=figures,
            origin="nbscope" if builtin else source_file,
        )
    missing_model = [name for name in MODEL_FIGURES if name not in table.model]
    if builtin and missing_model:
        raise NbscopeError(f"{path}: model.{missing_model[0]}: missing")


def check_device_text(text: str, path: Path) -> None:
    """Refuse (one line) device-file text the forecast could not read: not TOML, or entries that do not merge
    over nbscope's table. ``path`` names it in the error; nothing is read from or written to it."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NbscopeError(f"{path}: not valid TOML ({exc})") from None
    table = DeviceTable(devices={}, model={})
    _merge(table, _read(BUILTIN), BUILTIN, builtin=True)
    _merge(table, document, path, builtin=False)


def user_file(explicit: str | Path | None = None, environ: dict[str, str] | None = None) -> Path | None:
    """The user's device file: ``explicit``, else ``$NBSCOPE_DEVICES``, else the config folder's, if any."""
    if explicit:
        return Path(explicit).expanduser()
    settings = process_environment.read(environ)
    if settings.devices_file:
        return Path(settings.devices_file).expanduser()
    config = Path(settings.xdg_config_home or Path.home() / ".config") / "nbscope" / "devices.toml"
    return config if config.is_file() else None


def load_table(devices_file: str | Path | None = None, environ: dict[str, str] | None = None) -> DeviceTable:
    """nbscope's table with the user's file laid over it."""
    table = DeviceTable(devices={}, model={})
    _merge(table, _read(BUILTIN), BUILTIN, builtin=True)
    table.files.append(str(BUILTIN))
    extra = user_file(devices_file, environ)
    if extra is not None:
        _merge(table, _read(extra), extra, builtin=False)
        table.files.append(str(extra))
    return table


def _by_name(table: DeviceTable, name: str) -> Device | None:
    """The one device whose name or a ``match`` entry equals ``name``, else the one whose ``match``
    entry appears in it as a word (``Tesla T4``, ``NVIDIA A100-SXM4-80GB``: what NVML reports)."""
    lowered = name.lower()
    exact = [d for d in table.devices.values() if d.name.lower() == lowered or any(m.lower() == lowered for m in d.match)]
    if len(exact) == 1:
        return exact[0]
    words = [d for d in table.devices.values()
             if any(re.search(rf"(?<![a-z0-9]){re.escape(m.lower())}(?![a-z0-9])", lowered) for m in d.match)]
    return words[0] if len(words) == 1 else None


def resolve(table: DeviceTable, names: str | list[str]) -> list[Device]:
    """Devices by key (``t4``) or by a name they match (``Tesla T4``), in the order given."""
    wanted = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not wanted:
        raise NbscopeError(f"--gpu needs at least one GPU: {table.known()}")
    found: list[Device] = []
    for name in wanted:
        device = table.devices.get(name.lower())
        if device is None:
            device = _by_name(table, name)
        if device is None:
            raise NbscopeError(
                f"unknown GPU {name!r}: known are {table.known()}; add one in a device file "
                "(--devices FILE, $NBSCOPE_DEVICES or ~/.config/nbscope/devices.toml; see docs/forecast.md) "
                "or calibrate one with `nbscope forecast --calibrate-from RUN --name KEY`"
            )
        if device not in found:
            found.append(device)
    return found
