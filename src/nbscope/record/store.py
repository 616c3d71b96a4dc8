"""The run store: an embedded SQLite database in WAL mode, safe with concurrent writers.

Default location ``.nbscope/nbscope.db`` under the current directory; ``NBSCOPE_DB`` or an explicit
path overrides it. A file that exists but is not SQLite is refused and never overwritten.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord

DEFAULT_DB = Path(".nbscope") / "nbscope.db"
SQLITE_MAGIC = b"SQLite format 3\x00"
STORE_VERSION = 1  # the meta table's store_version: what a future migration starts from

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL,
    machine TEXT NOT NULL,
    digest TEXT NOT NULL,
    headline TEXT NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_target ON runs (target, digest, started_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('store_version', '{STORE_VERSION}');
"""


def default_path() -> Path:
    env = os.environ.get("NBSCOPE_DB")
    return Path(env) if env else DEFAULT_DB


def _set_wal(connection: sqlite3.Connection) -> None:
    # Turning a new file into WAL upgrades a read lock to a write lock, which SQLite refuses at once
    # ("database is locked", no busy wait) while another process does the same: retry for a while.
    for attempt in range(500):
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) != sqlite3.SQLITE_BUSY or attempt == 499:
                raise
            time.sleep(0.01)


class Store:
    """Runs saved as whole JSON documents plus the columns `nbscope runs` lists."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._check_file()

    def _check_file(self) -> None:
        if self.path.is_dir():
            raise NbscopeError(f"--db {self.path} is a directory, not a database file")
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                if handle.read(16) != SQLITE_MAGIC:
                    raise NbscopeError(f"--db {self.path} exists and is not an SQLite database; refusing to touch it")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except sqlite3.Error as exc:
            raise NbscopeError(f"cannot open database {self.path}: {exc}") from None
        with closing(connection):
            try:
                connection.execute("PRAGMA busy_timeout = 60000")
                _set_wal(connection)
                if connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
                    # Tables missing: create them under the write lock, taken (waiting on busy_timeout) up front.
                    connection.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            except sqlite3.DatabaseError as exc:
                raise NbscopeError(f"{self.path} is not a usable nbscope database: {exc}") from None
            yield connection

    def save(self, record: RunRecord) -> int:
        """Insert a run and return its id."""
        document = record.to_json(indent=None)
        row = (
            record.started_at,
            record.ended_at,
            record.kind,
            record.target,
            record.status,
            fp.summary(record.fingerprint),
            record.digest,
            json.dumps(record.headline()),
            document,
        )
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                cursor = db.execute(
                    "INSERT INTO runs (started_at, ended_at, kind, target, status, machine, digest, headline, document)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        record.run_id = int(cursor.lastrowid or 0)
        return record.run_id

    def get(self, run_id: int) -> RunRecord:
        with self._connect() as db:
            row = db.execute("SELECT document FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NbscopeError(f"no run with id {run_id} in {self.path}")
        record = RunRecord.from_dict(json.loads(row[0]), source=f"run {run_id}")
        record.run_id = run_id
        return record

    def list(
        self,
        *,
        kind: str | None = None,
        target: str | None = None,
        digest: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Run summaries, newest first."""
        clauses, params = [], []
        for column, value in (("kind", kind), ("target", target), ("digest", digest)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT id, started_at, ended_at, kind, target, status, machine, digest, headline FROM runs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY started_at DESC, id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as db:
            rows = db.execute(sql, params).fetchall()
        names = ("id", "started_at", "ended_at", "kind", "target", "status", "machine", "digest", "headline")
        result = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            item["headline"] = json.loads(item["headline"])
            result.append(item)
        return result

    def records(self, **filters: Any) -> list[RunRecord]:
        """Whole records matching ``list``'s filters, newest first."""
        return [self.get(item["id"]) for item in self.list(**filters)]

    def latest(self, *, target: str, digest: str | None = None, kind: str | None = None) -> RunRecord | None:
        rows = self.list(target=target, digest=digest, kind=kind, limit=1)
        return self.get(rows[0]["id"]) if rows else None

    def count(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def resolve_run(reference: str, store: Store) -> RunRecord:
    """A run given as a store id (``12``) or a path to an exported JSON record."""
    from nbscope.record import run as record_module

    if reference.isdigit():
        return store.get(int(reference))
    if Path(reference).exists():
        return record_module.load(reference)
    raise NbscopeError(f"{reference!r} is neither a run id in {store.path} nor an existing file")
