"""``nbscope publish``: the static site over a store of real records (the CPU records under tests/files/records/,
stored again as a lecture series' builds: renamed, moved in time, one lecture's code edited from build 8 on,
where its wall steps up), its incremental rebuild, and its refusals. The Chromium tests are in
test_publish_browser.py."""

from __future__ import annotations

import copy
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nbscope.api._saving import save_run
from nbscope.api.publish import MANIFEST, lecture_page, publish
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.render import site as site_pages

RECORDS = Path(__file__).resolve().parent / "files" / "records"
HOSTILE = "lectures/<img src=x onerror=alert(1)>|`*x*`.md"
STEADY = "lectures/steady.md"
STEPS = "lectures/steps.md"
BUILDS = 12
START = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)


def stored_run(
    name: str, target: str, build: int, factor: float, *, edited: bool = False, runner: str = "cpu"
) -> RunRecord:
    document = json.loads((RECORDS / name).read_text())
    document["target"] = target
    document["measurements"]["notebook"]["path"] = target
    when = START + timedelta(days=build)
    document["started_at"] = when.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    factor *= 1 + random.Random(build).uniform(-0.03, 0.03)  # noise, not a level
    for figures in (document["measurements"]["totals"], *document["measurements"]["cells"]):
        for key in ("wall_s", "compile_s", "run_s", "code_s"):
            if isinstance(figures.get(key), (int, float)):
                figures[key] *= factor
    if edited:
        cell = document["measurements"]["cells"][-1]
        cell["source"] = (cell.get("source") or "") + "\n# edited"
        cell["source_hash"] = "e" * 16
    if runner == "gpu":
        document["settings"] = {**document.get("settings", {}), "jax_platform": "cuda"}
    return RunRecord.from_dict(copy.deepcopy(document))


def data_file(target: str) -> str:
    """The file beside a lecture page that keeps its rows whole for the next publish."""
    return lecture_page(target).removesuffix(".html") + ".json"


def make_store(path: Path) -> Store:
    store = Store(path)
    runs = []
    for build in range(BUILDS):
        runs.append(stored_run("cpu_x64.json", STEADY, build, 1.0))
        runs.append(stored_run("cpu_x64.json", STEADY, build, 0.5, runner="gpu"))
        runs.append(stored_run("cpu_latency_loop.json", STEPS, build, 2.0 if build >= 8 else 1.0, edited=build >= 8))
        runs.append(stored_run("cpu_unrolled_loop.json", HOSTILE, build, 1.0))
    store.add_many(runs)
    return store


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Any]:
    store = make_store(tmp_path / "store" / "nbscope.db")
    result = publish(store.path, tmp_path / "site", site=site_pages)
    return {"store": store, "folder": tmp_path / "site", "result": result}


