"""The GPU forecast used by the rest (issue 14, item 4): diagnose's GPU rules as forecast risks on a CPU
run, recommend without a GPU run, compare and forecast --measured against a GPU run, audit --forecast.

The CPU runs are real (small notebooks profiled here with program data, JAX pinned to the CPU); the GPU
run is the synthetic T4 fixture of tests/files/records (labelled so in the file). What is asserted comes
from counts and the device table (iterations × per-iteration cost, flops at a peak), sized far from every
threshold, so it holds on a faster, slower or busier machine and on one with a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from diag_support import FILES, edited, fired, load_record, sources_of
from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import diagnose
from nbscope.analyse.forecast import forecast
from nbscope.analyse.forecast.calibrate import CalibratedDevice, to_toml
from nbscope.analyse.forecast.devices import load_table
from nbscope.analyse.forecast.measured import against_measured, forecast_vs_measured
from nbscope.analyse.recommend import recommend
from nbscope.api.profile import ProfileOptions, profile
from nbscope.record.run import RunRecord
from nbscope.record.sources import naming
from nbscope.record.store import Store

pytest.importorskip("jax")
pytestmark = pytest.mark.slow
LATENCY_SOURCES = sources_of("diag_latency_loop")
SCAN_STEPS = 1_000_000  # each logistic_path call in diag_latency_loop


def _profiled(path: Path, tmp: Path, **options: Any) -> RunRecord:
    options.setdefault("jax_platform", "cpu")
    return profile(
        path, ProfileOptions(**options), fingerprint={"digest": "test"}, live_path=tmp / f"{path.stem}.jsonl"
    )


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    """diag_latency_loop.ipynb on this CPU with program data, no GPU named (the forecast defaults to the T4)."""
    return _profiled(FILES / "diag_latency_loop.ipynb", tmp_path_factory.mktemp("loop"), programs=True)


@pytest.fixture(scope="module")
def matmul_run(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    """forecast_matmul.md: one 1000×1000 matmul in float64 and one in float32. A budget is passed in: the
    8 MB float64 product, written into the heap right after its compile, reads like a program's events and can
    cut the session before the program's own event at the default (docs/forecast.md); the float64 forecast
    is what these tests check."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NBSCOPE_PROBE_MEMORY_BUDGET", str(512 * 2**20))
        return _profiled(FILES / "forecast_matmul.md", tmp_path_factory.mktemp("matmul"), forecast=["t4", "h100"])


def _t4_per_iteration(record: RunRecord) -> float:
    """The T4's cost of one iteration of logistic_path's scan, from the table and the program's kernels."""
    table = load_table(environ={})
    t4 = table.devices["t4"]
    program = next(p for p in record.measurements["programs"]["programs"].values() if p["function"] == "logistic_path")
    extra = max(0, program["loops"][0]["kernels_per_iteration"] - int(table.model["reference_body_kernels"].low))
    return (t4.figure("loop_iteration_us").low + extra * t4.figure("launch_us").low) * 1e-6


# ---- diagnose: the GPU rules as forecast risks ---------------------------------------------------------


def test_latency_loop_fires_as_a_forecast_on_the_cpu_run(loop_run: RunRecord) -> None:
    findings = diagnose(loop_run, sources=LATENCY_SOURCES)
    loops = fired(findings, "latency-bound-loop")
    assert {f.cell_index for f in loops} == {2, 3}  # both logistic_path calls; the vectorised bump cells are not
    per_iteration = _t4_per_iteration(loop_run)
    for finding in loops:
        assert finding.forecast == ["t4"]  # no GPU named at record time: the T4
        assert finding.title == "Latency-bound loop (forecast: T4)"
        assert finding.summary.startswith("forecast: on a T4 ")
        assert f"lax.scan of {SCAN_STEPS:,} iterations" in finding.summary and "`logistic_path`" in finding.summary
        figures = finding.evidence["forecast"]["t4"]
        assert figures["loop_low_s"] == pytest.approx(SCAN_STEPS * per_iteration, rel=1e-3)
        assert finding.evidence["loop_functions"] == {"logistic_path": ["lax.scan"]}
        assert "jax.default_device" in finding.fix and "Nothing to change on this CPU" in finding.fix
        assert finding.severity == "high"  # ≥ 8 s forecast against a notebook of a few seconds
    assert not fired(findings, "weak-float64")  # float32 only


