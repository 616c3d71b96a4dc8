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
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nbscope import __version__
from nbscope._errors import NbscopeError
from nbscope._files import read_text, refuse_input, write_text
from nbscope.api._saving import COMPILE, ID, RUN, STARTED_AT, RowPlan, number, plan_row, row_key, series_by_row
from nbscope.record.store import STORE_FOLDER, SeriesRun, Store
from nbscope.schema.kinds import PROFILE_KINDS
from nbscope.schema.site_manifest import (
    MANIFEST_VERSION,
    BookRow,
    Regression,
    Scan,
    SiteManifest,
    SiteRow,
    read_manifest,
    read_page_rows,
)

# The analyses are imported where a run is summarised or a row's change points are found: a publish that finds
# every summary kept (an unchanged row, a new site of a published store) does without them. So is the run
# record's model, needed only where a run's document is read: the command of an incremental publish is mostly its
# start-up, so it imports neither (nor ``dataclasses``, ``statistics`` or ``html``); one with nothing new reads no
# run's summary either (``schema.run_summary``).
if TYPE_CHECKING:
    from nbscope.analyse.history import ChangeOptions
    from nbscope.analyse.trial import TrialResult
    from nbscope.record.run import RunRecord
    from nbscope.schema.run_summary import RunSummary

MANIFEST = "nbscope-site.json"
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

    def to_dict(self) -> dict[str, object]:
        return {
            "folder": str(self.folder),
            "rows": self.rows,
            "runs": self.runs,
            "rows_rebuilt": self.rows_rebuilt,
            "pages_written": self.pages_written,
            "pages_kept": self.pages_kept,
        }


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


def lecture_page(target: str) -> str:
    """The lecture page's path in the site: its name made safe for any file system and URL, plus a short hash
    of the whole name (two names that read alike never share a page)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", target).strip("._")[-80:] or "notebook"
    return f"{LECTURE_FOLDER}/{safe}-{hashlib.sha256(target.encode()).hexdigest()[:8]}.html"


def _ratio(new: float | None, old: float | None) -> float | None:
    return new / old if new is not None and old else None


def _median(values: Sequence[float]) -> float:
    """``statistics.median``'s figure (the middle value, or the mean of the two middle ones), without importing
    ``statistics`` (its fractions and decimals) into the command for one median."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# A run's summary (``Store.run_summaries``, ``analyse.run_summary``): what a row shows of the run, made whole when the
# run is saved (``api._saving.save_run``). A run without one (a store of an older version, an imported run) gets the
# parts rows need: ``status`` for every run a row reads; ``findings`` for a row's newest run; ``attribution``
# (against the run before it in its row, named by ``before_id``) for a newest run and the first run of each
# confirmed regression.