def test_publish_writes_the_book_the_lectures_and_the_status_files(site: dict[str, Any]) -> None:
    folder, result = site["folder"], site["result"]
    assert result.rows == 4 and result.runs == 4 * BUILDS and result.rows_rebuilt == 4
    assert sorted(result.pages_written) == sorted(
        [
            "index.html",
            "status.json",
            "status.md",
            *(lecture_page(t) for t in (STEADY, STEPS, HOSTILE)),
            *(data_file(t) for t in (STEADY, STEPS, HOSTILE)),
        ]
    )
    status = json.loads((folder / "status.json").read_text())["notebooks"]
    # Put together from each row's kept entry, as json.dumps writes the whole.
    assert (folder / "status.json").read_text() == json.dumps({"notebooks": status}, indent=1) + "\n"
    assert {(s["file"], s["runner"]) for s in status} == {
        (STEADY, "cpu"),
        (STEADY, "gpu"),
        (STEPS, "cpu"),
        (HOSTILE, "cpu"),
    }
    assert all(s["status"] == "ok" and s["cache"] == "off" and s["run_time_s"] > 0 for s in status)
    manifest = json.loads((folder / MANIFEST).read_text())
    steps = manifest["rows"][f"cpu\x1f{STEPS}"]
    # The wall doubled at build 8, where the code was edited: a confirmed regression, attributed to the edit.
    [regression] = steps["regressions"]
    assert regression["step_index"] == 8 and 1.8 < regression["ratio"] < 2.2
    assert regression["attribution"]["changes"][0]["kind"] == "code"
    assert manifest["rows"][f"cpu\x1f{STEADY}"]["regressions"] == []
    page = (folder / lecture_page(STEPS)).read_text()
    assert "code: 1 cell edited (cell 6" in page and "<td>regression</td>" in page
    book = (folder / "index.html").read_text()
    assert "<img" not in book and "&lt;img src=x onerror=alert(1)&gt;" in book
    assert "http://" not in book and "https://" not in book  # nothing loaded from anywhere
    markdown = (folder / "status.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\`\\*x\\*\\`.md" in markdown
    assert all(line.count(" | ") == 6 for line in markdown.splitlines()[2:])


def test_a_speed_up_is_a_change_point_not_a_regression(tmp_path: Path) -> None:
    # The wall halves at build 8: the lecture page shows the change point, the book counts no regression.
    store = Store(tmp_path / "nbscope.db")
    store.add_many(
        [
            stored_run("cpu_latency_loop.json", STEPS, build, 0.5 if build >= 8 else 1.0, edited=build >= 8)
            for build in range(BUILDS)
        ]
    )
    publish(store.path, tmp_path / "site", site=site_pages)
    page = (tmp_path / "site" / lecture_page(STEPS)).read_text()
    assert "<td>speed-up</td>" in page and "<td>regression</td>" not in page and "confirmed" not in page
    manifest = json.loads((tmp_path / "site" / MANIFEST).read_text())
    assert manifest["rows"][f"cpu\x1f{STEPS}"]["regressions"] == []


def test_publish_again_rewrites_only_what_changed(site: dict[str, Any]) -> None:
    store, folder = site["store"], site["folder"]
    lecture = folder / lecture_page(STEADY)
    before = lecture.stat().st_mtime_ns
    again = publish(store.path, folder, site=site_pages)
    assert again.rows_rebuilt == 0 and again.pages_written == [] and again.pages_kept == 9
    store.add(stored_run("cpu_latency_loop.json", STEPS, BUILDS, 2.0, edited=True))
    one = publish(store.path, folder, site=site_pages)
    assert one.rows_rebuilt == 1
    assert sorted(one.pages_written) == sorted(
        ["index.html", "status.json", "status.md", lecture_page(STEPS), data_file(STEPS)]
    )
    assert lecture.stat().st_mtime_ns == before
    # A new GPU build of a lecture makes only its GPU row again; its page still shows the CPU runner in full.
    store.add(stored_run("cpu_x64.json", STEADY, BUILDS, 0.5, runner="gpu"))
    gpu = publish(store.path, folder, site=site_pages)
    assert gpu.rows_rebuilt == 1 and lecture_page(STEADY) in gpu.pages_written
    assert [row["runs"] for row in json.loads((folder / data_file(STEADY)).read_text())["rows"]] == [BUILDS, BUILDS + 1]
    assert lecture.read_text().count("runner <span") == 2
    newest = [s for s in json.loads((folder / "status.json").read_text())["notebooks"] if s["file"] == STEPS]
    assert newest[0]["last_run"].startswith((START + timedelta(days=BUILDS)).strftime("%Y-%m-%d"))
    full = publish(store.path, folder, site=site_pages, full=True)
    assert full.rows_rebuilt == 4 and full.pages_written == []  # the same text: nothing rewritten
    whole = json.loads((folder / data_file(STEADY)).read_text())["rows"]
    assert [len(row["history"]["wall_s"]) for row in whole] == [BUILDS, BUILDS + 1]
    # A folder the previous nbscope published (manifest version 2, no kept parts) is taken over: every row again.
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**{k: v for k, v in manifest.items() if k != "tool"}, "version": 2}))
    taken = publish(store.path, folder, site=site_pages)
    assert taken.rows_rebuilt == 4 and taken.pages_written == []


def test_a_row_not_as_publish_wrote_it_is_made_again(site: dict[str, Any], tmp_path: Path) -> None:
    """The manifest's rows and a lecture page's data file are taken only as this version writes them: a row of the
    data file that lacks a member is made again from the store, and a manifest with such a row keeps none (every
    row again); the pages are those a new site of the store has."""
    store, folder = site["store"], site["folder"]
    store.add(stored_run("cpu_x64.json", STEADY, BUILDS, 0.5, runner="gpu"))
    kept = json.loads((folder / data_file(STEADY)).read_text())
    del kept["rows"][0]["median_wall_s"]  # the CPU row, which has no new run
    (folder / data_file(STEADY)).write_text(json.dumps(kept))
    both = publish(store.path, folder, site=site_pages)
    assert both.rows_rebuilt == 2 and lecture_page(STEADY) in both.pages_written
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["rows"][f"cpu\x1f{STEPS}"]["parts"]
    (folder / MANIFEST).write_text(json.dumps(manifest, separators=(",", ":")))
    every = publish(store.path, folder, site=site_pages)
    assert every.rows_rebuilt == 4 and every.pages_written == []
    fresh = publish(store.path, tmp_path / "fresh", site=site_pages)
    assert {name: (folder / name).read_bytes() for name in [*fresh.pages_written, MANIFEST]} == {
        name: (tmp_path / "fresh" / name).read_bytes() for name in [*fresh.pages_written, MANIFEST]
    }


