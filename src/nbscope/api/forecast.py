"""``nbscope forecast``: a profile run's time on named GPUs, the device table, and device entries calibrated from
runs made on a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from nbscope._errors import NbscopeError
from nbscope.analyse.forecast import Forecast, forecast
from nbscope.analyse.forecast.devices import DeviceTable, load_table, resolve
from nbscope.collect import target_compile
from nbscope.collect.target_compile import ProgressCallback
from nbscope.record.run import RunRecord
from nbscope.record.store import RUN_REFERENCE, resolve_run, run_id_of
from nbscope.record.store import Store as Store  # re-exported for the CLI's types
from nbscope.schema.codec import Encoded, Write, never

if TYPE_CHECKING:
    from nbscope.analyse.forecast.calibrate import CalibratedDevice

__all__ = ["DeviceTable", "Forecast", "device_table"]


def device_table(devices_file: Path | None) -> DeviceTable:
    """The device table, with ``devices_file``'s GPUs (default: ``$NBSCOPE_DEVICES``, else the config folder's)."""
    return load_table(devices_file)


def _installed_jax() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return None


def target_environment(install: bool, on_progress: ProgressCallback | None = None) -> Path | None:
    """The Python of nbscope's target environment for the TPU (jax[tpu] at this environment's jax version): found,
    else (``install``) made from the package index; None when absent."""
    version = _installed_jax()
    if version is None:
        raise NbscopeError("jax is not installed here: the target environment takes the notebook's jax version")
    return target_compile.environment(version, install=install, on_progress=on_progress)


def compiled_for_target(
    record: RunRecord, budget_s: float, on_progress: ProgressCallback | None = None
) -> target_compile.TargetCompiles:
    """The run's programs compiled for the TPU here, at the run's own jax version (what its kernel lowered with)."""
    run = record.notebook_run()
    programs = run.program_data.programs if run.program_data is not None else {}
    version = record.machine().versions.get("jax") or _installed_jax()
    python = target_compile.environment(version, install=False) if version else None
    return target_compile.compile_programs(programs, python, budget_s=budget_s, on_progress=on_progress)


def forecast_run(
    run: str | None,
    store: Store,
    table: DeviceTable,
    *,
    gpus: str,
    notebook: Path | None = None,
    measured: str | None = None,
    compile_budget_s: float = 600.0,
    on_progress: ProgressCallback | None = None,
) -> Forecast:
    """The forecast of the profile run ``run`` names on ``gpus``; with ``measured`` (a run of the same notebook on
    the GPU), each device's forecast against what it measured. For a TPU, the run's programs are compiled for it
    here first (at most ``compile_budget_s`` seconds) where nbscope's target environment exists."""
    if run is None:
        raise NbscopeError(f"give a profile RUN ({RUN_REFERENCE}), or --calibrate-from RUN, or --list")
    record = resolve_run(run, store)
    label = f"run {record.run_id}" if record.run_id is not None else run
    target = (
        compiled_for_target(record, compile_budget_s, on_progress)
        if any(d.platform == "tpu" for d in resolve(table, gpus))
        else None
    )
    result = forecast(record, gpus, table=table, notebook_path=notebook, run_label=label, target=target)
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
