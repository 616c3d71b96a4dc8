"""The SQLite run store: save, get, list, latest; concurrent writers; files it must not touch."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.record.run import RunRecord, dump, series_settings
from nbscope.record.secrets import hidden
from nbscope.record.store import SQLITE_MAGIC, STORE_VERSION, Store, default_path, resolve_run

FINGERPRINT_A = {"fingerprint_version": 1, "cpu": {"model": "CPU A", "logical_cores": 2}, "digest": "aaaaaaaaaaaa"}
FINGERPRINT_B = {
    "fingerprint_version": 1,
    "cpu": {"model": "CPU B", "logical_cores": 4},
    "gpu": {"devices": [{"name": "Tesla T4"}]},
    "digest": "bbbbbbbbbbbb",
}


def make_record(
    target: str = "a.md", *, kind: str = "profile", started_at: str, fingerprint: Any = None, wall: float = 1.0
) -> RunRecord:
    return RunRecord(
        kind=kind,
        target=target,
        fingerprint=fingerprint or FINGERPRINT_A,
        measurements={"totals": {"wall_s": wall, "cells": 3}, "cells": []},
        command=["nbscope", kind, target],
        started_at=started_at,
    )


def test_save_and_get_round_trip(tmp_db: Path) -> None:
    store = Store(tmp_db)
    assert not tmp_db.exists()  # opening creates nothing until something is written or read
    record = make_record(started_at="2025-01-01T00:00:00.000Z").finish()
    run_id = store.save(record)
    assert run_id == record.run_id == 1
    assert tmp_db.read_bytes()[:16] == SQLITE_MAGIC
    again = Store(tmp_db).get(run_id)
    assert again.run_id == run_id
    assert again.to_dict() == record.to_dict()
    assert store.save(make_record(started_at="2025-01-01T00:00:01.000Z")) == 2
    assert store.count() == 2


def test_get_unknown_id_is_a_one_line_error(tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.save(make_record(started_at="2025-01-01T00:00:00.000Z"))
    with pytest.raises(NbscopeError, match=r"no run with id 999999 in .*nbscope\.db") as excinfo:
        store.get(999999)
    assert "\n" not in str(excinfo.value)


def test_list_filters_and_orders_newest_first(tmp_db: Path) -> None:
    store = Store(tmp_db)
    ids = {
        "old-a": store.save(make_record("a.md", started_at="2025-01-01T10:00:00.000Z", wall=3.0)),
        "new-a": store.save(make_record("a.md", started_at="2025-01-03T10:00:00.000Z", wall=2.0)),
        "b-on-gpu": store.save(make_record("b.md", started_at="2025-01-02T10:00:00.000Z", fingerprint=FINGERPRINT_B)),
        "bench": store.save(make_record("suite", kind="bench", started_at="2025-01-04T10:00:00.000Z")),
    }
    rows = store.runs()
    assert [r["id"] for r in rows] == [ids["bench"], ids["new-a"], ids["b-on-gpu"], ids["old-a"]]
    first = rows[1]
    assert first["target"] == "a.md" and first["kind"] == "profile" and first["status"] == "ok"
    assert first["digest"] == "aaaaaaaaaaaa"
    assert first["machine"] == "CPU A ×2"
    assert first["headline"] == {"wall_s": 2.0, "cells": 3}
    assert store.runs(kind="bench")[0]["id"] == ids["bench"]
    assert [r["id"] for r in store.runs(target="a.md")] == [ids["new-a"], ids["old-a"]]
    gpu_rows = store.runs(digest="bbbbbbbbbbbb")
    assert [r["id"] for r in gpu_rows] == [ids["b-on-gpu"]]
    assert gpu_rows[0]["machine"] == "CPU B ×4 + 1× Tesla T4"
    assert len(store.runs(limit=2)) == 2
    assert store.runs(target="nothing.md") == []
    assert [r.run_id for r in store.records(target="a.md")] == [ids["new-a"], ids["old-a"]]


def test_latest(tmp_db: Path) -> None:
    store = Store(tmp_db)
    assert store.latest(target="a.md") is None
    store.save(make_record("a.md", started_at="2025-01-01T10:00:00.000Z", wall=3.0))
    newest = store.save(make_record("a.md", started_at="2025-01-02T10:00:00.000Z", wall=2.0))
    other_machine = store.save(make_record("a.md", started_at="2025-01-03T10:00:00.000Z", fingerprint=FINGERPRINT_B))
    latest = store.latest(target="a.md")
    assert latest is not None and latest.run_id == other_machine
    on_a = store.latest(target="a.md", digest="aaaaaaaaaaaa")
    assert on_a is not None and on_a.run_id == newest and on_a.measurements["totals"]["wall_s"] == 2.0
    assert store.latest(target="a.md", kind="bench") is None


def test_default_path_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NBSCOPE_DB", raising=False)
    assert default_path() == Path(".nbscope") / "nbscope.db"
    monkeypatch.setenv("NBSCOPE_DB", str(tmp_path / "elsewhere.db"))
    assert Store().path == tmp_path / "elsewhere.db"


def test_a_file_that_is_not_sqlite_is_refused_and_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    content = b"my precious notes\nnot a database\n"
    notes.write_bytes(content)
    with pytest.raises(NbscopeError, match="not an SQLite database") as excinfo:
        Store(notes)
    assert "\n" not in str(excinfo.value)
    short = tmp_path / "short"
    short.write_bytes(b"SQLite")  # shorter than the magic
    with pytest.raises(NbscopeError):
        Store(short)
    assert notes.read_bytes() == content and short.read_bytes() == b"SQLite"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "short"]  # no -wal / -shm left


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NbscopeError, match="is a directory"):
        Store(tmp_path)


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "new.db"
    empty.touch()
    store = Store(empty)
    store.save(make_record(started_at="2025-01-01T00:00:00.000Z"))
    assert store.count() == 1


def test_a_corrupt_sqlite_file_is_a_one_line_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(SQLITE_MAGIC + b"\x00" * 84 + b"garbage" * 100)
    before = broken.read_bytes()
    with pytest.raises(NbscopeError) as excinfo:
        Store(broken).count()
    assert "\n" not in str(excinfo.value)
    assert broken.read_bytes() == before


def test_resolve_run_by_id_or_file(tmp_db: Path, tmp_path: Path) -> None:
    store = Store(tmp_db)
    record = make_record(started_at="2025-01-01T00:00:00.000Z")
    run_id = store.save(record)
    assert resolve_run(str(run_id), store).to_dict() == record.to_dict()
    path = dump(record, tmp_path / "exported.json")
    assert resolve_run(str(path), store).to_dict() == record.to_dict()
    with pytest.raises(NbscopeError, match="no-such-thing.json: no such file"):
        resolve_run("no-such-thing.json", store)


WRITER = r"""
import sys, time
from pathlib import Path
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

