"""The SQLite run store: save, get, list, latest; concurrent writers; files it must not touch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbscope._errors import NbscopeError
from nbscope.record.run import RunRecord, dump
from nbscope.record.store import SQLITE_MAGIC, Store, default_path, resolve_run

FINGERPRINT_A = {
    "fingerprint_version": 1,
    "cpu": {"model": "CPU A", "logical_cores": 2},
    "digest": "aaaaaaaaaaaa",
}
FINGERPRINT_B = {
    "fingerprint_version": 1,
    "cpu": {"model": "CPU B", "logical_cores": 4},
    "gpu": {"devices": [{"name": "Tesla T4"}]},
    "digest": "bbbbbbbbbbbb",
}


def make_record(
    target: str = "a.md",
    *,
    kind: str = "profile",
    started_at: str,
    fingerprint: Any = None,
    wall: float = 1.0,
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
        "b-on-gpu": store.save(
            make_record("b.md", started_at="2025-01-02T10:00:00.000Z", fingerprint=FINGERPRINT_B)
        ),
        "bench": store.save(make_record("suite", kind="bench", started_at="2025-01-04T10:00:00.000Z")),
    }
    rows = store.list()
    assert [r["id"] for r in rows] == [ids["bench"], ids["new-a"], ids["b-on-gpu"], ids["old-a"]]
    first = rows[1]
    assert first["target"] == "a.md" and first["kind"] == "profile" and first["status"] == "ok"
    assert first["digest"] == "aaaaaaaaaaaa"
    assert first["machine"] == "CPU A ×2"
    assert first["headline"] == {"wall_s": 2.0, "cells": 3}
    assert store.list(kind="bench")[0]["id"] == ids["bench"]
    assert [r["id"] for r in store.list(target="a.md")] == [ids["new-a"], ids["old-a"]]
    gpu_rows = store.list(digest="bbbbbbbbbbbb")
    assert [r["id"] for r in gpu_rows] == [ids["b-on-gpu"]]
    assert gpu_rows[0]["machine"] == "CPU B ×4 + 1× Tesla T4"
    assert len(store.list(limit=2)) == 2
    assert store.list(target="nothing.md") == []
    assert [r.run_id for r in store.records(target="a.md")] == [ids["new-a"], ids["old-a"]]


def test_latest(tmp_db: Path) -> None:
    store = Store(tmp_db)
    assert store.latest(target="a.md") is None
    store.save(make_record("a.md", started_at="2025-01-01T10:00:00.000Z", wall=3.0))
    newest = store.save(make_record("a.md", started_at="2025-01-02T10:00:00.000Z", wall=2.0))
    other_machine = store.save(
        make_record("a.md", started_at="2025-01-03T10:00:00.000Z", fingerprint=FINGERPRINT_B)
    )
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
    with pytest.raises(NbscopeError, match="neither a run id"):
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
    rows = store.list()
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
            threading.Thread(target=open_and_count, args=(tmp_path / f"new{round_}.db", barrier))
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