def test_forecast_gpus_come_from_the_caller_then_the_record(loop_run: RunRecord) -> None:
    both = fired(diagnose(loop_run, sources=LATENCY_SOURCES, gpus="t4,h100"), "latency-bound-loop")
    assert all(f.forecast == ["t4", "h100"] and "on an H100 " in f.summary for f in both)
    named = edited(loop_run)
    named.settings["forecast"] = ["l4"]  # as `profile --forecast l4` records it
    assert {tuple(f.forecast) for f in fired(diagnose(named, sources=LATENCY_SOURCES), "latency-bound-loop")} == {
        ("l4",)
    }
    # The thresholds apply to the forecast: a slowdown this size (seconds) is not below a 1000 s minimum.
    quiet = diagnose(loop_run, sources=LATENCY_SOURCES, thresholds={"latency-bound-loop": {"min_delta_s": 1000}})
    assert not fired(quiet, "latency-bound-loop")


def test_a_loop_of_unknown_trip_count_is_not_guessed(loop_run: RunRecord) -> None:
    """The same program with its trip count unknown (as a data-dependent while_loop has): no finding, whose
    number would be a guess, but a note that says why, with the range the forecast can give."""
    unknown = edited(loop_run)
    for program in unknown.measurements["programs"]["programs"].values():
        for loop in program["loops"]:
            if program["function"] == "logistic_path":
                loop["trip_count"] = None
    for cell in unknown.measurements["cells"]:  # nor counted in the trace, nor timed
        for execution in (cell.get("programs") or {}).get("executions") or []:
            execution.pop("loops", None)
            execution["cpu_s"] = None
    findings = diagnose(unknown, sources=LATENCY_SOURCES)
    assert not fired(findings, "latency-bound-loop")
    skipped = [s for s in findings.skipped if s.rule == "latency-bound-loop"]  # type: ignore[attr-defined]
    assert {s.cell_index for s in skipped} == {2, 3}
    assert all("unknown number of iterations" in s.reason and "not guessed" in s.reason for s in skipped)


def test_forecast_requests_that_cannot_apply_are_refused_in_one_line(loop_run: RunRecord) -> None:
    plain = load_record("cpu_latency_loop")  # a real CPU run recorded without program data
    assert not fired(diagnose(plain, sources=LATENCY_SOURCES), "latency-bound-loop")  # no forecast, no error
    with pytest.raises(NbscopeError, match=r"recorded without program data.*--forecast t4"):
        diagnose(plain, sources=LATENCY_SOURCES, gpus="t4")
    with pytest.raises(NbscopeError, match="unknown device 'v100'"):
        diagnose(loop_run, sources=LATENCY_SOURCES, gpus="v100")
    gpu = edited(loop_run)
    gpu.settings["jax_platform"] = "cuda"
    if "jax_backend" in gpu.measurements["kernel"]:  # what JAX said it ran on outranks what was asked
        gpu.measurements["kernel"]["jax_backend"]["platform"] = "cuda"
    with pytest.raises(NbscopeError, match="ran on the GPU: forecast reads a run on the CPU"):
        diagnose(gpu, sources=LATENCY_SOURCES, gpus="t4")


def test_gpu_runs_keep_their_measured_findings() -> None:
    gpu, cpu = load_record("synthetic_t4_latency_loop"), load_record("cpu_latency_loop")
    findings = fired(diagnose(gpu, other=cpu, sources=LATENCY_SOURCES), "latency-bound-loop")
    assert {f.cell_index for f in findings} == {2, 3}
    assert all(f.forecast == [] and "forecast" not in f.title for f in findings)


