"""The machine fingerprint: every field present, absent-with-reason instead of errors, GPUs via NVML, digest."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbscope.collect import fingerprint as fp
from nbscope.schema.codec import decode
from nbscope.schema.machine import Machine

# The packages issue A names, listed here on purpose rather than read from nbscope.collect.fingerprint.
ISSUE_PACKAGES = (
    "numpy",
    "scipy",
    "numba",
    "jax",
    "jaxlib",
    "nbclient",
    "ipykernel",
    "jupytext",
    "myst-nb",
    "jupyter-book",
)
FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
GIB = 1024**3

# Variables that change what the fingerprint says; cleared so the tests read the same anywhere (CI too).
CLEARED_ENV = (
    "GITHUB_ACTIONS",
    "CI",
    "RUNNER_NAME",
    "RUNNER_OS",
    "RUNNER_ARCH",
    "GITHUB_RUN_ID",
    "GITHUB_WORKFLOW",
    "GITHUB_REPOSITORY",
    "GITHUB_SHA",
    "NUMBA_NUM_THREADS",
    "NUMBA_THREADING_LAYER",
)


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEARED_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in os.environ:
        if name.startswith("RUNS_ON_"):
            monkeypatch.delenv(name)


@pytest.fixture
def base(fake_nvml: Any) -> dict[str, Any]:
    """One fingerprint of this machine, collected with the fake NVML (two GPUs)."""
    return fp.collect(nvml=fake_nvml)


def cli_fake_nvml_env(**extra: str) -> dict[str, str | None]:
    path = os.pathsep.join(p for p in (str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH", "")) if p)
    # NBSCOPE_NVML=force: load "pynvml" (the fake) although this machine has no NVIDIA driver.
    return {"PYTHONPATH": path, "GITHUB_ACTIONS": None, "CI": None, "NBSCOPE_NVML": "force", **extra}


# --- every field, and absent-with-reason ----------------------------------------------------------


def test_every_field_is_present(base: dict[str, Any]) -> None:
    assert base["fingerprint_version"] == fp.FINGERPRINT_VERSION
    for section in ("host", "cpu", "memory", "blas", "numba_threading", "gpu", "versions", "environment"):
        assert isinstance(base[section], dict), section
    for key in ("os", "os_release", "kernel", "architecture", "hostname"):
        assert key in base["host"], key
    assert base["host"]["os"] == "Linux"
    assert base["host"]["architecture"] == os.uname().machine
    assert base["host"]["kernel"] == os.uname().release
    cpu = base["cpu"]
    for key in (
        "model",
        "logical_cores",
        "physical_cores",
        "mhz",
        "load_average",
        "affinity_cores",
        "cgroup_cpu_limit",
    ):
        assert key in cpu, key
    assert cpu["logical_cores"] == os.cpu_count()
    assert isinstance(cpu["model"], str) and cpu["model"]
    assert isinstance(cpu["physical_cores"], int) and 1 <= cpu["physical_cores"] <= cpu["logical_cores"]
    assert isinstance(cpu["mhz"], float) or fp.is_absent(cpu["mhz"])
    assert isinstance(cpu["load_average"], list) and len(cpu["load_average"]) == 3
    assert isinstance(base["memory"]["total_bytes"], int) and base["memory"]["total_bytes"] > 0.25 * GIB
    assert 0 < base["memory"]["available_bytes"] <= base["memory"]["total_bytes"]
    blas = base["blas"]
    assert isinstance(blas["library"], str), blas  # numpy is installed: its BLAS must be found
    assert isinstance(blas["version"], str)
    assert isinstance(blas["threads"], int) and blas["threads"] >= 1
    numba = base["numba_threading"]
    if importlib.util.find_spec("numba") is None:
        assert fp.is_absent(numba)
    else:
        assert numba["layer"] == "default"
        assert numba["threads"] == os.cpu_count() and numba["threads_source"] == "cpu count"
        assert numba["available_layers"] and set(numba["available_layers"]) <= {"tbb", "omp", "workqueue"}
    versions = base["versions"]
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    for name in ISSUE_PACKAGES:
        assert name in versions, name
        assert isinstance(versions[name], str) or fp.is_absent(versions[name]), name
    import numpy

    assert versions["numpy"] == numpy.__version__
    assert isinstance(versions["jax_plugins"], dict)
    assert "environment" in base and "ci" in base and "jax_runtime" in base
    assert fp.is_absent(base["ci"])
    assert fp.is_absent(base["jax_runtime"]) and "--jax" in base["jax_runtime"]["absent"]
    assert isinstance(base["digest"], str) and len(base["digest"]) == 12
    int(base["digest"], 16)
    json.dumps(base)  # plain JSON throughout


def test_versions_match_installed_packages(base: dict[str, Any]) -> None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("numpy", "jax", "nbclient", "myst-nb", "jupyter-book"):
        try:
            expected = version(name)
        except PackageNotFoundError:
            assert fp.is_absent(base["versions"][name])
        else:
            assert base["versions"][name] == expected, name


def test_without_nvml_the_gpu_devices_are_absent_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real pynvml on a machine without an NVIDIA driver.
    real = fp._gpus()
    if isinstance(real.get("devices"), list):
        pytest.skip("this machine has a working NVML")
    assert fp.is_absent(real["devices"])
    assert real["devices"]["absent"]
    # No binding installed at all.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("NBSCOPE_NVML", "force")
    gpu = fp.collect()["gpu"]
    assert gpu == {"devices": {"absent": "nvidia-ml-py (pynvml) not installed"}}


def test_nvml_is_not_loaded_without_an_nvidia_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp, "_nvidia_driver_present", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it would now fail loudly
    monkeypatch.delenv("NBSCOPE_NVML", raising=False)
    assert fp.collect()["gpu"]["devices"]["absent"].startswith("no NVIDIA driver")
    monkeypatch.setenv("NBSCOPE_NVML", "off")
    assert fp.collect()["gpu"]["devices"] == {"absent": "NVML disabled by NBSCOPE_NVML=off"}


def test_nvml_driver_not_loaded_is_absent_not_an_error(fake_nvml: Any) -> None:
    fake_nvml.FAIL = "init"
    gpu = fp.collect(nvml=fake_nvml)["gpu"]
    assert fp.is_absent(gpu["devices"])
    assert "NVMLError_DriverNotLoaded" in gpu["devices"]["absent"]
    assert "Driver Not Loaded" in gpu["devices"]["absent"]


@pytest.mark.parametrize("where", ["count", "handle"])
def test_nvml_failing_while_listing_devices_is_absent_not_an_error(fake_nvml: Any, where: str) -> None:
    fake_nvml.FAIL = where
    gpu = fp.collect(nvml=fake_nvml)["gpu"]
    assert fp.is_absent(gpu["devices"]), gpu
    assert "NVMLError_Unknown" in gpu["devices"]["absent"]
    assert gpu["driver_version"] == "550.54.15"
    assert fake_nvml.calls["init"] == fake_nvml.calls["shutdown"] == 1


def test_missing_packages_are_absent_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp, "installed_distributions", lambda: {"numpy": "2.0.0"})
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real_find_spec(name, *a)
    )
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    result = fp.collect()
    versions = result["versions"]
    assert versions["numpy"] == "2.0.0"
    for name in ISSUE_PACKAGES[1:]:  # numpy's version is faked above
        assert fp.is_absent(versions[name]), name
        assert versions[name]["absent"] == "not installed"
    assert versions["jax_plugins"] == {}
    assert result["numba_threading"] == {"absent": "numba not installed"}
    assert result["blas"] == {"absent": "threadpoolctl not installed"}


def test_installed_distributions_reads_dist_info_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("Jupyter_Book-1.0.4.post1.dist-info", "myst_nb-1.4.0.dist-info", "jax_cuda12_plugin-0.10.2.dist-info"):
        (tmp_path / name).mkdir()
    (tmp_path / "not_a_dist-1.0.egg-link").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "missing")])
    found = fp.installed_distributions()
    assert found == {"jupyter-book": "1.0.4.post1", "myst-nb": "1.4.0", "jax-cuda12-plugin": "0.10.2"}
    versions = fp._versions(fp.installed_distributions())
    assert versions["jupyter-book"] == "1.0.4.post1"
    assert versions["jax_plugins"] == {"jax-cuda12-plugin": "0.10.2"}
    assert fp.is_absent(versions["numpy"])


def test_environment_variables_that_change_timings_are_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = {
        "JAX_PLATFORMS": "cpu",
        "JAX_ENABLE_X64": "1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5",
        "NUMBA_NUM_THREADS": "3",
        "NUMBA_THREADING_LAYER": "omp",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    for key, value in wanted.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NBSCOPE_TEST_UNRELATED", "x")
    result = fp.collect()
    for key, value in wanted.items():
        assert result["environment"].get(key) == value, key
    assert "NBSCOPE_TEST_UNRELATED" not in result["environment"]
    assert "PATH" not in result["environment"]
    if not fp.is_absent(result["numba_threading"]):
        assert result["numba_threading"]["layer"] == "omp"
        assert result["numba_threading"]["threads"] == 3
        assert result["numba_threading"]["threads_source"] == "NUMBA_NUM_THREADS"


def test_github_actions_context_with_runs_on_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "GITHUB_ACTIONS": "true",
        "RUNNER_NAME": "runs-on--i-0abc",
        "RUNNER_OS": "Linux",
        "RUNNER_ARCH": "X64",
        "GITHUB_WORKFLOW": "lectures",
        "GITHUB_RUN_ID": "123456789",
        "GITHUB_REPOSITORY": "QuantEcon/lecture-jax",
        "GITHUB_SHA": "0123abcd",
        "RUNS_ON_INSTANCE_TYPE": "g4dn.2xlarge",
        "RUNS_ON_RUNNER_NAME": "gpu-runner",
    }
    plain = fp.collect()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ci = fp.collect()["ci"]
    assert ci["provider"] == "github-actions"
    assert ci["runner_name"] == "runs-on--i-0abc"
    assert ci["runner_os"] == "Linux" and ci["runner_arch"] == "X64"
    assert ci["workflow"] == "lectures" and ci["run_id"] == "123456789"
    assert ci["repository"] == "QuantEcon/lecture-jax" and ci["sha"] == "0123abcd"
    assert ci["runs_on"] == {"RUNS_ON_INSTANCE_TYPE": "g4dn.2xlarge", "RUNS_ON_RUNNER_NAME": "gpu-runner"}
    # CI run identifiers are volatile: the same machine inside and outside a CI run compares equal.
    assert fp.collect()["digest"] == plain["digest"]


def test_generic_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    assert fp.collect()["ci"] == {"provider": "generic", "ci": "1"}


# --- GPUs through (fake) NVML -----------------------------------------------------------------------


def check_fake_gpus(gpu: dict[str, Any]) -> None:
    assert gpu["driver_version"] == "550.54.15"
    assert gpu["cuda_driver_version"] == "12.4"
    t4, h200 = gpu["devices"]
    assert t4["index"] == 0 and h200["index"] == 1
    assert t4["name"] == "Tesla T4" and h200["name"] == "NVIDIA H200"
    assert t4["uuid"].startswith("GPU-0f3a") and h200["uuid"].startswith("GPU-7c9e")
    assert t4["compute_capability"] == "7.5" and h200["compute_capability"] == "9.0"
    assert t4["fp64_class"]["ratio"] == "1/32" and t4["fp64_class"]["weak"] is True
    assert h200["fp64_class"]["ratio"] == "1/2" and h200["fp64_class"]["weak"] is False
    assert t4["memory_total_bytes"] == 15360 * 1024**2
    assert h200["memory_total_bytes"] == 143771 * 1024**2
    assert t4["memory_used_bytes"] == 257 * 1024**2
    assert t4["memory_used_bytes"] + t4["memory_free_bytes"] == t4["memory_total_bytes"]
    assert t4["clocks"] == {"sm_mhz": 585, "sm_max_mhz": 1590, "memory_mhz": 5000, "memory_max_mhz": 5001}
    assert h200["clocks"]["sm_max_mhz"] == 1980
    assert t4["persistence_mode"] is False and h200["persistence_mode"] is True
    assert fp.is_absent(t4["mig_mode"]) and "NVMLError_NotSupported" in t4["mig_mode"]["absent"]
    assert h200["mig_mode"] is False


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_fake_nvml_two_gpus(fake_nvml: Any, as_bytes: bool) -> None:
    fake_nvml.RETURN_BYTES = as_bytes
    result = fp.collect(nvml=fake_nvml)
    check_fake_gpus(result["gpu"])
    assert fake_nvml.calls == {"init": 1, "shutdown": 1}
    assert decode(Machine, result).summary.endswith("+ 1× NVIDIA H200, 1× Tesla T4")
    json.dumps(result)  # names decoded: no bytes left


@pytest.mark.parametrize("as_bytes", ["0", "1"], ids=["str", "bytes"])
def test_fake_nvml_through_the_cli(run_cli_process: Any, as_bytes: str) -> None:
    # A real process: the fake pynvml is found through PYTHONPATH, which only a new process reads.
    result = run_cli_process("info", "--json", env=cli_fake_nvml_env(FAKE_NVML_BYTES=as_bytes))
    assert result.returncode == 0, result.stderr
    check_fake_gpus(json.loads(result.stdout)["gpu"])


def test_fake_nvml_terminal_view(run_cli_process: Any) -> None:
    # A real process: the fake pynvml is found through PYTHONPATH, which only a new process reads.
    result = run_cli_process("info", env=cli_fake_nvml_env(COLUMNS="200"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "gpu.devices.0.name" in out and "Tesla T4" in out
    assert "gpu.devices.1.name" in out and "NVIDIA H200" in out
    assert "15.0 GiB" in out  # the T4's memory, formatted


def test_gpu_name_changes_the_digest_but_gpu_memory_in_use_does_not(base: dict[str, Any]) -> None:
    other = copy.deepcopy(base)
    other["gpu"]["devices"][0]["memory_used_bytes"] += 10**9
    other["gpu"]["devices"][0]["memory_free_bytes"] -= 10**9
    other["gpu"]["devices"][0]["clocks"]["sm_mhz"] = 1590
    other["gpu"]["devices"][1]["uuid"] = "GPU-another-card"
    assert fp.digest(other) == base["digest"]
    other["gpu"]["devices"][0]["name"] = "Tesla V100"
    assert fp.digest(other) != base["digest"]


# --- JAX runtime (opt-in) ---------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")
def test_info_jax_reports_the_runtime(run_cli_process: Any) -> None:
    # A real process: JAX reads JAX_PLATFORMS and JAX_ENABLE_X64 once, when it is first imported.
    result = run_cli_process("info", "--json", "--jax", env={"JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"})
    assert result.returncode == 0, result.stderr
    runtime = json.loads(result.stdout)["jax_runtime"]
    assert runtime["default_backend"] == "cpu"
    assert runtime["x64"] is True  # read from the JAX config, which JAX_ENABLE_X64 sets
    assert runtime["devices"] and all(d["platform"] == "cpu" for d in runtime["devices"])
    assert runtime["devices"][0]["id"] == 0


def test_without_jax_flag_jax_is_not_imported() -> None:
    code = "import sys; from nbscope.collect import fingerprint as f; f.collect(); print('jax' in sys.modules, 'numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


# --- digest -----------------------------------------------------------------------------------------


def test_same_environment_gives_the_same_digest(base: dict[str, Any], fake_nvml: Any) -> None:
    again = fp.collect(nvml=fake_nvml)
    assert again["digest"] == base["digest"]
    assert fp.digest(base) == base["digest"]  # the stored digest ignores itself and collection_s


def test_same_environment_in_two_processes_gives_the_same_digest(run_cli_process: Any) -> None:
    # Two real processes, as the name says (and the fake pynvml comes through PYTHONPATH).
    env = cli_fake_nvml_env()
    first, second = run_cli_process("info", "--json", env=env), run_cli_process("info", "--json", env=env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["digest"] == b["digest"]
    assert fp.digest(a) == a["digest"]


def test_volatile_fields_do_not_change_the_digest(base: dict[str, Any]) -> None:
    other = copy.deepcopy(base)
    other["collected_at"] = "2001-01-01T00:00:00Z"
    other["collection_s"] = 9.9
    other["host"]["hostname"] = "elsewhere"
    other["cpu"]["mhz"] = 1234.5
    other["cpu"]["load_average"] = [7.0, 6.0, 5.0]
    other["memory"]["available_bytes"] = 1
    other["ci"] = {"provider": "github-actions", "run_id": "42"}
    other["jax_runtime"] = {"default_backend": "cpu", "x64": False, "devices": []}
    assert fp.digest(other) == base["digest"]
    assert fp.diff(base, other) == []
    assert {row[0] for row in fp.diff(base, other, include_volatile=True)} >= {"cpu.mhz", "host.hostname"}


@pytest.mark.parametrize(
    "path, value",
    [
        (("blas", "threads"), 64),
        (("versions", "jax"), "0.0.1"),
        (("versions", "numpy"), "1.0.0"),
        (("cpu", "model"), "Some Other CPU"),
        (("cpu", "logical_cores"), 1024),
        (("memory", "total_bytes"), 1),
        (("environment",), {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
        (("numba_threading", "layer"), "tbb"),
        (("gpu", "driver_version"), "535.0"),
    ],
)
def test_comparable_fields_change_the_digest(base: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    other = copy.deepcopy(base)
    target = other
    for key in path[:-1]:
        target = target[key]
    assert target[path[-1]] != value
    target[path[-1]] = value
    assert fp.digest(other) != base["digest"]
    assert [row[0] for row in fp.diff(base, other)] != []


# --- diff -------------------------------------------------------------------------------------------


def changed_pair(tmp_path: Path, base: dict[str, Any]) -> tuple[Path, Path]:
    b = copy.deepcopy(base)
    b["blas"]["threads"] = base["blas"]["threads"] + 7
    b["versions"]["jax"] = "0.0.1"
    b["cpu"]["load_average"] = [9.0, 9.0, 9.0]  # volatile: left out unless --all
    b["digest"] = fp.digest(b)
    path_a, path_b = tmp_path / "A.json", tmp_path / "B.json"
    path_a.write_text(json.dumps(base))
    path_b.write_text(json.dumps(b))
    return path_a, path_b


def test_diff_names_exactly_the_changed_fields(tmp_path: Path, base: dict[str, Any]) -> None:
    a, b = changed_pair(tmp_path, base)
    rows = fp.diff(json.loads(a.read_text()), json.loads(b.read_text()))
    assert [(path, va) for path, va, _ in rows] == [
        ("blas.threads", base["blas"]["threads"]),
        ("versions.jax", base["versions"]["jax"]),
    ]
    assert rows[1][2] == "0.0.1"


def test_info_diff_json(tmp_path: Path, base: dict[str, Any], run_cli: Any) -> None:
    a, b = changed_pair(tmp_path, base)
    result = run_cli("info", "--diff", a, b, "--json")
    assert result.returncode == 1, result.stderr  # fields differ: exit 1, as diff does
    assert json.loads(result.stdout) == [
        {"field": "blas.threads", "a": base["blas"]["threads"], "b": base["blas"]["threads"] + 7},
        {"field": "versions.jax", "a": base["versions"]["jax"], "b": "0.0.1"},
    ]
    with_all = run_cli("info", "--diff", a, b, "--json", "--volatile")
    fields = [row["field"] for row in json.loads(with_all.stdout)]
    assert {"blas.threads", "versions.jax", "cpu.load_average", "digest"} <= set(fields)


def test_info_diff_table(tmp_path: Path, base: dict[str, Any], run_cli: Any) -> None:
    a, b = changed_pair(tmp_path, base)
    result = run_cli("info", "--diff", a, b, env={"COLUMNS": "200"})
    assert result.returncode == 1, result.stderr
    assert "2 fields differ" in result.stdout
    assert "blas.threads" in result.stdout and "versions.jax" in result.stdout
    assert "load_average" not in result.stdout
    same = run_cli("info", "--diff", a, a, env={"COLUMNS": "200"})
    assert same.returncode == 0 and "agree on every compared field" in same.stdout


def test_info_diff_reads_a_run_record(tmp_path: Path, base: dict[str, Any], run_cli: Any) -> None:
    from nbscope.record.run import RunRecord

    a, b = changed_pair(tmp_path, base)
    record_path = tmp_path / "run.json"
    record_path.write_text(RunRecord(kind="profile", target="x.md", fingerprint=json.loads(b.read_text())).to_json())
    result = run_cli("info", "--diff", a, record_path, "--json")
    assert result.returncode == 1, result.stderr
    assert [row["field"] for row in json.loads(result.stdout)] == ["blas.threads", "versions.jax"]


def test_flatten_indexes_lists_of_objects() -> None:
    flat = fp.flatten({"a": {"b": 1, "c": [{"d": 2}], "e": [1, 2], "f": {"absent": "why"}, "g": {}}})
    assert flat == {"a.b": 1, "a.c.0.d": 2, "a.e": [1, 2], "a.f": {"absent": "why"}, "a.g": {}}
