"""``nbscope publish STORE_OR_BOOK -o site/``: the book's status as a static site over the run store.

One row per lecture × runner (the runs of a notebook on one JAX backend: the CPU runner, the GPU runner), oldest
run first. Each row gets its newest status (ok, failed, timeout, died, stopped), wall and compile share, the walls
of its last builds, the change against the previous build and against the baseline (the gate's baseline for the
newest run when the gate judged it, else the row's first run), its confirmed regressions (change points of the
wall, ``analyse.history``) each with what changed across it (``analyse.attribution``), the newest run's top
finding (``analyse.diagnose``) and, for a CPU run with program data, the GPU forecast's verdict.

The store is read with two queries over its summary columns (the row's ids, then the figures of the rows that
changed); a run's document is read only for a row's newest run, the one before it, and the two sides of each
confirmed regression. Incremental: the folder keeps a manifest (``nbscope-site.json``) with each row's figures and
the count and newest id of its runs; a row whose runs are the same is taken from it unchanged, and a page whose
text is the same is not written again.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nbscope._errors import NbscopeError
from nbscope.analyse.attribution import attribute, classify_failure
from nbscope.analyse.history import ChangeOptions, Point, change_points
from nbscope.record.cells import project_root
from nbscope.record.run import PROFILE_KINDS, RunRecord
from nbscope.record.store import STORE_FOLDER, Store
from nbscope.schema.model import NotebookRun

MANIFEST = "nbscope-site.json"
MANIFEST_VERSION = 2
SPARK_RUNS = 30  # the last builds a row's sparkline shows
LECTURE_FOLDER = "lectures"
SUMMARY = ("id", "started_at", "target", "status", "machine", "backend", "totals")
STATUS_OF_FAILURE = {"cell-error": "failed", "timeout": "timeout", "kernel-killed": "died", "out-of-memory": "died",
                     "runner-stopped": "stopped", "interrupted": "stopped"}


@dataclass
class PublishResult:
    folder: Path
    rows: int
    runs: int
    rows_rebuilt: int
    pages_written: list[str] = field(default_factory=list)
    pages_kept: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "rows": self.rows, "runs": self.runs, "rows_rebuilt": self.rows_rebuilt,
                "pages_written": self.pages_written, "pages_kept": self.pages_kept}


def store_of(source: str | Path) -> Store:
    """The store ``source`` names: a store file, or a book (or project) folder: the store at its project root
    (``record.cells.project_root``: where ``nbscope profile`` run in that folder stores its runs)."""
    path = Path(source)
    if path.is_dir():
        path = project_root(path) / STORE_FOLDER / "nbscope.db"
    if not path.is_file():
        raise NbscopeError(f"no run store at {path}: give a store file or a folder whose {STORE_FOLDER}/ holds one")
    return Store(path, read_only=True)


def row_key(target: str, runner: str) -> str:
    return f"{runner}\x1f{target}"


def lecture_page(target: str) -> str:
    """The lecture page's path in the site: its name made safe for any file system and URL, plus a short hash
    of the whole name (two names that read alike never share a page)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", target).strip("._")[-80:] or "notebook"
    return f"{LECTURE_FOLDER}/{safe}-{hashlib.sha256(target.encode()).hexdigest()[:8]}.html"


def _figure(totals: Any, name: str) -> float | None:
    value: Any = totals.get(name) if type(totals) is dict else None
    return float(value) if type(value) in (int, float) else None  # not a bool, which is an int


def _status(record: RunRecord, run: NotebookRun) -> tuple[str, str | None]:
    """The newest run's status word and its failure's text."""
    failure = classify_failure(record, run)
    if failure is None:
        return "ok", None
    return STATUS_OF_FAILURE.get(failure.kind, "failed"), failure.text


def _ratio(new: float | None, old: float | None) -> float | None:
    return new / old if new is not None and old else None


def _cells(newest: NotebookRun, previous: NotebookRun | None) -> list[dict[str, Any]]:
    """The newest run's cells beside the previous run's cell of the same code (by source hash)."""
    before = {c.source_hash: c for c in previous.cells} if previous else {}
    rows = []
    for cell in newest.cells:
        old = before.get(cell.source_hash)
        rows.append({"label": cell.label, "first_line": cell.first_line, "status": cell.status,
                     "wall_s": cell.wall_s, "compile_s": cell.compile_s,
                     "previous_wall_s": old.wall_s if old else None, "edited": previous is not None and old is None})
    return rows


