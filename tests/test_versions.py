"""``nbscope versions`` and ``nbscope bisect``: isolated environments per variant, built from the package
index (and, for the tests, a wheel folder of a tiny package made here), profiled in their own kernels."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import run_in_process
from nbscope._errors import NbscopeError
from nbscope.analyse.versions import next_probe
from nbscope.collect import environments
from nbscope.collect.notebook import read
from nbscope.collect.requirements import imported_modules, notebook_requirements
from nbscope.record.live import live_folder
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
SRC = Path(__file__).resolve().parents[1] / "src"
SLOW_NOTEBOOK = FILES / "versions_slowpkg.md"
JAX_NOTEBOOK = FILES / "versions_jax.md"
PACKAGE = "nbscope-test-slowpkg"
RELEASES = ("1.0", "1.1", "1.2", "1.3", "1.4")
# work() sleeps: 8× longer from 1.3 on. A sleep does not depend on the CPU's speed, and 0.2 s against 1.6 s
# stays past the 50 % the tests allow with up to 2.6 s of a busy machine's overhead on each side (0.4 s against
# 1.2 s allowed 1.2 s: a machine loaded 7 on 2 cores once found 1.4 where 1.3 made the cell slower).
FAST_S, SLOW_S = 0.2, 1.6


def write_wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel holding one module ``name/__init__.py`` (no build tool needed)."""
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": source,
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: nbscope-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    target = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return target


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Releases 1.0–1.4 of the test package; from 1.3 on ``work()`` is 8× slower."""
    folder = tmp_path_factory.mktemp("wheels")
    for version in RELEASES:
        seconds = SLOW_S if tuple(map(int, version.split("."))) >= (1, 3) else FAST_S
        source = f'"""A test package for nbscope bisect."""\nimport time\n\n__version__ = "{version}"\n\n\ndef work():\n    time.sleep({seconds})\n'
        write_wheel(folder, "nbscope_test_slowpkg", version, source)
    return folder


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One environment cache for the module's tests: a variant built once is reused by the next test."""
    return tmp_path_factory.mktemp("envs")


