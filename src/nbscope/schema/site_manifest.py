"""The site ``nbscope publish`` writes, as publish reads it back: its manifest (``nbscope-site.json``, version 3:
each row's book fields, the count and newest id of its runs and its parts of the book pages; the store's run count
and newest id; each page's hash) and the data file beside each lecture page (that page's rows whole).

Each is decoded once, where it is read, into NamedTuples: the command of an incremental publish imports neither
``dataclasses`` nor the record model, and a row's ``_asdict()`` is the JSON object publish writes of it, its members
in the order they are written. A row is taken only as this version writes it (its members in that order, and no
other); a manifest with a row that is not keeps none of its rows (every row is made again, as after another version).
"""

# Not ``from __future__ import annotations``: a NamedTuple would compile each field's annotation from its text
# at import, a part of the start-up an incremental publish is made of.
import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple, TypedDict

MANIFEST_VERSION = 3  # 3: each row's parts of the book pages, not its sparkline's figures
READABLE_MANIFESTS = (2, MANIFEST_VERSION)  # a folder of version 2 is published again whole, and taken over
# A row's own parts of the book pages (``render.site.book_row``).
BOOK_PARTS = ("index.html", "status.json", "status.md")


class Scan(NamedTuple):
    """The store as the last publish read it: its run count (``count`` in the manifest: a tuple's ``count`` is a
    method) and its newest run's id (ids only grow)."""

    run_count: int
    newest_id: int


class Change(TypedDict):
    """A change point as ``ChangePoint.to_dict`` writes it (``analyse.history``)."""

    index: int
    run_id: int | None
    started_at: str
    before: float
    after: float
    delta: float
    ratio: float | None
    score: float
    tentative: bool


class Regression(Change):
    """A confirmed regression of a row: its change point, the place of its new level's first run in the row's runs
    and what changed across it (None: no record of either side)."""

    step_index: int
    attribution: dict[str, object] | None


class SiteRow(NamedTuple):
    """A lecture × runner row whole (``api.publish.build_row``), as a lecture page's data file keeps it. Its parts
    are the JSON the run summaries hold (``analyse.run_summary``): ``forecast`` and ``attribution`` None or an object
    with its ``text``; ``findings`` each with ``title`` and ``summary``; ``regressions`` each a change point with
    its ``attribution`` (None: no record of either side)."""

    target: str
    runner: str
    page: str
    machine: str | None
    runs: int
    newest_id: int
    started_at: str
    status: str
    error: str | None
    wall_s: float | None
    compile_s: float | None
    compile_share: float | None
    cache_state: str | None
    vs_previous: float | None
    baseline_id: int
    vs_baseline: float | None
    spark: list[float | None]
    history: Mapping[str, Sequence[object]]
    changes: list[Change]
    regressions: list[Regression]
    regression_count: int
    attribution: dict[str, object] | None
    cells: list[dict[str, object]]
    findings: list[dict[str, object]]
    forecast: dict[str, object] | None
    median_wall_s: float | None
    signature: list[int]  # the count and the newest id of its runs


class BookRow(NamedTuple):
    """A row as the manifest keeps it: what the book page and the status files show (not its sparkline's figures),
    its last regression, its top finding, its signature and its parts of the book pages as they were formatted."""

    target: str
    runner: str
    page: str
    machine: str | None
    runs: int
    newest_id: int
    started_at: str
    status: str
    error: str | None
    wall_s: float | None
    compile_s: float | None
    compile_share: float | None
    cache_state: str | None
    vs_previous: float | None
    baseline_id: int
    vs_baseline: float | None
    regression_count: int
    forecast: dict[str, object] | None
    regressions: list[Regression]
    findings: list[dict[str, object]]
    signature: list[int]
    parts: dict[str, str]


class SiteManifest(NamedTuple):
    """The manifest: ``tool`` (the nbscope that wrote it) and ``scan`` are None in the one a publish writes before its
    first page; ``row_texts``: each row's text as it stands in the file, when laid out as publish writes it."""

    version: int
    tool: str | None
    store: str | None
    scan: Scan | None
    rows: dict[str, BookRow]
    pages: dict[str, str]
    row_texts: dict[str, str]


