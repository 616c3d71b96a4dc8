"""``nbscope import-jupyter-cache``: jupyter-book's cached execution times as runs, for a free history.

jupyter-book 1 in ``execute_notebooks: cache`` mode keeps a jupyter-cache folder
(``_build/.jupyter_cache``) whose SQLite file ``global.db`` has a table ``nbcache``: one row per
executed notebook version (``hashkey``), with the source ``uri``, the time it was ``created`` (UTC) and
``data`` = ``{"execution_seconds": ...}``. Each row becomes one run of kind ``jupyter-cache`` whose
``totals.wall_s`` is that time (per notebook only: jupyter-book never records cells). The database is
opened read-only; rows already imported (same hashkey and time) are skipped.

jupyter-book 2 keeps its execution cache in ``_build/execute``: one ``<key>.ipynb`` per executed page
version, whose ``metadata.mystContext`` holds ``kernelspec``, ``timestamp`` (UTC) and ``duration_ms``
(from the kernel's connection to the last cell's reply; per page, never per cell). The file holds no
source and no page name: the key is the MD5 of the kernelspec name and the page's executable cells
(``[{"kind": "block", "content": SOURCE, "raisesException": BOOL}, ...]`` as compact JSON), so nbscope
computes the key of every page of the project (the folder above ``_build``) and names each entry by
the page it belongs to. An entry whose page has changed since (or is gone) keeps a name of its own,
``_build/execute/<key>``. Entries become runs of kind ``jupyter-cache`` as for jupyter-book 1.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from nbscope._errors import NbscopeError
from nbscope.collect import fingerprint as fp
from nbscope.collect import notebook as notebook_module
from nbscope.record.cells import target_name
from nbscope.record.run import RunRecord, loads
from nbscope.schema.codec import decode
from nbscope.schema.jupyter_cache import Book2Entry, CacheData, MystContext
from nbscope.schema.machine import Machine

if TYPE_CHECKING:
    from nbscope.record.store import Store

DB_NAME = "global.db"
BOOK2_CACHE = Path("_build") / "execute"
# Never searched for a book's pages: build output, environments, version control.
NOT_PAGES = {"_build", "node_modules", "__pycache__", ".git", ".ipynb_checkpoints", "venv", ".venv"}


def find_database(path: str | Path) -> Path:
    """``global.db`` of a jupyter-cache folder, given the folder, the file, or a book's ``_build``."""
    path = Path(path)
    candidates = [path, path / DB_NAME, path / ".jupyter_cache" / DB_NAME, path / "_build" / ".jupyter_cache" / DB_NAME]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not path.exists():
        raise NbscopeError(f"{path}: no such file or folder")
    raise NbscopeError(f"{path}: no jupyter-cache database ({DB_NAME}) found there")


class CacheRow(TypedDict, total=False):
    """A cached execution: jupyter-cache's (``pk``, ``description``, ``data``) or jupyter-book 2's (``page``,
    ``context``, ``project``), with the key, notebook, time and seconds both have."""

    pk: int
    hashkey: str
    uri: str
    description: str
    created: str
    execution_seconds: float | None
    data: dict[str, object]
    page: Path | None
    context: dict[str, object]
    project: Path


