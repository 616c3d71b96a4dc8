"""The run record: JSON round trip and one-line refusals of documents it cannot read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbscope._errors import NbscopeError
from nbscope.record.run import FORMAT_NAME, SCHEMA_VERSION, RunRecord, dump, load, loads, utc_now
from nbscope.schema.validate import validate

FINGERPRINT = {"fingerprint_version": 1, "cpu": {"model": "Test CPU", "logical_cores": 4}, "digest": "0123456789ab"}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def make_record(**changes: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "kind": "profile",
        "target": "lectures/jax_intro.md",
        "fingerprint": FINGERPRINT,
        "measurements": {
            "totals": {"cells": 2, "wall_s": 1.5, "compile_s": 0.25, "compiles": 3, "peak_rss_bytes": 10**9},
            "cells": [{"index": 0, "wall_s": 1.0, "error": None}, {"index": 1, "wall_s": 0.5, "error": None}],
        },
        "settings": {"kernel": "python3", "timeout": 600, "env": {"JAX_PLATFORMS": "cpu"}},
        "command": ["nbscope", "profile", "lectures/jax_intro.md"],
    }
    fields.update(changes)
    return RunRecord(**fields)


def assert_one_line_error(excinfo: pytest.ExceptionInfo[NbscopeError], *words: str) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


def test_new_record_envelope() -> None:
    record = make_record()
    document = record.to_dict()
    assert document["format"] == FORMAT_NAME == "nbscope-run"
    assert document["schema_version"] == SCHEMA_VERSION == 2
    assert isinstance(document["tool_version"], str) and document["tool_version"]
    assert TIMESTAMP.match(document["started_at"]), document["started_at"]
    assert document["ended_at"] is None and document["status"] == "ok"
    assert "run_id" not in document
    assert record.digest == "0123456789ab"
    validate(document, source="document", reader="test")


def test_finish_sets_end_time_and_status() -> None:
    record = make_record().finish("partial")
    assert TIMESTAMP.match(record.ended_at or "")
    assert record.ended_at >= record.started_at
    assert record.status == "partial"
    assert make_record().finish().status == "ok"


def test_utc_now_format() -> None:
    assert TIMESTAMP.match(utc_now())


def test_round_trip_through_json() -> None:
    record = make_record().finish()
    text = record.to_json()
    again = loads(text)
    assert again.to_dict() == record.to_dict()
    assert again.to_json() == text
    compact = record.to_json(indent=None)
    assert "\n" not in compact and json.loads(compact) == record.to_dict()


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    record = make_record().finish("error")
    with pytest.raises(NbscopeError, match="does not exist"):  # written only in an existing folder
        dump(record, tmp_path / "sub" / "run.json")
    assert not (tmp_path / "sub").exists()
    (tmp_path / "sub").mkdir()
    path = dump(record, tmp_path / "sub" / "run.json")
    assert path.exists() and not (tmp_path / "sub" / "run.json.tmp").exists()
    assert load(path).to_dict() == record.to_dict()


def test_numpy_values_and_paths_are_written_as_plain_json() -> None:
    record = make_record(
        measurements={"totals": {"wall_s": np.float64(0.5), "cells": np.int64(3)}, "where": Path("/tmp/x")},
        settings={"tags": {"b", "a"}},
    )
    document = json.loads(record.to_json())
    assert document["measurements"] == {"totals": {"wall_s": 0.5, "cells": 3}, "where": "/tmp/x"}
    assert document["settings"] == {"tags": ["a", "b"]}
    with pytest.raises(TypeError, match="not JSON serialisable"):
        make_record(measurements={"x": object()}).to_json()


def test_headline_picks_the_totals_runs_lists() -> None:
    assert make_record().headline() == {"wall_s": 1.5, "compile_s": 0.25, "cells": 2, "compiles": 3}
    assert make_record(measurements={}).headline() == {}


def test_unknown_fields_are_ignored_and_optional_ones_defaulted() -> None:
    document = make_record().to_dict()
    document["added_in_a_later_minor_version"] = {"x": 1}
    for optional in ("settings", "ended_at", "status"):
        del document[optional]
    record = RunRecord.from_dict(document)
    assert record.settings == {} and record.ended_at is None and record.status == "ok"


def test_not_json_is_refused_with_one_line() -> None:
    with pytest.raises(NbscopeError) as excinfo:
        loads("this is not json\n{", source="notes.txt")
    assert_one_line_error(excinfo, "notes.txt", "not valid JSON", "line 1")


@pytest.mark.parametrize(
    "document",
    [[1, 2, 3], "a string", 42, None, {"kind": "profile"}, {"format": "something-else", "schema_version": 1}],
    ids=["list", "string", "number", "null", "no-format", "other-format"],
)
def test_json_that_is_not_a_record_is_refused(document: Any) -> None:
    with pytest.raises(NbscopeError) as excinfo:
        loads(json.dumps(document), source="thing.json")
    assert_one_line_error(excinfo, "thing.json", "not an nbscope run record")


def test_newer_schema_version_is_refused() -> None:
    document = make_record().to_dict()
    document["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(NbscopeError) as excinfo:
        loads(json.dumps(document), source="future.json")
    assert_one_line_error(excinfo, "future.json", f"schema version {SCHEMA_VERSION + 1}", "upgrade nbscope")


@pytest.mark.parametrize("version", [None, "1", 1.0, True])
def test_mistyped_schema_version_is_refused(version: Any) -> None:
    document = make_record().to_dict()
    document["schema_version"] = version
    with pytest.raises(NbscopeError) as excinfo:
        loads(json.dumps(document), source="odd.json")
    assert_one_line_error(excinfo, "odd.json", "schema_version")


@pytest.mark.parametrize(
    "name", ["tool_version", "command", "started_at", "kind", "target", "fingerprint", "measurements"]
)
def test_missing_required_field_is_refused(name: str) -> None:
    document = make_record().to_dict()
    del document[name]
    with pytest.raises(NbscopeError) as excinfo:
        loads(json.dumps(document), source="short.json")
    assert_one_line_error(excinfo, "short.json", repr(name), "missing")


@pytest.mark.parametrize("name, value", [("kind", 3), ("command", "nbscope profile"), ("measurements", [])])
def test_mistyped_required_field_is_refused(name: str, value: Any) -> None:
    document = make_record().to_dict()
    document[name] = value
    with pytest.raises(NbscopeError) as excinfo:
        RunRecord.from_dict(document, source="typed.json")
    assert_one_line_error(excinfo, "typed.json", repr(name))


def test_load_refuses_missing_binary_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(NbscopeError) as excinfo:
        load(tmp_path / "nope.json")
    assert_one_line_error(excinfo, "nope.json", "no such file")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    with pytest.raises(NbscopeError) as excinfo:
        load(binary)
    assert_one_line_error(excinfo, "blob.bin", "not a text file")
    text = tmp_path / "not-json.txt"
    text.write_text("hello\nworld\n")
    with pytest.raises(NbscopeError) as excinfo:
        load(text)
    assert_one_line_error(excinfo, "not-json.txt", "not valid JSON")
    with pytest.raises(NbscopeError) as excinfo:
        load(tmp_path)
    assert_one_line_error(excinfo, "cannot read")


# --- the shape of measurements: records from elsewhere are refused with the field named --------------------

RECORDS = Path(__file__).resolve().parent / "files" / "records"


def test_every_recorded_fixture_passes_the_shape_checks() -> None:
    paths = sorted(RECORDS.glob("*.json"))
    assert paths
    for path in paths:
        assert load(path).measurements["cells"], path


def _cells(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document["measurements"]["cells"]


@pytest.mark.parametrize(
    "change, field, found, wanted",
    [
        (lambda d: d["measurements"].__setitem__("cells", {"0": {}}), "measurements.cells", "an object", "an array"),
        (lambda d: _cells(d).__setitem__(1, "cell"), "measurements.cells[1]", "a string", "an object"),
        (lambda d: _cells(d)[1].__setitem__("wall_s", "0.5"), "measurements.cells[1].wall_s", "a string", "a number"),
        (lambda d: _cells(d)[0].__setitem__("wall_s", True), "measurements.cells[0].wall_s", "a boolean", "a number"),
        (lambda d: _cells(d)[0].__setitem__("index", None), "measurements.cells[0].index", "null", "an integer"),
        (lambda d: _cells(d)[0].__setitem__("index", 0.5), "measurements.cells[0].index", "a number", "an integer"),
        (
            lambda d: _cells(d)[0].__setitem__("samples", {"wall_s": [1.0, "x"]}),
            "measurements.cells[0].samples.wall_s[1]",
            "a string",
            "a number",
        ),
        (
            lambda d: _cells(d)[0].__setitem__("jax", {"functions": [{"name": "f", "count": "2"}]}),
            "measurements.cells[0].jax.functions[0].count",
            "a string",
            "an integer",
        ),
        (
            lambda d: _cells(d)[0].__setitem__("rss", {"peak_bytes": "1 GB"}),
            "measurements.cells[0].rss.peak_bytes",
            "a string",
            "a number",
        ),
        (lambda d: _cells(d)[0].__setitem__("error", "boom"), "measurements.cells[0].error", "a string", "an object"),
        (lambda d: d["measurements"].__setitem__("totals", [1.5]), "measurements.totals", "an array", "an object"),
        (
            lambda d: d["measurements"]["totals"].__setitem__("wall_s", {"median": "1.5"}),
            "measurements.totals.wall_s.median",
            "a string",
            "a number",
        ),
        (
            lambda d: d["measurements"].__setitem__("notebook", {"path": ["a.md"]}),
            "measurements.notebook.path",
            "an array",
            "a string",
        ),
        (lambda d: d.__setitem__("settings", ["--repeat", "3"]), "field 'settings'", "an array", "an object"),
        (lambda d: d.__setitem__("status", 0), "field 'status'", "a number", "a string"),
    ],
    ids=[
        "cells-object",
        "cell-string",
        "wall-string",
        "wall-bool",
        "index-null",
        "index-float",
        "sample",
        "function-count",
        "rss",
        "error",
        "totals-array",
        "nested-time",
        "notebook-path",
        "settings",
        "status",
    ],
)
def test_malformed_measurements_are_refused_naming_the_field(change: Any, field: str, found: str, wanted: str) -> None:
    document = make_record().to_dict()
    change(document)
    with pytest.raises(NbscopeError) as excinfo:
        RunRecord.from_dict(json.loads(json.dumps(document)), source="shared.json")
    assert_one_line_error(excinfo, f"shared.json: {field} is {found}, not {wanted}")


def test_unknown_and_null_fields_in_measurements_are_accepted() -> None:
    document = make_record().to_dict()
    cell = _cells(document)[0]
    cell.update({"jax": None, "numba": None, "line": None, "new_field": ["anything", {"x": "y"}], "code_s": None})
    document["measurements"]["extra"] = {"first_call_s": [0.1, None], "import_s": {"numpy": 0.2}}
    record = loads(json.dumps(document), source="ok.json")
    assert record.measurements["extra"]["import_s"] == {"numpy": 0.2}


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["measurements"]["totals"].update(wall_s=float("nan")), "measurements.totals.wall_s is NaN"),
        (lambda d: _cells(d)[0].update(wall_s=float("inf")), "measurements.cells[0].wall_s is Infinity"),
        (lambda d: _cells(d)[0].update(compile_s=-1.5), "measurements.cells[0].compile_s is -1.5"),
        (
            lambda d: _cells(d)[0].setdefault("samples", {}).update(wall_s=[0.1, -2.0]),
            "measurements.cells[0].samples.wall_s[1] is -2.0",
        ),
        (lambda d: _cells(d)[0].update(status="exploded"), "measurements.cells[0].status is 'exploded'"),
        (lambda d: d.update(status="weird"), "field 'status' is 'weird'"),
        (lambda d: d.update(kind="nonsense"), "field 'kind' is 'nonsense'"),
    ],
    ids=["nan", "infinity", "negative", "negative-sample", "cell-status", "run-status", "kind"],
)
def test_untrue_figures_and_unknown_names_are_refused_with_the_field_named(edit: Any, named: str) -> None:
    document = make_record().to_dict()
    edit(document)
    with pytest.raises(NbscopeError, match=re.escape(named)):
        loads(json.dumps(document), source="bad.json")


def test_a_signed_difference_may_be_negative_and_non_finite_figures_are_written_as_null() -> None:
    document = make_record().to_dict()
    document["measurements"]["totals"]["cache_saving_s"] = -0.25  # warm slower than cold: a true difference
    record = loads(json.dumps(document), source="ok.json")
    record.measurements["totals"]["wall_s"] = float("nan")  # made in memory (e.g. a median of nothing)
    text = record.to_json()
    assert "NaN" not in text and json.loads(text)["measurements"]["totals"]["wall_s"] is None
    assert loads(text, source="again.json").measurements["totals"]["cache_saving_s"] == -0.25


def test_content_hash_is_the_same_for_the_same_run_only() -> None:
    record = make_record(started_at="2026-01-01T00:00:00.000Z")
    again = loads(record.to_json(), source="exported.json")
    assert again.content_hash() == record.content_hash() and len(record.content_hash()) == 64
    other = make_record(started_at="2026-01-01T00:00:00.001Z")
    assert other.content_hash() != record.content_hash()


def test_measurement_settings() -> None:
    from nbscope.record.run import describe_settings

    assert make_record().measurement_settings() == {
        "jax_platform": None,
        "jax_cache": "off",
        "timeline": False,
        "repeat": 1,
    }
    record = make_record(
        settings={
            "jax_platform": "cpu",
            "jax_cache": "warm",
            "timeline": True,
            "repeat": 4,
            "timeout": 60,
            "env": {"X": "1"},
        }
    )
    assert record.measurement_settings() == {"jax_platform": "cpu", "jax_cache": "warm", "timeline": True, "repeat": 4}
    from nbscope.record.run import series_settings

    assert series_settings(record.settings) == {**record.measurement_settings(), "env": {"X": "1"}}
    assert describe_settings(record.measurement_settings()) == "backend cpu · cache warm · timeline · repeat 4"
    assert describe_settings(make_record().measurement_settings()) == "default settings"


def test_typed_views_are_decoded_once_when_loaded_or_stored_and_afresh_while_a_job_writes(tmp_path: Path) -> None:
    from nbscope.record.store import Store

    recorded = Path(__file__).resolve().parent / "files" / "records" / "cpu_x64.json"
    loaded = load(recorded)
    assert loaded.notebook_run() is loaded.notebook_run() and loaded.machine() is loaded.machine()
    written = RunRecord(
        kind="profile",
        target="x.ipynb",
        fingerprint=FINGERPRINT,
        measurements=json.loads(recorded.read_text())["measurements"],
    )
    before = written.notebook_run().totals.wall_s
    written.measurements["totals"]["wall_s"] = before + 1.0  # a job still writing sees what it writes
    assert written.notebook_run().totals.wall_s == before + 1.0
    Store(tmp_path / "nbscope.db").save(written)
    assert written.notebook_run() is written.notebook_run()
    written.measurements = {"totals": {"wall_s": 2.0}}  # a part replaced is read again
    assert written.notebook_run().totals.wall_s == 2.0 and not written.notebook_run().cells