_DECODE = json.JSONDecoder().raw_decode


# Checked without generators: 240 rows are read per publish.
def _is_signature(value: object) -> bool:
    return type(value) is list and len(value) == 2 and type(value[0]) is int and type(value[1]) is int


def _texts(row: SiteRow | BookRow) -> bool:
    return (
        type(row.target) is str
        and type(row.runner) is str
        and type(row.page) is str
        and type(row.status) is str
        and type(row.started_at) is str
    )


def _book_row(value: object) -> BookRow | None:
    if not isinstance(value, dict) or tuple(value) != BookRow._fields:
        return None
    row = BookRow._make(value.values())  # its members in order: a fifth of BookRow(**value)'s time, 240 rows a publish
    parts = row.parts
    if not (
        _texts(row)
        and _is_signature(row.signature)
        and type(parts) is dict
        and tuple(parts) == BOOK_PARTS
        and type(parts["index.html"]) is str
        and type(parts["status.json"]) is str
        and type(parts["status.md"]) is str
    ):
        return None
    return row


def _site_row(value: object) -> SiteRow | None:
    """A data file's row, None when it is not one as this version writes it."""
    if not isinstance(value, dict) or tuple(value) != SiteRow._fields:
        return None
    row = SiteRow._make(value.values())
    lists = (row.spark, row.changes, row.regressions, row.cells, row.findings)
    if not (
        _texts(row)
        and _is_signature(row.signature)
        and isinstance(row.history, dict)
        and all(isinstance(part, list) for part in lists)
    ):
        return None
    return row


def read_page_rows(text: str) -> list[SiteRow]:
    """The rows a lecture page's data file keeps (``{"rows": [...]}``); those not as this version writes them are
    left out (made again)."""
    try:
        document = json.loads(text)
    except ValueError:
        return []
    rows = document.get("rows") if isinstance(document, dict) else None
    return [row for row in map(_site_row, rows) if row is not None] if isinstance(rows, list) else []


def read_manifest(text: str) -> SiteManifest | None:
    """The manifest ``text`` holds, None when it is not one publish can read (another version, not JSON)."""
    try:
        document, row_texts = _compact_manifest(text)
    except (ValueError, IndexError):  # laid out otherwise (edited by hand): read as any JSON, its rows written anew
        row_texts = {}
        try:
            document = json.loads(text)
        except ValueError:
            return None
    if not isinstance(document, dict) or document.get("version") not in READABLE_MANIFESTS:
        return None
    found = document.get("rows")
    rows = {key: _book_row(row) for key, row in found.items()} if isinstance(found, dict) else {}
    kept = {key: row for key, row in rows.items() if row is not None}
    if len(kept) < len(rows):
        kept = {}
    scan = document.get("scan")
    pages = document.get("pages")
    tool, store = document.get("tool"), document.get("store")
    return SiteManifest(
        version=document["version"],
        tool=tool if isinstance(tool, str) else None,
        store=store if isinstance(store, str) else None,
        scan=Scan(scan["count"], scan["newest_id"])
        if isinstance(scan, dict) and isinstance(scan.get("count"), int) and isinstance(scan.get("newest_id"), int)
        else None,
        rows=kept,
        pages=pages if isinstance(pages, dict) else {},
        row_texts=row_texts,
    )


def _compact_manifest(text: str) -> tuple[object, dict[str, str]]:
    """``json.loads(text)`` of a manifest laid out as publish writes it (compact), and the text of each member of
    its "rows" as it stands there: a row kept as it was is written out as that text (``api.publish``). A
    ValueError (or IndexError) when it is laid out otherwise."""
    row_texts: dict[str, str] = {}

    def members(at: int, texts: dict[str, str] | None) -> tuple[dict[str, object], int]:
        # The object at text[at] and where it ends; each member's text to ``texts`` when given; at the top
        # (``texts`` None) the object "rows" is read member by member, their texts to ``row_texts``.
        if text[at] != "{":
            raise ValueError("not an object")
        found: dict[str, object] = {}
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
