"""``nbscope publish STORE_OR_BOOK -o site/``: the book's status as a static site over the run store.

One row per lecture × runner (the runs of a notebook on one JAX backend: the CPU runner, the GPU runner), oldest
run first. Each row gets its newest status (ok, failed, timeout, died, stopped), wall and compile share, the walls
of its last builds, the change against the previous build and against the baseline (the gate's baseline for the
newest run when the gate judged it, else the row's first run), its confirmed regressions (change points of the
wall, ``analyse.history``) each with what changed across it (``analyse.attribution``), the newest run's top
finding (``analyse.diagnose``) and, for a CPU run with program data, the GPU forecast's verdict.

The store is read on one connection: the runs of every row from the index ``runs_book`` (id, start, status,
wall, compile and run of each run: version 7's columns), which give each row its history; then the summaries the
store keeps of the runs the rows show (version 8: a run's status, cells, findings, forecast verdict and what changed
since the run before it, and with a row's newest run the row's change points for that very series of runs). Only
a run without one has its document read (those of every row in one query) and is diagnosed; its summary is then
kept in the store, so a publish of a store published before reads no document. Incremental: the folder keeps a
manifest (``nbscope-site.json``) with each row's book fields and the count and newest id of its runs, and beside
each lecture page a data file with that page's rows whole. Only a row with a new run is made again; its
notebook's other rows come from the data file; a page whose text is the same is not written again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nbscope import __version__
from nbscope._errors import NbscopeError
from nbscope._files import check_target, refuse_input
from nbscope.record.store import STORE_FOLDER, Store
from nbscope.schema.kinds import PROFILE_KINDS

# The analyses are imported where a run is summarised or a row's change points are found: a publish that finds
# every summary kept (an unchanged row, a new site of a published store) does without them. So is the run
# record's model, needed only where a run's document is read: the command of an incremental publish is mostly its
# start-up, so it imports neither (nor ``dataclasses``, ``statistics`` or ``html``).
if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Findings
    from nbscope.analyse.history import ChangeOptions
    from nbscope.record.run import RunRecord

MANIFEST = "nbscope-site.json"
MANIFEST_VERSION = 3  # 3: each row's parts of the book pages, not its sparkline's figures
READABLE_MANIFESTS = (2, MANIFEST_VERSION)  # a folder of version 2 is published again whole, and taken over
SPARK_RUNS = 30  # the last builds a row's sparkline shows
LECTURE_FOLDER = "lectures"


class PublishResult:
    """What a publish made: the rows and runs it shows, the rows made again, the pages written and those kept."""

    def __init__(self, folder: Path, rows: int, runs: int, rows_rebuilt: int, pages_kept: int = 0) -> None:
        self.folder = folder
        self.rows = rows
        self.runs = runs
        self.rows_rebuilt = rows_rebuilt
        self.pages_written: list[str] = []
        self.pages_kept = pages_kept

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "rows": self.rows, "runs": self.runs, "rows_rebuilt": self.rows_rebuilt,
                "pages_written": self.pages_written, "pages_kept": self.pages_kept}


def store_of(source: str | Path) -> Store:
    """The store ``source`` names: a store file, or a book (or project) folder: the store at its project root
    (``record.cells.project_root``: where ``nbscope profile`` run in that folder stores its runs)."""
    path = Path(source)
    if path.is_dir():
        from nbscope.record.cells import project_root

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


def _number(value: object) -> float | None:
    if type(value) is float:  # what a REAL column gives: 87,600 runs' three figures are read per full publish
        return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ratio(new: float | None, old: float | None) -> float | None:
    return new / old if new is not None and old else None


def _median(values: Sequence[float]) -> float:
    """``statistics.median``'s figure (the middle value, or the mean of the two middle ones), without importing
    ``statistics`` (its fractions and decimals) into the command for one median."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# A run's summary (``Store.run_summaries``, ``analyse.run_summary``): what a row shows of the run, made whole when the
