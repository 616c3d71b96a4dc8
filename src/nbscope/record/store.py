"""The run store: an embedded SQLite database in WAL mode, safe with concurrent writers.

One store per project by default: ``.nbscope/nbscope.db`` at the project root of the working directory, the
same root that names notebooks (:func:`nbscope.record.cells.project_root`: the git work tree, else the book's
root, else the folder itself), so every command finds it from any subfolder. ``NBSCOPE_DB`` or an explicit
path overrides it. A file that exists but is not SQLite is refused and never overwritten. The ``.nbscope/``
folder nbscope makes gets a ``.gitignore`` of its own (``*``), so the store never shows up in git.

What belongs to one store besides its database (the live files of its unfinished runs, the JAX cache
``--jax-cache cold|warm`` makes) lives in a folder named for it, :func:`files_folder`
(``nbscope.db`` -> ``nbscope.db.d/``): two stores in one folder never share them.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack

from nbscope._errors import NbscopeError
from nbscope._redact import redact, shorten
from nbscope._version import __version__

# The run record's model (``record.run``) and the hiding of ``--env`` values (``record.secrets``) are imported where
# a run's document is read or written: a reader of the columns and summaries alone (``publish``) does without them.
if TYPE_CHECKING:
    from nbscope.record.run import RunRecord

STORE_FOLDER = ".nbscope"
DEFAULT_DB = Path(STORE_FOLDER) / "nbscope.db"
GITIGNORE_TEXT = "# made by nbscope: its run store and working files stay out of git\n*\n"
SQLITE_MAGIC = b"SQLite format 3\x00"
# The meta table's store_version. 1: runs and meta. 2: runs.content_hash (a run is stored once) and
# gate_verdicts (what `nbscope gate` decided about a run). 3: runs.label (``--label``, found by run
# references). 4: runs holds only summary columns (backend, measurement settings and totals added),
# indexed for listings, references, history and the gate; each run's document is in documents. 5: no run
# keeps an ``--env`` value that may be a secret (runs stored before they were hashed are written again).
# 6: meta.env_key, the store's random key for hiding ``--env`` values (HMAC, ``record.secrets``); the
# unkeyed hashes of earlier runs stay as they are. 7: runs gains the figures and hashes a book's history reads
# for every run (wall, compile and run seconds, cache state; hashes of the cells' code, of the package versions
# and of the compiled programs), so that no listing over thousands of runs parses their totals or documents.
# 8: run_summaries, what `publish` shows of a run (its status, cells, findings, forecast verdict, what changed
# since the run before it) as JSON, kept by the nbscope version that made it: filled as runs are published,
# so a run's document is read and diagnosed once, not at every publish.
# Older stores are migrated on first use; a newer one is refused, untouched.
STORE_VERSION = 8

_SCHEMA_V1 = (
    """CREATE TABLE IF NOT EXISTS runs (
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
)""",
    "CREATE INDEX IF NOT EXISTS runs_target ON runs (target, digest, started_at)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


def _migrate_to_2(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN content_hash TEXT")
    for run_id, document in db.execute("SELECT id, document FROM runs").fetchall():
        db.execute("UPDATE runs SET content_hash = ? WHERE id = ?", (_document_hash(document), run_id))
    db.execute("CREATE INDEX IF NOT EXISTS runs_content ON runs (content_hash)")
    db.execute(
        """CREATE TABLE IF NOT EXISTS gate_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL,
    baseline_id INTEGER,
    passed INTEGER NOT NULL,
    judged_at TEXT NOT NULL,
    reasons TEXT NOT NULL
)"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS gate_verdicts_run ON gate_verdicts (run_id, id)")


def _migrate_to_3(db: sqlite3.Connection) -> None:
    from nbscope.schema import codec
    from nbscope.schema.run_index import LabelledRun

    db.execute("ALTER TABLE runs ADD COLUMN label TEXT")
    for run_id, document in db.execute("SELECT id, document FROM runs").fetchall():
        # A corrupt row: unlabelled (reported when read).
        label = codec.decode(LabelledRun, _json_column(document)).label
        if label is not None:
            db.execute("UPDATE runs SET label = ? WHERE id = ?", (label, run_id))
    db.execute("CREATE INDEX IF NOT EXISTS runs_label ON runs (label, started_at)")


# Version 4: a run's summary columns in runs, its document in documents. SQLite keeps a row of several
# kilobytes mostly in a chain of overflow pages, so with the documents in runs, every summary read walks
# pages of documents it does not need, and the table is as large as the documents. Apart, runs is
# about 1 KB a run, read through its indexes without touching a document.
_RUNS_V4 = """CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL,
    machine TEXT NOT NULL,
    digest TEXT NOT NULL,
    label TEXT,
    backend TEXT,
    settings TEXT,
    content_hash TEXT,
    headline TEXT NOT NULL,
    totals TEXT
)"""
_DOCUMENTS_V4 = "CREATE TABLE documents (run_id INTEGER PRIMARY KEY, document TEXT NOT NULL)"
# Listing (newest first), `latest`, references by notebook, kind or label, history and the gate's
# baseline search each walk one of these in order; none sorts or reads documents it does not return.
_INDEXES_V4 = (
    "CREATE INDEX runs_started ON runs (started_at)",
    "CREATE INDEX runs_target ON runs (target, started_at)",
    # The gate's baseline search reads every earlier run of a lineage: status and settings come from the index.
    "CREATE INDEX runs_lineage ON runs (target, kind, digest, started_at, id, status, settings)",
    "CREATE INDEX runs_kind ON runs (kind, started_at)",
    "CREATE INDEX runs_label ON runs (label, started_at)",
    "CREATE INDEX runs_target_label ON runs (target, label, started_at)",
    "CREATE INDEX runs_content ON runs (content_hash)",
)
_COPIED_V3 = (
    "id",
    "started_at",
    "ended_at",
    "kind",
    "target",
    "status",
    "machine",
    "digest",
    "label",
    "content_hash",
    "headline",
)


def _summary_values(record: RunRecord) -> tuple[str | None, str, str]:
    """The backend, measurement settings and totals columns of a run."""
    from nbscope.record.run import series_settings

    return (
        _backend(record),
        settings_key(series_settings(record.settings)),
        json.dumps(dict(record.totals()), default=str),
    )