class Summaries:
    """The summaries of the runs rows need: those the store keeps, the rest made from the runs' documents (read in
    one query) and kept in the store for the next publish; with what one publish's rows share."""

    def __init__(self, store: Store, *, again: bool = False) -> None:
        self.store = store
        self.again = again  # every summary made again from the documents (``--full``), and kept
        self.by_id: dict[int, RunSummary] = {}

    def of(self, run_id: int) -> RunSummary | None:
        """The run's summary; None: neither kept nor made yet (for a row's run after ``need``: its document is
        unreadable)."""
        return self.by_id.get(run_id)

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
        missing = [
            (run_id, part, before, runner)
            for run_id, part, before, runner in parts
            if not self._has(run_id, part, before)
        ]
        reads = {run_id for run_id, *_ in missing} | {before for _, _, before, _ in missing if before is not None}
        records = self.store.documents(reads) if reads else {}
        from nbscope.analyse.run_summary import SUMMARY_FORMAT, RunFindings, attribution_summary, status_summary
        from nbscope.schema.run_summary import NO_SUMMARY, summary_document

        made: set[int] = set()
        forecasts = RunFindings()
        for run_id, part, before, runner in missing:
            record = records.get(run_id)
            if record is None or self._has(run_id, part, before):
                continue
            summary = self.of(run_id) or NO_SUMMARY  # a run the store keeps no summary of: none made yet
            run = record.notebook_run()
            if summary.status is None:
                self.by_id[run_id] = summary = summary._replace(**status_summary(record, run))
            if part == "findings":
                summary = summary._replace(**forecasts.findings(record, run, runner))
            elif part == "attribution":
                earlier = records.get(before) if before is not None else None
                if earlier is None:
                    continue  # unreadable: the row says nothing of what changed, as before
                summary = summary._replace(attribution=attribution_summary(earlier, record, run))
            self.by_id[run_id] = summary
            made.add(run_id)
        for plan in plans:  # change points found now are kept with the newest run's summary
            newest = plan.ids[-1]
            newest_summary = self.of(newest)
            if plan.found is not None and newest_summary is not None and newest_summary.status is not None:
                self.by_id[newest] = newest_summary._replace(changes=plan.found)
                made.add(newest)
        self.store.keep_run_summaries({run_id: summary_document(self.by_id[run_id], SUMMARY_FORMAT) for run_id in made})

    def read(self, run_ids: Iterable[int]) -> None:
        """The kept summaries of ``run_ids`` not read yet (none when made ``again``)."""
        from nbscope.analyse.run_summary import SUMMARY_FORMAT
        from nbscope.schema.run_summary import read_run_summary

        unread = set() if self.again else set(run_ids) - set(self.by_id)
        for run_id, document in self.store.run_summaries(unread).items():
            summary = read_run_summary(document, SUMMARY_FORMAT)
            if summary is not None:
                self.by_id[run_id] = summary

    def _has(self, run_id: int, part: str, before: int | None) -> bool:
        summary = self.of(run_id)
        if summary is None or summary.status is None:
            return False
        if part == "attribution":
            return summary.attribution is not None and summary.attribution["before_id"] == before
        return part == "status" or summary.findings is not None

    def attribution(self, run_id: int, before: int) -> dict[str, Any] | None:
        """What changed from ``before`` to ``run_id``, when made against that very run."""
        summary = self.of(run_id)
        found = None if summary is None else summary.attribution
        return found if found is not None and found["before_id"] == before else None


def _cells(newest: RunSummary, previous: RunSummary | None) -> list[dict[str, Any]]:
    """The newest run's cells beside the previous run's cell of the same code (by source hash)."""
    before = {c["source_hash"]: c for c in previous.cells} if previous else {}
    rows = []
    for cell in newest.cells:
        old = before.get(cell["source_hash"])
        rows.append(
            {
                "label": cell["label"],
                "first_line": cell["first_line"],
                "status": cell["status"],
                "wall_s": cell["wall_s"],
                "compile_s": cell["compile_s"],
                "previous_wall_s": old["wall_s"] if old else None,
                "edited": previous is not None and old is None,
            }
        )
    return rows


def build_row(
    plan: RowPlan,
    target: str,
    runner: str,
    runs: Summaries,
    machine: str | None,
    baselines: Mapping[int, int | None],
    signature: list[int],
) -> SiteRow | None:
    """One lecture × runner row (its data file keeps it) from its plan and its runs' summaries (``runs``, made for
    the plan: ``Summaries.need``), with its ``signature``; None when its newest run cannot be read."""
    series, walls = plan.series, plan.walls
    ids = plan.ids
    compiles = [number(run[COMPILE]) for run in series]
    run_figures = [number(run[RUN]) for run in series]
    newest_id = ids[-1]
    newest = runs.of(newest_id)
    if newest is None or newest.status is None or newest.findings is None:
        return None
    previous_id = ids[-2] if len(ids) > 1 else None
    previous = runs.of(previous_id) if previous_id is not None else None
    if previous is not None and previous.status is None:
        previous = None
    baseline_id = baselines.get(newest_id) or ids[0]
    baseline_wall = next((wall for run_id, wall in zip(ids, walls, strict=True) if run_id == baseline_id), None)
    regressions: list[Regression] = [
        {**change, "step_index": step, "attribution": runs.attribution(ids[step], ids[step - 1])}
        for change, step in plan.steps
    ]
    wall, compile_s = walls[-1], compiles[-1]
    started_at = series[-1][STARTED_AT]
    return SiteRow(
        target=target,
        runner=runner,
        page=lecture_page(target),
        machine=machine,
        runs=len(series),
        newest_id=newest_id,
        started_at=started_at,
        status=newest.status,
        error=newest.error,
        wall_s=wall,
        compile_s=compile_s,
        compile_share=compile_s / wall if wall and compile_s is not None else None,
        cache_state=newest.cache_state,
        vs_previous=_ratio(wall, walls[-2]) if len(walls) > 1 else None,
        baseline_id=baseline_id,
        vs_baseline=_ratio(wall, baseline_wall),
        spark=walls[-SPARK_RUNS:],
        history={
            "started_at": [run[STARTED_AT] for run in series],
            "wall_s": walls,
            "compile_s": compiles,
            "run_s": run_figures,
            "ids": ids,
        },
        changes=plan.changes,
        regressions=regressions,
        regression_count=len(regressions),
        attribution=runs.attribution(newest_id, previous_id)
        if previous is not None and previous_id is not None
        else None,
        cells=_cells(newest, previous),
        findings=newest.findings,
        forecast=newest.forecast,
        median_wall_s=_median([w for w in walls if w is not None]) if any(walls) else None,
        signature=signature,
    )