# run is saved (``keep_run_summary``). A run without one (a store of an older version, an imported run) gets the
# parts rows need: ``status`` for every run a row reads; ``findings`` for a row's newest run; ``attribution``
# (against the run before it in its row, named by ``before_id``) for a newest run and the first run of each
# confirmed regression.


class Summaries:
    """The summaries of the runs rows need: those the store keeps, the rest made from the runs' documents (read in
    one query) and kept in the store for the next publish; with what one publish's rows share."""

    def __init__(self, store: Store, *, again: bool = False) -> None:
        self.store = store
        self.again = again  # every summary made again from the documents (``--full``), and kept
        self.by_id: dict[int, dict[str, Any]] = {}

    def need(self, plans: Iterable[RowPlan], runners: Iterable[str]) -> None:
        """Every part each row needs (``RowPlan``): read from the store, made where missing, kept."""
        # (run id, part, the run before it for "attribution", the row's runner)
        parts: list[tuple[int, str, int | None, str]] = []
        plans = list(plans)
        for plan, runner in zip(plans, runners, strict=True):
            ids = plan.ids
            newest = ids[-1]
            parts.append((newest, "findings", None, runner))
            if len(ids) > 1:
                parts += [(ids[-2], "status", None, runner), (newest, "attribution", ids[-2], runner)]
            parts += [(ids[step], "attribution", ids[step - 1], runner) for _, step in plan.steps]
        self.read(run_id for run_id, *_ in parts)
        missing = [(run_id, part, before, runner) for run_id, part, before, runner in parts
                   if not self._has(run_id, part, before)]
        reads = {run_id for run_id, *_ in missing} | {before for _, _, before, _ in missing if before is not None}
        records = self.store.documents(reads) if reads else {}
        from nbscope.analyse.run_summary import SUMMARY_FORMAT, RunFindings, attribution_summary, status_summary

        made: dict[int, dict[str, Any]] = {}
        forecasts = RunFindings()
        for run_id, part, before, runner in missing:
            record = records.get(run_id)
            if record is None or self._has(run_id, part, before):
                continue
            summary = self.by_id.setdefault(run_id, {"format": SUMMARY_FORMAT})
            run = record.notebook_run()
            if "status" not in summary:
                summary.update(status_summary(record, run))
            if part == "findings":
                summary.update(forecasts.findings(record, run, runner))
            elif part == "attribution":
                earlier = records.get(before) if before is not None else None
                if earlier is None:
                    continue  # unreadable: the row says nothing of what changed, as before
                summary["attribution"] = attribution_summary(earlier, record, run)
            made[run_id] = summary
        for plan in plans:  # change points found now are kept with the newest run's summary
            newest_summary = self.by_id.get(plan.ids[-1])
            if plan.found is not None and newest_summary is not None and "status" in newest_summary:
                newest_summary["changes"] = plan.found
                made[plan.ids[-1]] = newest_summary
        self.store.keep_run_summaries(made)

    def read(self, run_ids: Iterable[int]) -> None:
        """The kept summaries of ``run_ids`` not read yet (none when made ``again``)."""
        from nbscope.analyse.run_summary import SUMMARY_FORMAT

        unread = set() if self.again else set(run_ids) - set(self.by_id)
        self.by_id.update((run_id, summary) for run_id, summary in self.store.run_summaries(unread).items()
                          if summary.get("format") == SUMMARY_FORMAT)

    def _has(self, run_id: int, part: str, before: int | None) -> bool:
        summary = self.by_id.get(run_id)
        if summary is None or "status" not in summary:
            return False
        if part == "attribution":
            return (summary.get("attribution") or {}).get("before_id") == before
        return part in summary

    def attribution(self, run_id: int, before: int) -> dict[str, Any] | None:
        found = (self.by_id.get(run_id) or {}).get("attribution")
        return found if isinstance(found, dict) and found.get("before_id") == before else None