db, tag, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
store = Store(db)
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:  # start together
    time.sleep(0.001)
ids = []
for i in range(count):
    record = RunRecord(kind="profile", target=f"{tag}.md", fingerprint={"digest": tag},
                       measurements={"totals": {"wall_s": i}}, command=["writer", tag, str(i)])
    ids.append(store.save(record))
print(" ".join(map(str, ids)))
"""


def test_two_processes_writing_concurrently_lose_nothing(tmp_db: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_db), tag, "100", str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("first", "second")
    ]
    time.sleep(0.3)  # let both import nbscope and wait at the line
    go.touch()
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (_, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
    reported = [int(x) for out, _ in outputs for x in out.split()]
    assert len(reported) == 200 and len(set(reported)) == 200
    store = Store(tmp_db)
    assert store.count() == 200
    rows = store.runs()
    assert sorted(r["id"] for r in rows) == sorted(reported)
    for tag in ("first", "second"):
        walls = sorted(r["headline"]["wall_s"] for r in rows if r["target"] == f"{tag}.md")
        assert walls == list(range(100)), tag
    documents = [json.loads(json.dumps(store.get(i).to_dict())) for i in (min(reported), max(reported))]
    assert all(d["format"] == "nbscope-run" for d in documents)


def test_many_connections_creating_a_new_store_at_once(tmp_path: Path) -> None:
    # Turning a new file into WAL races: SQLite answers "database is locked" at once to all but one
    # connection instead of waiting. Each round is a new file opened by four threads together.
    errors: list[str] = []

    def open_and_count(path: Path, barrier: threading.Barrier) -> None:
        store = Store(path)
        barrier.wait()
        try:
            store.count()
        except Exception as exc:  # reported below, with the round
            errors.append(f"{path.name}: {exc}")

    for round_ in range(40):
        barrier = threading.Barrier(4)
        threads = [
            threading.Thread(target=open_and_count, args=(tmp_path / f"new{round_}.db", barrier)) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


# --- versions, migrations, duplicates and unreadable rows ---------------------------------------------------

V1_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL, ended_at TEXT, kind TEXT NOT NULL,
    target TEXT NOT NULL, status TEXT NOT NULL, machine TEXT NOT NULL, digest TEXT NOT NULL,
    headline TEXT NOT NULL, document TEXT NOT NULL
);
CREATE INDEX runs_target ON runs (target, digest, started_at);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def write_v1_store(path: Path, records: list[RunRecord], *, with_version: bool = True) -> None:
    """A store as nbscope wrote it before version 2 (no content hash), built with sqlite3 directly."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing_db(path) as db:
        db.executescript(V1_SCHEMA)
        if with_version:
            db.execute("INSERT INTO meta VALUES ('store_version', '1')")
        for record in records:
            db.execute(
                "INSERT INTO runs (started_at, ended_at, kind, target, status, machine, digest, headline, document)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.started_at,
                    record.ended_at,
                    record.kind,
                    record.target,
                    record.status,
                    "CPU A ×2",
                    record.digest,
                    json.dumps(record.headline()),
                    record.to_json(indent=None),
                ),
            )
        db.commit()


