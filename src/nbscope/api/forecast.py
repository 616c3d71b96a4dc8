"""``nbscope forecast``: a profile run's time on named GPUs, the device table, and device entries calibrated from
runs made on a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from nbscope._errors import NbscopeError
from nbscope.analyse.forecast import Forecast, forecast
from nbscope.analyse.forecast.devices import DeviceTable, load_table
from nbscope.record.store import RUN_REFERENCE, resolve_run, run_id_of
from nbscope.record.store import Store as Store  # re-exported for the CLI's types
from nbscope.schema.codec import Encoded, Write, never

if TYPE_CHECKING:
    from nbscope.analyse.forecast.calibrate import CalibratedDevice

__all__ = ["DeviceTable", "device_table"]


def device_table(devices_file: Path | None) -> DeviceTable:
    """The device table, with ``devices_file``'s GPUs (default: ``$NBSCOPE_DEVICES``, else the config folder's)."""
    return load_table(devices_file)


def forecast_run(
    run: str | None,
    store: Store,
    table: DeviceTable,
    *,
    gpus: str,
    notebook: Path | None = None,
    measured: str | None = None,
) -> Forecast:
    """The forecast of the profile run ``run`` names on ``gpus``; with ``measured`` (a run of the same notebook on
    the GPU), each device's forecast against what it measured."""
    if run is None:
        raise NbscopeError(f"give a profile RUN ({RUN_REFERENCE}), or --calibrate-from RUN, or --list")
    record = resolve_run(run, store)
    label = f"run {record.run_id}" if record.run_id is not None else run
    result = forecast(record, gpus, table=table, notebook_path=notebook, run_label=label)
    if measured is None:
        return result
    from nbscope.analyse.forecast.measured import against_measured

    other = resolve_run(measured, store)
    if other.run_id is None:
        other.run_id = run_id_of(measured)
    return result.with_measured(tuple(against_measured(result, other, d.key) for d in result.devices))


@dataclass(frozen=True)
class Calibrated(Encoded):
    """A device entry built from runs made on a GPU (its ``--json`` document), and its TOML text for a device
    file."""

    name: Annotated[str, Write(when=never)]  # the key as given
    entry: Annotated[CalibratedDevice, Write(inline=True)]
    text: Annotated[str, Write(when=never)]


def calibrate_device(
    runs: list[str], name: str | None, base: str | None, table: DeviceTable, store: Store
) -> Calibrated:
    """``forecast --calibrate-from``: the entry of a new device ``name`` from ``nbscope loops`` / ``bench`` runs,
    figures they lack taken from ``base``."""
    from nbscope.analyse.forecast.calibrate import calibrate, to_toml
    from nbscope.analyse.forecast.devices import resolve

    if not name:
        raise NbscopeError("--calibrate-from needs --name KEY for the new device (e.g. --name my-a100)")
    records = [resolve_run(r, store) for r in runs]
    for reference, record in zip(runs, records, strict=True):
        if record.run_id is None:
            record.run_id = run_id_of(reference)
    base_device = resolve(table, base)[0] if base else None
    entry = calibrate(records, name, base_device)
    return Calibrated(name, entry, to_toml(entry))


def append_device(output: Path, calibrated: Calibrated) -> None:
    """Append a calibrated entry to the device file ``output``: checked first (the entry, then the file as it
    would be: a key it has already, or a file that was not valid before); the file is replaced whole
    (atomically) or not at all."""
    from nbscope._files import check_target, write_text
    from nbscope.analyse.forecast.devices import check_device_text

    check_target(output, option="--append-to")
    try:
        existing = output.read_text(encoding="utf-8") if output.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise NbscopeError(f"--append-to {output}: cannot read it ({exc}); nothing appended") from None
    combined = existing + ("\n" if existing and not existing.endswith("\n\n") else "") + calibrated.text
    check_device_text(calibrated.text, Path(f"the new entry {calibrated.name!r}"))
    try:
        check_device_text(combined, output)
    except NbscopeError as exc:
        raise NbscopeError(f"{exc}; nothing appended to {output}") from None
    write_text(output, combined, option="--append-to")