def test_weak_float64_fires_as_a_forecast_for_weak_gpus_only(matmul_run: RunRecord) -> None:
    sources = sources_of_md("forecast_matmul.md")
    # 2 GFLOP of float64 cost milliseconds on a T4: below the default minimum of 0.1 s, so pass one in.
    assert not fired(diagnose(matmul_run, sources=sources), "weak-float64")
    low = {"weak-float64": {"min_forecast_cost_s": 0.001}}
    (finding,) = fired(diagnose(matmul_run, sources=sources, thresholds=low), "weak-float64")
    assert finding.forecast == ["t4"]  # recorded for t4 and h100; the H100 runs float64 at half rate
    assert finding.title == "float64 on a GPU with weak float64 (forecast: T4)"
    assert finding.summary.startswith("forecast: the float64 arithmetic of")
    assert "on a T4 (float64 at 1/32 of float32)" in finding.summary
    t4 = finding.evidence["forecast"]["t4"]
    flops = 2 * 1000**3
    table = load_table(environ={})
    peak64 = table.devices["t4"].figure("fp64_tflops").high * 1e12 * table.model["compute_efficiency"].high
    assert t4["float64_low_s"] == pytest.approx(flops / peak64, rel=0.05)
    assert t4["float64_low_s"] > 10 * t4["float32_high_s"]
    assert t4["extra_low_s"] == pytest.approx(t4["float64_low_s"] - t4["float32_low_s"])
    assert finding.evidence["x64_set_in_cells"] == [0]
    assert not fired(diagnose(matmul_run, sources=sources, thresholds=low, gpus="h100,a100"), "weak-float64")


def sources_of_md(name: str) -> dict[str, str]:
    from nbscope.collect import notebook as notebook_module

    return {c.source_hash: c.source for c in notebook_module.read(FILES / name).code_cells}


# ---- recommend without a GPU run ---------------------------------------------------------------------


def test_recommend_from_the_forecast_says_so_and_keeps_the_loop_on_the_cpu(loop_run: RunRecord) -> None:
    result = recommend(naming(loop_run, LATENCY_SOURCES)).to_dict()
    forecast_result = forecast(loop_run, "t4", sources=LATENCY_SOURCES).to_dict()
    notebook = forecast_result["notebook"]["t4"]
    assert result["basis"] == "forecast" and result["device"] == "t4"
    assert result["reason"].startswith("forecast for the NVIDIA T4 from the CPU run (no GPU run)")
    expected = {"mixed": "mixed", "slower": "cpu", "similar": "cpu", "faster": "gpu"}[notebook["verdict"]]
    assert result["recommendation"] == expected
    assert notebook["all_on_gpu"] == "slower"  # two scans of 1,000,000 steps at ≥ 8 µs each
    assert [p["functions"] for p in result["pinned"]] == [["logistic_path"]]
    assert result["pinned"][0]["cells"] == [2, 3]
    assert result["estimates"]["gpu_low_s"] >= 2 * SCAN_STEPS * _t4_per_iteration(loop_run)
    assert "with jax.default_device" in result["pinned"][0]["example"]
    assert any("not a measurement" in c for c in result["caveats"])
    # Two CPU runs of the notebook: the forecast decides (there is no GPU run to measure by).
    assert recommend(load_record("cpu_latency_loop"), naming(loop_run, LATENCY_SOURCES)).basis == "forecast"
    # A CPU and a GPU run: measured, as before.
    measured = recommend(
        *(naming(load_record(name), LATENCY_SOURCES) for name in ("synthetic_t4_latency_loop", "cpu_latency_loop"))
    )
    assert measured.basis == "measured"