# What the manifest keeps of a row: what the book page and the status files show. A lecture page's history, cells
# and findings are made again from the store when its notebook has new runs, and only then.
def book_fields(row: SiteRow, parts: dict[str, str]) -> BookRow:
    """The row as the manifest keeps it: its book fields, its last regression and its top finding, with its parts of
    the book pages (``site.book_row``); not its sparkline's figures, which only those parts show."""
    return BookRow(
        target=row.target,
        runner=row.runner,
        page=row.page,
        machine=row.machine,
        runs=row.runs,
        newest_id=row.newest_id,
        started_at=row.started_at,
        status=row.status,
        error=row.error,
        wall_s=row.wall_s,
        compile_s=row.compile_s,
        compile_share=row.compile_share,
        cache_state=row.cache_state,
        vs_previous=row.vs_previous,
        baseline_id=row.baseline_id,
        vs_baseline=row.vs_baseline,
        regression_count=row.regression_count,
        forecast=row.forecast,
        regressions=row.regressions[-1:],
        findings=row.findings[:1],
        signature=row.signature,
        parts=parts,
    )


def _signatures(store: Store, manifest: SiteManifest) -> tuple[dict[str, list[int]], Scan]:
    """Per row key, the count and the newest id of its runs; and the store's run count and newest id.

    After a publish, the runs stored since are the newest ids (ids only grow): when the store has exactly as many
    more runs as the newest few with an id above the last publish's newest, only those are read. Anything else
    (a first publish, runs deleted, more than a few thousand new) reads every run's id, notebook and backend."""
    total = store.count()
    old = manifest.scan
    if old is not None:
        added = total - old.run_count
        if 0 <= added <= 5000:
            newest: Any = store.summaries(("id", "kind", "target", "backend"), limit=added + 64) if added else []
            new = [row for row in newest if row["id"] > old.newest_id]
            if len(new) == added:
                signatures = {key: list(row.signature) for key, row in manifest.rows.items()}
                for row in new:
                    if row["kind"] in PROFILE_KINDS:
                        _count(signatures, row["target"], row["backend"], row["id"])
                newest_id = max([old.newest_id, *(row["id"] for row in new)])
                return signatures, Scan(total, newest_id)
    signatures = {}
    newest_id = 0
    for row in store.summaries(("id", "target", "backend"), kind=list(PROFILE_KINDS)):  # one query
        _count(signatures, row["target"], row["backend"], row["id"])
        newest_id = max(newest_id, row["id"])
    every: Any = store.summaries(("id",), limit=1)  # the newest run of any kind: its id bounds the next scan
    newest_id = max([newest_id, *(row["id"] for row in every)])
    return signatures, Scan(total, newest_id)


def _count(signatures: dict[str, list[int]], target: str, backend: str | None, run_id: int) -> None:
    count_and_newest = signatures.setdefault(row_key(target, backend or "unknown"), [0, 0])
    count_and_newest[0] += 1
    count_and_newest[1] = max(count_and_newest[1], run_id)


# The manifest as publish writes it: compact JSON.
COMPACT = (",", ":")
_string = json.encoder.encode_basestring_ascii  # a key as json.dumps writes it (ensure_ascii)


def _manifest(folder: Path) -> SiteManifest | None:
    """The folder's manifest (``schema.site_manifest``), None when there is none publish can read."""
    try:
        text = read_text(folder / MANIFEST, what="site manifest", note=False)
    except NbscopeError:  # none, or not a regular file: the folder is refused as not publish's
        return None
    return read_manifest(text)


