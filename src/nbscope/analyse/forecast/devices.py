"""The GPU table the forecast reads: nbscope's own (``devices.toml`` beside this file) plus a user's.

A user file has the same format (docs/forecast.md) and adds devices or overrides single figures of
existing ones; it is ``--devices FILE``, else ``$NBSCOPE_DEVICES``, else
``$XDG_CONFIG_HOME/nbscope/devices.toml`` (``~/.config/nbscope/devices.toml``) when it exists. A
malformed file is refused with one line naming the file and the field (``schema.devices_file`` reads it).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from nbscope._errors import NbscopeError
from nbscope.schema import devices_file, process_environment
from nbscope.schema.codec import Write
from nbscope.schema.devices_file import DEVICE_FIGURES as DEVICE_FIGURES  # its readers import them from here
from nbscope.schema.devices_file import MODEL_FIGURES
from nbscope.schema.devices_file import Figure as Figure

BUILTIN = Path(__file__).with_name("devices.toml")


def not_gpu(platform: object) -> bool:
    """``Write(when=not_gpu)``: a device's platform is written where it is not a GPU (as documents were before)."""
    return platform != "gpu"


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU of the table: its names and figures (a forecast's result holds these as they were)."""

    key: str
    name: str
    match: list[str]
    compute_capability: str | None
    origin: str  # the file its figures (last) came from
    figures: dict[str, Figure]
    platform: Annotated[str, Write(when=not_gpu)] = "gpu"  # gpu or tpu (devices_file.PLATFORMS)

    def figure(self, name: str) -> Figure:
        return self.figures[name]

    @property
    def forecasts_compile(self) -> bool:
        """The device gives its own compile figures (a TPU's): its compile is forecast from them, not derived from
        the table's gpu_compile_ratio, and a measured run's compile is compared with it."""
        return "compile_ratio" in self.figures

    def optional(self, name: str) -> Figure | None:
        """A figure a device may leave out (``devices_file.OPTIONAL_DEVICE_FIGURES``); None where it does."""
        return self.figures.get(name)

    @property
    def kind(self) -> str:
        """``GPU`` or ``TPU``: the word for this device in a forecast's text."""
        return self.platform.upper()


@dataclass
class DeviceTable:
    devices: dict[str, Device]
    model: dict[str, Figure]
    files: list[str] = field(default_factory=list)

    def known(self) -> str:
        return ", ".join(sorted(self.devices))


def _read(path: Path) -> dict[str, Any]:
    """A device file: a regular file, bounded in size and depth (``nbscope._files``), read as TOML."""
    from nbscope._files import parse_nested, read_text

    text = read_text(path, what="device file", limit=2**20)
    return dict(parse_nested(text, tomllib.loads, path=path, what="device file", form="TOML"))


def _merge(table: DeviceTable, document: dict[str, Any], path: Path, *, builtin: bool) -> None:
    source_file = str(path)
    try:
        read = devices_file.read(document, source_file, known=table.devices)
    except devices_file.InvalidDevicesFile as exc:
        raise NbscopeError(str(exc)) from None
    table.model.update(read.model)
    for entry in read.devices:
        existing = table.devices.get(entry.key)  # None: a new device
        # The device's fields as it stands (a new one's: its key), each field the file gives read over them.
        table.devices[entry.key] = Device(
            key=entry.key,
            name=entry.name if entry.name is not None else existing.name if existing else entry.key,
            match=list(entry.match if entry.match is not None else existing.match if existing else [entry.key]),
            compute_capability=(
                entry.compute_capability
                if entry.compute_capability is not None
                else existing.compute_capability
                if existing
                else None
            ),
            figures={**(existing.figures if existing else {}), **entry.figures},
            origin="nbscope" if builtin else source_file,
            platform=entry.platform or (existing.platform if existing else "gpu"),
        )
    missing_model = [name for name in MODEL_FIGURES if name not in table.model]
    if builtin and missing_model:
        raise NbscopeError(f"{path}: model.{missing_model[0]}: missing")


def check_device_text(text: str, path: Path) -> None:
    """Refuse (one line) device-file text the forecast could not read: not TOML, or entries that do not merge
    over nbscope's table. ``path`` names it in the error; nothing is read from or written to it."""
    from nbscope._files import parse_nested

    document = parse_nested(text, tomllib.loads, path=path, what="device file", form="TOML")
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
    exact = [
        d for d in table.devices.values() if d.name.lower() == lowered or any(m.lower() == lowered for m in d.match)
    ]
    if len(exact) == 1:
        return exact[0]
    words = [
        d
        for d in table.devices.values()
        if any(re.search(rf"(?<![a-z0-9]){re.escape(m.lower())}(?![a-z0-9])", lowered) for m in d.match)
    ]
    return words[0] if len(words) == 1 else None


def resolve(table: DeviceTable, names: str | list[str]) -> list[Device]:
    """Devices by key (``t4``) or by a name they match (``Tesla T4``), in the order given."""
    wanted = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if [w.lower() for w in wanted] == ["all"]:  # every device of the table: one recommendation across targets
        return list(table.devices.values())
    if not wanted:
        raise NbscopeError(f"--device needs at least one device: {table.known()}")
    found: list[Device] = []
    for name in wanted:
        device = table.devices.get(name.lower()) or _by_name(table, name)
        if device is None:
            raise NbscopeError(
                f"unknown device {name!r}: known are {table.known()}; add one in a device file "
                "(--devices FILE, $NBSCOPE_DEVICES or ~/.config/nbscope/devices.toml; see docs/forecast.md) "
                "or calibrate one with `nbscope forecast --calibrate-from RUN --name KEY`"
            )
        if device not in found:
            found.append(device)
    return found