def _migrate_to_4(db: sqlite3.Connection) -> None:
    from nbscope.record import run as record_module

    # The documents move to their own table, runs is made again without them (with the new columns,
    # filled from each run's document), and indexed anew.
    db.execute("ALTER TABLE runs RENAME TO runs_v3")
    indexes = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs_v3' AND sql IS NOT NULL"
    )
    for (index,) in indexes.fetchall():
        db.execute(f'DROP INDEX "{index}"')
    db.execute(_RUNS_V4)
    db.execute(_DOCUMENTS_V4)
    columns = ", ".join(_COPIED_V3)
    db.execute(f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs_v3")
    db.execute("INSERT INTO documents (run_id, document) SELECT id, document FROM runs_v3")
    # AUTOINCREMENT keeps its high-water mark: an id of a run deleted before is not given again.
    (seq,) = db.execute("SELECT MAX(seq) FROM sqlite_sequence WHERE name IN ('runs', 'runs_v3')").fetchone()
    if seq is not None:
        db.execute("DELETE FROM sqlite_sequence WHERE name = 'runs'")
        db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('runs', ?)", (seq,))
    for run_id, document in db.execute("SELECT run_id, document FROM documents"):  # one document at a time
        try:
            summaries = _summary_values(record_module.loads(document, source=f"run {run_id}"))
        except Exception:  # any unreadable row: it must not stop the migration of the others
            continue  # it keeps empty summaries (and is reported when read)
        db.execute("UPDATE runs SET backend = ?, settings = ?, totals = ? WHERE id = ?", (*summaries, run_id))
    db.execute("DROP TABLE runs_v3")
    for statement in _INDEXES_V4:
        db.execute(statement)


def _migrate_to_5(db: sqlite3.Connection) -> None:
    """Runs stored before ``--env`` values were hashed keep them no longer (``record.secrets``): each such
    document is written again without them, with its content hash and settings column."""
    from nbscope.record import run as record_module
    from nbscope.record.secrets import hide_stored_values

    # The pages a document leaves are zeroed, not just freed: the values must not stay in the file.
    db.execute("PRAGMA secure_delete = ON")
    key = _env_key(db)  # the key version 6 keeps: the values hidden here compare with later runs' ones
    for run_id, text in db.execute("SELECT run_id, document FROM documents").fetchall():  # one document at a time
        try:
            record = record_module.loads(text, source=f"run {run_id}")
        except Exception:  # an unreadable row is reported when read; it must not stop the others
            continue
        if hide_stored_values(record.settings, record.command, key):
            row = _row(record)
            db.execute("UPDATE documents SET document = ? WHERE run_id = ?", (row[-1], run_id))
            db.execute(
                "UPDATE runs SET settings = ?, content_hash = ? WHERE id = ?",
                (row[_ROW_COLUMNS.index("settings")], row[_CONTENT_HASH], run_id),
            )


def _env_key(db: sqlite3.Connection, made: bytes | None = None) -> bytes:
    """The store's key for hidden ``--env`` values; made now (``made``, else a random one) when it has none."""
    from nbscope.record.secrets import new_key

    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('env_key', ?)", ((made or new_key()).hex(),))
    (value,) = db.execute("SELECT value FROM meta WHERE key = 'env_key'").fetchone()
    return bytes.fromhex(value)


def _migrate_to_6(db: sqlite3.Connection) -> None:
    """The store gets its key for hidden ``--env`` values (the runs it holds keep their hashes)."""
    _env_key(db)


# Version 7's columns: what `publish` and the attribution of a change read of every run without its document.
FIGURE_COLUMNS = ("wall_s", "compile_s", "run_s")
HASH_COLUMNS = ("cells_hash", "packages_hash", "programs_hash")
_COLUMNS_V7 = (
    *(f"{name} REAL" for name in FIGURE_COLUMNS),
    "cache_state TEXT",
    *(f"{name} TEXT" for name in HASH_COLUMNS),
)


def _short_hash(parts: Iterable[str]) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


def _document_summary(document: Mapping[str, Any]) -> tuple[Any, ...]:
    """Version 7's columns of a run, from its document (as stored, or as a migration reads it)."""
    from nbscope.schema import codec
    from nbscope.schema.run_index import IndexedRun

    run = codec.decode(IndexedRun, document)
    totals, versions = run.measurements.totals, run.fingerprint.versions
    packages = (
        sorted(f"{k}={json.dumps(v, sort_keys=True, default=str)}" for k, v in versions.items())
        if versions is not None
        else []
    )
    programs = run.measurements.program_hashes
    return (
        totals.wall_s,
        totals.compile_s,
        totals.run_s,
        totals.cache_state,
        _short_hash(str(cell.source_hash) for cell in run.measurements.cells),
        _short_hash(packages),
        _short_hash(programs) if programs is not None else None,
    )


def _migrate_to_7(db: sqlite3.Connection) -> None:
    """The figures and hashes of version 7, filled from each run's document."""
    for column in _COLUMNS_V7:
        db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
    names = (*FIGURE_COLUMNS, "cache_state", *HASH_COLUMNS)
    update = f"UPDATE runs SET {', '.join(f'{name} = ?' for name in names)} WHERE id = ?"
    for run_id, text in db.execute("SELECT run_id, document FROM documents"):  # one document at a time
        document = _json_column(text)  # a corrupt row keeps empty columns (and is reported when read)
        if isinstance(document, dict):
            db.execute(update, (*_document_summary(document), run_id))
    # A notebook's runs on one backend, in time order, with the figures a book's history reads.
    db.execute(
        "CREATE INDEX runs_book ON runs (kind, target, backend, started_at, id, status, wall_s, compile_s, run_s)"
    )


_SUMMARIES_V8 = (
    "CREATE TABLE IF NOT EXISTS run_summaries (run_id INTEGER PRIMARY KEY, tool_version TEXT NOT NULL,"
    " summary TEXT NOT NULL)"
)


def _migrate_to_8(db: sqlite3.Connection) -> None:
    """The table of run summaries, empty: each run's is made when a publish first reads the run."""
    db.execute(_SUMMARIES_V8)


MIGRATIONS = {
    1: _migrate_to_2,
    2: _migrate_to_3,
    3: _migrate_to_4,
    4: _migrate_to_5,
    5: _migrate_to_6,
    6: _migrate_to_7,
    7: _migrate_to_8,
}  # from version N to N + 1


def _document_hash(text: str) -> str:
    """The content hash of a stored document; the text's own hash when it is not a JSON object (a corrupt row)."""
    document = _json_column(text)
    if isinstance(document, dict):
        from nbscope.record import run as record_module

        return record_module.content_hash(document)
    return hashlib.sha256(str(text).encode("utf-8", "replace")).hexdigest()


def _notebook_cell_hashes(path: Path) -> list[str]:
    """The source hashes of a notebook file's code cells; none when it cannot be read as a notebook."""
    from nbscope.collect import notebook as notebook_module

    try:
        return [cell.source_hash for cell in notebook_module.read(path).code_cells]
    except (NbscopeError, OSError, ValueError):
        return []


def default_path() -> Path:
    """The store commands use without ``--db``: ``$NBSCOPE_DB``, else ``.nbscope/nbscope.db`` at the project
    root of the working directory (relative when that root is the working directory itself)."""
    from nbscope.schema import process_environment  # here: a store given its path starts without the codec

    given = process_environment.read().store
    if given:
        return Path(given)
    from nbscope.record.cells import project_root

    here = Path.cwd()
    root = project_root(here)
    return DEFAULT_DB if root == here.resolve() else root / DEFAULT_DB


def files_folder(store_path: str | Path | None) -> Path:
    """The folder of what belongs to one store besides its database: ``<store>.d`` beside it (its ``live/``
    files, its ``jax-cache/``); the default store's when ``store_path`` is None. A store named through a symbolic
    link has them beside the database it links to: one folder, whichever name a command gives."""
    path = Path(store_path) if store_path is not None else default_path()
    path = path.resolve() if path.is_symlink() else path
    return path.with_name(path.name + ".d")


def make_folder(folder: Path, *, ignored: Path | None = None) -> Path:
    """Make ``folder`` (and the folders above it). Of the folders made here, a ``.nbscope`` one and ``ignored``
    (a store's :func:`files_folder`) get a ``.gitignore`` holding ``*``, so ``git status`` stays clean; a folder
    that was there already, the user's, is never given one."""
    folder = Path(folder)
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for made in missing:
        if made.name == STORE_FOLDER or (ignored is not None and made == Path(ignored)):
            try:
                with open(made / ".gitignore", "x", encoding="utf-8") as handle:
                    handle.write(GITIGNORE_TEXT)
            except OSError:
                pass  # a read-only folder: git hygiene is not worth failing a run
    return folder


def store_subfolder(store_path: str | Path | None, name: str) -> Path:
    """``files_folder(store_path) / name``, made (with the files folder's ``.gitignore`` when it is new)."""
    base = files_folder(store_path)
    return make_folder(base / name, ignored=base)


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


# Less free space than this where SQLite reports an I/O error: the disk is full (a page and its journal do not fit).
FULL_DISK_BYTES = 1 << 20

# A book's history of its runs (``Store.book_series``), all in the runs_book index.
BOOK_SERIES = ("target", "backend", "started_at", "id", "status", *FIGURE_COLUMNS)
# A row of BOOK_SERIES: target, backend, started_at, id, status, then the figures.
SeriesRun = tuple[str, str | None, str, int, str, float | None, float | None, float | None]
Series = list[SeriesRun]
SUMMARY_COLUMNS = ("id", "started_at", "ended_at", "kind", "target", "status", "machine", "digest", "label")
# A filter: one value, or any of several (a notebook's current and older names, several kinds).
Match = str | Sequence[str] | None


def settings_key(settings: dict[str, Any]) -> str:
    """The measurement settings of a run as the store keeps them: equal settings, equal text."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)


class RunFilters(TypedDict, total=False):
    """Which stored runs ``Store.runs`` and ``Store.records`` give: a value or values per column, and how many."""

    kind: Match
    target: Match
    digest: str | None
    label: str | None
    limit: int | None


class RunQuery(NamedTuple):
    """The ``RunFilters`` a ``Store`` method was given, typed once: what each column must match (None: any
    value), and how many runs at most. (A named tuple, not a dataclass: a reader of the store's columns alone,
    such as ``publish``, starts without importing dataclasses.)"""

    kind: Match = None
    target: Match = None
    digest: str | None = None
    label: str | None = None
    limit: int | None = None


def _where(query: RunQuery) -> tuple[str, list[Any]]:
    """The WHERE clause (empty or starting with a space) and its parameters for ``query``."""
    clauses: list[str] = []
    params: list[Any] = []
    columns = (("kind", query.kind), ("target", query.target), ("digest", query.digest), ("label", query.label))
    for column, value in columns:
        if value is None:
            continue
        values = [value] if isinstance(value, str) else list(value)
        clauses.append(f"{column} IN ({', '.join('?' * len(values))})" if values else "0")
        params.extend(values)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _newest_ids(db: sqlite3.Connection, query: RunQuery) -> Iterator[int]:
    """The ids of the matching runs, newest first, found lazily in index order (no document is read).

    Runs of several kinds and nothing else (``latest`` of a command's kinds) are one query per kind, each
    walking the kind's index in time order, merged: SQLite would otherwise sort the ids of every run of
    those kinds to give the newest. Any other filter has an index of its own (a notebook's runs, a
    label's) to walk or to sort, whatever the size of the store.
    """
    kinds = query.kind
    others = [value for value in (query.target, query.digest, query.label) if value is not None]
    if kinds is not None and not isinstance(kinds, str) and not others:
        order = "ORDER BY started_at DESC, id DESC"
        cursors = [
            db.execute(f"SELECT started_at, id FROM runs WHERE kind = ? {order}", (kind,))
            for kind in dict.fromkeys(kinds)
        ]
        for _, run_id in heapq.merge(*cursors, reverse=True):
            yield int(run_id)
        return
    where, params = _where(query)
    for (run_id,) in db.execute(f"SELECT id FROM runs{where} ORDER BY started_at DESC, id DESC", params):
        yield int(run_id)


def _json_column(text: object) -> Any:
    from nbscope.schema._fields import without_surrogates  # a crafted store's summary may hold lone surrogates

    try:
        return without_surrogates(json.loads(text)) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None


# How long a command waits for another writer to release the store before giving up (tests pass it in).
WAIT_S = 60.0


class Store:
    """Runs saved as whole JSON documents plus the summary columns listings, history and the gate read.

    A row that cannot be read (a corrupt document, a record schema newer than this nbscope's) is left
    out of every listing and reported once through ``on_skip`` (and kept in ``skipped``): one bad row
    does not stop ``runs``, ``history``, ``gate`` or ``report``. Asked for by its id, it is an error.
    """

    def __init__(
        self, path: str | Path | None = None, *, on_skip: Callable[[str], None] | None = None, read_only: bool = False
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.on_skip = on_skip
        # A read-only store never creates a database: reading one that is not there is an error.
        self.read_only = read_only
        self.skipped: dict[int, str] = {}
        # A read-only store of an older version, migrated in memory: reading never writes to the file.
        self._migrated_copy: sqlite3.Connection | None = None
        self._held: sqlite3.Connection | None = None  # the connection of ``held``, while one is open
        # The key a store not made yet gets when it is made (a run hides its --env values before it is stored):
        # made when first asked for (``_new_env_key``), once.
        self._made_env_key: bytes | None = None
        from nbscope._files import note_input

        # No -o of this command replaces it, nor a file SQLite would take for its own (a rollback journal is
        # read, or deleted, by the next connection).
        note_input(self.path, "the run store")
        for suffix in ("-wal", "-shm", "-journal"):
            note_input(Path(f"{self.path}{suffix}"), "the run store", transient=True)
        self._check_file()

    @property
    def _new_env_key(self) -> bytes:
        if self._made_env_key is None:
            from nbscope.record.secrets import new_key

            self._made_env_key = new_key()
        return self._made_env_key

    def _check_file(self) -> None:
        from nbscope._files import check_store_path

        check_store_path(self.path)  # a directory, a device, a FIFO, a folder of devices: one line, nothing made
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                if handle.read(16) != SQLITE_MAGIC:
                    raise NbscopeError(f"--db {self.path} exists and is not an SQLite database; refusing to touch it")

    def _version(self, db: sqlite3.Connection) -> int | None:
        """The store version, None for a file with no tables yet; refuses a store this nbscope cannot use."""
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables - {"sqlite_sequence"}:
            return None
        if "runs" not in tables and "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise NbscopeError(
                f"--db {self.path} is an SQLite database but not an nbscope store (tables: {shown}); refusing to touch it"
            )
        row = db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone() if "meta" in tables else None
        if row is None:
            return 1  # stores from before the version was written
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise NbscopeError(
                f"{self.path}: store_version {row[0]!r} is not a number; not an nbscope store this version can read"
            ) from None
        if version > STORE_VERSION:
            raise NbscopeError(
                f"{self.path} is an nbscope store of version {version}; this nbscope ({__version__}) reads up to "
                f"version {STORE_VERSION}: upgrade nbscope"
            )
        return version

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Create the tables of a new store, or migrate an older one, under the write lock."""
        version = self._version(db)  # before WAL: a store this nbscope refuses is not changed at all
        _set_wal(db)
        if version == STORE_VERSION:
            return
        self._migrate(db)

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Bring a store to this version in one transaction (a new one gets the tables first)."""
        with _transaction(db):  # waits on busy_timeout; another process may migrate meanwhile
            version = self._version(db)
            if version is None:
                for statement in _SCHEMA_V1:
                    db.execute(statement)
                _env_key(db, self._new_env_key)  # created with the store: the key runs were hidden with
                version = 1
            while version < STORE_VERSION:
                MIGRATIONS[version](db)
                version += 1
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('store_version', ?)", (str(STORE_VERSION),))

    def env_key(self) -> bytes:
        """The key that hides ``--env`` values of runs for this store (:mod:`nbscope.record.secrets`): the
        store's own; for a store not made yet, the one it will be made with. Reading it never makes the store."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return self._new_env_key
        with self._connect() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'env_key'").fetchone()
        return bytes.fromhex(row[0]) if row else self._new_env_key

    def check_writable(self) -> None:
        """Refuse (one line) an existing store a run could not be saved in: not SQLite, corrupt, of a newer
        version, or read-only (the file, or the folder SQLite keeps its journal in). A write is tried and
        rolled back, so nothing changes."""
        folder = self.path.absolute().parent
        if not os.access(self.path, os.W_OK) or not os.access(folder, os.W_OK | os.X_OK):
            machine = self._not_the_store()
            if machine is not None and "read-only" in str(machine):
                raise machine
        if not os.access(self.path, os.W_OK):
            raise NbscopeError(f"--db {self.path} is read-only: a run could not be stored in it")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise NbscopeError(f"--db {self.path}: its folder {folder} is read-only (SQLite writes its journal there)")
        with self._connect() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute("UPDATE meta SET value = value WHERE key = 'store_version'")
                finally:
                    db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise self._not_the_store(exc) or NbscopeError(
                    f"--db {self.path}: a run could not be stored in it ({exc})"
                ) from None

    def missing(self) -> NbscopeError:
        """The error of a read-only command given a store that does not exist."""
        return NbscopeError(
            f"no run store at {self.path}: nothing was stored there yet; record a first run with "
            "`nbscope profile NOTEBOOK` (or give another store with --db or NBSCOPE_DB)"
        )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self._held is not None:
            yield self._held
            return
        if self.read_only:
            with self._connect_read_only() as connection:
                yield connection
            return
        make_folder(self.path.parent)
        try:
            connection = sqlite3.connect(self.path, timeout=WAIT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._not_the_store(exc) or NbscopeError(f"cannot open database {self.path}: {exc}") from None
        with closing(connection):
            try:
                connection.execute(f"PRAGMA busy_timeout = {WAIT_S * 1000:.0f}")
                self._prepare(connection)
            except sqlite3.DatabaseError as exc:
                raise self._not_the_store(exc) or NbscopeError(
                    f"{self.path} is not a usable nbscope database: {exc}"
                ) from None
            try:
                yield connection
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:  # "database is locked"
                    raise NbscopeError(
                        f"--db {self.path}: another process held it for over {WAIT_S:g} s ({exc})"
                    ) from None
                raise self._not_the_store(exc) or exc from None

    def _not_the_store(self, exc: sqlite3.Error | None = None) -> NbscopeError | None:
        """The error to give when a write failed for a reason of the machine, not of the store: a read-only mount,
        the file size limit (``ulimit -f``: SQLite's write fails with EFBIG), a full disk (SQLite says "database or
        disk is full", or "disk I/O error" when it cannot grow its journal); None otherwise."""
        import resource

        folder = self.path.absolute().parent
        intact = "the store itself is not damaged"
        try:
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                return NbscopeError(f"--db {self.path}: the file system of {folder} is mounted read-only; {intact}")
        except OSError:
            pass
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            return NbscopeError(
                f"--db {self.path}: this shell's file size limit (ulimit -f: {limit // 1024} KiB) stops SQLite from "
                f"writing the store; {intact}: raise the limit (ulimit -f unlimited) and run again"
            )
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code not in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
            return None
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            return None
        if code == sqlite3.SQLITE_IOERR and free >= FULL_DISK_BYTES:
            return None  # a real I/O error: not a full disk
        return NbscopeError(
            f"--db {self.path}: the disk is full ({free // 1024} KiB free in {folder}); {intact}: free some space and "
            "run again"
        )

    @contextmanager
    def _connect_read_only(self) -> Iterator[sqlite3.Connection]:
        """A read-only command's connection: the file as it is (no WAL switch, no migration); a store of an older
        version is copied into memory and migrated there, once per Store, so that the file stays as it was."""
        if not self.path.exists():
            raise self.missing()
        if self._migrated_copy is not None:
            yield self._migrated_copy
            return
        connection = self._open_for_reading()
        try:
            version = self._version(connection)
            if version is not None and version < STORE_VERSION:
                copy = sqlite3.connect(":memory:", isolation_level=None)
                connection.backup(copy)
                self._migrate(copy)
                self._migrated_copy = copy
                connection.close()
                yield copy
                return
            with closing(connection):
                yield connection
        except sqlite3.DatabaseError as exc:
            raise NbscopeError(f"{self.path} is not a usable nbscope database: {exc}") from None

    def _open_for_reading(self) -> sqlite3.Connection:
        """A connection that reads the store. A store in WAL mode needs its folder writable even to be read
        (SQLite makes its ``-shm`` file there); where that fails (a read-only folder, a read-only mount), the
        file is opened as immutable: read as it is, without locks, which is safe because nothing can write
        beside it either."""
        try:
            connection = sqlite3.connect(self.path, timeout=WAIT_S, isolation_level=None)
            connection.execute(f"PRAGMA busy_timeout = {WAIT_S * 1000:.0f}")
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return connection
        except sqlite3.OperationalError:
            pass  # "unable to open database file" (no -shm), "attempt to write a readonly database"
        except sqlite3.Error as exc:
            raise self._not_the_store(exc) or NbscopeError(f"cannot open database {self.path}: {exc}") from None
        try:
            return sqlite3.connect(f"{self.path.absolute().as_uri()}?immutable=1", uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._not_the_store(exc) or NbscopeError(f"cannot open database {self.path}: {exc}") from None

    def _skip(self, run_id: int, reason: str) -> None:
        if run_id in self.skipped:
            return
        self.skipped[run_id] = reason
        if self.on_skip is not None:
            self.on_skip(f"{reason}; run {run_id} skipped")

    def _parse(self, run_id: int, document: Any) -> RunRecord:
        from nbscope.record import run as record_module

        source = f"run {run_id} in {self.path}"
        if not isinstance(document, str):
            raise NbscopeError(f"{source} has no JSON document")
        record = record_module.loads(document, source=source)
        record.run_id = run_id
        return record

    def add(self, record: RunRecord) -> tuple[int, bool]:
        """Save a run unless the store holds one with the same content: (its id, whether it was added)."""
        return self.add_many([record])[0]

    def add_many(self, records: Iterable[RunRecord]) -> list[tuple[int, bool]]:
        """``add`` for many runs in one transaction (an import of many runs): (id, added) for each."""
        from nbscope.record import run as record_module
        from nbscope.record.secrets import hide_stored_values

        records = list(records)
        key = self.env_key()
        for record in records:  # a run recorded (or exported) before ``--env`` values were hashed
            record_module.check_not_future(record, f"run {record.target}")
            hide_stored_values(record.settings, record.command, key)
        rows = [(record, _row(record)) for record in records]
        found: list[tuple[int, bool]] = []
        with self._connect() as db:
            with _transaction(db):  # one writer at a time: the duplicate check and insert are atomic
                for _, row in rows:
                    same = db.execute(
                        "SELECT id FROM runs WHERE content_hash = ? ORDER BY id LIMIT 1", (row[_CONTENT_HASH],)
                    ).fetchone()
                    if same is not None:
                        found.append((int(same[0]), False))
                        continue
                    cursor = db.execute(
                        f"INSERT INTO runs ({', '.join(_ROW_COLUMNS)}) VALUES ({', '.join('?' * len(_ROW_COLUMNS))})",
                        row[:-1],
                    )
                    run_id = int(cursor.lastrowid or 0)
                    db.execute("INSERT INTO documents (run_id, document) VALUES (?, ?)", (run_id, row[-1]))
                    found.append((run_id, True))
        for (record, _), (run_id, _) in zip(rows, found, strict=True):
            record.run_id = run_id
        return found

    def save(self, record: RunRecord) -> int:
        """Insert a run and return its id (the existing run's id when the same run is stored already)."""
        record.settle()
        return self.add(record)[0]

    def find(self, record: RunRecord) -> int | None:
        """The id of the stored run with this record's content, if any (never creates the store)."""
        if not self.path.exists():
            return None
        digest = record.content_hash()
        with self._connect() as db:
            found = db.execute("SELECT id FROM runs WHERE content_hash = ? ORDER BY id LIMIT 1", (digest,)).fetchone()
        return int(found[0]) if found is not None else None

    def ids_of_uuids(self, uuids: Sequence[str]) -> dict[str, int]:
        """The id of the stored run whose ``measurements.run_uuid`` is each of ``uuids`` (found ones only)."""
        if not uuids or not self.path.exists():
            return {}
        marks = ", ".join("?" * len(uuids))
        with self._connect() as db:
            rows: list[tuple[str, int]] = db.execute(
                "SELECT json_extract(document, '$.measurements.run_uuid') AS uuid, MIN(run_id) FROM documents "
                f"WHERE uuid IN ({marks}) GROUP BY uuid",
                list(uuids),
            ).fetchall()
        return {str(uuid): int(run_id) for uuid, run_id in rows}

    def get(self, run_id: int) -> RunRecord:
        if not 0 <= run_id <= MAX_RUN_ID:
            raise NbscopeError(f"no run with id {run_id} in {self.path} (`nbscope runs` lists the stored runs)")
        with self._connect() as db:
            row = db.execute(
                "SELECT d.document FROM runs r LEFT JOIN documents d ON d.run_id = r.id WHERE r.id = ?", (run_id,)
            ).fetchone()
        if row is None:
            raise NbscopeError(f"no run with id {run_id} in {self.path} (`nbscope runs` lists the stored runs)")
        return self._parse(run_id, row[0])

    def documents(self, run_ids: Iterable[int]) -> dict[int, RunRecord]:
        """The readable runs of ``run_ids``, read in one query (an unreadable or missing one is left out; an
        unreadable one is reported as ``readable`` reports it)."""
        wanted = sorted({int(i) for i in run_ids})
        found: dict[int, RunRecord] = {}
        with self._connect() as db:
            for run_id, text in _by_ids(db, "SELECT run_id, document FROM documents WHERE run_id IN ({})", wanted):
                try:
                    found[int(run_id)] = self._parse(int(run_id), text)
                except NbscopeError as exc:
                    self._skip(int(run_id), str(exc))
        for run_id in set(wanted) - set(found) - set(self.skipped):
            self._skip(run_id, f"no run with id {run_id} in {self.path}")
        return found

    @contextmanager
    def held(self) -> Iterator[Store]:
        """Every read inside on one connection: a command that reads many runs one by one opens the store once,
        not once per run."""
        if self._held is not None:
            yield self
            return
        with self._connect() as db:
            self._held = db
            try:
                yield self
            finally:
                self._held = None

    def _readable(self, query: RunQuery) -> Iterator[tuple[tuple[Any, ...], RunRecord]]:
        """(summary columns, record) of the matching runs, newest first, skipping (and reporting) bad rows.

        The ids are found and ordered in an index first; a document is read and parsed only for a run
        that is given (or skipped), so ``runs --limit 20`` reads twenty documents in any store.
        """
        limit = query.limit
        columns = ", ".join(f"r.{c}" for c in (*SUMMARY_COLUMNS, "headline", "backend"))
        row_sql = f"SELECT {columns}, d.document FROM runs r LEFT JOIN documents d ON d.run_id = r.id WHERE r.id = ?"
        given = 0
        with self._connect() as db:
            for run_id in _newest_ids(db, query):  # one by one: the cursors stop where the caller does
                if limit and given >= limit:
                    return
                row = db.execute(row_sql, (run_id,)).fetchone()
                if row is None:
                    continue  # deleted meanwhile
                try:
                    record = self._parse(int(row[0]), row[-1])
                except NbscopeError as exc:
                    self._skip(int(row[0]), str(exc))
                    continue
                given += 1
                yield row[:-1], record

    def runs(self, **filters: Unpack[RunFilters]) -> list[dict[str, Any]]:
        """Summaries of the readable runs, newest first, with the JAX backend each used."""
        result = []
        for row, record in self._readable(RunQuery(**filters)):
            item = dict(zip(SUMMARY_COLUMNS, row[: len(SUMMARY_COLUMNS)], strict=True))
            headline = _json_column(row[len(SUMMARY_COLUMNS)])
            item["headline"] = headline if isinstance(headline, dict) else record.headline()
            item["backend"] = row[len(SUMMARY_COLUMNS) + 1]
            result.append(item)
        return result

    def records(self, **filters: Unpack[RunFilters]) -> list[RunRecord]:
        """Whole records matching ``runs``' filters, newest first (unreadable rows skipped and reported)."""
        return [record for _, record in self._readable(RunQuery(**filters))]

    def latest(
        self, *, target: Match = None, digest: str | None = None, kind: Match = None, label: str | None = None
    ) -> RunRecord | None:
        """The newest readable run matching the filters, or None."""
        found = self.records(target=target, digest=digest, kind=kind, label=label, limit=1)
        return found[0] if found else None

    def newest_per_target(self, **filters: Unpack[RunFilters]) -> list[RunRecord]:
        """The newest readable matching run of each target (each notebook), newest first; only those
        documents are read (an unreadable newest run is skipped, reported, and the one before it given)."""
        where, params = _where(RunQuery(**filters))
        sql = (
            f"SELECT id, target FROM (SELECT id, target, started_at, ROW_NUMBER() OVER (PARTITION BY target"
            f" ORDER BY started_at DESC, id DESC) AS place FROM runs{where}) WHERE place = ?"
        )
        found: dict[str, RunRecord] = {}
        unread: set[str] | None = None  # targets still without a readable run (None: all, at first)
        place = 1
        while unread is None or unread:  # again only for a target whose newest runs cannot be read
            with self._connect() as db:
                rows = [(i, t) for i, t in db.execute(sql, [*params, place]) if unread is None or t in unread]
            if not rows:
                break
            unread = set()
            for run_id, target in rows:
                record = self.readable(run_id)
                if record is None:
                    unread.add(target)
                else:
                    found[target] = record
            place += 1
        return sorted(found.values(), key=lambda r: (r.started_at, r.run_id or 0), reverse=True)

    def summaries(self, columns: Sequence[str] | None = None, **filters: Unpack[RunFilters]) -> list[dict[str, Any]]:
        """The summary columns of the matching runs, newest first, without reading a document: ``runs``'
        keys plus ``settings`` (the measurement settings), ``totals``, the totals' ``wall_s``, ``compile_s``,
        ``run_s`` and ``cache_state``, and the hashes of the cells' code, the package versions and the compiled
        programs (``*_hash``); only ``columns`` (and ``id``) when given. A run whose document could not be read
        when the store was migrated has these None (``readable`` says why)."""
        query = RunQuery(**filters)
        where, params = _where(query)
        limit = query.limit
        known = (
            *SUMMARY_COLUMNS,
            "headline",
            "backend",
            "settings",
            "totals",
            *FIGURE_COLUMNS,
            "cache_state",
            *HASH_COLUMNS,
        )
        if columns is None:
            columns = known
        elif unknown := set(columns) - set(known):
            raise ValueError(f"no summary column {', '.join(sorted(unknown))}")
        columns = ("id", *(c for c in columns if c != "id"))
        sql = f"SELECT {', '.join(columns)} FROM runs{where} ORDER BY started_at DESC, id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as db:
            rows = db.execute(sql, params).fetchall()
        result = []
        parsed = [name for name in ("headline", "settings", "totals") if name in columns]
        for row in rows:
            item = dict(zip(columns, row, strict=True))
            for name in parsed:
                item[name] = _json_column(item[name])
            result.append(item)
        return result

    def book_series(self, kinds: Sequence[str], targets: Sequence[str] | None = None) -> list[Series]:
        """``BOOK_SERIES`` of every run of each of ``kinds`` (of ``targets`` when given): a list of tuples per kind,
        each in the order of the runs_book index (kind, notebook, backend, start, id). A book's history read from
        the index alone, neither sorted nor looked up in the table, and no document read."""
        found: list[Series] = []
        columns = ", ".join(BOOK_SERIES)
        with self._connect() as db:
            for kind in dict.fromkeys(kinds):
                sql = f"SELECT {columns} FROM runs WHERE kind = ?"
                params: list[Any] = [kind]
                if targets is not None:
                    sql += f" AND target IN ({', '.join('?' * len(targets))})"
                    params += list(targets)
                found.append(db.execute(sql + " ORDER BY target, backend, started_at, id", params).fetchall())
        return found

    def machines(self, run_ids: Iterable[int]) -> dict[int, str]:
        """The machine column (the fingerprint's summary) of each of ``run_ids``."""
        wanted = sorted({int(i) for i in run_ids})
        with self._connect() as db:
            return dict(_by_ids(db, "SELECT id, machine FROM runs WHERE id IN ({})", wanted))

    def readable(self, run_id: int) -> RunRecord | None:
        """The run with this id, or None (reported through ``on_skip`` once) when it cannot be read."""
        try:
            return self.get(run_id)
        except NbscopeError as exc:
            self._skip(run_id, str(exc))
            return None

    def names_of(self, target: str) -> list[str]:
        """The names runs of ``target`` (a path or a stored name) are stored under: its current name first,
        then of its older names (:func:`nbscope.record.cells.aliases_for`) its absolute path, and a
        shorter name only when the newest run stored under it measured this notebook: most of its cells the
        same (:func:`nbscope.record.cells.shares_cells`) as the newest run under its current name or, when
        there is none, as the file. ``x/intro.md`` never takes the runs of another folder's ``intro.md``
        that an older nbscope stored as ``intro.md``."""
        from nbscope.record.cells import aliases_for, cell_hashes, notebook_file, shares_cells

        file = notebook_file(target)
        names = aliases_for(target, file)
        if file is None or len(names) == 1 or not self.path.exists():
            return names
        fixed = list(dict.fromkeys([names[0], file.as_posix()]))
        with self._connect() as db:
            older = [n for n in names if n not in fixed]
            marks = ",".join("?" * len(older))
            present = {t for (t,) in db.execute(f"SELECT DISTINCT target FROM runs WHERE target IN ({marks})", older)}
        if not present:
            return fixed
        current = self.latest(target=fixed)
        # The stored run says which cells this notebook has; the file is read (a notebook parser) only without one.
        hashes = cell_hashes(current) if current is not None else _notebook_cell_hashes(file)
        kept = list(fixed)
        for name in older:
            if name in present and (newest := self.latest(target=name)) is not None:
                if shares_cells(hashes, cell_hashes(newest)):
                    kept.append(name)
        return kept

    def targets(self, limit: int = 500) -> list[str]:
        """The names runs are stored under, in order (at most ``limit``)."""
        with self._connect() as db:
            return [t for (t,) in db.execute("SELECT DISTINCT target FROM runs ORDER BY target LIMIT ?", (limit,))]

    def count(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def version(self) -> int:
        """The store's version (migrating an older store first)."""
        with self._connect() as db:
            return self._version(db) or STORE_VERSION

    # --- run summaries -----------------------------------------------------------------------------------

    def run_summaries(self, run_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The kept summaries of ``run_ids`` (``keep_run_summaries``) made by this nbscope version: one made by
        another version may judge the run by other rules, so it is made again. A store older than version 8
        read without migrating it has none."""
        wanted = sorted({int(i) for i in run_ids})
        found: dict[int, dict[str, Any]] = {}
        with self._connect() as db:
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_summaries'").fetchone() is None:
                return found
            sql = "SELECT run_id, summary FROM run_summaries WHERE tool_version = ? AND run_id IN ({})"
            for run_id, text in _by_ids(db, sql, wanted, __version__):
                summary = _json_column(text)
                if isinstance(summary, dict):
                    found[int(run_id)] = summary
        return found

    def keep_run_summaries(self, summaries: Mapping[int, Mapping[str, Any]]) -> bool:
        """Keep what a reader made of these runs (plain JSON each), under this nbscope's version; whether they were
        kept. A store opened read-only is written on a connection of its own, and only when it can be: its file
        and folder writable, and of version 7 (migrated to 8 then: one empty table) or 8. An older one is not
        migrated by a reader (that rewrites every run), and one that cannot be written keeps nothing: the
        summaries are made again next time."""
        if not summaries:
            return True
        rows = [
            (int(run_id), __version__, redact(json.dumps(summary, separators=(",", ":"), default=str)))
            for run_id, summary in summaries.items()
        ]
        statement = "INSERT OR REPLACE INTO run_summaries (run_id, tool_version, summary) VALUES (?, ?, ?)"
        if not self.read_only:
            with self._connect() as db, _transaction(db):  # one commit (one sync of the journal), not one per row
                db.executemany(statement, rows)
            return True
        if not os.access(self.path, os.W_OK) or not os.access(self.path.absolute().parent, os.W_OK | os.X_OK):
            return False
        try:
            with closing(sqlite3.connect(self.path, timeout=5, isolation_level=None)) as db:
                db.execute("PRAGMA busy_timeout = 5000")
                version = self._version(db)
                if version is None or version < STORE_VERSION - 1:
                    return False
                if version < STORE_VERSION:
                    self._migrate(db)
                with _transaction(db):
                    db.executemany(statement, rows)
        except (sqlite3.Error, NbscopeError):
            return False
        return True

    # --- gate verdicts -----------------------------------------------------------------------------------

    def record_verdict(self, run_id: int, *, baseline_id: int | None, passed: bool, reasons: list[str]) -> None:
        """Remember that ``nbscope gate`` passed or failed run ``run_id`` (against ``baseline_id``)."""
        from nbscope.schema.validate import utc_now

        with self._connect() as db:
            try:
                db.execute(
                    "INSERT INTO gate_verdicts (run_id, baseline_id, passed, judged_at, reasons) VALUES (?, ?, ?, ?, ?)",
                    (run_id, baseline_id, int(passed), utc_now(), redact(json.dumps(reasons))),
                )
            except sqlite3.OperationalError as exc:  # a store only readable (its folder or mount read-only)
                raise NbscopeError(f"{self.path} cannot be written ({exc})") from None

    def verdicts(self, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, Any]]:
        """The latest gate verdict of every judged run (of those of ``run_ids`` when given): run id ->
        {passed, baseline_id, judged_at}."""
        if not self.path.exists():
            return {}
        sql = "SELECT run_id, baseline_id, passed, judged_at FROM gate_verdicts"
        params: list[int] = []
        if run_ids is not None:
            params = [int(i) for i in run_ids]
            if len(params) > _MOST_PARAMETERS:
                params = []  # more than one statement takes: every verdict
            else:
                sql += f" WHERE run_id IN ({', '.join('?' * len(params))})" if params else " WHERE 0"
        with self._connect() as db:
            rows = db.execute(sql + " ORDER BY id", params).fetchall()
        return {
            int(run_id): {"passed": bool(passed), "baseline_id": baseline_id, "judged_at": judged_at}
            for run_id, baseline_id, passed, judged_at in rows
        }


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """The block as one write transaction (its lock taken at once), committed at its end, or rolled back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        # No transaction is open when a signal came just after the COMMIT (the run is stored): ROLLBACK would then
        # raise over the signal's KeyboardInterrupt.
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


_MOST_PARAMETERS = 30000  # SQLite takes at most 32,766 parameters in one statement


def _by_ids(db: sqlite3.Connection, sql: str, ids: Sequence[int], *first: Any) -> Iterator[tuple[Any, ...]]:
    """The rows of ``sql`` for ``ids``, in as many statements as SQLite's bound on parameters asks: its ``{}``
    is the placeholders of one part of them, which follow the parameters ``first``."""
    for start in range(0, len(ids), _MOST_PARAMETERS):
        part = ids[start : start + _MOST_PARAMETERS]
        yield from db.execute(sql.format(", ".join("?" * len(part))), [*first, *part]).fetchall()


# A run's row: the summary columns but its id (SQLite gives it), then the rest.
_ROW_COLUMNS = (
    *SUMMARY_COLUMNS[1:],
    "backend",
    "settings",
    "content_hash",
    "headline",
    "totals",
    *FIGURE_COLUMNS,
    "cache_state",
    *HASH_COLUMNS,
)
_CONTENT_HASH = _ROW_COLUMNS.index("content_hash")


def _row(record: RunRecord) -> tuple[Any, ...]:
    """The values of ``_ROW_COLUMNS`` for a run, then its document."""
    from nbscope.record import run as record_module

    text = record.to_json(indent=None)
    document = json.loads(text)
    backend, settings, totals = _summary_values(record)
    columns = (
        record.started_at,
        record.ended_at,
        record.kind,
        record.target,
        record.status,
        record.machine().summary,
        record.digest,
        record.label,
        backend,
        settings,
        record_module.content_hash(document),
        json.dumps(record.headline()),
        totals,
        *_document_summary(document),
    )
    # Every column passes the redaction its document passed (``to_json``): the settings column keeps an --env
    # URL's credentials otherwise, the target and label a token put in a name.
    return (*(redact(value) if isinstance(value, str) else value for value in columns), text)


def _backend(record: RunRecord) -> str | None:
    """The backend a run measured on, for listings: an audit's backends, else the JAX backend it used."""
    if record.kind == "audit":
        backends = record.run_settings().backends
        return ",".join(map(str, backends)) if backends else None
    from nbscope.record import run as record_module

    platform: str | None = record_module.backend_of(record)["platform"]
    return platform


# The largest id SQLite gives a run (a 64-bit INTEGER PRIMARY KEY).
MAX_RUN_ID = 2**63 - 1


def run_id_of(text: str) -> int | None:
    """The run id ``text`` is (ASCII digits), None when it is none; a one-line NbscopeError when it is larger than
    any run id."""
    if not (text.isascii() and text.isdigit()):
        return None
    if len(text.lstrip("0")) > 19 or int(text) > MAX_RUN_ID:
        raise NbscopeError(f"run id {shorten(text, 40)} is larger than any run id (at most {MAX_RUN_ID})")
    return int(text)


# The grammar of a run reference, the same in every command that takes a run.
RUN_REFERENCE = "a run id, latest, latest:NOTEBOOK, a label (LABEL or LABEL:NOTEBOOK) or a run JSON file"


def resolve_run(reference: str, store: Store, *, kinds: Sequence[str] | None = None) -> RunRecord:
    """The run ``reference`` names, in one grammar for every command:

    - ``12``: the run with that id in ``store``;
    - ``latest``: the newest stored run; ``latest:NOTEBOOK`` the newest of that notebook (a path or a
      stored name, old names included: :meth:`Store.names_of`);
    - ``run.json``: a run record file (``nbscope export``, ``--json``); the same run stored already keeps
      its id;
    - ``main-cpu``: the newest run recorded with ``--label main-cpu``; ``main-cpu:NOTEBOOK`` the newest
      of that notebook with that label.

    ``latest`` and labels consider only runs of ``kinds`` when given (the command's own kinds). A
    reference that names nothing is a one-line NbscopeError saying what was looked for.
    """
    from nbscope.record import run as record_module

    text = reference.strip()
    if not text:
        raise NbscopeError(f"an empty run reference; give {RUN_REFERENCE}")
    if (run_id := run_id_of(text)) is not None:
        return store.get(run_id)
    path = Path(text)
    if path.exists() and not path.is_dir():  # a FIFO or a device too: the bounded reader refuses it in one line
        record = record_module.load(path)
        try:  # the same run stored already keeps its id (gate verdicts, baselines)
            record.run_id = store.find(record)
        except NbscopeError:
            pass  # a store this nbscope cannot use does not stop reading a file; commands that need it say so
        return record
    if path.is_dir():
        raise NbscopeError(f"{text} is a directory; give {RUN_REFERENCE}")
    if path.suffix in (".json", ".jsonl") and not store.path.exists():
        raise NbscopeError(f"{text}: no such file")  # with a store, a label may end so (`--label other.json`)
    label, _, notebook = text.partition(":")
    if label == "latest":
        label = ""
    elif not record_module.LABEL_PATTERN.fullmatch(label):
        raise NbscopeError(f"{text!r} is not a run reference: no such file, and not {RUN_REFERENCE}")
    if ":" in text and not notebook:
        raise NbscopeError(f"{text!r}: give the notebook after ':' ({label or 'latest'}:lecture.md)")
    if not store.path.exists():
        raise store.missing()
    targets = store.names_of(notebook) if notebook else None
    latest = store.latest(target=targets, kind=list(kinds) if kinds else None, label=label or None)
    if latest is not None:
        return latest
    runs = f"{'/'.join(kinds)} run" if kinds else "run"
    of = f" of {notebook}" if notebook else ""
    if path.suffix in (".json", ".jsonl"):
        raise NbscopeError(f"{text}: no such file, and no {runs}{of} labelled {label!r} in {store.path}")
    if label:
        raise NbscopeError(
            f"no {runs}{of} labelled {label!r} in {store.path}, and no file {text!r} "
            "(label runs with --label when recording them)"
        )
    raise NbscopeError(f"no {runs}{of} in {store.path}")
