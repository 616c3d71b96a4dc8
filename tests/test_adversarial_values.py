"""Values checked where they enter (issue AB, class "values"): a record from elsewhere passes the codec's strict
decode once, which refuses an impossible value with the dotted path of its field in one line; run ids are bounded
where they are parsed; lone surrogates are replaced, never a crash. Each case through the unit decode
(``codec.strict``) and through the real CLI."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error
from nbscope.analyse.forecast import forecast
from nbscope.record.run import RunRecord, load
from nbscope.schema import codec
from nbscope.schema.model import NotebookRun
from nbscope.schema.programs import Loop

FILES = Path(__file__).resolve().parent / "files"
RECORD = FILES / "records" / "cpu_forecast_f64_loop.json"  # a real CPU profile with program data and a loop


def _document(change: Any = None) -> dict[str, Any]:
    document = json.loads(RECORD.read_text())
    if change is not None:
        change(document["measurements"])
    return document


def _written(tmp_path: Path, name: str, change: Any = None) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(_document(change)))
    return path


def _loops(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [loop for program in m["programs"]["programs"].values() for loop in program["loops"]]


def _set_loops(key: str, value: Any) -> Any:
    return lambda m: [loop.__setitem__(key, value) for loop in _loops(m)]


def _swap(m: dict[str, Any]) -> None:
    cells = m["cells"]
    cells[0]["index"], cells[1]["index"] = cells[1]["index"], cells[0]["index"]


# (change of the measurements, the field's path, what the error says)
IMPOSSIBLE = {
    "negative-kernel-start": (
        lambda m: m["totals"].update(kernel_start_s=-5),
        "measurements.totals.kernel_start_s",
        "cannot be negative",
    ),
    "negative-runner-start": (
        lambda m: m["runner"].update(kernel_start_s=-0.5),
        "measurements.runner.kernel_start_s",
        "cannot be negative",
    ),
    "cell-index-1e9": (lambda m: m["cells"][0].update(index=10**9), "measurements.cells[0].index", "larger than any"),
    "cell-index-400-digits": (
        lambda m: m["cells"][0].update(index=10**400),
        "measurements.cells[0].index",
        "more than 300 digits",
    ),
    "cell-index-negative": (lambda m: m["cells"][0].update(index=-1), "measurements.cells[0].index", "negative"),
    "cell-indexes-swapped": (_swap, "measurements.cells[1].index", "in notebook order"),
    "cell-index-duplicated": (
        lambda m: m["cells"][1].update(index=m["cells"][0]["index"]),
        "measurements.cells[1].index",
        "each code cell once",
    ),
    "null-cell": (lambda m: m["cells"].__setitem__(0, None), "measurements.cells[0]", "is null, not an object"),
    "totals-count-other-cells": (
        lambda m: m["totals"].update(cells=99),
        "measurements.totals.cells",
        "the run lists 2 cells",
    ),
    "more-cells-run-than-cells": (
        lambda m: m["totals"].update(cells_run=5),
        "measurements.totals.cells_run",
        "more than the run's 2 cells",
    ),
    "negative-trip-count": (_set_loops("trip_count", -1000), "loops[0].trip_count", "a trip count cannot be negative"),
    "absurd-trip-count": (_set_loops("trip_count", 2**64), "loops[0].trip_count", "larger than any"),
    "trip-count-a-string": (_set_loops("trip_count", "many"), "loops[0].trip_count", "a string, not an integer"),
    "kernels-per-iteration-a-list": (
        _set_loops("kernels_per_iteration", [1]),
        "loops[0].kernels_per_iteration",
        "an array, not an integer",
    ),
    "loop-a-number": (
        lambda m: next(p for p in m["programs"]["programs"].values() if p["loops"])["loops"].__setitem__(0, 7),
        "loops[0]",
        "a number, not an object",
    ),
    "time-of-1e8-s": (lambda m: m["cells"][1].update(wall_s=1e8), "measurements.cells[1].wall_s", "larger than any"),
    "negative-compile-share-time": (
        lambda m: m["cells"][1]["jax"].update(backend_s=-0.1),
        "measurements.cells[1].jax.backend_s",
        "cannot be negative",
    ),
    "count-a-boolean": (
        lambda m: m["cells"][1]["jax"].update(compiles=True),
        "measurements.cells[1].jax.compiles",
        "a boolean, not an integer",
    ),
    "execution-count-negative": (
        lambda m: [e.update(count=-3) for c in m["cells"] for e in (c.get("programs") or {}).get("executions", [])],
        ".executions[0].count",
        "cannot be negative",
    ),
    "negative-transfer-bytes": (
        lambda m: m["cells"][1]["programs"].update(transfers={"bytes_low": -5.0}),
        ".programs.transfers.bytes_low",
        "a size or factor cannot be negative",
    ),
    "negative-peak-memory": (
        lambda m: m["cells"][0]["rss"].update(peak_bytes=-1),
        "measurements.cells[0].rss.peak_bytes",
        "a size cannot be negative",
    ),
    "compile-share-over-1": (
        lambda m: m["cells"][1].update(compile_share=3.5),
        "measurements.cells[1].compile_share",
        "larger than any share",
    ),
    "cell-status-unknown": (
        lambda m: m["cells"][0].update(status="exploded"),
        "measurements.cells[0].status",
        "not one of",
    ),
}


@pytest.mark.parametrize("change, path, words", IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_strict_decode_refuses_an_impossible_value_naming_its_path(change: Any, path: str, words: str) -> None:
    document = _document(change)
    with pytest.raises(codec.Invalid) as caught:
        codec.strict(NotebookRun, document["measurements"], "measurements")
    message = str(caught.value)
    assert path in message and words in message and "\n" not in message, message


def test_strict_decode_of_a_real_record_is_its_decode() -> None:
    measurements = _document()["measurements"]
    assert codec.strict(NotebookRun, measurements, "measurements") == codec.decode(NotebookRun, measurements)


@pytest.mark.parametrize("change, path, words", IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_import_refuses_an_impossible_value_in_one_line_and_stores_nothing(
    change: Any, path: str, words: str, tmp_path: Path, run_cli: Any
) -> None:
    bad = _written(tmp_path, "bad.json", change)
    db = tmp_path / "s.db"
    assert_one_line_error(run_cli("import", bad, "--db", db), str(bad), path, words)
    assert not db.exists()


def test_nan_in_a_figure_is_refused_by_the_strict_decode_too() -> None:
    document = _document(lambda m: m["cells"][1].update(wall_s=math.nan))
    with pytest.raises(codec.Invalid, match=r"measurements.cells\[1\].wall_s is nan, not a finite number"):
        codec.strict(NotebookRun, document["measurements"], "measurements")


def test_xlas_minus_one_for_an_unknown_cost_is_kept_and_read_as_unknown() -> None:
    """XLA's cost analysis writes -1 for a figure it cannot count: such a record is real and loads; the figure
    reads as unknown."""

    def unknown_cost(m: dict[str, Any]) -> None:
        [p["per_execution"].update(flops=-1.0) for p in m["programs"]["programs"].values()]

    record = RunRecord.from_dict(_document(unknown_cost), source="xla.json")
    programs = record.notebook_run().program_data
    assert programs is not None and all(p.per_execution.flops is None for p in programs.programs.values())


def test_a_value_out_of_bounds_reads_as_unknown_where_a_record_is_not_checked() -> None:
    """The bound is declared once: the lenient decode (a record being written) reads what it refuses as unknown,
    so a negative trip count never multiplies a forecast."""
    loop = codec.decode(Loop, {"id": "w", "trip_count": -1000, "outer_iterations": -2.0, "kernels_per_iteration": 3})
    assert (loop.trip_count, loop.outer_iterations, loop.kernels_per_iteration) == (None, None, 3)

    def negative(m: dict[str, Any]) -> None:
        _set_loops("trip_count", -1000)(m)
        [p["per_execution"].update(flops=-1e12, bytes=-1e9) for p in m["programs"]["programs"].values()]

    document = _document(negative)
    record = RunRecord(
        kind="profile", target="x.md", fingerprint=document["fingerprint"], measurements=document["measurements"]
    )
    result = json.dumps(forecast(record, "t4").to_dict())
    numbers = [float(n) for n in re.findall(r"(?<![\w.])-\d+(?:\.\d+)?(?:e[+-]?\d+)?", result)]
    assert numbers == [], numbers  # no negative figure anywhere in the forecast


def test_a_negative_trip_count_stored_by_an_older_nbscope_is_one_line_in_forecast(tmp_path: Path, run_cli: Any) -> None:
    db = tmp_path / "s.db"
    assert run_cli("import", RECORD, "--db", db).returncode == 0
    with sqlite3.connect(db) as connection:  # as an older nbscope's import left it
        connection.execute("UPDATE documents SET document = ?", (json.dumps(_document(_set_loops("trip_count", -9))),))
    assert_one_line_error(run_cli("forecast", "1", "--db", db), "run 1", "trip_count is -9")


# --- lone surrogates: replaced as the record is read, in every command (a real process: its stdout is UTF-8) ---


def _surrogates(m: dict[str, Any]) -> None:
    m["cells"][0]["first_line"] = "\ud800 first"
    m["cells"][1]["source"] = "x = '\udfff'\n" + m["cells"][1]["source"]
    m["notebook"]["path"] = "lec\udc80ture.md"


@pytest.mark.parametrize(
    "command",
    [
        ("import", "{bad}"),
        ("show", "{bad}"),
        ("report", "{bad}", "-o", "{tmp}/r.html"),
        ("compare", "{good}", "{bad}"),
        ("diagnose", "{bad}"),
        ("forecast", "{bad}"),
        ("gate", "--baseline", "{good}", "--candidate", "{bad}"),
    ],
    ids=lambda c: c[0],
)
def test_lone_surrogates_in_a_record_are_replaced_never_a_traceback(
    command: tuple[str, ...], tmp_path: Path, run_cli_process: Any
) -> None:
    document = _document(_surrogates)
    document["target"] = "\ud83dlecture.md"  # half of a pair
    (bad := tmp_path / "bad.json").write_text(json.dumps(document))  # json writes them as \\ud800 escapes
    good = RECORD
    args = [part.format(bad=bad, good=good, tmp=tmp_path) for part in command]
    done = run_cli_process(*args, "--db", tmp_path / "s.db", timeout=120)
    assert "Traceback" not in done.stderr and "UnicodeEncodeError" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (done.returncode, done.stderr)  # 1: a gate that fails is still an answer
    if command[0] == "show":
        assert "\ufffdlecture.md" in done.stdout
    loaded = load(bad)
    assert loaded.target == "\ufffdlecture.md" and loaded.measurements["cells"][0]["first_line"] == "\ufffd first"


def test_a_lone_surrogate_in_a_key_is_replaced_too(tmp_path: Path) -> None:
    document = _document(lambda m: m["totals"].update({"odd\udc00": 1}))
    record = RunRecord.from_dict(json.loads(json.dumps(document)), source="k.json")
    assert "odd\ufffd" in record.measurements["totals"]


# --- run ids ---------------------------------------------------------------------------------------------------

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    "command",
    [
        ("show", HUGE),
        ("report", HUGE, "-o", "r.html"),
        ("compare", HUGE, "1"),
        ("diagnose", HUGE),
        ("forecast", HUGE),
        ("forecast", "1", "--measured", HUGE),
        ("gate", "--candidate", HUGE),
        ("gate", "--baseline", HUGE, "--candidate", "1"),
        ("cells", HUGE),
        ("lectures", HUGE, "1"),
        ("export", HUGE, "-o", "e.json"),
        ("show", "9" * 5000),  # past Python's bound on reading an integer
    ],
    ids=lambda c: "-".join(p[:12] for p in c),
)
def test_a_run_id_larger_than_any_is_one_line(command: tuple[str, ...], tmp_path: Path, run_cli: Any) -> None:
    db = tmp_path / "s.db"
    assert run_cli("import", RECORD, "--db", db).returncode == 0
    assert_one_line_error(run_cli(*command, "--db", db), "larger than any run id")


@pytest.mark.parametrize("reference", ["²", "١", "9223372036854775807"], ids=["superscript", "arabic-digit", "max"])
def test_a_run_id_that_is_no_stored_run_is_one_line(reference: str, tmp_path: Path, run_cli: Any) -> None:
    db = tmp_path / "s.db"
    assert run_cli("import", RECORD, "--db", db).returncode == 0
    assert_one_line_error(run_cli("show", reference, "--db", db), reference)


# --- import-jupyter-cache ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seconds, words",
    [(-5, "totals.wall_s is -5.0: a measurement cannot be negative"), (1e308, "wall_s is 1e+308, larger than any")],
    ids=["minus-5-s", "1e308-s"],
)
def test_import_jupyter_cache_refuses_an_impossible_time_and_stores_nothing(
    seconds: float, words: str, tmp_path: Path, run_cli: Any
) -> None:
    cache = tmp_path / "global.db"
    with sqlite3.connect(cache) as connection:  # jupyter-cache's table, as its executor writes it
        connection.execute("CREATE TABLE nbcache (pk INTEGER PRIMARY KEY, hashkey, uri, description, data, created)")
        for pk, value in ((1, 2.5), (2, seconds)):
            connection.execute(
                "INSERT INTO nbcache VALUES (?, ?, ?, '', ?, '2024-01-31 12:00:00.123')",
                (pk, f"h{pk}", f"/book/n{pk}.ipynb", json.dumps({"execution_seconds": value})),
            )
    db = tmp_path / "s.db"
    assert_one_line_error(run_cli("import-jupyter-cache", cache, "--db", db), "n2.ipynb", words)
    assert not db.exists() or sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


# --- merge -------------------------------------------------------------------------------------------------------


def _audit(tmp_path: Path, name: str, *, shard: str | None = "1/2", path: str = "a.md") -> Path:
    document = json.loads(RECORD.read_text())
    entry = {"path": path, "backend": "cpu", "status": "error", "error": "x", "started_at": name}
    document.update(kind="audit", target="book", runs={}, measurements={"notebooks": [entry]})
    document["settings"] = {"backends": ["cpu"], "shard": shard}
    (file := tmp_path / name).write_text(json.dumps(document))
    return file


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "~/x.md", "a/../../b.md", "C:\\x.md"])
def test_merge_refuses_an_entry_path_outside_the_book(path: str, tmp_path: Path, run_cli: Any) -> None:
    bad = _audit(tmp_path, "bad.json", path=path)
    done = run_cli("merge", bad, "--db", tmp_path / "m.db")
    assert_one_line_error(done, "bad.json", "measurements.notebooks[0].path", "not a path inside the book")


def test_merge_refuses_a_shard_given_twice(tmp_path: Path, run_cli: Any) -> None:
    first, again = _audit(tmp_path, "one.json"), _audit(tmp_path, "again.json")
    two = _audit(tmp_path, "two.json", shard="2/2")
    assert run_cli("merge", first, two, "--db", tmp_path / "m.db").returncode == 0
    done = run_cli("merge", first, two, again, "--db", tmp_path / "m2.db")
    assert_one_line_error(done, "one.json", "again.json", "shard 1/2", "give each shard once")
    done = run_cli("merge", first, first, "--db", tmp_path / "m3.db")
    assert_one_line_error(done, "one.json", "the same audit run")


# --- more of the class: other kinds, the envelope, keys that would break the line --------------------------------


def _program_key(m: dict[str, Any]) -> None:
    programs = m["programs"]["programs"]
    key = next(k for k, p in programs.items() if p["loops"])
    programs["jit\nfake\x1b[2J"] = programs.pop(key)
    programs["jit\nfake\x1b[2J"]["loops"][0]["trip_count"] = -1


@pytest.mark.parametrize(
    "change, words",
    [
        (_program_key, ("programs.programs.'jit\\nfake\\x1b[2J'.loops[0].trip_count is -1",)),
        (lambda m: m["totals"].update({"odd\nkey_s": 1e12}), ("totals.'odd\\nkey_s' is 1e+12, larger than any",)),
        (lambda m: m.update(repeats=-3), ("measurements.repeats is -3: a repeat count cannot be negative",)),
        (lambda m: m["cells"][1].update(samples={"wall_s": [0.1, None]}), ("samples.wall_s[1] is null, not a number",)),
        (lambda m: m["cells"][0].update(sched={"wait_s": -1}), ("cells[0].sched.wait_s is -1",)),
        (lambda m: m["cells"][0].update(lines=[9, 3]), ("cells[0].lines is [9, 3], not a first and last line",)),
        (lambda m: m["cells"][0].update(lines="3-9"), ("cells[0].lines is 3-9, not a first and last line",)),
    ],
    ids=[
        "newline-in-a-program-key",
        "newline-in-a-time-key",
        "negative-repeats",
        "null-sample",
        "negative-wait",
        "lines-swapped",
        "lines-a-string",
    ],
)
def test_more_impossible_values_are_one_line(change: Any, words: tuple[str, ...], tmp_path: Path, run_cli: Any) -> None:
    bad = _written(tmp_path, "bad.json", change)
    assert_one_line_error(run_cli("import", bad, "--db", tmp_path / "s.db"), *words)


def _bench(change: Any) -> dict[str, Any]:
    document = json.loads(RECORD.read_text())
    steady = {"median_s": 0.002, "min_s": 0.001, "max_s": 0.003, "mad_s": 0.0001, "samples": 5}
    figure = {"key": "matmul[f32]", "name": "matmul", "first": {"wall_s": 0.5}, "steady": steady}
    document.update(kind="bench", measurements={"groups": {"linalg": {"figures": [figure]}}, "totals": {}})
    change(figure)
    return document


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda f: f["steady"].update(median_s=-0.002), "groups.linalg.figures[0].steady.median_s is -0.002"),
        (lambda f: f["first"].update(wall_s="fast"), "groups.linalg.figures[0].first.wall_s is a string, not a number"),
        (lambda f: f.update(warnings=[None]), "groups.linalg.figures[0].warnings[0] is null, not a string"),
    ],
    ids=["negative-median", "wall-a-string", "null-warning"],
)
def test_a_bench_record_is_checked_by_its_own_model(change: Any, words: str) -> None:
    assert RunRecord.from_dict(_bench(lambda f: None), source="b.json").kind == "bench"
    with pytest.raises(Exception) as caught:
        RunRecord.from_dict(_bench(change), source="b.json")
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("kind", "nonsense", "field 'kind' is 'nonsense', not one of profile"),
        ("command", "nbscope profile", "field 'command' is a string, not an array"),
        ("ended_at", "yesterday", "field 'ended_at' is 'yesterday', not an ISO 8601 time"),
        ("fingerprint", None, "field 'fingerprint' is null, not an object"),
        ("label", 7, "field 'label' is a number, not a string"),
    ],
)
def test_the_envelope_is_checked_by_its_model_with_the_same_one_line_errors(
    field: str, value: Any, words: str, tmp_path: Path, run_cli: Any
) -> None:
    document = _document()
    document[field] = value
    (bad := tmp_path / "bad.json").write_text(json.dumps(document))
    assert_one_line_error(run_cli("import", bad, "--db", tmp_path / "s.db"), "bad.json", words)


@pytest.mark.parametrize("walls, words", [([-5.0, 0.5, 0.5], "cells[0].wall_s is -5.0"), ([0.5, 1e9, 0.5], "1e+09")])
def test_a_crafted_live_file_is_checked_as_an_imported_record(
    walls: list[float], words: str, tmp_path: Path, run_cli: Any
) -> None:
    from test_adversarial_ci import _complete_live_file, _three_cells

    live = tmp_path / "crafted.jsonl"
    _complete_live_file(live, _three_cells(tmp_path), walls)
    db = tmp_path / "s.db"
    assert_one_line_error(run_cli("import", live, "--db", db), "crafted.jsonl", words)
    assert not db.exists() or sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_lone_surrogates_in_a_stored_summary_are_replaced_in_publish(tmp_path: Path, run_cli_process: Any) -> None:
    """A store from elsewhere (the Action uploads one) may hold summaries no nbscope wrote: its JSON columns are
    read as a record is, lone surrogates replaced (a real process: the site's files are written as UTF-8)."""
    db = tmp_path / "s.db"
    assert run_cli_process("import", RECORD, "--db", db).returncode == 0
    with sqlite3.connect(db) as connection:
        [summary] = connection.execute("SELECT summary FROM run_summaries").fetchone()
        assert '"first_line":"import jax"' in summary
        crafted = summary.replace('"first_line":"import jax"', '"first_line":"import \\ud800jax"')
        connection.execute("UPDATE run_summaries SET summary = ?", (crafted,))
    done = run_cli_process("publish", db, "-o", tmp_path / "site", timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    pages = "".join(p.read_text() for p in (tmp_path / "site").rglob("*.html"))
    assert "import \ufffdjax" in pages or "import &#xfffd;jax" in pages.lower()


@pytest.mark.parametrize(
    "trips, words",
    [("1e400,5", "expects comma-separated trip counts"), ("10,99999999999999999999999", "a trip count is at most")],
    ids=["infinite", "past-int32"],
)
def test_loops_trip_counts_past_any_loop_are_one_line(trips: str, words: str, tmp_path: Path, run_cli: Any) -> None:
    assert_one_line_error(run_cli("loops", "--trips", trips, "--db", tmp_path / "s.db"), words)


def test_merge_reads_an_embedded_run_keyed_by_a_digit_that_is_not_ascii_as_no_run(tmp_path: Path, run_cli: Any) -> None:
    audit = _audit(tmp_path, "a.json", shard=None)
    document = json.loads(audit.read_text())
    document["runs"] = {"²": json.loads(RECORD.read_text()), str(2**62): json.loads(RECORD.read_text())}
    document["measurements"]["notebooks"][0].update(run_id=2**62, status="ok", wall_s=1.0)
    audit.write_text(json.dumps(document))
    done = run_cli("merge", audit, "--db", tmp_path / "m.db")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert run_cli("show", "1", "--db", tmp_path / "m.db").returncode == 0  # the run under 2^62, imported as run 1


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda t: t.update(numba_compile_s="fast"), "measurements.totals.numba_compile_s is a string, not a number"),
        (lambda t: t.update(cache_retrieval_s=-3), "totals.cache_retrieval_s is -3: a measurement cannot be negative"),
        (lambda t: t.update(import_s={"numpy": True}), "measurements.totals.import_s.numpy is a boolean, not a number"),
        (
            lambda t: t.update(odd_s=[1.0, 5e7]),
            "measurements.totals.odd_s[1] is 50000000.0, larger than any measurement",
        ),
    ],
    ids=["string-time", "negative-retrieval", "boolean-in-a-time-object", "untyped-time-too-long"],
)
def test_a_time_read_by_name_is_a_number_whether_typed_or_not(
    change: Any, words: str, tmp_path: Path, run_cli: Any
) -> None:
    """``history --metric`` reads any total by name: a ``*_s`` or ``*_bytes`` figure is a number wherever it is."""
    bad = _written(tmp_path, "bad.json", lambda m: change(m["totals"]))
    assert_one_line_error(run_cli("import", bad, "--db", tmp_path / "s.db"), words)


def test_a_large_size_is_no_time(tmp_path: Path, run_cli: Any) -> None:
    big = _written(tmp_path, "big.json", lambda m: m["totals"].update(peak_rss_bytes=5e10, odd_bytes=[6e10]))
    assert run_cli("import", big, "--db", tmp_path / "s.db").returncode == 0


def test_a_run_stopped_before_its_first_repeat_reads_back() -> None:
    # repeats 0: the run was stopped before any repeat finished (a SIGTERM'd `versions` variant); its cells
    # are "not run", and the record is stored and read as such.
    from nbscope.schema import codec
    from nbscope.schema.model import NotebookRun

    document = json.loads((FILES / "records" / "cpu_forecast_cut.json").read_text())["measurements"]
    document["repeats"] = 0
    read = codec.strict(NotebookRun, document, "measurements")  # refused before: "cannot be below 1"
    assert len(read.cells) == len(document["cells"])