def _timestamp(value: object) -> str:
    """jupyter-cache's ``created`` (naive UTC, ``2024-01-31 12:00:00.123456``) as a run-record time."""
    text = str(value or "").strip()
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise NbscopeError(f"unreadable time {text!r} in the jupyter-cache database") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def read_cache(path: str | Path) -> list[CacheRow]:
    """Rows of ``nbcache``: pk, hashkey, uri, created (record time), execution_seconds (None if absent)."""
    database = find_database(path)
    with open(database, "rb") as handle:
        if handle.read(16) != b"SQLite format 3\x00":
            raise NbscopeError(f"{database} is not an SQLite database")
    try:
        connection = sqlite3.connect(f"file:{database.resolve()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise NbscopeError(f"cannot open {database}: {exc}") from None
    with closing(connection):
        try:
            rows: list[tuple[int, str, str, str | None, object, object]] = connection.execute(
                "SELECT pk, hashkey, uri, description, data, created FROM nbcache ORDER BY created, pk"
            ).fetchall()
        except sqlite3.Error as exc:
            raise NbscopeError(f"{database} is not a jupyter-cache database ({exc})") from None
    result: list[CacheRow] = []
    for pk, hashkey, uri, description, data, created in rows:
        try:
            payload: object = json.loads(data) if isinstance(data, str) and data else {}
        except json.JSONDecodeError:
            payload = {}
        result.append(
            {
                "pk": pk,
                "hashkey": hashkey,
                "uri": uri,
                "description": description or "",
                "created": _timestamp(created),
                "execution_seconds": decode(CacheData, payload).execution_seconds,
                "data": payload if isinstance(payload, dict) else {},
            }
        )
    return result


def to_records(
    rows: list[CacheRow],
    *,
    fingerprint: dict[str, Any],
    cache: Path,
    root: Path | None = None,
    fingerprint_source: str = "importing machine",
    book2: bool = False,
) -> list[RunRecord]:
    """One ``jupyter-cache`` run per cached execution (``book2``: rows of jupyter-book 2's ``_build/execute``)."""
    records = []
    for row in rows:
        seconds = row["execution_seconds"]
        if book2:
            where = {
                "tool": "jupyter-book 2",
                "uri": row["uri"],
                "hashkey": row["hashkey"],
                "page_found": row["page"] is not None,
            }
            cached = {"data": row["context"], "description": "jupyter-book 2 execution cache entry"}
        else:
            where = {"uri": row["uri"], "hashkey": row["hashkey"], "cache_pk": row["pk"]}
            cached = {"data": row["data"], "description": row["description"]}
        record = RunRecord(
            kind="jupyter-cache",
            target=target_name(row["uri"], root),
            fingerprint=fingerprint,
            settings={"source": str(cache), **where, "fingerprint_source": fingerprint_source},
            measurements={
                "notebook": {"path": row["uri"]},
                "totals": {"wall_s": seconds, "execute_s": seconds, "notebooks": 1},
                "jupyter_cache": cached,
            },
            started_at=row["created"],
            status="ok" if seconds is not None else "partial",
        )
        record.ended_at = row["created"]
        records.append(record)
    return records


def _already_imported(store: Store) -> set[tuple[str, str]]:
    return {(str(record.run_settings().hashkey), record.started_at) for record in store.records(kind="jupyter-cache")}


# ---- jupyter-book 2 (_build/execute) -------------------------------------------------------------


def find_book2_cache(path: str | Path) -> Path | None:
    """A jupyter-book 2 execution cache folder, given it, the book's ``_build`` or the book's folder."""
    path = Path(path)
    for candidate in (path, path / "execute", path / BOOK2_CACHE):
        if candidate.is_dir() and any(_is_book2_entry(entry) for entry in candidate.glob("*.ipynb")):
            return candidate
    return None


def _is_book2_entry(path: Path) -> bool:
    from nbscope._files import read_json

    try:
        return decode(Book2Entry, read_json(path, what="notebook")).metadata.myst_context is not None
    except (NbscopeError, ValueError):
        return False


def book2_cache_key(nb: notebook_module.Notebook, kernel_name: str | None = None) -> str:
    """The key jupyter-book 2 files a page's execution under (``myst-execute``'s ``buildCacheKey``)."""
    items = [
        {"kind": "block", "content": cell.source, "raisesException": "raises-exception" in cell.tags}
        for cell in nb.code_cells
        if "skip-execution" not in cell.tags
    ]
    # JSON.stringify: no spaces, non-ASCII kept as is.
    text = (kernel_name or nb.kernel_name) + json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def book2_pages(project: Path) -> dict[str, Path]:
    """Cache key → page, for every notebook page (``.ipynb``, MyST ``.md`` with code cells) under ``project``."""
    pages: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(project):
        dirnames[:] = sorted(d for d in dirnames if d not in NOT_PAGES and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith((".md", ".ipynb")):
                continue
            try:
                nb = notebook_module.read(Path(dirpath) / name)
            except NbscopeError:
                continue
            if nb.code_cells:
                pages.setdefault(book2_cache_key(nb), nb.path)
    return pages


def read_book2_cache(folder: str | Path) -> list[CacheRow]:
    """Entries of a jupyter-book 2 execution cache, oldest first: hashkey, page (or None), created,
    execution_seconds, context."""
    folder = Path(folder)
    project = folder.parent.parent if folder.parent.name == "_build" else folder.parent
    pages = book2_pages(project)
    rows: list[CacheRow] = []
    for entry in sorted(folder.glob("*.ipynb")):
        from nbscope._files import read_json

        try:
            context = read_json(entry, what="notebook")["metadata"]["mystContext"]
        except (NbscopeError, KeyError, TypeError):
            continue  # not an entry of jupyter-book 2's (or an unreadable one: a FIFO, a device, too large)
        if not isinstance(context, dict):
            continue
        typed = decode(MystContext, context)
        created = typed.timestamp
        if not created:
            created = dt.datetime.fromtimestamp(entry.stat().st_mtime, dt.UTC).isoformat()
        page = pages.get(entry.stem)
        rows.append(
            {
                "hashkey": entry.stem,
                "page": page,
                "uri": str(page) if page else str(entry.with_suffix("")),
                "created": _timestamp(created),
                "execution_seconds": typed.execution_seconds,
                "context": context,
                "project": project,
            }
        )
    return sorted(rows, key=lambda row: (row["created"], row["hashkey"]))


def import_cache(
    path: str | Path,
    store: Store,
    *,
    fingerprint: dict[str, Any] | None = None,
    fingerprint_source: str | None = None,
    root: Path | None = None,
) -> tuple[list[RunRecord], int]:
    """Save one run per cached notebook execution; returns (new runs, rows skipped as already imported).

    ``path`` is a jupyter-book 1 jupyter-cache (folder, ``global.db``, or the book's folder) or a
    jupyter-book 2 execution cache (``_build/execute``, ``_build`` or the book's folder).

    ``fingerprint`` describes the machine that ran the book (for instance ``nbscope info --json`` saved on
    the CI runner); by default it is this machine's, which is right when the book was built here.
    """
    book2 = find_book2_cache(path) if not Path(path).is_file() else None
    database = None if book2 is not None else find_database(path)
    if fingerprint is None:
        fingerprint, fingerprint_source = fp.collect(), "importing machine"
    fingerprint = dict(fingerprint)
    if not decode(Machine, fingerprint).digest:
        fingerprint["digest"] = fp.digest(fingerprint)
    seen = _already_imported(store)
    if book2 is not None:
        rows, cache = read_book2_cache(book2), book2
    else:
        assert database is not None
        rows, cache = read_cache(database), database.parent
    fresh = [r for r in rows if (str(r["hashkey"]), r["created"]) not in seen]
    records = to_records(
        fresh,
        fingerprint=fingerprint,
        cache=cache,
        root=root,
        fingerprint_source=fingerprint_source or "given",
        book2=book2 is not None,
    )
    for record in records:  # every row checked as an imported record is, before any is stored
        loads(record.to_json(), source=f"{book2 or database} entry {record.target}")
    for record in records:
        store.save(record)
    return records, len(rows) - len(fresh)