def _manifest_text(
    store: Store, scan: Scan, rows: Mapping[str, BookRow], row_texts: Mapping[str, str], pages: Mapping[str, str]
) -> str:
    """The manifest as ``json.dumps(..., default=str, separators=COMPACT)`` writes it, but each row of ``row_texts`` (a
    row kept as the last publish wrote it) written as its text there: 240 rows' parts of the book pages are not
    encoded again for one new run."""

    def encoded(value: object) -> str:
        return json.dumps(value, default=str, separators=COMPACT)

    written = ",".join(f"{_string(key)}:{row_texts.get(key) or encoded(row._asdict())}" for key, row in rows.items())
    return (
        f'{{"version":{MANIFEST_VERSION},"tool":{encoded(__version__)},"store":{encoded(str(store.path))},'
        f'"scan":{{"count":{scan.run_count},"newest_id":{scan.newest_id}}},"rows":{{{written}}},"pages":{encoded(pages)}}}'
    )


def _check_folder(folder: Path) -> SiteManifest | None:
    """The folder's manifest; refuses a folder that holds anything publish did not make (it is never replaced)."""
    refuse_input(folder, option="-o")  # the store itself, named as the site's folder
    if folder.exists() and not folder.is_dir():
        raise NbscopeError(f"-o {folder} is a file, not a folder")
    manifest = _manifest(folder) if folder.is_dir() else None
    if folder.is_dir() and manifest is None and any(folder.iterdir()):
        raise NbscopeError(
            f"-o {folder} is not empty and was not made by `nbscope publish`; give a new or empty folder"
        )
    return manifest


def _target_of(key: str) -> str:
    return key.split("\x1f", 1)[1]


def _data_file(page: str) -> str:
    """The file beside a lecture page that keeps its rows whole (history, cells, findings), as plain JSON."""
    return page.removesuffix(".html") + ".json"


def _row_files(folder: Path, targets: set[str], old_rows: Mapping[str, BookRow]) -> dict[str, SiteRow]:
    """The whole rows of ``targets`` as the last publish kept them, by row key: only those whose runs are those
    the manifest records for the row (a file written by a publish stopped midway is not trusted)."""
    found: dict[str, SiteRow] = {}
    for target in targets:
        try:
            text = read_text(folder / _data_file(lecture_page(target)), what="page's data", note=False)
        except NbscopeError:
            continue
        for row in read_page_rows(text):
            key = row_key(row.target, row.runner)
            old = old_rows.get(key)  # None: a row the manifest does not know
            if old is not None and old.signature == row.signature:
                found[key] = row
    return found


class SitePages(Protocol):
    """What formats the site's pages (``nbscope.render.site``): the API gathers the rows, the renderer writes them."""

    def book_row(self, row: SiteRow) -> dict[str, str]: ...

    def book_pages(self, rows: Sequence[SiteRow | BookRow], parts: Sequence[Mapping[str, str]]) -> dict[str, str]: ...

    def lecture_page(self, target: str, rows: Sequence[SiteRow], trials: Sequence[TrialResult] = ()) -> str: ...


def publish(
    source: str | Path, output: str | Path, *, site: SitePages, full: bool = False, options: ChangeOptions | None = None
) -> PublishResult:
    """Write the site for the store ``source`` names into ``output``, its pages formatted by ``site``; only what
    changed since the last publish into that folder (``full``: every row and page again, and every run's summary
    made again from its document: what a publish with another version of the analyses' rules needs)."""

    store = store_of(source)
    folder = Path(output)
    manifest = _check_folder(folder)
    with store.held():  # one connection for every query and document
        return _publish(store, folder, manifest, site=site, full=full, options=options)