def keep_run_summary(store: Store | None, record: RunRecord, *, findings: Findings | None = None,
                     diagnose: bool = True) -> None:
    """Right after ``record`` was saved in ``store`` (by ``profile``, ``trace``, ``audit``, ``merge``, ``gate``'s
    rerun): its summary as publish shows it, made whole and kept in the store (``analyse.run_summary``), with what
    changed since the run before it in its row and, when it is the row's newest run, the row's change points; the
    next publish then reads it and diagnoses nothing. ``findings``: those the command made of the run (it is not
    diagnosed twice); ``diagnose=False`` (``--no-diagnose``): none made, publish makes them. Only a notebook's
    stored run is summarised, and none after a stop signal (the command is ending). A summary that cannot be made
    or kept is made by the next publish instead: the run is saved already."""
    from nbscope import _signals
    from nbscope.analyse.run_summary import run_summary

    if store is None or record.run_id is None or record.kind not in PROFILE_KINDS or _signals.received() is not None:
        return
    try:
        with store.held():
            rows = _series_by_row(store.book_series(PROFILE_KINDS, [record.target]), None)
            key, series = next(((key, series) for key, series in rows.items()
                                if any(run[ID] == record.run_id for run in series)), ("", []))
            ids = [run[ID] for run in series]
            if not ids:
                return
            place = ids.index(record.run_id)
            before = store.readable(ids[place - 1]) if place else None
            summary = run_summary(record, runner=key.split("\x1f", 1)[0], before=before, found=findings,
                                  diagnose=diagnose)
            if place == len(ids) - 1:  # the row's newest run keeps the row's change points
                summary["changes"] = plan_row(series).found
            store.keep_run_summaries({record.run_id: summary})
    except Exception:  # as a failed diagnosis (``diagnosis_of``): it costs the run its summary, not the command
        return


def keep_run_summaries(store: Store | None, runs: Iterable[tuple[RunRecord, Findings | None]], *,
                       diagnose: bool = True) -> None:
    """``keep_run_summary`` of each of ``runs``: a run saved and the findings its command made of it (or None)."""
    for record, findings in runs:
        keep_run_summary(store, record, findings=findings, diagnose=diagnose)


