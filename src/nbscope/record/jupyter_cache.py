"""``nbscope import-jupyter-cache``: jupyter-book's cached execution times as runs, for a free history.

jupyter-book 1 in ``execute_notebooks: cache`` mode keeps a jupyter-cache folder
(``_build/.jupyter_cache``) whose SQLite file ``global.db`` has a table ``nbcache``: one row per
executed notebook version (``hashkey``), with the source ``uri``, the time it was ``created`` (UTC) and
``data`` = ``{"execution_seconds": ...}``. Each row becomes one run of kind ``jupyter-cache`` whose
``totals.wall_s`` is that time (per notebook only: jupyter-book never records cells). The database is
opened read-only; rows already imported (same hashkey and time) are skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.collect import fingerprint as fp
from nbscope.record.cells import target_name
from nbscope.record.run import RunRecord

DB_NAME = "global.db"


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


def _timestamp(value: Any) -> str:
    """jupyter-cache's ``created`` (naive UTC, ``2024-01-31 12:00:00.123456``) as a run-record time."""
    text = str(value or "").strip()
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise NbscopeError(f"unreadable time {text!r} in the jupyter-cache database") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def read_cache(path: str | Path) -> list[dict[str, Any]]:
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
            rows = connection.execute(
                "SELECT pk, hashkey, uri, description, data, created FROM nbcache ORDER BY created, pk"
            ).fetchall()
        except sqlite3.Error as exc:
            raise NbscopeError(f"{database} is not a jupyter-cache database ({exc})") from None
    result = []
    for pk, hashkey, uri, description, data, created in rows:
        try:
            payload = json.loads(data) if isinstance(data, str) and data else {}
        except json.JSONDecodeError:
            payload = {}
        seconds = payload.get("execution_seconds") if isinstance(payload, dict) else None
        result.append(
            {
                "pk": pk,
                "hashkey": hashkey,
                "uri": uri,
                "description": description or "",
                "created": _timestamp(created),
                "execution_seconds": float(seconds) if isinstance(seconds, (int, float)) else None,
                "data": payload if isinstance(payload, dict) else {},
            }
        )
    return result


def to_records(
    rows: list[dict[str, Any]],
    *,
    fingerprint: dict[str, Any],
    cache: Path,
    root: Path | None = None,
    fingerprint_source: str = "importing machine",
) -> list[RunRecord]:
    records = []
    for row in rows:
        seconds = row["execution_seconds"]
        record = RunRecord(
            kind="jupyter-cache",
            target=target_name(row["uri"], root),
            fingerprint=fingerprint,
            settings={
                "source": str(cache),
                "uri": row["uri"],
                "hashkey": row["hashkey"],
                "cache_pk": row["pk"],
                "fingerprint_source": fingerprint_source,
            },
            measurements={
                "notebook": {"path": row["uri"]},
                "totals": {"wall_s": seconds, "execute_s": seconds, "notebooks": 1},
                "jupyter_cache": {"data": row["data"], "description": row["description"]},
            },
            started_at=row["created"],
            status="ok" if seconds is not None else "partial",
        )
        record.ended_at = row["created"]
        records.append(record)
    return records


def _already_imported(store: Any) -> set[tuple[str, str]]:
    seen = set()
    for row in store.list(kind="jupyter-cache"):
        record = store.get(row["id"])
        seen.add((str(record.settings.get("hashkey")), record.started_at))
    return seen


def import_cache(
    path: str | Path,
    store: Any,
    *,
    fingerprint: dict[str, Any] | None = None,
    fingerprint_source: str | None = None,
    root: Path | None = None,
) -> tuple[list[RunRecord], int]:
    """Save one run per cached notebook execution; returns (new runs, rows skipped as already imported).

    ``fingerprint`` describes the machine that ran the book (for instance ``nbscope info --json`` saved on
    the CI runner); by default it is this machine's, which is right when the book was built here.
    """
    database = find_database(path)
    rows = read_cache(database)
    if fingerprint is None:
        fingerprint, fingerprint_source = fp.collect(), "importing machine"
    fingerprint = dict(fingerprint)
    if not fingerprint.get("digest"):
        fingerprint["digest"] = fp.digest(fingerprint)
    seen = _already_imported(store)
    fresh = [r for r in rows if (str(r["hashkey"]), r["created"]) not in seen]
    records = to_records(
        fresh, fingerprint=fingerprint, cache=database.parent, root=root,
        fingerprint_source=fingerprint_source or "given",
    )
    for record in records:
        store.save(record)
    return records, len(rows) - len(fresh)