def test_recommend_refuses_a_run_without_program_data_and_says_when_there_is_no_jax(tmp_path: Path) -> None:
    with pytest.raises(NbscopeError, match="--forecast t4"):
        recommend(load_record("cpu_latency_loop"))
    host = _profiled(FILES / "forecast_host_only.md", tmp_path, forecast=["t4"])
    result = recommend(host)
    assert result.recommendation is None and "runs no JAX" in result.reason


# ---- forecast vs a measured GPU run -------------------------------------------------------------------


def test_compare_shows_forecast_vs_measured_per_cell(loop_run: RunRecord, run_cli: Any, tmp_path: Path) -> None:
    gpu = load_record("synthetic_t4_latency_loop")
    found = forecast_vs_measured(naming(loop_run, LATENCY_SOURCES), gpu)
    assert found is not None and found.device == "t4"
    result = found.to_dict()
    rows = {r["index"]: r for r in result["comparison"]["cells"]}
    for index in (2, 3):  # the synthetic T4 run: 8.2 s per 1,000,000-step scan, as the seed measured
        assert rows[index]["measured_s"] == pytest.approx(8.2, rel=0.01)
        assert abs(rows[index]["error"]) < 0.1
    assert result["comparison"]["paired"] == len(loop_run.measurements["cells"])
    assert forecast_vs_measured(loop_run, loop_run) is None  # two CPU runs: nothing measured on a GPU
    unknown = edited(gpu)
    unknown.fingerprint["gpu"]["devices"][0]["name"] = "NVIDIA Quantum 9"
    note = forecast_vs_measured(gpu, loop_run)  # either order
    assert note is not None and note.comparison is not None
    missing = forecast_vs_measured(loop_run, unknown)
    assert missing is not None and missing.comparison is None and "not in the device table" in (missing.note or "")
    cpu_file = tmp_path / "cpu.json"
    cpu_file.write_text(loop_run.to_json())
    gpu_file = FILES / "records" / "synthetic_t4_latency_loop.json"
    shown = run_cli("compare", cpu_file, gpu_file, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["forecast_vs_measured"]["comparison"]["device"] == "t4"
    text = run_cli("compare", cpu_file, gpu_file)
    assert "forecast (t4) vs measured on Tesla T4" in text.stdout and "error" in text.stdout


def test_forecast_measured_notes_a_run_on_another_gpu(loop_run: RunRecord) -> None:
    gpu = load_record("synthetic_t4_latency_loop")
    result = forecast(loop_run, "t4,h100", sources=LATENCY_SOURCES)
    assert against_measured(result, gpu, "t4").notes == ()
    notes = against_measured(result, gpu, "h100").notes
    assert notes == ("the measured run ran on a Tesla T4, the forecast is for the NVIDIA H100 SXM5",)
    assert against_measured(result, loop_run, "t4").notes[0].startswith("the measured run used the cpu backend")


def test_duplicated_cells_pair_with_their_own_twin(loop_run: RunRecord) -> None:
    """Cells 3 and 4 have the same source: each forecast pairs with its own measured cell, not the last."""
    gpu = edited(load_record("synthetic_t4_latency_loop"))
    gpu.measurements["cells"][2]["wall_s"] = 20.0  # first call: slower than the second in this edited run
    comparison = against_measured(forecast(loop_run, "t4"), gpu, "t4")
    rows = {r.index: r for r in comparison.cells}
    assert rows[2].measured_wall_s == 20.0 and rows[3].measured_wall_s == pytest.approx(8.2)


# ---- diagnose --gpu and the CLI -------------------------------------------------------------------------


def test_cli_diagnose_gpu_labels_forecasts_and_refuses_bad_input(
    loop_run: RunRecord, run_cli: Any, tmp_path: Path
) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(loop_run.to_json())
    notebook = FILES / "diag_latency_loop.ipynb"
    shown = run_cli("diagnose", run_file, "--gpu", "t4,h100", "--notebook", notebook, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    loops = [f for f in document["findings"] if f["rule"] == "latency-bound-loop"]
    assert loops and all(f["forecast"] == ["t4", "h100"] for f in loops)
    assert document["recommendation"]["basis"] == "forecast"
    text = run_cli("diagnose", run_file, "--notebook", notebook)
    assert "forecast: on a T4" in " ".join(text.stdout.split()) and "recommended backend" in text.stdout
    unknown = run_cli("diagnose", run_file, "--gpu", "v100")
    assert unknown.returncode == 2 and "known are a100" in unknown.stderr and "Traceback" not in unknown.stderr
    plain = run_cli("diagnose", FILES / "records" / "cpu_latency_loop.json", "--gpu", "t4")
    assert plain.returncode == 2 and "nbscope profile NOTEBOOK --forecast t4" in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1


def test_diagnose_forecasts_for_a_gpu_of_the_named_device_file(
    loop_run: RunRecord, run_cli: Any, tmp_path: Path
) -> None:
    """``diagnose(devices_file=...)`` / ``diagnose --devices FILE``: a GPU only the user's file knows (here the
    H100's figures under another name) is forecast for, as ``nbscope forecast --devices`` does."""
    devices = tmp_path / "devices.toml"
    h100 = load_table(environ={}).devices["h100"]
    devices.write_text(to_toml(CalibratedDevice(key="lab", name="Lab GPU", match=["Lab"], figures=h100.figures)))
    with pytest.raises(NbscopeError, match="unknown device 'lab'"):
        diagnose(loop_run, sources=LATENCY_SOURCES, gpus="lab")
    lab = fired(diagnose(loop_run, sources=LATENCY_SOURCES, gpus="lab", devices_file=devices), "latency-bound-loop")
    h100_findings = fired(diagnose(loop_run, sources=LATENCY_SOURCES, gpus="h100"), "latency-bound-loop")
    assert lab and all(f.forecast == ["lab"] and f.title == "Latency-bound loop (forecast: LAB)" for f in lab)
    assert [f.evidence["forecast"]["lab"] for f in lab] == [f.evidence["forecast"]["h100"] for f in h100_findings]
    run_file = tmp_path / "run.json"
    run_file.write_text(loop_run.to_json())
    shown = run_cli(
        "diagnose",
        run_file,
        "--gpu",
        "lab",
        "--devices",
        devices,
        "--notebook",
        FILES / "diag_latency_loop.ipynb",
        "--json",
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert [f["forecast"] for f in document["findings"] if f["rule"] == "latency-bound-loop"] == [["lab"]] * len(lab)
    assert list(document["recommendation"]["forecast"]) == ["lab"]


# ---- audit --forecast -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def forecast_audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path, Path]:
    import shutil

    from nbscope.api.audit import AuditOptions, audit

    folder = tmp_path_factory.mktemp("audit")
    book = folder / "book"
    book.mkdir()
    for name in ("forecast_scan.md", "forecast_host_only.md"):
        shutil.copy(FILES / name, book / name)
    db = folder / "audit.db"
    from nbscope.collect import fingerprint as fp

    fingerprint = fp.collect(nvml=None)
    fingerprint["gpu"] = {"devices": fp.absent("NVML unavailable: test")}  # CPU only, whatever the machine has
    fingerprint["digest"] = fp.digest(fingerprint)
    record = audit(
        book, AuditOptions(backends=["cpu"], forecast=["t4", "h100"]), store=Store(db), fingerprint=fingerprint
    )
    return record, book, db


def test_audit_forecast_gives_the_blast_radius_sorted_by_slowdown(forecast_audit: tuple[RunRecord, Path, Path]) -> None:
    record, _, db = forecast_audit
    assert record.settings["forecast"] == ["t4", "h100"]
    radius = record.measurements["forecast"]
    assert radius["gpu"] == "t4" and radius["gpus"] == ["t4", "h100"]
    lectures = {x["path"]: x for x in radius["lectures"]}
    assert [x["path"] for x in radius["lectures"]] == ["forecast_scan.md", "forecast_host_only.md"]
    slowdowns = [x["slowdown"] for x in radius["lectures"]]
    assert slowdowns == sorted(slowdowns, reverse=True)
    scan = lectures["forecast_scan.md"]
    assert scan["dominant"]["kind"] == "loop" and "lax.scan of 100,000 iterations" in scan["dominant"]["words"]
    assert scan["keep_on_cpu"] == ["logistic"] and scan["all_on_gpu"] == "slower"
    assert scan["low_s"] - scan["cpu_s"] >= 0.5 * 111_000 * 8e-6  # 1,000 + 10,000 + 100,000 steps at ≥ 8 µs
    assert set(scan["gpus"]) == {"t4", "h100"}
    host = lectures["forecast_host_only.md"]
    assert host["verdict"] == "unchanged" and host["has_jax"] is False
    assert radius["summary"].startswith("forecast from CPU runs: 1 of 2 lectures slower on the NVIDIA T4")
    rows = {r["path"]: r for r in record.measurements["lectures"]}
    assert rows["forecast_scan.md"]["recommendation"]["basis"] == "forecast"
    assert rows["forecast_scan.md"]["forecast"]["gpus"] == ["t4", "h100"]
    # Each CPU run holds program data and names the GPUs; the store has them.
    for entry in record.measurements["notebooks"]:
        run = Store(db).get(entry["run_id"])
        assert run.measurements.get("programs") and run.settings["forecast"] == ["t4", "h100"]


def test_audit_forecast_renders_merges_and_reuses_only_runs_with_program_data(
    forecast_audit: tuple[RunRecord, Path, Path], tmp_path: Path
) -> None:
    from nbscope.api.audit import export_audit, merge
    from nbscope.api.audit._run import find_previous
    from nbscope.render.audit import audit_html, audit_markdown

    record, _, db = forecast_audit
    markdown = audit_markdown(record)
    assert (
        "GPU blast radius" in markdown
        and "| `forecast_scan.md` |" in markdown
        and "T4 forecast" in markdown
        and "lax.scan of 100,000" in markdown
    )
    assert "GPU blast radius (forecast)" in audit_html(record)
    path = export_audit(record, tmp_path / "audit.json", store=Store(db))
    merged = merge([path], store=Store(tmp_path / "merged.db"), fingerprint={"digest": "merge"})
    assert [x["path"] for x in merged.measurements["forecast"]["lectures"]] == [
        x["path"] for x in record.measurements["forecast"]["lectures"]
    ]
    store = Store(db)
    entry = next(e for e in record.measurements["notebooks"] if e["path"] == "forecast_scan.md")
    stored = store.get(entry["run_id"])
    plain = edited(stored)
    plain.measurements.pop("programs")
    store.save(plain)  # newer, same file and environment, but without program data
    target, source_hash, digests = stored.target, stored.measurements["audit"]["source_hash"], {stored.digest}
    assert find_previous(store, target, source_hash, "cpu", digests)[0].measurements.get("programs") is None
    found = find_previous(store, target, source_hash, "cpu", digests, programs=True)[0]
    assert found is not None and found.measurements.get("programs")


def test_audit_forecast_bad_input_is_one_line(run_cli: Any) -> None:
    from nbscope.api.audit import AuditOptions

    with pytest.raises(NbscopeError, match="unknown device 'v100'"):
        AuditOptions(forecast=["v100"]).validate()
    with pytest.raises(NbscopeError, match="add cpu to --backends"):
        AuditOptions(backends=["cuda"], forecast=["t4"]).validate()
    result = run_cli("audit", FILES / "forecast_scan.md", "--forecast", "quantum9")
    assert result.returncode == 2 and "unknown device 'quantum9'" in result.stderr and "Traceback" not in result.stderr