def nbscope(*args: str | os.PathLike[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python -m nbscope ...`` with nbscope's source on PYTHONPATH (which no variant kernel may see)."""
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def nbscope_here(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """As :func:`nbscope`, in this process (conftest's ``run_in_process``): the same ``PYTHONPATH`` reaches the
    variants' kernels, which must not see it; for the cases that need no process of their own."""
    pythonpath = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return run_in_process(args, env={"PYTHONPATH": pythonpath}, cwd=cwd)


# ---- fast: parsing, requirements, the search, the cache -------------------------------------------------


def test_a_variant_is_split_into_requirements_and_a_bad_one_is_refused() -> None:
    assert environments.parse_requirements("jax==0.10.2 jaxlib==0.10.2") == ["jax==0.10.2", "jaxlib==0.10.2"]
    assert environments.parse_requirements("jax >= 0.4, <0.5 numpy==2.1") == ["jax>=0.4,<0.5", "numpy==2.1"]
    with pytest.raises(NbscopeError, match="not a requirement"):
        environments.parse_requirements("==0.10.2")
    with pytest.raises(NbscopeError):
        environments.parse_requirements("   ")


def test_the_notebooks_imports_are_pinned_at_the_versions_installed_here() -> None:
    from importlib import metadata

    assert imported_modules(["%matplotlib inline\nimport numpy as np, os\nfrom jax import numpy as jnp\n!ls"]) == [
        "numpy",
        "os",
        "jax",
    ]
    assert imported_modules(["x = 1 +\nimport scipy.linalg"]) == ["scipy"]  # unparsable: line by line
    found = notebook_requirements(read(JAX_NOTEBOOK))
    assert f"jax=={metadata.version('jax')}" in found.lines
    assert f"ipykernel=={metadata.version('ipykernel')}" in found.lines
    # The package a variant names is the variant's to decide.
    assert not any(
        line.startswith("jax==") for line in notebook_requirements(read(JAX_NOTEBOOK), exclude=["jax"]).lines
    )
    unresolved = notebook_requirements(read(SLOW_NOTEBOOK), exclude=[PACKAGE]).unresolved
    assert unresolved == ["nbscope_test_slowpkg"]  # not installed here: it must come from the variant


def test_a_requirements_file_gives_the_notebooks_requirements_less_the_variants_packages(tmp_path: Path) -> None:
    from importlib import metadata

    from nbscope.api.versions import VersionsOptions, variant_requirements

    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned for the lecture\njax==0.10.2  # the variant decides\nscipy>=1.11\n")
    lines, notes = variant_requirements(
        read(JAX_NOTEBOOK), ["jax==0.10.1"], VersionsOptions(requirements_file=requirements)
    )
    assert lines == ["scipy>=1.11", f"ipykernel=={metadata.version('ipykernel')}", "jax==0.10.1"]
    assert notes == []


@pytest.mark.parametrize("releases", range(2, 34))
def test_bisection_needs_at_most_log2_n_plus_one_profiles(releases: int) -> None:
    """For every position of the first bad release (or none), the search profiles at most
    ceil(log2(n)) versions after the good one, and finds it."""
    for first_bad in [*range(1, releases), releases]:  # ``releases``: no version is bad
        low, high, profiled = 0, releases, 1  # the good version is the baseline
        while (position := next_probe(low, high, set())) is not None:
            profiled += 1
            if position >= first_bad:
                high = position
            else:
                low = position
        assert high == first_bad
        assert profiled <= math.ceil(math.log2(releases)) + 1


def test_untestable_versions_are_skipped() -> None:
    assert next_probe(0, 5, {2}) in (1, 3)
    assert next_probe(0, 3, {1, 2}) is None


def test_released_versions_between_good_and_bad(wheels: Path) -> None:
    listed = environments.released_versions(PACKAGE, find_links=[str(wheels)], no_index=True)
    assert listed == list(RELEASES)
    assert environments.versions_between(listed, "1.1", "1.3") == ["1.1", "1.2", "1.3"]
    with pytest.raises(NbscopeError, match="not among the released versions"):
        environments.versions_between(listed, "1.0", "2.0")
    with pytest.raises(NbscopeError, match="older"):
        environments.versions_between(listed, "1.3", "1.1")


def test_a_folder_nbscope_did_not_make_is_never_removed(tmp_path: Path) -> None:
    spec = environments.EnvironmentSpec(requirements=("ipykernel",))
    mine = tmp_path / spec.key()
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(NbscopeError, match="not made by nbscope"):
        environments.ensure(spec, tmp_path)
    assert (mine / "notes.txt").read_text() == "mine"
    other = tmp_path / "other.txt"
    other.write_text("keep")
    assert environments.clear_cache(tmp_path)["removed"] == []
    assert other.exists() and (mine / "notes.txt").exists()


def test_bad_options_are_one_line_errors(tmp_path: Path, wheels: Path, run_cli: Any) -> None:
    cases = [
        (["versions", SLOW_NOTEBOOK], "at least one variant"),
        (["versions", SLOW_NOTEBOOK, "--with", "==0.10.2"], "not a requirement"),
        (["versions", SLOW_NOTEBOOK, "--with", "jax==0.10.2", "--no-index"], "--no-index needs --find-links"),
        (["versions", SLOW_NOTEBOOK, "--with", "jax==0.10.2", "--find-links", tmp_path / "none"], "not a folder"),
        (
            ["bisect", SLOW_NOTEBOOK, "--package", PACKAGE, "--good", "1.0", "--bad", "1.4", "--cell", "2", "--total"],
            "exclude each other",
        ),
        (
            [
                "bisect",
                SLOW_NOTEBOOK,
                "--package",
                PACKAGE,
                "--good",
                "1.0",
                "--bad",
                "9.9",
                "--find-links",
                wheels,
                "--no-index",
                "--env-cache",
                tmp_path / "envs",
            ],
            "not among the released versions",
        ),
    ]
    for args, message in cases:
        done = run_cli(*args, "--db", tmp_path / "db.sqlite", cwd=tmp_path)  # refused before any environment
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("nbscope: error:") and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


# ---- slow: real environments, real kernels ----------------------------------------------------------------


@pytest.mark.slow
def test_versions_profiles_each_variant_in_its_own_environment(tmp_path: Path, wheels: Path, env_cache: Path) -> None:
    db = tmp_path / "db.sqlite"
    args = [
        "versions",
        SLOW_NOTEBOOK,
        "--with",
        f"{PACKAGE}==1.0",
        "--with",
        f"{PACKAGE}==1.3",
        "--find-links",
        wheels,
        "--env-cache",
        env_cache,
        "--max-slowdown",
        "50%",
        "--db",
        db,
    ]
    done = nbscope(*args, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    first, second = result["variants"]
    for variant, version in ((first, "1.0"), (second, "1.3")):
        assert variant["status"] == "ok" and variant["error"] is None
        assert variant["versions"][PACKAGE] == version  # read from the variant's environment
        # The kernel ran the environment's Python (the probe, loaded there, says which).
        assert variant["kernel_python"].startswith(variant["environment"])
    assert first["environment"] != second["environment"]
    assert [d["field"] for d in result["differences"]] == [f"versions.{PACKAGE}"]
    assert result["differences"][0]["values"] == ["1.0", "1.3"]
    # Every cell ran, the isolation check included: nbscope's own PYTHONPATH did not reach the kernel.
    assert all(run["status"] == "ok" for row in result["cells"] for run in row["runs"])
    work = result["cells"][1]
    assert work["runs"][1]["wall_s"] > 2 * work["runs"][0]["wall_s"]
    gate = result["gates"][0]
    assert {c["index"]: c["verdict"] for c in gate["cells"]}[1] == "regression"
    assert gate["total"]["verdict"] == "regression"

    # Both runs are stored with their fingerprints: history shows one series per environment.
    store = Store(db)
    records = [store.get(v["run_id"]) for v in (first, second)]
    assert [r.fingerprint["versions"][PACKAGE] for r in records] == ["1.0", "1.3"]
    assert records[0].settings["variant"]["requirements"] == [f"{PACKAGE}==1.0"]
    history = nbscope_here("history", records[0].target, "--db", db, "--json", cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    digests = {s["digest"] for s in json.loads(history.stdout)["series"]}
    assert digests == {first["digest"], second["digest"]}

    # The same variants again: both environments come from the cache; the table names the difference.
    again = nbscope_here(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "reusing environment" in again.stdout
    assert f"{PACKAGE} version: 1.0 → 1.3" in again.stdout  # a reader's name for versions.{PACKAGE}
    assert "regression" in again.stdout


@pytest.mark.slow
def test_a_variant_that_cannot_be_installed_does_not_lose_the_others(
    tmp_path: Path, wheels: Path, env_cache: Path
) -> None:
    done = nbscope_here(
        "versions",
        SLOW_NOTEBOOK,
        "--with",
        f"{PACKAGE}==1.0",
        "--with",
        f"{PACKAGE}==7.7",
        "--find-links",
        wheels,
        "--env-cache",
        env_cache,
        "--db",
        tmp_path / "db.sqlite",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    ok, missing = json.loads(done.stdout)["variants"]
    assert ok["status"] == "ok" and ok["run_id"] is not None
    assert missing["run_id"] is None and "7.7" in missing["error"]
    # Nothing half-built is left for the failed variant.
    assert all(e["complete"] for e in environments.list_environments(env_cache))
    shown = nbscope_here(
        "versions",
        SLOW_NOTEBOOK,
        "--with",
        f"{PACKAGE}==1.0",
        "--with",
        f"{PACKAGE}==7.7",
        "--find-links",
        wheels,
        "--env-cache",
        env_cache,
        "--db",
        tmp_path / "db.sqlite",
        "--markdown",
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"| `{PACKAGE}==1.0` |" in shown.stdout  # the variant that ran, as a column
    assert f"> `{PACKAGE}==7.7` not run: could not install" in shown.stdout


@pytest.mark.slow
def test_bisect_finds_the_release_that_made_a_cell_slower(tmp_path: Path, wheels: Path, env_cache: Path) -> None:
    db = tmp_path / "db.sqlite"
    done = nbscope_here(
        "bisect",
        SLOW_NOTEBOOK,
        "--package",
        PACKAGE,
        "--good",
        "1.0",
        "--bad",
        "1.4",
        "--cell",
        "2",
        "--max-slowdown",
        "50%",
        "--find-links",
        wheels,
        "--env-cache",
        env_cache,
        "--db",
        db,
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["versions"] == list(RELEASES)
    assert result["first_bad"] == "1.3" and result["last_good"] == "1.2"
    assert result["profiles"] <= math.ceil(math.log2(len(RELEASES))) + 1
    assert len(Store(db).runs()) == result["profiles"]  # every profile stored
    assert result["slowdown"]["verdict"] == "regression" and result["slowdown"]["ratio"] > 2
    assert result["slowdown"]["test"] == "mann-whitney"  # 3 repeats per version by default
    evidence = result["evidence"]
    assert evidence["moved"]["mostly"]["part"] == "run"  # a sleep: run time, not compiles
    assert evidence["compile_counts_changed"] == {}
    assert [d["field"] for d in evidence["differences"]] == [f"versions.{PACKAGE}"]

    shown = nbscope_here(
        "bisect",
        SLOW_NOTEBOOK,
        "--package",
        PACKAGE,
        "--good",
        "1.0",
        "--bad",
        "1.4",
        "--total",
        "--repeat",
        "1",
        "--max-slowdown",
        "50%",
        "--find-links",
        wheels,
        "--env-cache",
        env_cache,
        "--db",
        db,
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"first bad release: {PACKAGE} 1.3 (last good 1.2) on the total" in shown.stdout


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "nbscope", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _building(cache: Path) -> list[Path]:
    return [p for p in cache.glob("*") if (p / environments.BUILDING_MARKER).exists()] if cache.exists() else []


@pytest.mark.slow
def test_an_interrupted_build_is_never_reused(tmp_path: Path, wheels: Path) -> None:
    cache = tmp_path / "envs"
    args = [
        "versions",
        str(SLOW_NOTEBOOK),
        "--with",
        f"{PACKAGE}==1.1",
        "--find-links",
        str(wheels),
        "--env-cache",
        str(cache),
        "--db",
        str(tmp_path / "db.sqlite"),
        "--json",
    ]

    # SIGTERM (as CI sends) while pip installs: nbscope stops pip and removes the folder it was building.
    process = _start(args, tmp_path)
    _wait_for(lambda: any((p / "bin" / "python").exists() for p in _building(cache)))
    time.sleep(1.0)  # pip is installing now
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert [p for p in cache.iterdir() if p.is_dir()] == []

    # SIGKILL (no chance to clean up): the folder stays, unfinished, and the next run builds it afresh
    # (once the orphaned pip, which holds the environment's lock, has finished).
    process = _start(args, tmp_path)
    _wait_for(lambda: any((p / "bin" / "python").exists() for p in _building(cache)))
    time.sleep(1.0)
    process.kill()
    process.communicate(timeout=60)
    (left,) = _building(cache)
    assert not environments.is_complete(left)
    assert [e["complete"] for e in environments.list_environments(cache)] == [False]
    (left / "from-the-killed-build").write_text("x")

    done = nbscope_here(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (variant,) = json.loads(done.stdout)["variants"]
    assert variant["reused"] is False and variant["status"] == "ok"
    assert Path(variant["environment"]) == left
    assert environments.is_complete(left) and not (left / "from-the-killed-build").exists()

    cleared = nbscope_here("versions", "--clear-cache", "--env-cache", cache, "--json", cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["removed"] == [str(left)]
    assert not left.exists()


@pytest.mark.slow
def test_sigterm_during_a_variants_run_keeps_the_runs_measured(tmp_path: Path, wheels: Path, env_cache: Path) -> None:
    db = tmp_path / "store" / "nbscope.db"
    process = _start(
        [
            "versions",
            str(SLOW_NOTEBOOK),
            "--with",
            f"{PACKAGE}==1.0",
            "--with",
            f"{PACKAGE}==1.3",
            "--find-links",
            str(wheels),
            "--env-cache",
            str(env_cache),
            "--db",
            str(db),
        ],
        tmp_path,
    )
    live = live_folder(db)

    def second_variant_running() -> bool:
        for path in live.glob("*.jsonl"):
            try:
                header = json.loads(path.read_text().splitlines()[0])
            except (OSError, ValueError, IndexError):
                continue
            if header.get("settings", {}).get("variant", {}).get("requirements") == [f"{PACKAGE}==1.3"]:
                return True
        return False

    _wait_for(second_variant_running, timeout=600)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "saved partial run" in stderr
    runs = sorted(Store(db).runs(), key=lambda r: r["id"])
    assert [r["status"] for r in runs] == ["ok", "partial"], stderr
    assert Store(db).get(runs[1]["id"]).settings["variant"]["requirements"] == [f"{PACKAGE}==1.3"]


def _jax_releases() -> list[str]:
    try:
        return environments.released_versions("jax")
    except NbscopeError:
        return []


@pytest.mark.slow
def test_versions_of_a_jax_notebook_across_two_jax_releases(tmp_path: Path) -> None:
    """The acceptance check: two jax releases from the package index, side by side, ``versions.jax`` named."""
    released = _jax_releases()
    pair = ("0.10.1", "0.10.2")
    if not set(pair) <= set(released):
        pytest.skip(f"the package index does not offer jax {' and '.join(pair)} (it lists {released[-5:]})")
    # Two full JAX installs: NBSCOPE_ENV_CACHE, when set, lets a developer's repeated runs reuse them.
    cache = os.environ.get("NBSCOPE_ENV_CACHE") or tmp_path / "envs"
    done = nbscope(
        "versions",
        JAX_NOTEBOOK,
        *[a for v in pair for a in ("--with", f"jax=={v}")],
        "--env-cache",
        cache,
        "--db",
        tmp_path / "db.sqlite",
        "--json",
        cwd=tmp_path,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [v["versions"]["jax"] for v in result["variants"]] == list(pair)
    assert all(v["status"] == "ok" for v in result["variants"])
    fields = [d["field"] for d in result["differences"]]
    assert fields[0] == "versions.jax", fields
    # Both runs measured the compile of the jitted step, side by side.
    step = result["cells"][1]
    assert all(run["compiles"] >= 1 and run["wall_s"] > 0 for run in step["runs"])
