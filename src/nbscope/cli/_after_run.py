"""What `profile` and `trace` do after a run: its top findings with the command that shows them in full, and the
exit status its cells call for (shared by both commands' modules)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from nbscope.api.profile import Cell, Findings, RunRecord, Store

TOP_FINDINGS = 3


def with_diagnosis(record: RunRecord, findings: Findings | None, why_not: str | None) -> dict[str, object]:
    """A run record's document with its findings under "diagnosis" (not part of the stored record)."""
    document: dict[str, object] = json.loads(record.to_json())
    document["diagnosis"] = findings.to_dict() if findings is not None else {"error": why_not}
    return document


def print_findings_end(
    record: RunRecord, findings: Findings | None, why_not: str | None, store: Store, devices: Path | None = None
) -> None:
    """What ends the main job's output: the top findings, each with its fix, and the command that shows them all."""
    from nbscope.api.profile import diagnose_command
    from nbscope.render import findings as view
    from nbscope.render.terminal import console, literal

    if findings is None:
        console.print(f"[dim]no findings: the run could not be diagnosed ({literal(why_not)})[/dim]")
        return
    view.print_top_findings(findings, record, diagnose_command(record, store, devices), top=TOP_FINDINGS)


def exit_if_failed(failed: Sequence[tuple[RunRecord, Cell]], allow_errors: bool) -> None:
    """Exit 1, with one line on stderr, when a cell of these runs failed: what CI needs to fail a broken lecture."""
    from nbscope.render.ledger import failure_line

    if not failed or allow_errors:
        return
    typer.echo(failure_line(failed), err=True)
    raise typer.Exit(1)
