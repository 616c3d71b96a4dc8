"""What ``nbscope runs`` prints: the stored runs' table (or JSON), the unfinished runs one line each (never wrapped,
so that the import command can be copied), or the kernels running now."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope.render.live import live_lines
from nbscope.render.terminal import console, print_run_list

if TYPE_CHECKING:
    from nbscope.api.live import ImportedRun
    from nbscope.api.run_list import RunList
    from nbscope.record.live import UnfinishedRun


def runs_json(listing: RunList) -> str:
    if listing.live is not None:
        return json.dumps([dict(vars(kernel)) for kernel in listing.live], indent=1)  # its fields, in order
    if listing.unfinished is not None:
        return json.dumps([found.to_dict() for found in listing.unfinished], indent=1)
    return json.dumps(list(listing.rows), indent=1)


def print_runs(listing: RunList) -> None:
    if listing.live is not None:
        print("\n".join(live_lines(listing.live)))
    elif listing.unfinished is not None:
        print_unfinished(listing.unfinished, listing.db_hint)
    elif not listing.rows and listing.filtered:
        print("No stored run matches.")
    else:
        print_run_list(list(listing.rows))
        if listing.waiting:
            console.print(
                f"[yellow]{listing.waiting} unfinished run(s) were killed before they were stored: "
                f"see nbscope runs --unfinished{listing.db_hint}[/yellow]",
                soft_wrap=True,
            )


def print_unfinished(found: Sequence[UnfinishedRun], db_hint: str) -> None:
    """``runs --unfinished``: each live file of a run that ended before it was stored, and how to store it."""
    if not found:
        print("No unfinished runs.")
        return
    for item in found:
        path = item.path
        if item.state == "unreadable":
            print(f"{path}: cannot be imported: {item.reason}")
            continue
        what = f"{item.kind} {item.target}, started {str(item.started_at)[:19].replace('T', ' ')} UTC"
        done = f"{item.cells_measured} of {item.code_cells} cells measured"
        if item.state == "running":
            print(f"{path}: {what}: still running (process {item.pid}), {done} so far")
        elif item.state == "not-stored":
            print(f"{path}: {what}: measured, not stored; store it with: nbscope import {path}{db_hint}")
        else:
            print(f"{path}: {what}: unfinished, {done}; store it with: nbscope import {path}{db_hint}")


def import_lines(runs: Sequence[ImportedRun], store_path: Path) -> list[str]:
    """``nbscope import``: one line per file, saying what storing its run did (and a live file's fate)."""
    return [f"{run.path}: {_what_import_did(run, store_path)}" for run in runs]


def _what_import_did(run: ImportedRun, store_path: Path) -> str:
    record = run.record
    if not run.added:
        return f"already in {store_path} as run {record.run_id}; not imported again" + _live_file(run)
    if run.live_file_removed is None:
        return f"imported as run {record.run_id}" + (f": {run.note}" if run.note else "")
    totals = record.notebook_run().totals
    return (
        f"imported as run {record.run_id} ({record.status}: {totals.cells_run} of {totals.cells} cells ran)"
        + _live_file(run)
    )


def _live_file(run: ImportedRun) -> str:
    if run.live_file_removed is None:
        return ""
    return (
        "; the live file is removed"
        if run.live_file_removed
        else "; the file is kept (it is not one of this store's live files)"
    )