def _cells(newest: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The newest run's cells beside the previous run's cell of the same code (by source hash)."""
    before = {c["source_hash"]: c for c in previous["cells"]} if previous else {}
    rows = []
    for cell in newest["cells"]:
        old = before.get(cell["source_hash"])
        rows.append({"label": cell["label"], "first_line": cell["first_line"], "status": cell["status"],
                     "wall_s": cell["wall_s"], "compile_s": cell["compile_s"],
                     "previous_wall_s": old["wall_s"] if old else None, "edited": previous is not None and old is None})
    return rows


# A run in a row's series: ``Store.book_series``'s columns.
TARGET, BACKEND, STARTED_AT, ID, STATUS, WALL, COMPILE, RUN = range(8)


class RowPlan:
    """A row's runs (``Store.book_series`` tuples, oldest first), its change points and its confirmed regressions
    (as ``ChangePoint.to_dict`` gives them): found from the columns alone, or kept in the newest run's summary
    for the same series, so that the runs' summaries every row needs are read (or made) together."""

    def __init__(self, series: Sequence[tuple[Any, ...]], ids: list[int], walls: list[float | None],
                 changes: list[dict[str, Any]], steps: list[tuple[dict[str, Any], int]],
                 found: dict[str, Any] | None = None) -> None:
        self.series = series
        self.ids = ids
        self.walls = walls
        self.changes = changes
        self.steps = steps  # each confirmed regression and the index of its new level's first run
        self.found = found  # change points found now, for the newest run's summary


def _series_key(ids: Sequence[int], options: ChangeOptions | None) -> str:
    """What a row's change points depend on: its runs (a stored run's figures never change) and the detection's
    options (None: this version's defaults, as summaries are kept per version)."""
    digest = hashlib.sha256(array("q", ids).tobytes())
    digest.update(repr(options).encode())
    return digest.hexdigest()[:32]


def plan_row(series: Sequence[tuple[Any, ...]], options: ChangeOptions | None = None,
             kept: Mapping[str, Any] | None = None) -> RowPlan:
    """The row's plan; its change points and regressions are those ``kept`` (the newest run's summary) holds for
    this very series, else found now."""
    ids = [run[ID] for run in series]
    walls = [_number(run[WALL]) for run in series]
    key = _series_key(ids, options)
    cached = (kept or {}).get("changes")
    if isinstance(cached, dict) and cached.get("series") == key:
        changes: list[dict[str, Any]] = cached["found"]
        return RowPlan(series, ids, walls, changes, [(changes[n], changes[n]["index"]) for n in cached["steps"]])
    from nbscope.analyse.history import ChangeOptions, Point, change_points

    points = [Point(run_id, run[STARTED_AT], wall, run[STATUS]) for run_id, run, wall in zip(ids, series, walls, strict=True)]
    changes = [c.to_dict() for c in change_points(points, options)] if len([w for w in walls if w is not None]) > 2 else []
    floor = 1 + (options or ChangeOptions()).rel_floor
    # A change whose medians, measured up to the neighbouring changes, moved less than the history's own floor
    # is not a regression (its split was found in a wider segment, where the shift looked larger).
    confirmed = [n for n, change in enumerate(changes)
                 if not change["tentative"] and change["ratio"] is not None and change["ratio"] >= floor]
    return RowPlan(series, ids, walls, changes, [(changes[n], changes[n]["index"]) for n in confirmed],
                   {"series": key, "found": changes, "steps": confirmed})


def build_row(plan: RowPlan, target: str, runner: str, runs: Summaries, machine: str | None,
              baselines: Mapping[int, int | None]) -> dict[str, Any] | None:
    """One lecture × runner row (plain JSON: the manifest keeps it) from its plan and its runs' summaries (``runs``,
    made for the plan: ``Summaries.need``); None when its newest run cannot be read."""
    series, walls = plan.series, plan.walls
    ids = plan.ids
    compiles = [_number(run[COMPILE]) for run in series]
    run_figures = [_number(run[RUN]) for run in series]
    newest_id = ids[-1]
    newest = runs.by_id.get(newest_id)
    if newest is None or "findings" not in newest:
        return None
    previous_id = ids[-2] if len(ids) > 1 else None
    previous = runs.by_id.get(previous_id) if previous_id is not None else None
    if previous is not None and "status" not in previous:
        previous = None
    baseline_id = baselines.get(newest_id) or ids[0]
    baseline_wall = next((wall for run_id, wall in zip(ids, walls, strict=True) if run_id == baseline_id), None)
    regressions = []
    for change, step in plan.steps:
        why = runs.attribution(ids[step], ids[step - 1])
        regressions.append({**change, "step_index": step, "attribution": why})
    wall, compile_s = walls[-1], compiles[-1]
    started_at = series[-1][STARTED_AT]
    return {
        "target": target, "runner": runner, "page": lecture_page(target), "machine": machine,
        "runs": len(series), "newest_id": newest_id, "started_at": started_at,
        "status": newest["status"], "error": newest["error"], "wall_s": wall, "compile_s": compile_s,
        "compile_share": compile_s / wall if wall and compile_s is not None else None,
        "cache_state": newest["cache_state"],
        "vs_previous": _ratio(wall, walls[-2]) if len(walls) > 1 else None,
        "baseline_id": baseline_id, "vs_baseline": _ratio(wall, baseline_wall),
        "spark": walls[-SPARK_RUNS:], "history": {"started_at": [run[STARTED_AT] for run in series], "wall_s": walls,
                                                   "compile_s": compiles, "run_s": run_figures, "ids": ids},
        "changes": plan.changes, "regressions": regressions,
        "regression_count": len(regressions),
        "attribution": runs.attribution(newest_id, previous_id) if previous is not None and previous_id is not None
        else None,
        "cells": _cells(newest, previous),
        "findings": newest["findings"], "forecast": newest["forecast"],
        "median_wall_s": _median([w for w in walls if w is not None]) if any(walls) else None,
    }


# What the manifest keeps of a row: what the book page and the status files show. A lecture page's history, cells
# and findings are made again from the store when its notebook has new runs, and only then.
BOOK_FIELDS = ("target", "runner", "page", "machine", "runs", "newest_id", "started_at", "status", "error", "wall_s",
               "compile_s", "compile_share", "cache_state", "vs_previous", "baseline_id", "vs_baseline", "spark",
               "regression_count", "forecast")


def book_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as the manifest keeps it: its book fields, its last regression and its top finding; not its
    sparkline's figures, which only its parts of the book pages show (kept beside it, ``site.book_row``)."""
    return {**{name: row[name] for name in BOOK_FIELDS if name != "spark"}, "regressions": row["regressions"][-1:],
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
                        _count(signatures, row["target"], row["backend"], row["id"])
                newest_id = max([old["newest_id"], *(row["id"] for row in new)])
                return signatures, {"count": total, "newest_id": newest_id}
    signatures = {}
    newest_id = 0
    for row in _summaries(store, ("id", "target", "backend"), None):
        _count(signatures, row["target"], row["backend"], row["id"])
        newest_id = max(newest_id, row["id"])
    every: Any = store.summaries(("id",), limit=1)  # the newest run of any kind: its id bounds the next scan
    newest_id = max([newest_id, *(row["id"] for row in every)])
    return signatures, {"count": total, "newest_id": newest_id}


def _count(signatures: dict[str, list[int]], target: str, backend: str | None, run_id: int) -> None:
    count_and_newest = signatures.setdefault(row_key(target, backend or "unknown"), [0, 0])
    count_and_newest[0] += 1
    count_and_newest[1] = max(count_and_newest[1], run_id)


def _series_by_row(per_kind: Iterable[Sequence[tuple[Any, ...]]], keys: set[str] | None) -> dict[str, list[tuple[Any, ...]]]:
    """The runs of each row of ``keys`` (None: of every row), oldest first (by start, then id). ``Store.book_series``
    gives each kind's runs of a row in that order already; a row with runs of two kinds, or of backends that are one
    row (none recorded and "unknown"), is sorted."""
    grouped: dict[str, list[tuple[Any, ...]]] = {}
    unordered: set[str] = set()
    groups = (group for series in per_kind for group in itertools.groupby(series, key=operator.itemgetter(TARGET, BACKEND)))
    for (target, backend), runs in groups:
        key = row_key(target, backend or "unknown")
        if keys is not None and key not in keys:
            continue
        group = grouped.get(key)
        if group is None:
            grouped[key] = list(runs)
        else:
            group.extend(runs)
            unordered.add(key)
    for key in unordered:
        grouped[key].sort(key=lambda run: (run[STARTED_AT], run[ID]))
    # The rows in the order the manifest has always kept them: the row with the newest run first.
    return dict(sorted(grouped.items(), key=lambda item: (item[1][-1][STARTED_AT], item[1][-1][ID]), reverse=True))


# The manifest as publish writes it: compact JSON.
COMPACT = (",", ":")
_DECODE = json.JSONDecoder().raw_decode
_string = json.encoder.encode_basestring_ascii  # a key as json.dumps writes it (ensure_ascii)


def _manifest(folder: Path) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The folder's manifest, and the text of each of its rows as it stands there (``_read_manifest``)."""
    try:
        text = (folder / MANIFEST).read_text()
    except OSError:
        return None, {}
    try:
        manifest, row_texts = _read_manifest(text)
    except (ValueError, IndexError):  # laid out otherwise (edited by hand): read as any JSON, its rows written anew
        row_texts = {}
        try:
            manifest = json.loads(text)
        except ValueError:
            return None, {}
    if not isinstance(manifest, dict) or manifest.get("version") not in READABLE_MANIFESTS:
        return None, {}
    return manifest, row_texts


def _read_manifest(text: str) -> tuple[Any, dict[str, str]]:
    """``json.loads(text)`` of a manifest laid out as publish writes it (compact), and the text of each member of
    its "rows" as it stands there: a row kept as it was is written out as that text (``_manifest_text``). A
    ValueError (or IndexError) when it is laid out otherwise."""
    row_texts: dict[str, str] = {}

    def members(at: int, texts: dict[str, str] | None) -> tuple[dict[str, Any], int]:
        # The object at text[at] and where it ends; each member's text to ``texts`` when given; at the top
        # (``texts`` None) the object "rows" is read member by member, their texts to ``row_texts``.
        if text[at] != "{":
            raise ValueError("not an object")
        found: dict[str, Any] = {}
        at += 1
        if text[at] == "}":
            return found, at + 1
        while True:
            key, at = _DECODE(text, at)
            if not isinstance(key, str) or text[at] != ":":
                raise ValueError("not a member")
            if texts is None and key == "rows" and text[at + 1] == "{":
                found[key], end = members(at + 1, row_texts)
            else:
                found[key], end = _DECODE(text, at + 1)
                if texts is not None:
                    texts[key] = text[at + 1 : end]
            at = end
            if text[at] == "}":
                return found, at + 1
            if text[at] != ",":
                raise ValueError("not a member")
            at += 1

    manifest, end = members(0, None)
    if end != len(text):
        raise ValueError("text after the manifest")
    return manifest, row_texts


def _manifest_text(manifest: Mapping[str, Any], row_texts: Mapping[str, str]) -> str:
    """``json.dumps(manifest, default=str, separators=COMPACT)``, the same text, but each row of ``row_texts`` (a
    row kept as the last publish wrote it) written as its text there: 240 rows' parts of the book pages are not
    encoded again for one new run."""

    def member(key: str, value: object) -> str:
        if key != "rows" or not row_texts or not isinstance(value, Mapping):
            return f"{_string(key)}:{json.dumps(value, default=str, separators=COMPACT)}"
        rows = ",".join(f"{_string(name)}:{row_texts[name]}" if name in row_texts
                        else f"{_string(name)}:{json.dumps(row, default=str, separators=COMPACT)}"
                        for name, row in value.items())
        return f'"rows":{{{rows}}}'

    return "{" + ",".join(member(key, value) for key, value in manifest.items()) + "}"


def _check_folder(folder: Path) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The folder's manifest (and its rows' texts); refuses a folder that holds anything publish did not make (it
    is never replaced)."""
    refuse_input(folder, option="-o")  # the store itself, named as the site's folder
    if folder.exists() and not folder.is_dir():
        raise NbscopeError(f"-o {folder} is a file, not a folder")
    manifest, row_texts = _manifest(folder) if folder.is_dir() else (None, {})
    if folder.is_dir() and manifest is None and any(folder.iterdir()):
        raise NbscopeError(f"-o {folder} is not empty and was not made by `nbscope publish`; give a new or empty folder")
    return manifest, row_texts


def _target_of(key: str) -> str:
    return key.split("\x1f", 1)[1]


def _data_file(page: str) -> str:
    """The file beside a lecture page that keeps its rows whole (history, cells, findings), as plain JSON."""
    return page.removesuffix(".html") + ".json"


def _row_files(folder: Path, targets: set[str], old_rows: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The whole rows of ``targets`` as the last publish kept them, by row key: only those whose runs are those
    the manifest records for the row (a file written by a publish stopped midway is not trusted)."""
    found: dict[str, dict[str, Any]] = {}
    for target in targets:
        try:
            kept = json.loads((folder / _data_file(lecture_page(target))).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for row in kept.get("rows") or [] if isinstance(kept, dict) else []:
            if not isinstance(row, dict) or "history" not in row:
                continue
            key = row_key(str(row.get("target")), str(row.get("runner")))
            if (old_rows.get(key) or {}).get("signature") == row.get("signature"):
                found[key] = row
    return found


class SitePages(Protocol):
    """What formats the site's pages (``nbscope.render.site``): the API gathers the rows, the renderer writes them."""

    def book_row(self, row: Mapping[str, Any]) -> dict[str, str]: ...

    def book_pages(self, rows: Sequence[Mapping[str, Any]],
                   parts: Sequence[Mapping[str, str]] | None = None) -> dict[str, str]: ...

    def lecture_page(self, target: str, rows: Sequence[Mapping[str, Any]]) -> str: ...


def publish(source: str | Path, output: str | Path, *, site: SitePages, full: bool = False,
            options: ChangeOptions | None = None) -> PublishResult:
    """Write the site for the store ``source`` names into ``output``, its pages formatted by ``site``; only what
    changed since the last publish into that folder (``full``: every row and page again, and every run's summary
    made again from its document: what a publish with another version of the analyses' rules needs)."""

    store = store_of(source)
    folder = Path(output)
    manifest, row_texts = _check_folder(folder)
    with store.held():  # one connection for every query and document
        return _publish(store, folder, manifest, row_texts, site=site, full=full, options=options)


def _publish(store: Store, folder: Path, manifest: Mapping[str, Any] | None, row_texts: Mapping[str, str], *,
             site: SitePages, full: bool, options: ChangeOptions | None) -> PublishResult:
    # Each row's parts of the book pages as the renderer made them (``site.book_row``) are kept with the row in the
    # manifest, valid while the nbscope that made them publishes: after another one, every row is made again.
    same_tool = manifest is not None and "tool" in manifest and manifest["tool"] == __version__
    old_rows: dict[str, Any] = manifest["rows"] if same_tool and not full and manifest is not None else {}
    # Even with ``full``, a page whose text is the same is not written again.
    old_pages: dict[str, str] = {} if manifest is None else manifest.get("pages") or {}
    every: dict[str, list[tuple[Any, ...]]] | None = None
    if old_rows:
        signatures, scan = _signatures(store, manifest)
    else:  # a first publish, or --full: one query gives every row's runs, and their counts
        every = _series_by_row(store.book_series(PROFILE_KINDS), None)
        signatures = {key: [len(runs), max(run[ID] for run in runs)] for key, runs in every.items()}
        scan = {"count": store.count(), "newest_id": max((newest for _, newest in signatures.values()), default=0)}
    if not signatures:
        raise NbscopeError(f"{store.path} holds no profile or trace runs to publish")
    changed_keys = {key for key, signature in signatures.items()
                    if (old_rows.get(key) or {}).get("signature") != signature}
    changed = {_target_of(key) for key in changed_keys}
    if not changed_keys and manifest is not None and _unchanged(folder, manifest, store, scan, old_pages):
        # Nothing new since the last publish, whose pages are all there: nothing to format or write.
        return PublishResult(folder=folder, rows=len(signatures), runs=sum(s[0] for s in signatures.values()),
                             rows_rebuilt=0, pages_kept=len(old_pages))
    # A lecture page shows every runner of its notebook in full: the rows of a changed notebook that have no
    # new run are read whole from its data file (made again only when that file is missing or out of date).
    # Only a notebook with a row that has no new run has a data file worth reading.
    kept_rows = {_target_of(key) for key in signatures if key not in changed_keys} & changed
    whole = _row_files(folder, kept_rows, old_rows) if old_rows else {}
    stale = changed_keys | {key for key in signatures if _target_of(key) in changed and key not in whole}
    rows: dict[str, dict[str, Any]] = {key: whole.get(key) or old_rows[key] for key in signatures if key not in stale}
    if stale:
        # Only the changed notebooks' runs, unless every run was read already, or most notebooks changed (a
        # whole new build: one walk of the index is quicker than looking each notebook up).
        most = len(changed) * 2 > len({_target_of(key) for key in signatures})
        grouped = every if every is not None else _series_by_row(
            store.book_series(PROFILE_KINDS, None if most else sorted(changed)), stale)
        runs = Summaries(store, again=full)
        runs.read(group[-1][ID] for group in grouped.values())  # each kept with its row's change points
        plans = {key: plan_row(group, options, runs.by_id.get(group[-1][ID])) for key, group in grouped.items()}
        newest_ids = [plan.ids[-1] for plan in plans.values()]
        baselines = {run_id: v.get("baseline_id") for run_id, v in store.verdicts(newest_ids).items()}
        machines = store.machines(newest_ids)
        runs.need(plans.values(), [key.split("\x1f", 1)[0] for key in plans])
        for key, plan in plans.items():
            runner, target = key.split("\x1f", 1)
            built = build_row(plan, target, runner, runs, machines.get(plan.ids[-1]), baselines)
            if built is not None:
                rows[key] = {**built, "signature": signatures[key]}
    parts = {key: old_rows[key]["parts"] if key not in stale else site.book_row(row) for key, row in rows.items()}
    keys = sorted(rows, key=lambda k: (rows[k]["target"], rows[k]["runner"]))
    ordered = [rows[key] for key in keys]
    pages = site.book_pages(ordered, [parts[key] for key in keys])
    by_target: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        by_target.setdefault(row["target"], []).append(row)
    for target, target_rows in by_target.items():
        page = target_rows[0]["page"]
        if (full or target in changed or page not in old_pages) and all("history" in r for r in target_rows):
            pages[page] = site.lecture_page(target, target_rows)
            pages[_data_file(page)] = json.dumps({"rows": target_rows}, default=str, separators=COMPACT)
    result = PublishResult(folder=folder, rows=len(rows), runs=sum(s[0] for s in signatures.values()),
                           rows_rebuilt=len([key for key in stale if key in rows]))
    hashes = dict(old_pages)
    # Marked as publish's before its first page: a publish stopped midway (SIGTERM) leaves a folder the next one
    # takes up (in full: no rows are known), not one it refuses as someone else's.
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / MANIFEST, json.dumps({"version": MANIFEST_VERSION, "store": str(store.path), "scan": None,
                                          "rows": {}, "pages": hashes}, separators=COMPACT))
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
    # A row kept from the manifest as it was (no new run, not read from its data file) is written as its text there.
    as_written = {key: row_texts[key] for key in rows if key not in stale and key not in whole and key in row_texts}
    kept = {key: old_rows[key] if key in as_written else
            {**book_fields(row), "signature": signatures[key], "parts": parts[key]} for key, row in rows.items()}
    _write(folder / MANIFEST, _manifest_text({"version": MANIFEST_VERSION, "tool": __version__,
                                              "store": str(store.path), "scan": scan, "rows": kept, "pages": hashes},
                                             as_written))
    return result


def _unchanged(folder: Path, manifest: Mapping[str, Any], store: Store, scan: Mapping[str, int],
               pages: Mapping[str, str]) -> bool:
    """Whether the last publish into ``folder`` was of this store as it is now (no run stored since) and its book
    pages are all there: a publish would write the same pages again."""
    return (manifest["store"] == str(store.path) and manifest["scan"] == scan
            and all((folder / name).is_file() for name in pages if "/" not in name))


def _write(path: Path, text: str) -> None:
    """Written whole, then renamed: a reader (or a publish stopped midway) never sees half a page. A page never
    replaces a link, a device or a file this command reads (the store kept inside the site's folder)."""
    check_target(path, option="-o")
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
