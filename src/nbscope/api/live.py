"""Live files: a profile's cell records, streamed to disk as each cell finishes.

``nbscope profile`` (and each notebook of ``nbscope audit``) writes ``<store folder>/live/<stamp>-<pid>-<id>.jsonl``:
one header line (``{"type": "run", ...}``: what ran, where, with which settings), then per execution (one
per ``--repeat``) an ``{"type": "execution", ...}`` line followed by one line per code cell, as each
finishes (and, before the first, the probe's ``{"type": "kernel", ...}`` line). Once the run is in the store the file is removed. A file that stays behind belongs to a run
that was killed before it could be stored (SIGKILL, a crash, a full disk): ``nbscope runs --unfinished``
lists it and ``nbscope import FILE`` stores it as a partial run, then removes it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.record.run import RunRecord

LIVE_FORMAT = "nbscope-live"
LIVE_VERSION = 1
LIVE_FOLDER = "live"


def live_folder(store_path: Path | None) -> Path:
    """Where live files go: beside the store (``.nbscope/live`` by default)."""
    root = Path(store_path).parent if store_path is not None else Path(".nbscope")
    return root / LIVE_FOLDER


def new_live_path(store_path: Path | None, label: str = "") -> Path:
    """A fresh live file name; unique even for several runs of one process in the same second."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    middle = f"-{label}" if label else ""
    return live_folder(store_path) / f"{stamp}{middle}-{os.getpid()}-{uuid.uuid4().hex[:6]}.jsonl"


def _append(path: Path, line: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, default=str) + "\n")


def _process_started(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


def write_header(
    path: Path, record: RunRecord, notebook: dict[str, Any], code_cells: list[dict[str, Any]], store_path: Path | None
) -> None:
    """The first line: enough to rebuild the run record from the cell lines that follow."""
    _append(path, {
        "type": "run",
        "format": LIVE_FORMAT,
        "version": LIVE_VERSION,
        "kind": record.kind,
        "target": record.target,
        "started_at": record.started_at,
        "command": record.command,
        "settings": record.settings,
        "fingerprint": record.fingerprint,
        "notebook": notebook,
        "code_cells": code_cells,
        "store": str(Path(store_path).resolve()) if store_path is not None else None,
        "pid": os.getpid(),
        "process_started": _process_started(os.getpid()),
    })


def remove_live_file(path: Path) -> None:
    """Remove a live file once its run is stored; only a file that starts with nbscope's header, so that
    nothing nbscope did not write is ever deleted."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = json.loads(handle.readline() or "null")
    except (OSError, json.JSONDecodeError):
        return
    if isinstance(first, dict) and first.get("type") == "run" and first.get("format") == LIVE_FORMAT:
        path.unlink(missing_ok=True)


def write_execution(path: Path, number: int, cache_state: str) -> None:
    """Marks the start of one execution (one per repeat); its cell lines follow."""
    _append(path, {"type": "execution", "number": number, "cache_state": cache_state, "started_unix": time.time()})


@dataclass
class LiveRun:
    """What a live file holds: its header and, per execution, the cells recorded so far."""

    path: Path
    header: dict[str, Any]
    executions: list[dict[str, Any]] = field(default_factory=list)  # {"cache_state", "cells": [...]}

    @property
    def cells_measured(self) -> int:
        last = self.executions[-1]["cells"] if self.executions else []
        return sum(1 for c in last if c.get("status") not in ("not-run", None))

    @property
    def code_cells(self) -> int:
        return len(self.header.get("code_cells") or [])

    def running(self) -> bool:
        """Whether the process that writes this file is still alive (then the run is not unfinished)."""
        pid, started = self.header.get("pid"), self.header.get("process_started")
        if not isinstance(pid, int):
            return False
        now_started = _process_started(pid)
        if now_started is None:
            return False
        return not isinstance(started, (int, float)) or abs(now_started - started) < 1.0


def read_live(path: str | Path) -> LiveRun:
    """Parse a live file; the last header in it starts the run (a reused path may hold earlier ones)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise NbscopeError(f"{path}: no such file") from None
    except OSError as exc:
        raise NbscopeError(f"{path}: cannot read ({exc.strerror})") from None
    run: LiveRun | None = None
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a process killed mid-write leaves a torn last line
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "run" and item.get("format") == LIVE_FORMAT:
            run = LiveRun(path, item)
        elif run is None:
            continue
        elif kind == "execution":
            run.executions.append({"cache_state": item.get("cache_state") or "off", "cells": [], "kernel": None})
        elif kind == "kernel" and run.executions:
            run.executions[-1]["kernel"] = item  # the probe's header of that execution's kernel
        elif kind is None and "source_hash" in item:
            if not run.executions:
                run.executions.append({"cache_state": "off", "cells": [], "kernel": None})
            run.executions[-1]["cells"].append(item)
    if run is None:
        raise NbscopeError(f"{path} is not an nbscope live file with a header (an older nbscope wrote it, or another program)")
    version = run.header.get("version")
    if not isinstance(version, int) or version > LIVE_VERSION:
        raise NbscopeError(f"{path}: live file version {version!r}; this nbscope reads up to {LIVE_VERSION}: upgrade nbscope")
    return run


def recover(path: str | Path) -> RunRecord:
    """The partial run a live file holds, as a run record (status ``partial``)."""
    from nbscope.api.profile import fill_measurements
    from nbscope.collect.runner import Execution, merge_described

    run = read_live(path)
    header = run.header
    described = [c for c in header.get("code_cells") or [] if isinstance(c, dict)]
    executions = []
    for number, entry in enumerate(run.executions):
        cells = list(entry["cells"])
        # The cells the killed run never reached: as a run cut short records them.
        cells += [merge_described(c, None) for c in described[len(cells):]]
        runner = {"pathway": "kernel", "recovered_from": str(path)}
        executions.append(Execution(cells=cells, runner=runner, kernel=entry["kernel"], status="partial",
                                    interrupted=number == len(run.executions) - 1))
    cache_state = run.executions[-1]["cache_state"] if run.executions else "off"
    record = RunRecord(
        kind=str(header.get("kind") or "profile"),
        target=str(header.get("target") or ""),
        fingerprint=header.get("fingerprint") if isinstance(header.get("fingerprint"), dict) else {},
        settings=header.get("settings") if isinstance(header.get("settings"), dict) else {},
        command=header.get("command") if isinstance(header.get("command"), list) else [],
        started_at=str(header.get("started_at") or ""),
    )
    fill_measurements(record, header.get("notebook") or {}, described, executions, cache_state, None)
    record.measurements["recovered_from"] = str(path)
    record.status = "partial"
    try:
        mtime = Path(path).stat().st_mtime
        record.ended_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mtime)) + f".{int(mtime % 1 * 1000):03d}Z"
    except OSError:
        pass
    return record


