"""Forecast evidence for the GPU rules on a CPU run: the run's GPU forecast, computed once per diagnosis.

On a CPU run that holds program data (``nbscope profile --forecast``), the GPU rules (latency-bound
loop, weak float64) fire as *forecast* findings: their numbers come from
:func:`nbscope.analyse.forecast.forecast` for the GPUs named with ``diagnose(gpus=...)``, else those
named when the run was recorded, else the T4. A finding built on it carries ``forecast`` (the GPU keys)
and says "forecast:" in its title and summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope import _units as units
from nbscope._errors import NbscopeError

if TYPE_CHECKING:  # the forecast is imported only when a run can be forecast
    from nbscope.analyse.forecast import Forecast
    from nbscope.record.run import RunRecord


@dataclass
class ForecastEvidence:
    """The forecast a diagnosis may use, or why there is none (``why_not``)."""

    gpus: list[str]
    result: Forecast | None = None
    table: Any = None  # nbscope.analyse.forecast.devices.DeviceTable
    devices: list[Any] = field(default_factory=list)  # Device, in the order asked
    why_not: str | None = None


def check_request(
    record: RunRecord,
    gpus: str | Sequence[str],
    platform: str | None,
    run_label: str = "the run",
    *,
    devices_file: str | Path | None = None,
) -> None:
    """An explicit ``gpus=`` request: unknown GPUs and runs that cannot be forecast are refused (one line)."""
    from nbscope.analyse.forecast.devices import load_table, resolve
    from nbscope.analyse.forecast.risks import gpus_of, require_forecast

    resolve(load_table(devices_file), gpus_of(record, list(gpus) if not isinstance(gpus, str) else gpus))
    require_forecast(record, platform, run_label)


def evidence(
    record: RunRecord, platform: str | None, gpus: Sequence[str] | None, *, devices_file: str | Path | None = None
) -> ForecastEvidence:
    """The forecast of ``record`` on the GPUs to diagnose for, or why it has none."""
    from nbscope.analyse.forecastable import forecast_unavailable

    why_not = forecast_unavailable(record, platform)
    if why_not is not None and not gpus:  # nothing to forecast: the forecast is not even imported
        return ForecastEvidence(gpus=[], why_not=why_not)
    from nbscope.analyse.forecast import forecast
    from nbscope.analyse.forecast.devices import load_table, resolve
    from nbscope.analyse.forecast.risks import gpus_of

    names = gpus_of(record, list(gpus) if gpus else None)
    found = ForecastEvidence(gpus=names, why_not=why_not)
    if why_not is not None:
        return found
    try:
        found.table = load_table(devices_file)
        found.devices = resolve(found.table, names)
        found.result = forecast(record, [d.key for d in found.devices], table=found.table)
    except NbscopeError as exc:  # e.g. a GPU named at record time that the device file no longer has
        found.result, found.why_not = None, f"no forecast: {exc}"
    return found


seconds_range = units.seconds_range


def on_a(key: str) -> str:
    """``on a T4``, ``on an H100``: the GPU as the findings name it (letters read as words)."""
    name = key.upper()
    return f"on {'an' if name[:1] in 'AEFHILMNORSX' else 'a'} {name}"