def _findings(record: RunRecord) -> list[dict[str, str]]:
    from nbscope.analyse.diagnose import diagnose

    try:
        found = diagnose(record)
    except NbscopeError as exc:
        return [{"title": "not diagnosed", "summary": str(exc)}]
    return [{"title": f.title, "summary": f.summary, "severity": f.severity} for f in found[:5]]


def _forecast(record: RunRecord, run: NotebookRun, runner: str) -> dict[str, Any] | None:
    """The GPU forecast's verdict of a CPU run with program data (the GPUs it was recorded for, else the T4)."""
    if runner != "cpu" or run.program_data is None:
        return None
    from nbscope.analyse.forecast import forecast

    gpus = list(record.run_settings().forecast) or ["t4"]
    try:
        result = forecast(record, gpus)
    except NbscopeError as exc:
        return {"text": f"not forecast: {exc}"}
    verdicts = [f"{result.device_name(key)}: {notebook.verdict}" for key, notebook in result.notebook.items()]
    return {"text": "; ".join(verdicts) or "no verdict"}


def _step(walls: Sequence[float | None], index: int, reach: int = 2) -> int:
    """The run where a change point's level starts: of the adjacent pairs within ``reach`` runs of the split, the
    one with the largest rise. The history's split can be a run early or late (a median does not move for one
    value of the other level, and the score favours balanced sides); the attribution compares the two runs
    of the step itself."""
    pairs = [i for i in range(max(1, index - reach), min(len(walls), index + reach + 1))
             if walls[i] is not None and walls[i - 1] is not None]
    return max(pairs, key=lambda i: float(walls[i] or 0) - float(walls[i - 1] or 0), default=index)


def build_row(store: Store, target: str, runner: str, summaries: Sequence[Mapping[str, Any]],
              baselines: Mapping[int, int | None], options: ChangeOptions | None = None) -> dict[str, Any]:
    """One lecture × runner row (plain JSON: the manifest keeps it) from its runs' summaries, oldest first."""
    points = [Point(row["id"], row["started_at"], _figure(row["totals"], "wall_s"), row["status"])
              for row in summaries]
    walls = [p.value for p in points]
    compiles = [_figure(row["totals"], "compile_s") for row in summaries]
    runs = [_figure(row["totals"], "run_s") for row in summaries]
    newest_id = summaries[-1]["id"]
    newest = store.get(newest_id)
    previous = store.readable(summaries[-2]["id"]) if len(summaries) > 1 else None
    newest_run = newest.notebook_run()
    previous_run = previous.notebook_run() if previous is not None else None
    status, error = _status(newest, newest_run)
    baseline_id = baselines.get(newest_id) or summaries[0]["id"]
    baseline_wall = next((p.value for p in points if p.run_id == baseline_id), None)
    changes = change_points(points, options) if len([w for w in walls if w is not None]) > 2 else []
    regressions = []
    for change in changes:
        # A change whose medians, once both sides are known, moved less than the history's own floor is a side
        # effect of a split a run off (the next split's segment held a run of the other level), not a regression.
        if change.tentative or change.ratio is None or change.ratio < 1 + (options or ChangeOptions()).rel_floor:
            continue
        step = _step(walls, change.index)
        before = store.readable(summaries[step - 1]["id"])
        after = store.readable(summaries[step]["id"])
        why = attribute(before, after).to_dict() if before is not None and after is not None else None
        regressions.append({**change.to_dict(), "step_index": step, "attribution": why})
    wall, compile_s = walls[-1], compiles[-1]
    totals = newest_run.totals
    return {
        "target": target, "runner": runner, "page": lecture_page(target), "machine": summaries[-1]["machine"],
        "runs": len(summaries), "newest_id": newest_id, "started_at": summaries[-1]["started_at"],
        "status": status, "error": error, "wall_s": wall, "compile_s": compile_s,
        "compile_share": compile_s / wall if wall and compile_s is not None else None,
        "cache_state": totals.cache_state,
        "vs_previous": _ratio(wall, walls[-2]) if len(walls) > 1 else None,
        "baseline_id": baseline_id, "vs_baseline": _ratio(wall, baseline_wall),
        "spark": walls[-SPARK_RUNS:], "history": {"started_at": [p.started_at for p in points], "wall_s": walls,
                                                   "compile_s": compiles, "run_s": runs, "ids": [p.run_id for p in points]},
        "changes": [c.to_dict() for c in changes], "regressions": regressions, "regression_count": len(regressions),
        "attribution": attribute(previous, newest).to_dict() if previous is not None else None,
        "cells": _cells(newest_run, previous_run), "findings": _findings(newest),
        "forecast": _forecast(newest, newest_run, runner),
        "median_wall_s": statistics.median([w for w in walls if w is not None]) if any(walls) else None,
    }