def test_a_cpu_run_with_program_data_shows_the_gpu_forecast_verdict(tmp_path: Path) -> None:
    """The verdict is the forecast's own (the one the diagnosis made for its GPU rules, not a second one)."""
    from nbscope.analyse.forecast import forecast

    store = Store(tmp_path / "nbscope.db")
    runs = [stored_run("cpu_forecast_f64_small.json", STEPS, build, 1.0) for build in range(2)]
    store.add_many(runs)
    publish(store.path, tmp_path / "site", site=site_pages)
    [row] = json.loads((tmp_path / "site" / MANIFEST).read_text())["rows"].values()
    result = forecast(runs[-1], ["t4"])
    assert row["forecast"]["text"] == f"NVIDIA T4: {result.notebook['t4'].verdict}"
    assert f"NVIDIA T4: {result.notebook['t4'].verdict}" in (tmp_path / "site" / "index.html").read_text()


def test_publish_refuses_what_it_did_not_make(tmp_path: Path, run_cli: Any) -> None:
    make_store(tmp_path / "store" / "nbscope.db")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    done = run_cli("publish", tmp_path / "store" / "nbscope.db", "-o", foreign)
    assert done.returncode == 2 and "not made by `nbscope publish`" in done.stderr
    assert "Traceback" not in done.stderr and (foreign / "notes.txt").read_text() == "keep me"
    missing = run_cli("publish", tmp_path / "nowhere", "-o", tmp_path / "site")
    assert missing.returncode == 2 and "no run store at" in missing.stderr and "Traceback" not in missing.stderr
    book = run_cli("publish", tmp_path / "store", "-o", tmp_path / "site")  # a folder without .nbscope/nbscope.db
    assert book.returncode == 2 and "no run store at" in book.stderr and not (tmp_path / "site").exists()
    project = tmp_path / "book"
    (project / ".git").mkdir(parents=True)  # the project root, where `nbscope profile` stores its runs
    (project / "lectures").mkdir()
    make_store(project / ".nbscope" / "nbscope.db")
    from_book = run_cli("publish", project / "lectures", "-o", tmp_path / "book-site")
    assert from_book.returncode == 0 and (tmp_path / "book-site" / "status.md").is_file(), from_book.stderr
    done = run_cli("publish", tmp_path / "store" / "nbscope.db", "-o", tmp_path / "site", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 4


def test_the_command_runs_without_typer_and_says_what_typer_would(tmp_path: Path) -> None:
    """``publish STORE -o SITE`` is read without typer, click and rich (most of the command's start-up); a command
    line typer reads (``-oSITE``) gives the same output, and the same one-line error."""
    import os
    import subprocess
    import sys

    store = make_store(tmp_path / "store" / "nbscope.db").path
    probe = (
        "import sys\nfrom nbscope.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
        "    print('modules', sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich'}),"
        " file=sys.stderr)"
    )
    env = {key: value for key, value in os.environ.items() if key != "NBSCOPE_DB"}
    done = {}
    for name, args in (("fast", ["-o", "site"]), ("typer", ["-osite"])):
        (tmp_path / name).mkdir()
        for source in (store, tmp_path / "nowhere"):
            done[name, source] = subprocess.run(
                [sys.executable, "-c", probe, "publish", str(source), *args],
                cwd=tmp_path / name,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
    for source in (store, tmp_path / "nowhere"):
        fast, typer = done["fast", source], done["typer", source]
        assert fast.stderr.endswith("modules []\n") and typer.stderr.endswith("modules ['click', 'rich', 'typer']\n")
        assert (fast.returncode, fast.stdout, fast.stderr.splitlines()[:-1]) == (
            typer.returncode,
            typer.stdout,
            typer.stderr.splitlines()[:-1],
        )
    assert done["fast", store].stdout.startswith("4 lecture × runner rows from 48 runs")
    assert done["fast", tmp_path / "nowhere"].stderr.startswith("nbscope: error: no run store at")


def test_each_run_is_summarised_once_and_the_summaries_publish_the_same_site(
    site: dict[str, Any], tmp_path: Path
) -> None:
    """A publish keeps what it made of each run it read (status, cells, findings, what changed) in the store; the
    next publish reads those summaries, not the runs: the same pages; ``full`` makes them again. A version-7 store (before summaries) is
    published read-only and then given the table (one empty table: no run is written again)."""
    import sqlite3

    store, folder = site["store"], site["folder"]
    newest = json.loads((folder / MANIFEST).read_text())["rows"][f"cpu\x1f{STEPS}"]["newest_id"]
    kept = store.run_summaries([newest])[newest]
    assert kept["findings"] and kept["attribution"]["before_id"] == newest - 4 and kept["cells"]
    again = publish(store.path, tmp_path / "again", site=site_pages)
    assert again.rows_rebuilt == 4
    for page in [*again.pages_written, MANIFEST]:
        assert (tmp_path / "again" / page).read_bytes() == (folder / page).read_bytes(), page
    # What the page shows of a run is its summary's (a summary the store keeps is not made again).
    with sqlite3.connect(store.path) as db:
        db.execute(
            "UPDATE run_summaries SET summary = replace(summary, ?, ?) WHERE run_id = ?",
            (kept["findings"][0]["title"], "a kept title", newest),
        )
    publish(store.path, tmp_path / "kept", site=site_pages)
    assert "a kept title" in (tmp_path / "kept" / lecture_page(STEPS)).read_text()
    publish(store.path, tmp_path / "kept", site=site_pages, full=True)  # every summary made again from the runs
    assert (tmp_path / "kept" / lecture_page(STEPS)).read_bytes() == (folder / lecture_page(STEPS)).read_bytes()
    assert store.run_summaries([newest])[newest]["findings"] == kept["findings"]
    old = make_store(tmp_path / "old" / "nbscope.db").path
    with sqlite3.connect(old) as db:
        db.execute("DROP TABLE run_summaries")
        db.execute("UPDATE meta SET value = '7' WHERE key = 'store_version'")
    publish(old, tmp_path / "old-site", site=site_pages)
    assert (tmp_path / "old-site" / lecture_page(STEPS)).read_bytes() == (folder / lecture_page(STEPS)).read_bytes()
    with sqlite3.connect(old) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()[0] == "8"
        assert db.execute("SELECT COUNT(*) FROM run_summaries").fetchone()[0] > 0


def test_a_run_summarised_when_saved_is_only_read_by_publish(site: dict[str, Any]) -> None:
    """``save_run``, which every command that stores a run calls, keeps its whole summary once it is saved:
    what changed since the run before it in its row, and its row's change points. The next publish reads it and
    makes nothing (a kept title that was changed shows); ``full`` makes the same summary again from the run."""
    import sqlite3

    store, folder = site["store"], site["folder"]
    before = json.loads((folder / MANIFEST).read_text())["rows"][f"cpu\x1f{STEPS}"]["newest_id"]
    record = stored_run("cpu_latency_loop.json", STEPS, BUILDS, 2.0, edited=True)
    save_run(store, record)
    assert record.run_id is not None
    kept = store.run_summaries([record.run_id])[record.run_id]
    assert kept["attribution"]["before_id"] == before and kept["status"] == "ok" and kept["findings"]
    assert [change["index"] for change in kept["changes"]["found"]] == [8]  # the row's step, with the new run
    page = folder / lecture_page(STEPS)
    one = publish(store.path, folder, site=site_pages)
    assert one.rows_rebuilt == 1 and lecture_page(STEPS) in one.pages_written
    made_at_save = page.read_bytes()
    assert publish(store.path, folder, site=site_pages, full=True).pages_written == []  # made again: the same
    assert store.run_summaries([record.run_id])[record.run_id] == kept
    with sqlite3.connect(store.path) as db:
        db.execute(
            "UPDATE run_summaries SET summary = replace(summary, ?, ?) WHERE run_id = ?",
            (kept["findings"][0]["title"], "a kept title", record.run_id),
        )
    publish(store.path, folder.parent / "kept", site=site_pages)
    assert "a kept title" in (folder.parent / "kept" / lecture_page(STEPS)).read_text()
    assert page.read_bytes() == made_at_save


def test_a_summary_that_cannot_be_kept_is_said_and_costs_the_run_nothing(
    site: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """``save_run`` swallows nothing silently: a summary the store cannot keep is one line, in the job's notes (the
    outcome shows them) or else a warning on the nbscope logger; the run itself is saved either way."""
    import sqlite3

    store = site["store"]
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE run_summaries")  # a store the summary cannot be written to
    record = stored_run("cpu_latency_loop.json", STEPS, BUILDS, 2.0, edited=True)
    notes: list[str] = []
    save_run(store, record, notes=notes)
    assert record.run_id is not None and store.get(record.run_id).target == record.target
    [note] = notes
    assert f"run {record.run_id}" in note and "run_summaries" in note
    assert not [r for r in caplog.records if r.name == "nbscope"]  # said once: in the notes
    again = stored_run("cpu_latency_loop.json", STEPS, BUILDS, 3.0, edited=True)
    save_run(store, again)  # a job with no notes to show: the logger says it
    said = [r.getMessage() for r in caplog.records if r.name == "nbscope"]
    assert said == ["nbscope: " + note.replace(f"run {record.run_id}", f"run {again.run_id}")]


def test_an_incremental_publish_reads_no_run_record_and_keeps_the_manifest_as_json_writes_it(
    site: dict[str, Any], tmp_path: Path
) -> None:
    """After one new run, summarised when it was saved, the command makes its one row from the store's columns and
    summaries: it imports neither the run record's model nor the analyses (nor typer, dataclasses, statistics or
    html: the start-up an incremental publish is made of). The rows it keeps are written out as the manifest held
    them: the manifest is what ``json.dumps`` writes of it, and the same as a publish that made every row again."""
    import os
    import subprocess
    import sys

    store, folder = site["store"], site["folder"]
    record = stored_run("cpu_latency_loop.json", STEPS, BUILDS, 2.0, edited=True)
    save_run(store, record)
    heavy = (
        "nbscope.record.run",
        "nbscope.analyse.history",
        "nbscope.analyse.diagnose",
        "nbscope.record.cells",
        "typer",
        "click",
        "rich",
        "dataclasses",
        "statistics",
        "html",
    )
    probe = (
        "import sys\nfrom nbscope.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
        f"    print('modules', [m for m in {heavy!r} if m in sys.modules], file=sys.stderr)"
    )
    env = {key: value for key, value in os.environ.items() if key != "NBSCOPE_DB"}
    done = subprocess.run(
        [sys.executable, "-c", probe, "publish", str(store.path), "-o", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "; 1 rebuilt;" in done.stdout, done.stderr
    assert done.stderr.endswith("modules []\n")
    text = (folder / MANIFEST).read_text()
    assert text == json.dumps(json.loads(text), separators=(",", ":"))
    again = tmp_path / "again"
    publish(store.path, again, site=site_pages)
    made_again = json.loads((again / MANIFEST).read_text())
    assert json.loads(text)["rows"] == made_again["rows"]
    assert {name: (folder / name).read_bytes() for name in made_again["pages"]} == {
        name: (again / name).read_bytes() for name in made_again["pages"]
    }


def test_a_notebooks_profile_and_trace_runs_make_one_history_in_time_order(tmp_path: Path) -> None:
    """A row's runs of two kinds come from two walks of the store's index; the row has them in time order, as
    the same runs of one kind."""
    histories = []
    for name, traced in (("one-kind", ()), ("two-kinds", range(0, BUILDS - 1, 2))):
        store = Store(tmp_path / name / "nbscope.db")
        runs = []
        for build in range(BUILDS):
            run = stored_run("cpu_latency_loop.json", STEPS, build, 2.0 if build >= 8 else 1.0)
            if build in traced:
                run = RunRecord.from_dict({**run.to_dict(), "kind": "trace"})
            runs.append(run)
        store.add_many(runs)
        publish(store.path, tmp_path / name / "site", site=site_pages)
        [row] = json.loads((tmp_path / name / "site" / data_file(STEPS)).read_text())["rows"]
        histories.append((row["history"], row["changes"]))
    assert histories[0] == histories[1] and histories[0][0]["ids"] == list(range(1, BUILDS + 1))


def test_an_imported_run_is_summarised_when_it_is_stored(tmp_path: Path) -> None:
    """``nbscope import`` keeps each new run's summary as profile does, so the next publish diagnoses nothing;
    a run already in the store is not summarised again."""
    from nbscope.api.live import import_runs

    record = RECORDS / "cpu_unrolled_loop.json"
    db = tmp_path / "s.db"
    first = import_runs([record], db)
    run_id = first.runs[0].record.run_id
    assert first.runs[0].added and run_id is not None
    kept = Store(db).run_summaries([run_id])
    assert kept[run_id]["cells"]
    again = import_runs([record], db)
    assert not again.runs[0].added