def _publish(
    store: Store,
    folder: Path,
    manifest: SiteManifest | None,
    *,
    site: SitePages,
    full: bool,
    options: ChangeOptions | None,
) -> PublishResult:
    # Each row's parts of the book pages as the renderer made them (``site.book_row``) are kept with the row in the
    # manifest, valid while the nbscope that made them publishes: after another one, every row is made again.
    old_rows = manifest.rows if manifest is not None and manifest.tool == __version__ and not full else {}
    # Even with ``full``, a page whose text is the same is not written again.
    old_pages = {} if manifest is None else manifest.pages
    every: dict[str, list[SeriesRun]] | None = None
    if manifest is not None and old_rows:
        signatures, scan = _signatures(store, manifest)
    else:  # a first publish, or --full: one query gives every row's runs, and their counts
        every = series_by_row(store.book_series(PROFILE_KINDS), None)
        signatures = {key: [len(runs), max(run[ID] for run in runs)] for key, runs in every.items()}
        scan = Scan(store.count(), max((newest for _, newest in signatures.values()), default=0))
    if not signatures:
        raise NbscopeError(f"{store.path} holds no profile or trace runs to publish")
    # A row the manifest does not keep (None) is new.
    changed_keys = {
        key for key, signature in signatures.items() if (old := old_rows.get(key)) is None or old.signature != signature
    }
    changed = {_target_of(key) for key in changed_keys}
    # A notebook with a remedy tried since (``nbscope try``) gets its lecture page again, with the trial.
    tried: Any = store.summaries(("id", "target"), kind="trial") if store.path.exists() else []
    since = manifest.scan.newest_id if manifest is not None and manifest.scan is not None and old_rows else 0
    changed |= {row["target"] for row in tried if row["id"] > since} & {_target_of(key) for key in signatures}
    if not changed_keys and manifest is not None and _unchanged(folder, manifest, store, scan, old_pages):
        # Nothing new since the last publish, whose pages are all there: nothing to format or write.
        return PublishResult(
            folder=folder,
            rows=len(signatures),
            runs=sum(s[0] for s in signatures.values()),
            rows_rebuilt=0,
            pages_kept=len(old_pages),
        )
    # A lecture page shows every runner of its notebook in full: the rows of a changed notebook that have no
    # new run are read whole from its data file (made again only when that file is missing or out of date).
    # Only a notebook with a row that has no new run has a data file worth reading.
    kept_rows = {_target_of(key) for key in signatures if key not in changed_keys} & changed
    whole = _row_files(folder, kept_rows, old_rows) if old_rows else {}
    stale = changed_keys | {key for key in signatures if _target_of(key) in changed and key not in whole}
    # A kept row: whole from its data file, else as the manifest keeps it (None from ``get``: not read whole).
    rows: dict[str, SiteRow | BookRow] = {
        key: whole.get(key) or old_rows[key] for key in signatures if key not in stale
    }
    if stale:
        _remake_rows(store, rows, stale, changed, signatures, every, full=full, options=options)
    parts = {
        key: site.book_row(row) if key in stale and isinstance(row, SiteRow) else old_rows[key].parts
        for key, row in rows.items()
    }
    keys = sorted(rows, key=lambda k: (rows[k].target, rows[k].runner))
    ordered = [rows[key] for key in keys]
    pages = site.book_pages(ordered, [parts[key] for key in keys])
    pages.update(_lecture_pages(ordered, site, full, changed, old_pages, lambda target: _trials(store, target, tried)))
    result = PublishResult(
        folder=folder,
        rows=len(rows),
        runs=sum(s[0] for s in signatures.values()),
        rows_rebuilt=len([key for key in stale if key in rows]),
    )
    hashes = _write_pages(folder, store, pages, old_pages, result)
    result.pages_kept += len(set(old_pages) - set(pages))
    # A row kept from the manifest as it was (no new run, not read from its data file) is written as its text there.
    row_texts = {} if manifest is None else manifest.row_texts
    as_written = {key: row_texts[key] for key, row in rows.items() if isinstance(row, BookRow) and key in row_texts}
    kept = {key: book_fields(row, parts[key]) if isinstance(row, SiteRow) else row for key, row in rows.items()}
    _write(folder / MANIFEST, _manifest_text(store, scan, kept, as_written, hashes))
    return result


def _lecture_pages(
    ordered: list[SiteRow | BookRow],
    site: SitePages,
    full: bool,
    changed: set[str],
    old: Mapping[str, str],
    trials_of: Callable[[str], list[TrialResult]],
) -> dict[str, str]:
    """The lecture page and data file of each notebook whose rows are all whole (made now or read from their data
    file) and that changed, lacks its page, or is published in ``full``; with the remedies tried on it."""
    pages: dict[str, str] = {}
    by_target: dict[str, list[SiteRow | BookRow]] = {}
    for row in ordered:
        by_target.setdefault(row.target, []).append(row)
    for target, target_rows in by_target.items():
        page = target_rows[0].page
        whole_rows = [r for r in target_rows if isinstance(r, SiteRow)]
        if (full or target in changed or page not in old) and len(whole_rows) == len(target_rows):
            pages[page] = site.lecture_page(target, whole_rows, trials_of(target))
            pages[_data_file(page)] = json.dumps(
                {"rows": [r._asdict() for r in whole_rows]}, default=str, separators=COMPACT
            )
    return pages