# What the manifest keeps of a row: what the book page and the status files show. A lecture page's history, cells
# and findings are made again from the store when its notebook has new runs, and only then.
BOOK_FIELDS = ("target", "runner", "page", "machine", "runs", "newest_id", "started_at", "status", "error", "wall_s",
               "compile_s", "compile_share", "cache_state", "vs_previous", "baseline_id", "vs_baseline", "spark",
               "regression_count", "forecast")


def book_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as the manifest keeps it: its book fields, its last regression and its top finding."""
    return {**{name: row[name] for name in BOOK_FIELDS}, "regressions": row["regressions"][-1:],
            "findings": row["findings"][:1]}


def _summaries(store: Store, columns: Sequence[str], targets: Sequence[str] | None) -> list[dict[str, Any]]:
    """The profile and trace runs' summary columns (of ``targets`` only, when given): one query."""
    rows: Any = store.summaries(columns, kind=list(PROFILE_KINDS), target=targets)
    return list(rows)


def _signatures(store: Store, manifest: Mapping[str, Any] | None) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Per row key, the count and the newest id of its runs; and the store's run count and newest id.

    After a publish, the runs stored since are the newest ids (ids only grow): when the store has exactly as many
    more runs as the newest few with an id above the last publish's newest, only those are read. Anything else
    (a first publish, runs deleted, more than a few thousand new) reads every run's id, notebook and backend."""
    total = store.count()
    old = manifest.get("scan") if manifest else None
    rows = (manifest or {}).get("rows") or {}
    if isinstance(old, dict) and isinstance(old.get("count"), int) and isinstance(old.get("newest_id"), int):
        added = total - old["count"]
        if 0 <= added <= 5000:
            newest: Any = store.summaries(("id", "kind", "target", "backend"), limit=added + 64) if added else []
            new = [row for row in newest if row["id"] > old["newest_id"]]
            if len(new) == added:
                signatures = {key: list(row["signature"]) for key, row in rows.items()}
                for row in new:
                    if row["kind"] in PROFILE_KINDS:
                        _count(signatures, row)
                newest_id = max([old["newest_id"], *(row["id"] for row in new)])
                return signatures, {"count": total, "newest_id": newest_id}
    signatures = {}
    newest_id = 0
    for row in _summaries(store, ("id", "target", "backend"), None):
        _count(signatures, row)
        newest_id = max(newest_id, row["id"])
    every: Any = store.summaries(("id",), limit=1)  # the newest run of any kind: its id bounds the next scan
    newest_id = max([newest_id, *(row["id"] for row in every)])
    return signatures, {"count": total, "newest_id": newest_id}


def _count(signatures: dict[str, list[int]], row: Mapping[str, Any]) -> None:
    count_and_newest = signatures.setdefault(row_key(row["target"], row["backend"] or "unknown"), [0, 0])
    count_and_newest[0] += 1
    count_and_newest[1] = max(count_and_newest[1], row["id"])


def _manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("version") == MANIFEST_VERSION else None


