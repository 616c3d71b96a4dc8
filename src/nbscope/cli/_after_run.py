"""What `profile` and `trace` do after a run: its top findings with the command that shows them in full, the
GPUs it forecasts for, and the exit status its cells call for (shared by both commands' modules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

TOP_FINDINGS = 3


def diagnose_command(record: Any, store: Any, devices: Path | None = None) -> str:
    """The command that shows a stored run's findings in full (with the device file they were forecast from)."""
    from nbscope.record.store import default_path

    command = f"nbscope diagnose {record.run_id}" + (f" --devices {devices}" if devices is not None else "")
    try:
        same = Path(store.path).resolve() == default_path().resolve()
    except OSError:
        same = False
    return command if same else f"{command} --db {store.path}"


def with_diagnosis(record: Any, findings: Any, why_not: str | None) -> dict[str, Any]:
    """A run record's document with its findings under "diagnosis" (not part of the stored record)."""
    document = json.loads(record.to_json())
    document["diagnosis"] = findings.to_dict() if findings is not None else {"error": why_not}
    return document


def print_findings_end(
    record: Any, findings: Any, why_not: str | None, store: Any, devices: Path | None = None
) -> None:
    """What ends the main job's output: the top findings, each with its fix, and the command that shows them all."""
    from nbscope.render import compare as view
    from nbscope.render.terminal import console, literal

    if findings is None:
        console.print(f"[dim]no findings: the run could not be diagnosed ({literal(why_not)})[/dim]")
        return
    view.print_top_findings(findings, record, diagnose_command(record, store, devices), top=TOP_FINDINGS)


def exit_if_failed(records: list[Any], allow_errors: bool) -> None:
    """Exit 1, with one line on stderr, when a cell of these runs failed: what CI needs to fail a broken lecture."""
    from nbscope.api.profile import failed_cells
    from nbscope.record.cells import label

    failed = [(record, cell) for record in records for cell in failed_cells(record)]
    if not failed or allow_errors:
        return
    record, cell = failed[0]
    error = cell.get("error") or {}
    what = f"{cell.get('status')}" + (f" {error.get('name')}" if error.get("name") else "")
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    where = f"run {record.run_id}" if record.run_id is not None else "the run"
    typer.echo(f"nbscope: failed: {label(cell)} of {record.target} ({what}){more}; {where} is stored "
               "with what it measured (--allow-errors exits 0 even so)", err=True)
    raise typer.Exit(1)


def forecast_gpus(names: str | None, devices: Path | None) -> list[Any]:
    """The GPUs of ``--forecast`` from the device table (one-line error for an unknown one)."""
    if not names:
        return []
    from nbscope.analyse.forecast.devices import load_table, resolve

    return resolve(load_table(devices), names)