def _remake_rows(
    store: Store,
    rows: dict[str, SiteRow | BookRow],
    stale: set[str],
    changed: set[str],
    signatures: dict[str, list[int]],
    every: dict[str, list[SeriesRun]] | None,
    *,
    full: bool,
    options: ChangeOptions | None,
) -> None:
    """The ``stale`` rows made again into ``rows``, from their runs' columns and summaries."""
    # Only the changed notebooks' runs, unless every run was read already, or most notebooks changed (a
    # whole new build: one walk of the index is quicker than looking each notebook up).
    most = len(changed) * 2 > len({_target_of(key) for key in signatures})
    grouped = (
        every
        if every is not None
        else series_by_row(store.book_series(PROFILE_KINDS, None if most else sorted(changed)), stale)
    )
    runs = Summaries(store, again=full)
    runs.read(group[-1][ID] for group in grouped.values())  # each kept with its row's change points
    plans = {key: plan_row(group, options, runs.of(group[-1][ID])) for key, group in grouped.items()}
    newest_ids = [plan.ids[-1] for plan in plans.values()]
    baselines = {run_id: verdict["baseline_id"] for run_id, verdict in store.verdicts(newest_ids).items()}
    machines = store.machines(newest_ids)
    runs.need(plans.values(), [key.split("\x1f", 1)[0] for key in plans])
    for key, plan in plans.items():
        runner, target = key.split("\x1f", 1)
        built = build_row(plan, target, runner, runs, machines.get(plan.ids[-1]), baselines, signatures[key])
        if built is not None:
            rows[key] = built


def _write_pages(
    folder: Path, store: Store, pages: Mapping[str, str], old_pages: Mapping[str, str], result: PublishResult
) -> dict[str, str]:
    """Each page whose text changed written (counted in ``result``); every page's hash, for the manifest."""
    hashes = dict(old_pages)
    # Marked as publish's before its first page: a publish stopped midway (SIGTERM) leaves a folder the next one
    # takes up (in full: no rows are known), not one it refuses as someone else's.
    folder.mkdir(parents=True, exist_ok=True)
    _write(
        folder / MANIFEST,
        json.dumps(
            {"version": MANIFEST_VERSION, "store": str(store.path), "scan": None, "rows": {}, "pages": hashes},
            separators=COMPACT,
        ),
    )
    for name, text in pages.items():
        digest = hashlib.sha256(text.encode()).hexdigest()
        path = folder / name
        if hashes.get(name) == digest and path.is_file():
            result.pages_kept += 1
            continue
        _write(path, text, folder)
        hashes[name] = digest
        result.pages_written.append(name)
    return hashes


def _trials(store: Store, target: str, tried: list[dict[str, Any]]) -> list[TrialResult]:
    """The remedies tried on a notebook's runs (``nbscope try``), newest first: its trial runs read only where
    it has any."""
    if not any(row["target"] == target for row in tried):
        return []
    from nbscope.api.runs import trials_of

    records: list[RunRecord] = store.records(kind="trial", target=target)
    return [trial for record in records for trial in trials_of(store, record)]


def _unchanged(folder: Path, manifest: SiteManifest, store: Store, scan: Scan, pages: Mapping[str, str]) -> bool:
    """Whether the last publish into ``folder`` was of this store as it is now (no run stored since) and its book
    pages are all there: a publish would write the same pages again."""
    return (
        manifest.store == str(store.path)
        and manifest.scan == scan
        and all((folder / name).is_file() for name in pages if "/" not in name)
    )


def _write(path: Path, text: str, folder: Path | None = None) -> None:
    """Written whole, then renamed (:func:`nbscope._files.write_text`, which redacts credentials as every file
    nbscope writes): a reader (or a publish stopped midway) never sees half a page. A page never replaces a link,
    a device or a file this command reads (the store kept inside the site's folder), and is never written through a
    link inside the site's ``folder`` (``lectures/`` pointing elsewhere)."""
    if folder is not None:
        for inside in reversed(path.relative_to(folder).parents[:-1]):  # lectures, then any folder below it
            if (folder / inside).is_symlink() or ((folder / inside).exists() and not (folder / inside).is_dir()):
                raise NbscopeError(
                    f"-o {folder}: {folder / inside} is a link or not a folder; publish writes only into folders it "
                    "made, never through a link (remove it, or give a new folder)"
                )
            (folder / inside).mkdir(exist_ok=True)
    write_text(path, text, sync=False)