def store_version(path: Path) -> str:
    with closing_db(path) as db:
        return str(db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()[0])


def closing_db(path: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(path))


@pytest.mark.parametrize("with_version", [True, False], ids=["version-1", "before-versions"])
def test_an_older_store_is_migrated_and_keeps_every_run(tmp_db: Path, with_version: bool) -> None:
    first = make_record("a.md", started_at="2025-01-01T00:00:00.000Z", wall=1.0)
    second = make_record("a.md", started_at="2025-01-02T00:00:00.000Z", wall=2.0)
    write_v1_store(tmp_db, [first, second, first], with_version=with_version)  # imported twice back then
    store = Store(tmp_db)
    assert [r["id"] for r in store.runs()] == [2, 3, 1]  # nothing dropped, not even the old duplicate
    assert store.version() == STORE_VERSION and store_version(tmp_db) == str(STORE_VERSION)
    with closing_db(tmp_db) as db:
        hashes = dict(db.execute("SELECT id, content_hash FROM runs").fetchall())
    assert hashes[1] == hashes[3] == first.content_hash() and hashes[2] == second.content_hash()
    assert store.add(second) == (2, False)  # the migrated hashes make a re-import a no-op
    assert store.count() == 3


def test_a_newer_store_is_refused_in_one_line_and_left_alone(tmp_db: Path, run_cli: Any) -> None:
    Store(tmp_db).save(make_record(started_at="2025-01-01T00:00:00.000Z"))
    newer = STORE_VERSION + 1
    with closing_db(tmp_db) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'store_version'", (str(newer),))
        db.commit()
    before = tmp_db.read_bytes()
    for command in (("runs",), ("show", "1"), ("history", "a.md"), ("gate",)):
        done = run_cli(*command, "--db", tmp_db)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"nbscope store of version {newer}" in done.stderr and "upgrade nbscope" in done.stderr
    assert tmp_db.read_bytes() == before
    with pytest.raises(NbscopeError, match=f"version {newer}"):
        Store(tmp_db).save(make_record(started_at="2025-01-02T00:00:00.000Z"))
    assert store_version(tmp_db) == str(newer) and tmp_db.read_bytes() == before


