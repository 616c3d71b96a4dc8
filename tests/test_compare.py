"""nbscope compare / diagnose / profile --backends: pairing, winners, differences, views and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag_support import FILES, RECORDS, edited, load_record
from nbscope._errors import NbscopeError
from nbscope.analyse import compare as compare_module
from nbscope.analyse.diagnose import diagnose
from nbscope.api.backends import backend_unavailable, parse_backends
from nbscope.render.compare import comparison_markdown
from nbscope.schema.codec import decode
from nbscope.schema.model import Cell


def _cell(index: int, source_hash: str, first_line: str = "", wall: float = 1.0) -> Cell:
    """A cell as a record's readers see it (pairing takes typed cells)."""
    return decode(
        Cell,
        {
            "index": index,
            "source_hash": source_hash,
            "first_line": first_line,
            "wall_s": wall,
            "compile_s": 0.0,
            "run_s": wall,
            "status": "ok",
            "line": None,
        },
    )


# ---- pairing --------------------------------------------------------------------------------------


def test_pairs_by_hash_in_order_including_duplicates() -> None:
    a = [_cell(0, "h0"), _cell(1, "dup"), _cell(2, "dup"), _cell(3, "h3")]
    b = [_cell(0, "h0"), _cell(1, "dup"), _cell(2, "dup"), _cell(3, "h3")]
    pairs = compare_module.pair_cells(a, b)
    assert [(p.a.index, p.b.index, p.match) for p in pairs] == [(i, i, "hash") for i in range(4)]


def test_edited_inserted_and_removed_cells() -> None:
    a = [
        _cell(0, "h0", "import jax"),
        _cell(1, "old", "x = f(1000)"),
        _cell(2, "h2", "plot(x)"),
        _cell(3, "gone", "print('bye')"),
    ]
    b = [_cell(0, "h0", "import jax"), _cell(1, "new", "x = f(2000)"), _cell(2, "h2", "plot(x)")]
    pairs = compare_module.pair_cells(a, b)
    assert [(p.match, p.a and p.a.index, p.b and p.b.index) for p in pairs] == [
        ("hash", 0, 0),
        ("edited", 1, 1),
        ("hash", 2, 2),
        ("only-a", 3, None),
    ]
    assert pairs[1].similarity is not None and pairs[1].similarity > 0.8


def test_similarity_pairs_across_an_insertion() -> None:
    a = [_cell(0, "h0", "import jax"), _cell(1, "a1", "result = simulate(x0, n=100)")]
    b = [
        _cell(0, "h0", "import jax"),
        _cell(1, "b1", "print('new cell')"),
        _cell(2, "b2", "result = simulate(x0, n=200)"),
    ]
    pairs = compare_module.pair_cells(a, b)
    assert [(p.match, p.a and p.a.index, p.b and p.b.index) for p in pairs] == [
        ("hash", 0, 0),
        ("only-b", None, 1),
        ("similar", 1, 2),
    ]


@pytest.mark.parametrize(
    ("a", "b", "text"),
    [
        (3.1, 1.0, "B 3.1× faster"),
        (1.0, 2.0, "A 2.0× faster"),
        (1.0, 1.05, "tie"),
        (0.001, 0.004, "tie"),
        (None, 1.0, "–"),
    ],
)
def test_winner_text(a, b, text) -> None:
    assert compare_module.Winner.of(a, b).text == text


# ---- comparison of records ------------------------------------------------------------------------


def test_cpu_vs_gpu_fixture_pairs_every_cell_and_names_the_backend() -> None:
    cpu, gpu = load_record("cpu_latency_loop"), load_record("synthetic_t4_latency_loop")
    comparison = compare_module.compare(cpu, gpu)
    data = comparison.to_dict()
    assert data["pairing"]["all_paired"] and data["pairing"]["by_hash"] == len(cpu.measurements["cells"])
    fields = {d["field"]: d for d in data["differences"]}
    assert fields["derived.platform"]["a"] == "cpu" and fields["derived.platform"]["b"] == "gpu"
    assert "gpu.devices" in fields or any(f.startswith("gpu.devices.0.name") for f in fields)
    assert any(f.startswith("versions.jax_plugins") for f in fields)
    row = data["cells"][3]  # second logistic_path call: 54 ms on CPU, 8.2 s on the (synthetic) T4
    assert row["winner"] == "A" and row["text"].startswith("A ") and row["ratio_b_over_a"] > 100
    assert data["totals"]["wall_s"]["winner"] == "A"


def test_settings_differences_are_named() -> None:
    a, b = edited(load_record("cpu_latency_loop")), edited(load_record("cpu_latency_loop"))
    a.settings["jax_cache"], b.settings["jax_cache"] = "cold", "warm"
    b.settings["env"] = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    b.measurements["totals"]["cache_state"] = "warm"
    fields = [d.field for d in compare_module.differences(a, b)]
    assert fields[:3] == ["settings.env.XLA_FLAGS", "settings.jax_cache", "derived.cache_state"]  # settings first


