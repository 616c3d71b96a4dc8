"""Per-cell device timelines: the in-kernel tracer, the trace summary and its classification."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbscope.collect import timeline
from nbscope.collect.probe import PROBE_FILE
from nbscope.collect.timeline import TraceEvents, _Op, summarise, summarise_cell
from nbscope.schema.codec import decode
from nbscope.schema.probe import ProbeTimeline

FILES = Path(__file__).resolve().parent / "files"
_TRACER_SPEC = importlib.util.spec_from_file_location("_nbscope_timeline", PROBE_FILE.with_name("_nbscope_timeline.py"))
assert _TRACER_SPEC is not None and _TRACER_SPEC.loader is not None
_nbscope_timeline = importlib.util.module_from_spec(_TRACER_SPEC)  # the in-kernel tracer, by its file
_TRACER_SPEC.loader.exec_module(_nbscope_timeline)
MS = 1_000_000  # nanoseconds


# ---- intervals ---------------------------------------------------------------------------------


def test_union_overlap_and_top_level() -> None:
    merged = timeline.union([(5, 10), (0, 3), (2, 4), (10, 12)])
    assert merged == [(0, 4), (5, 12)]
    assert timeline.covered(merged) == 11
    assert timeline.overlap(merged, [(3, 6), (11, 20)]) == 1 + 1 + 1
    # JAX records each jitted call twice, nested: count calls, not events.
    assert timeline._top_level([(0, 10), (1, 9), (20, 30), (21, 29), (40, 41)]) == 3


# ---- classification on synthetic traces ----------------------------------------------------------


def _ops(count: int, duration_ns: int, gap_ns: int, name: str = "fusion", start: int = 0) -> list[_Op]:
    step = duration_ns + gap_ns
    return [_Op(start + i * step, start + i * step + duration_ns, name, "jit_f", 1) for i in range(count)]


def test_one_long_op_is_compute_bound() -> None:
    events = TraceEvents(events=3, span_ns=100 * MS, ops=_ops(1, 90 * MS, 0, "dot"), programs=1)
    events.dispatch = {1: [(0, 95 * MS)]}
    events.busy_on_line = {1: [(0, 90 * MS)]}
    summary = summarise(events, wall_s=0.1, compile_s=0.0)
    assert summary["classification"] == "compute-bound"
    assert summary["ops"] == 1
    assert summary["device_busy_s"] == pytest.approx(0.09)
    assert summary["dispatch_s"] == pytest.approx(0.005)
    assert summary["top_ops"][0] == {"name": "dot", "module": "jit_f", "count": 1, "total_s": 0.09, "longest_s": 0.09}


def test_many_tiny_ops_inside_a_loop_op_are_launch_bound() -> None:
    # A CPU while thunk (one long op) holding 10 000 body ops of 1 µs each.
    body = _ops(10_000, 1_000, 500, start=100)
    loop = _Op(0, body[-1].end + 100, "while.5", "jit_f", 1)
    events = TraceEvents(events=20_003, span_ns=loop.end, ops=[loop, *body], programs=1)
    summary = summarise(events, wall_s=loop.end / 1e9, compile_s=0.0)
    assert summary["ops"] == 10_000  # leaf ops: the loop op contains the others
    assert summary["op_events"] == 10_001
    assert summary["median_op_s"] == pytest.approx(1e-6)
    assert summary["classification"] == "launch-bound"
    assert summary["top_ops"][0]["name"] == "while.5"
    assert summary["warnings"]  # 20 000 events distort the cell's timing


def test_compile_transfer_and_host_bound() -> None:
    compiled = summarise(TraceEvents(span_ns=100 * MS, ops=_ops(2, MS, MS)), wall_s=0.1, compile_s=0.08)
    assert compiled["classification"] == "compile-bound"

    copies = TraceEvents(span_ns=100 * MS, ops=_ops(1, 5 * MS, 0))
    copies.copies = [(10 * MS, 70 * MS, "MemcpyH2D", 400 * 2**20), (70 * MS, 90 * MS, "MemcpyD2H", 100 * 2**20)]
    moved = summarise(copies, wall_s=0.1, compile_s=0.0)
    assert moved["classification"] == "transfer-bound"
    assert moved["transfers"]["count"] == 2
    assert moved["transfers"]["bytes"] == 500 * 2**20
    assert (moved["transfers"]["host_to_device"], moved["transfers"]["device_to_host"]) == (1, 1)

    python = summarise(TraceEvents(span_ns=100 * MS), wall_s=0.1, compile_s=0.0)
    assert python["classification"] == "host-bound"
    assert python["ops"] == 0 and python["device_busy_s"] == 0


def test_gpu_style_tiny_copies_count_as_latency() -> None:
    # XLA:GPU copies each loop predicate to the host: many 1-byte copies are latency, not bandwidth.
    # Kernels of 2 µs every 10 µs: the device is idle 80 % of the loop, waiting for launches.
    events = TraceEvents(platform="gpu", span_ns=20 * MS, ops=_ops(2000, 2_000, 8_000))
    events.copies = [(i * 10_000 + 2_000, i * 10_000 + 4_000, "MemcpyD2H", 1) for i in range(2000)]
    summary = summarise(events, wall_s=0.022, compile_s=0.0)
    assert summary["device_busy_s"] == pytest.approx(0.004)
    assert summary["classification"] == "launch-bound"
    assert summary["shares"]["launch"] > 0.8
    assert summary["transfers"]["device_to_host"] == 2000


def test_summary_keys_the_diagnosis_reads() -> None:
    summary = summarise(TraceEvents(span_ns=MS, ops=_ops(1, MS // 2, 0)), wall_s=0.001, compile_s=0.0)
    for key in ("classification", "device_busy_s", "wall_s", "ops", "top_ops"):
        assert key in summary
    assert summary["classification"] in timeline.CLASSIFICATIONS
    json.dumps(summary)


def _stopped(line: dict[str, Any]) -> ProbeTimeline:
    """What the probe's ``Timeline.stop`` wrote, as the collector reads it from the probe's line."""
    return decode(ProbeTimeline, line)


def test_skipped_and_failed_traces() -> None:
    assert summarise_cell(_stopped({"skipped": "RuntimeError: busy", "seq": 3}), {})["classification"] is None
    failed = summarise_cell(_stopped({"path": "/nonexistent/cell-0001", "error": "RuntimeError: x"}), {})
    assert failed == {"version": 1, "classification": None, "error": "RuntimeError: x"}


# ---- real traces from the in-kernel tracer ---------------------------------------------------------

_TRACER_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import _nbscope_timeline
kept, temporary = sys.argv[2], sys.argv[3]
out = {}
t = _nbscope_timeline.Timeline(kept)
t.start(1)
out["before_jax"] = t.stop(1)
out["jax_imported"] = "jax" in sys.modules
import jax, jax.numpy as jnp
from jax._src import xla_bridge
t.start(1)
out["before_backends"] = t.stop(1)
out["tracer_started_backends"] = xla_bridge.backends_are_initialized()
x = jnp.ones((300, 300))
(x @ x).block_until_ready()
for name, folder in (("kept", kept), ("temporary", temporary)):
    t = _nbscope_timeline.Timeline(folder)
    out[name + "_is_temporary"] = t.temporary
    t.start(2)
    (x @ x + 1.0).block_until_ready()
    out[name] = t.stop(2)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("timeline")
    home = root / "home"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "_nbscope_probe.py").write_text("# marks a probe home\n")
    done = subprocess.run(
        [sys.executable, "-c", _TRACER_SCRIPT, str(PROBE_FILE.parent), str(root / "kept"), str(home / "traces")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},  # XLA:CPU traces
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tracer_waits_for_the_notebook_to_import_jax(traced: dict[str, Any]) -> None:
    assert traced["before_jax"] is None
    assert traced["jax_imported"] is False


def test_tracer_waits_for_the_notebook_to_start_jax_backends(traced: dict[str, Any]) -> None:
    """Tracing starts JAX's backends: until the notebook's code has, a cell is not traced, and says why."""
    assert traced["before_backends"] == {"skipped": _nbscope_timeline.BACKENDS_NOT_STARTED, "seq": 1}
    assert traced["tracer_started_backends"] is False


@pytest.mark.slow
def test_timeline_leaves_backend_start_to_the_notebook(tmp_path: Path) -> None:
    """A cell may configure JAX between ``import jax`` and its first JAX work (here jax_num_cpu_devices,
    which JAX refuses once its backends started): under --timeline it still runs as written."""
    from nbscope.api.profile import ProfileOptions, profile

    record = profile(
        FILES / "timeline_backend_after_import.ipynb", ProfileOptions(timeline=True), live_path=tmp_path / "live.jsonl"
    )
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 3, [c.get("error") for c in cells]
    assert cells[0].get("timeline") is None  # jax not imported yet
    configure = cells[1]["timeline"]
    assert configure["classification"] is None and configure["skipped"] == _nbscope_timeline.BACKENDS_NOT_STARTED
    assert cells[2]["timeline"]["ops"] >= 1  # the notebook started the backends: later cells are traced


def test_kept_trace_is_a_jax_profiler_trace_and_stays(traced: dict[str, Any]) -> None:
    stop = traced["kept"]
    assert traced["kept_is_temporary"] is False
    folder = Path(stop["path"])
    assert folder.name == "cell-0002" and stop["stop_s"] >= 0
    assert list(folder.glob("plugins/profile/*/*.xplane.pb"))
    assert list(folder.glob("plugins/profile/*/*.trace.json.gz"))  # jax.profiler's export, for Perfetto
    summary = summarise_cell(_stopped(stop), {"code_s": 0.05, "compile_s": 0.0})
    assert summary["trace"] == str(folder) and folder.exists()
    assert summary["platform"] == "cpu"
    assert summary["ops"] >= 1 and summary["device_busy_s"] > 0
    assert summary["dispatches"] >= 1 and summary["programs"] >= 1
    # block_until_ready shows as CommonPjRtBuffer::Await only when the result was not ready yet.
    assert isinstance(summary["syncs"]["count"], int)
    assert summary["classification"] in timeline.CLASSIFICATIONS


def test_temporary_trace_is_deleted_after_summarising(traced: dict[str, Any]) -> None:
    stop = traced["temporary"]
    assert traced["temporary_is_temporary"] is True
    folder = Path(stop["path"])
    assert list(folder.glob("plugins/profile/*/*.xplane.pb"))
    assert not list(folder.glob("plugins/profile/*/*.trace.json.gz"))  # the bare session skips the export
    summary = summarise_cell(_stopped(stop), {"code_s": 0.05, "compile_s": 0.0})
    assert summary["ops"] >= 1
    assert summary["trace"] is None and not folder.exists()


# ---- end to end ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_scan_and_matmul_cells_get_different_timelines(tmp_path: Path) -> None:
    from nbscope.api.profile import ProfileOptions, profile

    # On the CPU: what these traces look like on XLA:CPU (on a GPU the scans are latency-bound, see the notebook).
    record = profile(
        FILES / "timeline_scan_matmul.ipynb",
        ProfileOptions(timeline=True, jax_platform="cpu"),
        live_path=tmp_path / "live.jsonl",
    )
    assert record.status == "ok"
    cells = record.measurements["cells"]
    assert cells[0].get("timeline") is None  # `import jax` runs before any trace can start
    scalar, vector, matmul = (cells[i]["timeline"] for i in (2, 3, 4))

    # One large matmul, compiled in an earlier cell: one long op holding the device for most of the cell.
    assert matmul["classification"] == "compute-bound"
    assert matmul["ops"] <= 3
    assert matmul["top_ops"][0]["longest_s"] >= 0.5 * matmul["device_busy_s"]
    assert matmul["device_busy_s"] >= 0.4 * matmul["wall_s"]

    # lax.scan of 100 000 logistic-map steps on a scalar: XLA:CPU compiles the whole loop into one
    # kernel, so the device is busy for well under a millisecond while compiling fills the cell.
    assert scalar["ops"] <= 10
    assert scalar["device_busy_s"] < 0.1 * scalar["wall_s"]  # its longest op included
    assert scalar["classification"] != matmul["classification"]

    # The same trivial body on a 1000-element carry runs op by op: many short ops, whose launches are what
    # the device side of the cell costs. Launch-bound; but on a busy machine the gaps in which the system
    # ran other processes count as host time and can outweigh the launches: then it is host-bound.
    assert vector["ops"] >= 20_000
    assert vector["median_op_s"] < 20e-6
    device_side = {part: share for part, share in vector["shares"].items() if part != "host"}
    assert max(device_side, key=device_side.__getitem__) == "launch", vector["shares"]
    assert vector["classification"] in ("launch-bound", "host-bound")
    assert vector["classification"] != matmul["classification"]
    assert vector["ops"] > 1000 * matmul["ops"]
    for summary in (scalar, vector, matmul):
        assert summary["trace"] is None  # raw traces are not kept by default


@pytest.mark.slow
def test_cli_timeline_keeps_traces(run_cli: Any, tmp_path: Path, tmp_db: Path) -> None:
    kept = tmp_path / "kept"
    done = run_cli(
        "profile",
        FILES / "timeline_tiny.ipynb",
        "--keep-traces",
        "kept",
        "--json",
        "--db",
        tmp_db,
        env={"JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)["measurements"]["cells"]
    assert "timeline" not in cells[0]
    jax_cell, python_cell = cells[1]["timeline"], cells[2]["timeline"]
    assert jax_cell["ops"] >= 1 and jax_cell["transfers"]["count"] >= 1
    assert python_cell["ops"] == 0 and python_cell["classification"] == "host-bound"
    for summary in (jax_cell, python_cell):
        folder = Path(summary["trace"])
        assert folder.parent == kept.resolve()
        assert list(folder.glob("plugins/profile/*/*.trace.json.gz"))
