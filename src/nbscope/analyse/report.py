"""What a report shows beyond the runs themselves: the gate of the last run against the first, each
profile's GPU forecast (runs with program data) and diagnosis, and each target's history. Computed here once; the HTML renderer only formats it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import Findings, diagnose
from nbscope.analyse.forecast import Forecast, forecast
from nbscope.analyse.forecast.risks import gpus_of
from nbscope.analyse.gate import GateResult, gate
from nbscope.analyse.history import History, env_hashes, history
from nbscope.analyse.trial import TrialResult
from nbscope.record.cells import pair_cells
from nbscope.record.run import RunRecord
from nbscope.schema.model import Cell

if TYPE_CHECKING:
    from nbscope.record.store import Store

CELL_KINDS = ("profile", "trace")


@dataclass
class ReportData:
    """The runs of a report (the first is the baseline) and the analyses of them."""

    records: list[RunRecord]
    gate: GateResult | None = None
    gate_runs: tuple[int, int] | None = None  # positions in ``records`` of baseline and candidate
    gate_error: str | None = None
    diagnoses: list[tuple[int, Findings]] = field(default_factory=list)  # (position, findings)
    notes: list[str] = field(default_factory=list)  # runs that could not be diagnosed, and why
    histories: list[tuple[str, History]] = field(default_factory=list)
    # Cells of the profile runs side by side: ``side_by_side_runs`` are positions in ``records``, each row
    # holds one cell (or None) per such run, paired with the first run's cells by the cell model.
    side_by_side_runs: list[int] = field(default_factory=list)
    side_by_side: list[list[Cell | None]] = field(default_factory=list)
    forecasts: list[Forecast] = field(default_factory=list)  # GPU forecasts of runs with program data
    forecast_notes: list[str] = field(default_factory=list)
    # Settings the runs differ in: (``settings.jax_cache`` or ``settings.env.NAME``, one value per run); an
    # ``--env`` value only as a short hash of it ("#3fa2c1"), "not set" where a run lacks it.
    setting_differences: list[tuple[str, list[str]]] = field(default_factory=list)
    setting_runs: list[int] = field(default_factory=list)  # positions in ``records`` of those values: the profiles
    trials: list[TrialResult] = field(default_factory=list)  # remedies tried on these runs (``nbscope try``)


def _has_cells(record: RunRecord) -> bool:
    return record.kind in CELL_KINDS and bool(record.notebook_run().cells)


def _gate(data: ReportData) -> None:
    records = data.records
    runs = [r for r in records if _has_cells(r)]
    runs = [r for r in runs if runs and r.target == runs[-1].target]
    if len(runs) < 2:
        return  # gating pairs cells of one notebook: it needs two runs of the same target
    data.gate_runs = (records.index(runs[0]), records.index(runs[-1]))
    try:
        data.gate = gate(runs[0], runs[-1])
    except NbscopeError as exc:
        data.gate_error = str(exc)


def _side_by_side(data: ReportData) -> None:
    runs = [(i, r) for i, r in enumerate(data.records) if _has_cells(r)]
    if len(runs) < 2:
        return
    base = runs[0][1].notebook_run().cells
    rows: list[list[Cell | None]] = [[cell] + [None] * (len(runs) - 1) for cell in base]
    row_of = {id(cell): number for number, cell in enumerate(base)}
    for column, (_, record) in enumerate(runs[1:], start=1):
        for pair in pair_cells(base, record.notebook_run().cells):
            if pair.a is not None and pair.b is not None:
                rows[row_of[id(pair.a)]][column] = pair.b
            elif pair.b is not None:
                rows.append([pair.b if k == column else None for k in range(len(runs))])
    data.side_by_side_runs = [i for i, _ in runs]
    data.side_by_side = rows


def _diagnoses(data: ReportData) -> None:
    for position, record in enumerate(data.records):
        if record.kind not in CELL_KINDS:
            continue
        # The run before it of the same notebook, if any, is what diagnose() may compare it with.
        previous = [r for r in data.records[:position] if r.kind in CELL_KINDS and r.target == record.target]
        try:
            data.diagnoses.append((position, diagnose(record, other=previous[-1] if previous else None)))
        except NbscopeError as exc:
            data.notes.append(f"run {record.run_id or position + 1} not diagnosed: {exc}")


def _histories(data: ReportData, store: Store, metric: str) -> None:
    for target in dict.fromkeys(r.target for r in data.records):
        try:
            data.histories.append((target, history(store, target, metric=metric)))
        except NbscopeError:
            continue


def _forecasts(data: ReportData) -> None:
    """Each profile run recorded with program data, forecast on the GPUs named when it was recorded
    (``--forecast``), else on the T4."""
    for record in data.records:
        if record.kind not in CELL_KINDS or record.notebook_run().program_data is None:
            continue
        try:
            data.forecasts.append(forecast(record, gpus_of(record)))
        except NbscopeError as exc:  # e.g. a GPU named at profile time that a device file no longer has
            data.forecast_notes.append(f"forecast of run {record.run_id}: {exc}")


def _setting_text(value: object) -> str:
    """A recorded setting as the report lists it: ``–`` when it is not set."""
    return "–" if value in (None, "", [], {}) else str(value)


def _setting_differences(data: ReportData) -> None:
    """Among the profile runs only: a loop sweep or a pathways run has settings of its own kind."""
    positions = [i for i, r in enumerate(data.records) if r.kind in CELL_KINDS]
    records = [data.records[i] for i in positions]
    if len(records) < 2:
        return
    data.setting_runs = positions
    # Every setting any run recorded (``kernel``, ``traced_command``: more than the typed ``Settings`` holds),
    # as recorded: a walk over the settings documents.
    settings = [r.settings or {} for r in records]
    envs = [env_hashes(r) for r in records]  # env_signed: hashes of env, whose differences are shown
    for key in dict.fromkeys(k for one in settings for k in one if k not in ("env", "env_signed")):
        values = [_setting_text(one.get(key)) for one in settings]
        if len(set(values)) > 1:
            data.setting_differences.append((f"settings.{key}", values))
    for name in sorted({n for env in envs for n in env}):
        values = [f"#{env[name]}" if name in env else "not set" for env in envs]
        if len(set(values)) > 1:
            data.setting_differences.append((f"settings.env.{name}", values))


def report_data(records: list[RunRecord], *, store: Store | None = None, history_metric: str = "wall_s") -> ReportData:
    """Every analysis a report of ``records`` shows; ``store`` (optional) supplies the histories."""
    if not records:
        raise NbscopeError("report needs at least one run")
    data = ReportData(records=list(records))
    _gate(data)
    _setting_differences(data)
    _side_by_side(data)
    _forecasts(data)
    _diagnoses(data)
    if store is not None:
        _histories(data, store, history_metric)
    return data