def test_markdown_in_the_seed_style() -> None:
    text = comparison_markdown(
        compare_module.compare(load_record("cpu_latency_loop"), load_record("synthetic_t4_latency_loop"))
    )
    lines = text.splitlines()
    assert "| Benchmark | A | B | Winner |" in lines
    assert any("× faster |" in line for line in lines)
    assert any(line.startswith("| **total wall**") for line in lines)
    assert "`JAX backend`: cpu → gpu" in text  # a reader's name for derived.platform


def test_non_profile_records_are_refused() -> None:
    record = edited(load_record("cpu_latency_loop"))
    record.kind = "bench"
    with pytest.raises(NbscopeError, match="profile run"):
        compare_module.compare(record, load_record("cpu_latency_loop"))
    with pytest.raises(NbscopeError, match="profile run"):
        diagnose(record)


def test_platform_and_x64_evidence() -> None:
    assert compare_module.platform_of(load_record("cpu_latency_loop"))["platform"] == "cpu"
    gpu = compare_module.platform_of(load_record("synthetic_t4_latency_loop"))
    assert gpu["platform"] == "gpu" and "plugin" in gpu["source"]
    assert compare_module.x64_of(load_record("cpu_x64")).x64 is True
    assert compare_module.x64_of(load_record("cpu_latency_loop")).x64 is False


def test_backend_unavailable_detection() -> None:
    ok = load_record("cpu_latency_loop")
    assert backend_unavailable(ok) is None
    broken = edited(ok)
    for cell in broken.measurements["cells"][2:]:
        cell.update(
            status="error", error={"name": "AssertionError", "message": ""}, jax={"compiles": 0, "functions": []}
        )
    broken.measurements["totals"]["compiles"] = 0
    assert "no JAX operation ran" in backend_unavailable(broken)
    named = edited(ok)
    named.measurements["cells"][2].update(
        status="error", error={"name": "RuntimeError", "message": "Unable to initialize backend 'cuda': no devices"}
    )
    assert "Unable to initialize backend" in backend_unavailable(named)
    with pytest.raises(NbscopeError, match="at least two"):
        parse_backends("cpu", at_least=2)
    with pytest.raises(NbscopeError, match="twice"):
        parse_backends("cpu, gpu, cuda")


# ---- command line -----------------------------------------------------------------------------------


