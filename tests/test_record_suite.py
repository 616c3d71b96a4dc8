"""The typed views of bench and loops records (``schema.suite``), and of a profile's runner and kernel sections
(``schema.model``): real records parse to views whose figures are the documents', absent or mistyped fields read
None, and the renderers that read the views print what the documents say, as they printed it before."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nbscope.api.bench import run_bench
from nbscope.api.loops import run_loops
from nbscope.collect.loops import LoopOptions
from nbscope.record.run import RunRecord
from nbscope.render import terminal
from nbscope.render._markdown import plain_text
from nbscope.render.bench import bench_markdown, print_bench
from nbscope.render.html._sections import _loops_section
from nbscope.render.loops import print_loops
from nbscope.schema.codec import decode
from nbscope.schema.model import KernelInfo, NotebookRun, RunnerInfo
from nbscope.schema.suite import BenchGroup, BenchRun, BenchSettings, GroupFigure, LoopsRun, Sweep
from test_loops import USER_LOOP

RECORDS = Path(__file__).resolve().parent / "files" / "records"
FINGERPRINT = {"digest": "0123456789ab", "cpu": {"model": "test CPU", "logical_cores": 2}, "gpu": {}}
LOOP = USER_LOOP  # a fori_loop with a traced trip count, as test_loops sweeps it


@pytest.fixture(scope="module")
def bench() -> RunRecord:
    """A real bench run, small: the pure-Python group and the loops group (its fitted slopes), read back from
    its JSON as a stored record is."""
    record = run_bench(
        only=["python,loops"],
        size="quick",
        fingerprint=FINGERPRINT,
        jax_platform="cpu",
        overrides={"python.int_sum_n": 100_000, "python.sqrt_n": 50_000, "loops.trips": [1_000, 10_000]},
    )
    return RunRecord.from_dict(json.loads(record.to_json()))


@pytest.fixture(scope="module")
def loops(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    script = tmp_path_factory.mktemp("loops") / "userloop.py"
    script.write_text(LOOP)
    record = run_loops(
        LoopOptions(
            target=f"{script}:run",
            trip_counts=[1_000, 10_000, 100_000],
            samples=2,
            placements=["cpu"],
            at=5_000_000,
            jax_platform="cpu",
        ),
        fingerprint=FINGERPRINT,
    )
    return RunRecord.from_dict(json.loads(record.to_json()))


def same(view: Any, document: Any, where: str = "") -> int:
    """Assert a view holds the document's values, field by field (a field the document lacks is not compared);
    returns how many values were compared."""
    if dataclasses.is_dataclass(view):
        assert isinstance(document, Mapping), where
        return sum(
            same(getattr(view, f.name), document[f.name], f"{where}.{f.name}")
            for f in dataclasses.fields(view)
            if f.name in document
        )
    if isinstance(view, tuple):
        assert len(view) == len(document), where
        return sum(same(v, d, f"{where}[{i}]") for i, (v, d) in enumerate(zip(view, document, strict=True)))
    if isinstance(view, Mapping):
        assert list(view) == list(document), where
        return sum(same(view[k], document[k], f"{where}.{k}") for k in view)
    assert view == document and type(view) is type(document), f"{where}: {view!r} != {document!r}"
    return 1


# ---- real records parse to their figures ----------------------------------------------------------


def test_a_real_bench_record_reads_as_its_document(bench: RunRecord) -> None:
    document = bench.measurements
    run = decode(BenchRun, document)
    assert list(run.groups) == ["python", "loops"]
    assert same(run, document) > 100
    fitted = [f for f in run.figures if f.fit is not None]
    assert fitted and all(len(f.fit.points) == 2 and f.fit.per_iter_s is not None for f in fitted if f.fit)
    assert run.figures[0].first is not None and run.figures[0].steady is not None
    assert run.totals.figures == document["totals"]["figures"] > 0
    assert run.machine is not None and run.machine.samples == document["machine"]["samples"]
    settings = decode(BenchSettings, bench.settings)
    assert (settings.size, settings.dtype, settings.only) == ("quick", "float32", ("python", "loops"))


def test_a_real_loops_record_reads_as_its_document(loops: RunRecord) -> None:
    document = loops.measurements
    run = decode(LoopsRun, document)
    assert same(run, document) > 20
    (sweep,), (recorded,) = run.sweeps, document["sweeps"]
    assert sweep.placement == "cpu" and sweep.loop == recorded["loop"]
    # The record keeps a sweep's points as parallel lists; the view pairs them.
    assert [p.trips for p in sweep.points] == recorded["trip_counts"]
    assert [p.seconds for p in sweep.points] == recorded["seconds"]
    assert [p.first_call_s for p in sweep.points] == recorded["first_call_s"]
    assert [p.inner for p in sweep.points] == recorded["inner"]
    assert [list(p.samples) for p in sweep.points] == recorded["samples"]
    assert [p.cpu_seconds for p in sweep.points] == recorded["cpu_seconds"]
    assert sweep.fit is not None and sweep.fit.us_per_iter == recorded["fit"]["us_per_iter"]
    assert run.loop is not None and run.loop.description == "fori_loop with a traced trip count."
    assert run.extrapolation.trip_count == 5_000_000 and run.totals.at == 5_000_000


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDS.glob("cpu_*.json")))
def test_a_profile_records_runner_and_kernel_read_typed(name: str) -> None:
    document = json.loads((RECORDS / name).read_text())["measurements"]
    run = decode(NotebookRun, document)
    assert same(run.runner, document["runner"]) >= 4
    assert run.runner.pathway == "kernel" and run.runner.execute_s is not None
    assert run.kernel is not None and same(run.kernel, document["kernel"]) >= 5
    assert run.kernel.executable == document["kernel"]["executable"]


# ---- absent and mistyped fields are unknown ----------------------------------------------------------


def test_absent_fields_read_none() -> None:
    empty = decode(BenchRun, {})
    assert decode(BenchSettings, None) == BenchSettings(size=None, dtype=None, dtypes=(), only=None, jax_platform=None)
    assert empty.groups == {} and empty.machine is None and empty.figures == () and empty.warnings == ()
    assert all(getattr(empty.totals, f.name) in (None, False) for f in dataclasses.fields(empty.totals))
    figure = decode(GroupFigure, {"label": "x", "steady": {}, "fit": {"spread": 0.1}, "first": None})
    assert (figure.key, figure.dtype, figure.device, figure.note) == (None, None, None, None)
    assert figure.steady is None and figure.first is None and figure.throughput is None  # empty parts say nothing
    assert figure.fit is not None and figure.fit.per_iter_s is None and figure.fit.points == ()
    group = decode(BenchGroup, {"status": "ok", "wall_s": "slow", "runs": [{"dtype": "float32"}, "garbage"]})
    assert group.wall_s is None and group.title is None and len(group.runs) == 1
    assert group.runs[0].status is None and group.runs[0].notes is None and not group.runs[0].failed

    loops = decode(LoopsRun, {"sweeps": [{"placement": "default", "fit": {}}, "garbage"]})
    (sweep,) = loops.sweeps
    assert sweep.points == () and sweep.fit is None and sweep.device is None
    assert loops.loop is None and loops.jax is None and loops.xla_dump is None
    assert loops.extrapolation.trip_count is None and loops.extrapolation.estimates == ()
    assert loops.totals.us_per_iter is None
    # A point needs a trip count and a time; the lists beside them may be shorter, or hold the wrong thing.
    partial = decode(Sweep, {"trip_counts": [10, "x", 1000], "seconds": [1e-6, 2e-6, 3e-6], "inner": [4]})
    assert [(p.trips, p.seconds, p.inner, p.first_call_s) for p in partial.points] == [
        (10, 1e-6, 4, None),
        (1000, 3e-6, None, None),
    ]

    runner = decode(NotebookRun, {}).runner
    assert runner == RunnerInfo() and runner.pathway is None and runner.execute_s is None
    assert decode(NotebookRun, {}).kernel is None
    assert decode(RunnerInfo, {"execute_s": "soon", "kernel_restarts": True}).kernel_restarts == 0
    assert decode(KernelInfo, {"executable": 3}) == KernelInfo(*[None] * len(dataclasses.fields(KernelInfo)))


def test_numbers_stay_as_recorded() -> None:
    """A figure carried into ``--json`` output is written as the record has it: an integer stays one."""
    figure = decode(GroupFigure, {"throughput": {"value": 22, "unit": "GB/s"}, "steady": {"median_s": 2.5e-5}})
    assert figure.throughput is not None and type(figure.throughput.value) is int
    assert figure.steady is not None and figure.steady.median_s == 2.5e-5


# ---- the renderers print what the documents say --------------------------------------------------


def _seconds(value: Any) -> str:
    return terminal.format_seconds(value)


def _markdown_row(figure: Mapping[str, Any]) -> str:
    """A figure's markdown row as the renderer wrote it when it read the document's dicts (its oracle here)."""
    steady, fit, first = figure.get("steady") or {}, figure.get("fit") or {}, figure.get("first") or {}
    if steady:
        time = _seconds(steady["median_s"])
    elif fit:
        time = f"{fit['per_iter_s'] * 1e6:.4g} µs/iter"
    else:
        time = _seconds(first.get("wall_s")) if first else "–"
    spread = steady.get("spread") if steady.get("spread") is not None else fit.get("spread")
    spread_text = "–" if spread is None else f"{spread:.1%}"
    if figure.get("warnings"):
        spread_text += " ⚠"
    if steady:
        inner = steady.get("inner") or 1
        samples = f"{steady['samples']}" + (f"×{inner}" if inner > 1 else "")
    else:
        samples = f"fit of {len(fit.get('points') or [])}" if fit else ("1" if first else "–")
    throughput = figure.get("throughput")
    rate = f"{throughput['value']:.3g} {throughput['unit']}" if throughput else ""
    cells = [
        figure["label"],
        time,
        _seconds(first.get("wall_s")) if first else "–",
        _seconds(first.get("compile_s")),
        spread_text,
        samples,
        rate,
        figure["dtype"],
    ]
    return "| " + " | ".join(plain_text(cell) for cell in cells) + " |"


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def test_bench_views_print_the_documents_figures(
    bench: RunRecord, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    markdown = [_squeezed(line) for line in bench_markdown(bench).splitlines()]
    figures = [f for group in bench.measurements["groups"].values() for f in group["figures"]]
    for figure in figures:
        assert _squeezed(_markdown_row(figure)) in markdown
    totals = bench.measurements["totals"]
    assert any(line.startswith(f"{totals['figures']} figures in {_seconds(totals['wall_s'])};") for line in markdown)
    assert "dtype float32" in markdown[0]
    monkeypatch.setattr(terminal.console, "width", 220)
    print_bench(bench)
    out = capsys.readouterr().out
    for figure in figures:
        assert figure["label"] in out
    assert f"{totals['figures']} figures from {totals['groups_ok']} group(s) in {_seconds(totals['wall_s'])}" in out
    spread = bench.measurements["machine"]["spread"]
    assert f"varied ±{spread:.1%} over the run" in out


def test_loops_views_print_the_documents_figures(
    loops: RunRecord, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal.console, "width", 200)
    print_loops(loops)
    out = capsys.readouterr().out
    (sweep,) = loops.measurements["sweeps"]
    fit = sweep["fit"]
    for trips, seconds in zip(sweep["trip_counts"], sweep["seconds"], strict=True):
        assert f"{trips:,}" in out and _seconds(seconds) in out
    a = fit["a_s"]
    text = f"{fit['us_per_iter']:.4g} µs/iteration {'+' if a >= 0 else '−'} {_seconds(abs(a))} per call, R² {fit['r2']:.4f}"
    assert f"fit (wall clock): {text}" in out
    (estimate,) = loops.measurements["extrapolation"]["estimates"]
    assert (
        f"at 5,000,000 trips on {estimate['placement']} ({estimate['device']}): {_seconds(estimate['seconds'])}" in out
    )
    html = _loops_section(loops, 0)
    row = (
        f'<td class="n">{len(sweep["trip_counts"])}</td><td class="n">{fit["us_per_iter"]:.4g}</td>'
        f'<td class="n">{_seconds(a)}</td><td class="n">{fit["b_s"]:.3g}</td><td class="n">{fit["r2"]:.4f}</td>'
    )
    assert row in html