def test_an_sqlite_file_of_another_program_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    with closing_db(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.commit()
    before = other.read_bytes()
    with pytest.raises(NbscopeError, match="not an nbscope store") as excinfo:
        Store(other).count()
    assert "\n" not in str(excinfo.value) and other.read_bytes() == before


def test_the_same_run_is_stored_once(tmp_db: Path, tmp_path: Path, run_cli: Any) -> None:
    store = Store(tmp_db)
    record = make_record(started_at="2025-01-01T00:00:00.000Z")
    assert store.add(record) == (1, True)
    copy = RunRecord.from_dict(json.loads(record.to_json()))
    assert store.add(copy) == (1, False) and copy.run_id == 1
    assert store.save(make_record(started_at="2025-01-01T00:00:00.001Z")) == 2  # another run: kept
    exported = tmp_path / "run1.json"
    assert run_cli("export", "1", "-o", exported, "--db", tmp_db).returncode == 0
    other_db = tmp_path / "other.db"
    done = run_cli("import", exported, "--db", other_db)
    assert done.returncode == 0 and done.stdout == f"{exported}: imported as run 1\n"
    for db in (other_db, tmp_db):  # again into the same store, and back into the store it came from
        done = run_cli("import", exported, "--db", db)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{exported}: already in {db} as run 1; not imported again\n"
    assert Store(other_db).count() == 1 and store.count() == 2
    assert resolve_run(str(exported), store).run_id == 1  # a file of a stored run is that run


def corrupt_store(db: Path) -> dict[str, int]:
    """Five runs of a.md (one a day), then run 2's document broken and run 4 made a newer schema's."""
    store = Store(db)
    ids = {
        f"day{day}": store.save(make_record(started_at=f"2025-01-0{day}T00:00:00.000Z", wall=1.0 + day / 100))
        for day in range(1, 6)
    }
    newer = json.loads(store.get(ids["day4"]).to_json())
    newer["schema_version"] = 99
    with closing_db(db) as connection:
        # Without the summaries a document gives, as the migration leaves a row whose document it cannot read.
        for run_id, document in ((ids["day2"], '{"format": "nbscope-run", "kind": '), (ids["day4"], json.dumps(newer))):
            connection.execute("UPDATE documents SET document = ? WHERE run_id = ?", (document, run_id))
            connection.execute("UPDATE runs SET settings = NULL, totals = NULL WHERE id = ?", (run_id,))
        connection.commit()
    return ids


def test_unreadable_rows_are_skipped_and_reported_once(tmp_db: Path) -> None:
    ids = corrupt_store(tmp_db)
    reported: list[str] = []
    store = Store(tmp_db, on_skip=reported.append)
    readable = [ids["day5"], ids["day3"], ids["day1"]]
    assert [r["id"] for r in store.runs()] == readable
    assert [r.run_id for r in store.records(target="a.md")] == readable
    assert [r["id"] for r in store.runs(limit=2)] == readable[:2]
    latest = store.latest(target="a.md")
    assert latest is not None and latest.run_id == ids["day5"]
    assert len(reported) == 2 and all("\n" not in line for line in reported)
    assert f"run {ids['day2']} in {tmp_db} is not valid JSON" in reported[1]
    assert "schema version 99" in reported[0] and reported[0].endswith(f"run {ids['day4']} skipped")
    with pytest.raises(NbscopeError, match="not valid JSON"):  # asked for by id, it is an error
        store.get(ids["day2"])


def test_runs_history_gate_and_report_go_past_an_unreadable_row(tmp_db: Path, tmp_path: Path, run_cli: Any) -> None:
    ids = corrupt_store(tmp_db)

    def warnings(stderr: str) -> list[str]:
        lines = stderr.splitlines()
        assert all(line.startswith("nbscope: warning: ") for line in lines), stderr
        return lines

    done = run_cli("runs", "--db", tmp_db, "--json")
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in json.loads(done.stdout)] == [ids["day5"], ids["day3"], ids["day1"]]
    assert len(warnings(done.stderr)) == 2
    done = run_cli("history", "a.md", "--db", tmp_db, "--json")
    assert done.returncode == 0, done.stderr
    (series,) = json.loads(done.stdout)["series"]
    assert [p["run_id"] for p in series["points"]] == [ids["day1"], ids["day3"], ids["day5"]]
    assert len(warnings(done.stderr)) == 2
    done = run_cli("gate", "--db", tmp_db, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["candidate"]["run_id"] == ids["day5"] and result["baseline"]["run_id"] == ids["day3"]
    assert len(warnings(done.stderr)) == 2
    done = run_cli("report", ids["day5"], ids["day1"], "--db", tmp_db, "-o", tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.html").stat().st_size > 0 and len(warnings(done.stderr)) == 2
    done = run_cli("show", ids["day2"], "--db", tmp_db)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not valid JSON" in done.stderr


# --- the store at any size: summary columns, and documents read only for the runs given ----------------------

FILES = Path(__file__).parent / "files"
STORE_V3 = FILES / "store_v3.db"  # made by nbscope at store version 3 from three of tests/files/records
RECORDS = FILES / "records"


def copy_of(source: Path, folder: Path) -> Path:
    target = folder / source.name
    target.write_bytes(source.read_bytes())
    return target


def test_a_version_3_store_file_opens_migrates_and_reads(tmp_path: Path) -> None:
    path = copy_of(STORE_V3, tmp_path)
    assert store_version(path) == "3"
    store = Store(path)
    assert [r["id"] for r in store.runs()] == [3, 2, 1]
    assert store.version() == STORE_VERSION and store_version(path) == str(STORE_VERSION)
    expected = {1: "cpu_unrolled_loop", 2: "cpu_latency_loop", 3: "cpu_x64"}
    for run_id, name in expected.items():
        stored, original = store.get(run_id).to_dict(), json.loads((RECORDS / f"{name}.json").read_text())
        original.pop("label", None)
        stored.pop("label", None)
        assert stored == original, name
    rows = {row["id"]: row for row in store.summaries()}
    for run_id in expected:
        record = store.get(run_id)
        assert rows[run_id]["totals"] == record.measurements["totals"] and rows[run_id]["backend"] == "cpu"
        assert rows[run_id]["settings"] == series_settings(record.settings)  # what history groups by
    assert [r["label"] for r in store.runs()] == ["main-cpu", "main-cpu", None]
    assert resolve_run("main-cpu", store).run_id == 3
    assert resolve_run("main-cpu:tests/files/diag_latency_loop.ipynb", store).run_id == 2
    assert resolve_run("latest:tests/files/diag_unrolled_loop.ipynb", store).run_id == 1
    assert store.verdicts()[3]["passed"] is True  # gate verdicts are kept
    again = RunRecord.from_dict(json.loads((RECORDS / "cpu_unrolled_loop.json").read_text()))
    assert store.add(again) == (1, False)  # the content hashes came through: a re-import is a no-op
    assert store.save(make_record(started_at="2025-01-01T00:00:00.000Z")) == 4
    with closing_db(path) as db:
        columns = [name for (_, name, *_) in db.execute("PRAGMA table_info(runs)")]
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        documents = db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
    assert "document" not in columns and documents == 4  # the summaries are read without touching a document
    assert {"runs_started", "runs_target", "runs_lineage", "runs_kind", "runs_label", "runs_content"} <= indexes


def test_an_older_store_gets_the_figures_and_hashes_a_new_store_writes(tmp_path: Path) -> None:
    """Version 7's columns, backfilled from the documents of a version-3 store, are those of the same runs
    stored anew; and a run whose programs hash the same has the same programs hash."""
    migrated = Store(copy_of(STORE_V3, tmp_path))
    fresh = Store(tmp_path / "fresh.db")
    names = {1: "cpu_unrolled_loop", 2: "cpu_latency_loop", 3: "cpu_x64"}
    for name in names.values():
        fresh.add(RunRecord.from_dict(json.loads((RECORDS / f"{name}.json").read_text())))
    columns = ("target", "wall_s", "compile_s", "run_s", "cache_state", "cells_hash", "packages_hash", "programs_hash")
    old, new = migrated.summaries(columns), fresh.summaries(columns)
    assert [{**r, "id": 0} for r in old] == [{**r, "id": 0} for r in new]
    for row in old:
        totals = migrated.get(row["id"]).measurements["totals"]
        assert (row["wall_s"], row["compile_s"], row["cache_state"]) == (
            totals["wall_s"],
            totals["compile_s"],
            totals["cache_state"],
        )
    assert len({r["cells_hash"] for r in old}) == 3 and all(r["programs_hash"] is None for r in old)


def test_an_unreadable_row_of_an_older_store_is_migrated_and_skipped(tmp_path: Path, run_cli: Any) -> None:
    path = copy_of(STORE_V3, tmp_path)
    with closing_db(path) as db:
        db.execute("UPDATE runs SET document = 'not json' WHERE id = 2")  # a version-3 store: documents in runs
        db.commit()
    reported: list[str] = []
    store = Store(path, on_skip=reported.append)
    assert [r["id"] for r in store.runs()] == [3, 1] and len(reported) == 1 and "run 2 skipped" in reported[0]
    (row,) = [r for r in store.summaries() if r["id"] == 2]
    assert row["settings"] is None and row["totals"] is None and row["target"] == "tests/files/diag_latency_loop.ipynb"
    done = run_cli("history", "tests/files/diag_latency_loop.ipynb", "--db", path)
    assert done.returncode == 2 and "no figure" in done.stderr and "run 2 skipped" in done.stderr, done.stderr


def many_runs(db: Path, count: int) -> dict[str, list[int]]:
    """``count`` runs of a.md and of b.md, alternating, one a minute, the newest of b.md labelled ``nightly``."""
    store = Store(db)
    ids: dict[str, list[int]] = {"a.md": [], "b.md": []}
    for n in range(2 * count):
        target = "a.md" if n % 2 == 0 else "b.md"
        record = make_record(target, started_at=f"2025-01-01T{n // 60:02d}:{n % 60:02d}:00.000Z", wall=1.0 + n / 1000)
        record.label = "nightly" if n == 2 * count - 1 else None
        ids[target].append(store.save(record))
    return ids


def break_documents(db: Path, keep: set[int]) -> None:
    """Every document but those of ``keep`` made unreadable, the summary columns left as they are: a
    command that reads a document it does not return reports it."""
    with closing_db(db) as connection:
        connection.execute(f"UPDATE documents SET document = '{{' WHERE run_id NOT IN ({', '.join(map(str, keep))})")
        connection.commit()


def test_listing_latest_and_references_read_only_the_documents_they_return(tmp_db: Path) -> None:
    ids = many_runs(tmp_db, 30)
    newest = sorted(ids["a.md"] + ids["b.md"])[-5:]
    break_documents(tmp_db, set(newest))
    reported: list[str] = []
    store = Store(tmp_db, on_skip=reported.append)
    assert [r["id"] for r in store.runs(limit=5)] == newest[::-1]
    latest = store.latest()
    assert latest is not None and latest.run_id == newest[-1]
    assert resolve_run("latest", store).run_id == newest[-1]
    assert resolve_run("latest:a.md", store).run_id == ids["a.md"][-1]
    assert resolve_run("nightly", store).run_id == ids["b.md"][-1]
    assert resolve_run("nightly:b.md", store).run_id == ids["b.md"][-1]
    assert resolve_run(str(ids["a.md"][-2]), store).run_id == ids["a.md"][-2]
    assert [r["id"] for r in store.runs(target="b.md", limit=2)] == ids["b.md"][::-1][:2]
    assert reported == []  # not one of the 55 broken documents was read
    assert len(store.summaries()) == 60 and store.targets() == ["a.md", "b.md"]
    # Asked for a sixth, the listing reads on, past every broken document (each reported once).
    assert [r["id"] for r in store.runs(limit=6)] == newest[::-1] and len(reported) == 55


def test_history_of_a_total_and_the_gate_baseline_read_only_the_documents_they_use(tmp_db: Path) -> None:
    from nbscope.analyse.history import history
    from nbscope.api.gate import history_runs, latest_baseline

    ids = many_runs(tmp_db, 30)
    candidate, baseline, *earlier = ids["a.md"][::-1]
    break_documents(tmp_db, {candidate, baseline, *earlier[:3]})
    reported: list[str] = []
    store = Store(tmp_db, on_skip=reported.append)
    (series,) = history(store, "a.md").series  # totals come from the summary columns
    assert [p.run_id for p in series.points] == ids["a.md"] and series.points[-1].value == pytest.approx(1.058)
    cand = store.get(candidate)
    assert latest_baseline(store, cand).run_id == baseline
    assert [r.run_id for r in history_runs(store, cand, 4)] == [baseline, *earlier[:3]]
    assert reported == []
    with pytest.raises(NbscopeError, match="have no cell"):  # a cell's figure is read from each document: all broken
        history(store, "b.md", cell="#1")
    assert len(reported) == 30


def test_a_version_2_store_gets_its_labels_from_the_documents(tmp_path: Path) -> None:
    path = copy_of(STORE_V3, tmp_path)
    with closing_db(path) as db:  # version 3 less its label column is version 2
        db.execute("DROP INDEX runs_label")
        db.execute("ALTER TABLE runs DROP COLUMN label")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'store_version'")
        db.commit()
    store = Store(path)
    assert [r["label"] for r in store.runs()] == ["main-cpu", "main-cpu", None] and store.version() == STORE_VERSION
    assert resolve_run("main-cpu:tests/files/diag_latency_loop.ipynb", store).run_id == 2


def test_many_runs_are_added_in_one_transaction_each_once(tmp_db: Path) -> None:
    store = Store(tmp_db)
    first, second = (make_record(started_at=f"2025-01-0{day}T00:00:00.000Z") for day in (1, 2))
    copy = RunRecord.from_dict(json.loads(first.to_json()))
    assert store.add_many([first, second, copy]) == [(1, True), (2, True), (1, False)]
    assert copy.run_id == 1 and store.count() == 2 and store.add_many([]) == []
    assert store.get(2).to_dict() == second.to_dict()


def test_the_newest_run_of_each_notebook_reads_only_those(tmp_db: Path) -> None:
    ids = many_runs(tmp_db, 30)
    newest_a, before_a, newest_b = ids["a.md"][-1], ids["a.md"][-2], ids["b.md"][-1]
    break_documents(tmp_db, {before_a, newest_b})  # a.md's newest is broken: the one before it stands in
    reported: list[str] = []
    store = Store(tmp_db, on_skip=reported.append)
    assert [r.run_id for r in store.newest_per_target()] == [newest_b, before_a]
    assert len(reported) == 1 and f"run {newest_a} skipped" in reported[0]
    assert [r.run_id for r in store.newest_per_target(label="nightly")] == [newest_b]
    assert store.newest_per_target(label="nightly", target="a.md") == []


def test_a_read_only_command_reads_an_older_store_without_writing_to_it(tmp_path: Path, run_cli: Any) -> None:
    """An older store is migrated in memory for a command that only reads: the file stays byte for byte."""
    old = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "files" / "store_v3.db", old)
    before = old.read_bytes()
    done = run_cli("runs", "--db", old, "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 3
    assert run_cli("show", "1", "--db", old).returncode == 0
    assert old.read_bytes() == before and not Path(f"{old}-wal").exists()
    assert Store(old).latest() is not None  # a command that writes migrates it for good
    assert old.read_bytes() != before


STORE_V4 = FILES / "store_v4.db"  # made by nbscope at store version 4; run 2 as stored before --env hashing
OLD_TOKEN = "hf_FAKE_token_for_tests_0123456789"


def test_a_version_4_store_loses_the_env_values_an_older_nbscope_kept(tmp_path: Path) -> None:
    path = copy_of(STORE_V4, tmp_path)
    assert store_version(path) == "4" and OLD_TOKEN.encode() in path.read_bytes()
    with closing_db(path) as db:
        before = {run_id: json.loads(doc) for run_id, doc in db.execute("SELECT run_id, document FROM documents")}
    store = Store(path)
    assert [r["id"] for r in store.runs()] == [3, 2, 1] and store_version(path) == str(STORE_VERSION)
    old = store.get(2)
    key = store.env_key()  # made by the migration to version 6, used by the one to 5 before it
    assert old.settings["env"] == {"HF_TOKEN": hidden(OLD_TOKEN, key), "JAX_ENABLE_X64": "0"}
    assert f"HF_TOKEN={hidden(OLD_TOKEN, key)}" in old.command and "--env=JAX_ENABLE_X64=0" in old.command
    assert store.get(1).to_dict() == before[1]  # a run without such values is as it was
    assert store.get(3).settings["env"] == {"MY_SECRET": "kept-on-purpose"}  # recorded with --env-store-values
    with closing_db(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    leftovers = [p for p in tmp_path.iterdir() if OLD_TOKEN.encode() in p.read_bytes()]
    assert leftovers == []  # not in the file's free pages, nor its write-ahead log
    again = RunRecord.from_dict(before[2])  # the old export imported again: hidden the same way, stored once
    assert store.add(again) == (2, False) and OLD_TOKEN not in json.dumps(again.to_dict())
    rows = {row["id"]: row for row in store.summaries()}
    assert rows[2]["settings"] == series_settings(old.settings)


def test_a_run_added_with_an_env_value_that_may_be_a_secret_keeps_only_its_hash(tmp_db: Path) -> None:
    record = make_record(started_at="2025-02-01T00:00:00.000Z")
    record.settings = {"env": {"GITHUB_TOKEN": "ghp_notreal", "OMP_NUM_THREADS": "2"}}
    record.command = ["nbscope", "profile", "x.ipynb", "--env", "GITHUB_TOKEN=ghp_notreal"]
    Store(tmp_db).add(record)
    stored = Store(tmp_db).get(record.run_id or 0)
    key = Store(tmp_db).env_key()
    assert stored.settings["env"] == {"GITHUB_TOKEN": hidden("ghp_notreal", key), "OMP_NUM_THREADS": "2"}
    assert "ghp_notreal" not in json.dumps(stored.to_dict())
    assert hidden(hidden("ghp_notreal", key)) == hidden("ghp_notreal", key)  # hiding twice changes nothing