def test_cli_compare_json_markdown_and_diagnose(run_cli) -> None:
    a, b = RECORDS / "cpu_latency_loop.json", RECORDS / "synthetic_t4_latency_loop.json"
    result = run_cli("compare", a, b, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["pairing"]["all_paired"] and document["recommendation"]["accelerator"] == "gpu"
    result = run_cli("compare", a, b, "--markdown")
    assert result.returncode == 0 and "| Benchmark | A | B | Winner |" in result.stdout
    result = run_cli("compare", a, b)
    assert result.returncode == 0 and "recommended backend" in result.stdout
    result = run_cli("diagnose", RECORDS / "synthetic_t4_x64.json", "--notebook", FILES / "diag_x64.ipynb", "--json")
    assert result.returncode == 0, result.stderr
    assert "weak-float64" in [f["rule"] for f in json.loads(result.stdout)["findings"]]
    result = run_cli("diagnose", RECORDS / "synthetic_t4_x64.json", "--notebook", FILES / "diag_x64.ipynb")
    assert result.returncode == 0 and "fix" in result.stdout and "Tesla T4" in result.stdout


def test_cli_errors_are_one_line(run_cli, tmp_path: Path) -> None:
    result = run_cli("compare", tmp_path / "missing.json", RECORDS / "cpu_x64.json", "--db", tmp_path / "s.db")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    result = run_cli("diagnose", RECORDS / "cpu_x64.json", "--rule", "no-such-rule")
    assert result.returncode == 2 and "unknown rule" in result.stderr
    result = run_cli("profile", FILES / "diag_first_call.ipynb", "--backends", "cpu", "--db", tmp_path / "s.db")
    assert result.returncode == 2 and "at least two" in result.stderr


@pytest.mark.slow
def test_cli_compare_runs_in_the_store_names_the_cache_setting(run_cli, profiled, tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    from nbscope.record.store import Store

    store = Store(db)
    for mode in ("cold", "warm"):
        store.save(profiled("diag_cold_cache", jax_cache=mode))  # the session's pair (test_diagnose_cold_cache.py)
    result = run_cli("compare", "1", "2", "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["pairing"]["all_paired"]
    fields = {d["field"]: d for d in document["differences"]}
    assert (fields["settings.jax_cache"]["a"], fields["settings.jax_cache"]["b"]) == ("cold", "warm")
    assert fields["derived.cache_state"]["b"] == "warm"
    assert document["recommendation"] is None  # both on the CPU


@pytest.mark.slow
def test_profile_backends_reports_an_unavailable_backend(run_cli, tmp_path: Path) -> None:
    from nbscope.collect.platforms import machine_lacks

    unknown = run_cli(
        "profile", FILES / "diag_first_call.ipynb", "--backends", "cpu,no_such_platform", "--db", tmp_path / "s.db"
    )
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "unknown backend" in unknown.stderr
    # A backend this machine has no device for is refused before anything runs (tests/test_adversarial.py).
    present = ["cpu"] + [b for b in ("cuda", "tpu") if machine_lacks(b) is None]
    if len(present) < 2:
        pytest.skip("this machine has no GPU or TPU: a second backend is refused before anything runs")
    result = run_cli(
        "profile",
        FILES / "diag_first_call.ipynb",
        "--backends",
        ",".join(present),
        "--db",
        tmp_path / "s.db",
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    backends = {b["backend"]: b for b in document["backends"]}
    assert backends["cpu"]["available"] is True and backends["cpu"]["run_id"]
    # CUDA (or a TPU) runs only where such a device and JAX's plugin for it are: then it is compared,
    # else it says why not, in JAX's own words.
    for accelerator in present[1:]:
        if backends[accelerator]["available"]:
            assert backends[accelerator]["run_id"] and accelerator in document["diagnosis"]
        else:
            assert backends[accelerator]["reason"]
    assert (document["comparison"] is not None) == any(backends[a]["available"] for a in present[1:])
    assert "cpu" in document["diagnosis"]


# ---- engine robustness and the two-backend path -----------------------------------------------------


def test_rules_survive_partial_records() -> None:
    for name in ("cpu_latency_loop", "synthetic_t4_gpu_memory", "synthetic_t4_x64", "synthetic_cpu_slow_compile_alarm"):
        record = edited(load_record(name))
        record.status = "partial"
        cells = record.measurements["cells"]
        cells[-1].update(
            status="not-run", wall_s=None, compile_s=None, run_s=None, jax=None, numba=None, gpu_memory=None
        )
        cells[-2].update(
            status="kernel-died", error={"name": "DeadKernelError", "message": "died"}, timeline={"error": "x"}
        )
        cells[0]["jax"] = {"functions": [{"name": "odd"}]}  # fields missing inside a function entry
        findings = diagnose(record, sources={})
        assert not [s for s in findings.skipped if s.reason.startswith("rule failed")], findings.skipped  # type: ignore[attr-defined]
        assert isinstance(findings.to_dict()["findings"], list)  # type: ignore[attr-defined]
        json.dumps(findings.to_dict(), default=str)  # type: ignore[attr-defined]


def test_profile_backends_with_two_available_backends(monkeypatch, capsys, tmp_path: Path, fake_nvml) -> None:
    import sys

    import nbscope.api.profile
    from nbscope.api.backends import profile_backends
    from nbscope.api.profile import ProfileOptions
    from nbscope.record.store import Store
    from nbscope.render.backends import backends_markdown

    fixtures = {"cpu": load_record("cpu_latency_loop"), "cuda": load_record("synthetic_t4_latency_loop")}
    store = Store(tmp_path / "s.db")

    def fake_profile(path, options, *, store=None, **_):  # the GPU run cannot happen here: use the recorded runs
        record = edited(fixtures[options.jax_platform])
        record.settings["jax_platform"] = options.jax_platform
        store.save(record)
        return record

    monkeypatch.setattr(nbscope.api.profile, "profile", fake_profile)
    # NVML lists GPUs (tests/fake_nvml), so cuda is not refused as a backend this machine lacks.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    monkeypatch.setenv("NBSCOPE_NVML", "force")
    result = profile_backends(FILES / "diag_latency_loop.ipynb", ProfileOptions(), "cpu,cuda", store=store)
    document = json.loads(json.dumps(result.to_dict(), default=str))
    assert [b["available"] for b in document["backends"]] == [True, True]
    assert document["comparison"]["pairing"]["all_paired"]
    assert document["recommendation"]["accelerator"] == "gpu"
    assert [p["cell"] for p in document["recommendation"]["pinned"]] == [2, 3]
    rules = {f["rule"] for f in document["diagnosis"]["cuda"]["findings"]}
    assert "latency-bound-loop" in rules  # the CPU run is the evidence
    text = backends_markdown(
        profile_backends(FILES / "diag_latency_loop.ipynb", ProfileOptions(), "cpu,cuda", store=store)
    )
    assert "| Benchmark | A | B | Winner |" in text and "Recommended backend" in text