def _check_folder(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest; refuses a folder that holds anything publish did not make (it is never replaced)."""
    if folder.exists() and not folder.is_dir():
        raise NbscopeError(f"-o {folder} is a file, not a folder")
    manifest = _manifest(folder) if folder.is_dir() else None
    if folder.is_dir() and manifest is None and any(folder.iterdir()):
        raise NbscopeError(f"-o {folder} is not empty and was not made by `nbscope publish`; give a new or empty folder")
    return manifest


class SitePages(Protocol):
    """What formats the site's pages (``nbscope.render.site``): the API gathers the rows, the renderer writes them."""

    def book_pages(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]: ...

    def lecture_page(self, target: str, rows: Sequence[Mapping[str, Any]]) -> str: ...


def publish(source: str | Path, output: str | Path, *, site: SitePages, full: bool = False,
            options: ChangeOptions | None = None) -> PublishResult:
    """Write the site for the store ``source`` names into ``output``, its pages formatted by ``site``; only what
    changed since the last publish into that folder (``full``: every row and page again)."""

    store = store_of(source)
    folder = Path(output)
    manifest = _check_folder(folder)
    old_rows: dict[str, Any] = {} if full or manifest is None else manifest.get("rows") or {}
    # Even with ``full``, a page whose text is the same is not written again.
    old_pages: dict[str, str] = {} if manifest is None else manifest.get("pages") or {}
    every: list[dict[str, Any]] | None = None
    if old_rows:
        signatures, scan = _signatures(store, manifest)
    else:  # a first publish, or --full: one query gives every row's runs, and their counts
        every, signatures = _summaries(store, SUMMARY, None), {}
        for row in every:
            _count(signatures, row)
        scan = {"count": store.count(), "newest_id": max((row["id"] for row in every), default=0)}
    if not signatures:
        raise NbscopeError(f"{store.path} holds no profile or trace runs to publish")
    # A notebook with a new run has all its rows made again: its lecture page shows every runner in full.
    changed = {key.split("\x1f", 1)[1] for key, signature in signatures.items()
               if (old_rows.get(key) or {}).get("signature") != signature}
    stale = {key for key in signatures if key.split("\x1f", 1)[1] in changed}
    rows = {key: old_rows[key] for key in signatures if key not in stale}
    if stale:
        # Only the changed notebooks' runs, unless every run was read already.
        grouped: dict[str, list[dict[str, Any]]] = {}
        for row in every if every is not None else _summaries(store, SUMMARY, sorted(changed)):
            key = row_key(row["target"], row["backend"] or "unknown")
            if key in stale:
                grouped.setdefault(key, []).append(row)
        newest_ids = [max(r["id"] for r in group) for group in grouped.values()]
        baselines = {run_id: v.get("baseline_id") for run_id, v in store.verdicts(newest_ids).items()}
        for key, group in grouped.items():
            group.sort(key=lambda r: (r["started_at"], r["id"]))
            target, runner = key.split("\x1f", 1)[1], key.split("\x1f", 1)[0]
            rows[key] = {**build_row(store, target, runner, group, baselines, options), "signature": signatures[key]}
    ordered = [rows[key] for key in sorted(rows, key=lambda k: (rows[k]["target"], rows[k]["runner"]))]
    changed_targets = changed
    pages = site.book_pages(ordered)
    by_target: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        by_target.setdefault(row["target"], []).append(row)
    for target, target_rows in by_target.items():
        page = target_rows[0]["page"]
        if full or target in changed_targets or page not in old_pages:
            pages[page] = site.lecture_page(target, target_rows)
    result = PublishResult(folder=folder, rows=len(rows), runs=sum(s[0] for s in signatures.values()),
                           rows_rebuilt=len(stale))
    hashes = dict(old_pages)
    for name, text in pages.items():
        digest = hashlib.sha256(text.encode()).hexdigest()
        path = folder / name
        if hashes.get(name) == digest and path.is_file():
            result.pages_kept += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, text)
        hashes[name] = digest
        result.pages_written.append(name)
    result.pages_kept += len(set(old_pages) - set(pages))
    kept = {key: {**book_fields(row), "signature": signatures[key]} for key, row in rows.items()}
    manifest_text = json.dumps({"version": MANIFEST_VERSION, "store": str(store.path), "scan": scan, "rows": kept,
                                "pages": hashes}, default=str, separators=(",", ":"))
    _write(folder / MANIFEST, manifest_text)
    return result


def _write(path: Path, text: str) -> None:
    """Written whole, then renamed: a reader (or a publish stopped midway) never sees half a page."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