def unfinished(folder: Path) -> list[dict[str, Any]]:
    """Every live file in ``folder``, oldest first: path, state (``unfinished``, ``running`` or
    ``unreadable``), what ran and how far it got."""
    found = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        item: dict[str, Any] = {"path": str(path), "state": "unreadable", "started_at": None, "kind": None,
                                "target": None, "cells_measured": None, "code_cells": None, "executions": None,
                                "reason": None}
        try:
            run = read_live(path)
        except NbscopeError as exc:
            item["reason"] = str(exc).removeprefix(f"{path} ").removeprefix(f"{path}: ")
            found.append(item)
            continue
        item.update(
            state="running" if run.running() else "unfinished",
            started_at=run.header.get("started_at"),
            kind=run.header.get("kind"),
            target=run.header.get("target"),
            cells_measured=run.cells_measured,
            code_cells=run.code_cells,
            executions=len(run.executions),
            pid=run.header.get("pid"),
        )
        found.append(item)
    return found


def recover_unfinished(path: str | Path) -> RunRecord:
    """:func:`recover`, refusing a file whose run is still going."""
    path = Path(path)
    run = read_live(path)
    if run.running():
        raise NbscopeError(f"{path} is still being written by process {run.header.get('pid')}; import it once that run ends")
    return recover(path)


def store_recovered(path: str | Path, record: RunRecord, store: Any) -> int:
    """Save a recovered run, then remove its live file (its content is in the store now)."""
    run_id = store.save(record)
    remove_live_file(Path(path))
    return run_id


def import_live(path: str | Path, store: Any) -> RunRecord:
    """Store the partial run of an unfinished live file, then remove the file."""
    record = recover_unfinished(path)
    store_recovered(path, record, store)
    return record
