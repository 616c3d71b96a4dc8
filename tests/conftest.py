"""Shared fixtures. Keep this file to generic helpers; feature-specific fixtures live in their tests."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nbscope.collect.notebook import import_nbformat

# Test files import nbformat at their top: imported first as nbscope imports it (import_nbformat), it does not
# build jsonschema's IRI grammar (1-5 s in each pytest process) until an IRI is checked.
import_nbformat()

TESTS_DIR = Path(__file__).resolve().parent
FAKE_NVML_DIR = TESTS_DIR / "fake_nvml"


@pytest.fixture
def tmp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's temporary files (ours, and those of the tools it starts) go to this folder, so that a
    leftover is easy to see."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a run store that does not exist yet (``Store(tmp_db)`` or ``--db tmp_db`` creates it)."""
    return tmp_path / "store" / "nbscope.db"


def cli_env(env: Mapping[str, str | None] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment (or ``base``) with ``env`` laid over it; a value of ``None`` removes the
    variable."""
    merged = dict(os.environ if base is None else base)
    merged.pop("NBSCOPE_DB", None)  # tests name their store explicitly
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def run_in_process(
    args: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str | None] | None = None, cwd: str | os.PathLike[str]
) -> subprocess.CompletedProcess[str]:
    """``nbscope.cli.main(args)`` in this process, as ``python -m nbscope`` would run it in a new one.

    What a new process would start afresh is set up for the call and put back after it: the environment
    (:func:`cli_env`), the working folder, ``sys.argv``, file descriptors 1 and 2 (captured, so that the
    output of kernels and commands nbscope starts is captured too, in order), ``sys.stdout``/``sys.stderr``,
    warning filters, typer's terminal settings and the caches in ``_FRESH_CACHES``. The console and the
    signal handling are the command's own session's (``nbscope/cli/_session.py``): made afresh, put back.
    An exception that escapes ``main`` prints its traceback on the captured stderr with
    exit code 1, as Python's would. ``timeout`` is not applied (pytest-timeout still is).
    """
    import nbscope.__main__
    from nbscope.cli import main

    argv = [str(a) for a in args]
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_argv = sys.argv
    saved_streams = sys.stdout, sys.stderr
    saved_state = [(module, name, getattr(module, name)) for module, name in _in_process_state()]
    captured = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for stream in saved_streams:
        stream.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    code: int = 0
    try:
        os.environ.clear()
        os.environ.update(cli_env(env, saved_env))
        os.chdir(cwd)
        sys.argv = [nbscope.__main__.__file__, *argv]
        for fd, file in zip((1, 2), captured, strict=True):
            os.dup2(file.fileno(), fd)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
        )
        _fresh_typer_settings()
        _fresh_caches()
        with warnings.catch_warnings():
            try:
                main(argv)
            except SystemExit as exc:
                code = _exit_code(exc.code)
            except Exception:  # as Python does for an uncaught exception
                traceback.print_exc()
                code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, saved in zip((1, 2), saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for module, name, value in saved_state:
            setattr(module, name, value)
    stdout, stderr = (_read_text(file) for file in captured)
    return subprocess.CompletedProcess([sys.executable, "-m", "nbscope", *argv], code, stdout, stderr)


def _in_process_state() -> list[tuple[ModuleType, str]]:
    """Module-level values a command may set that a new process would not have (put back after each call)."""
    state = []
    for module_name, name in _IN_PROCESS_STATE:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            state.append((module, name))
    return state


# Typer's help reads the terminal settings once, at import.
_IN_PROCESS_STATE = [("typer.rich_utils", "FORCE_TERMINAL"), ("typer.rich_utils", "MAX_WIDTH")]
# Caches a command fills that a new process starts without: (module, name) -> the value at import.
_FRESH_CACHES = {
    ("nbscope.api.audit._jobs", "_FINGERPRINT"): None  # an in-process audit worker's fingerprint
}


def _fresh_caches() -> None:
    for (module_name, name), value in _FRESH_CACHES.items():
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            setattr(module, name, value)


def _fresh_typer_settings() -> None:
    # As typer.rich_utils reads them at import.
    import typer.rich_utils as rich_utils

    width = os.environ.get("TERMINAL_WIDTH")
    rich_utils.MAX_WIDTH = int(width) if width else None
    forced = os.environ.get("GITHUB_ACTIONS") or os.environ.get("FORCE_COLOR") or os.environ.get("PY_COLORS")
    rich_utils.FORCE_TERMINAL = False if os.environ.get("_TYPER_FORCE_DISABLE_TERMINAL") else (True if forced else None)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message"): Python prints it and exits with 1
    return 1


def _read_text(file: Any) -> str:
    # As subprocess.run(text=True) decodes: universal newlines.
    file.seek(0)
    text = file.read().decode("utf-8", errors="replace")
    file.close()
    return text.replace("\r\n", "\n").replace("\r", "\n")


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2 with one stderr line ``nbscope: error: ...`` holding each of ``words``, no traceback; the line."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nbscope: error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args, env=None, cwd=None, timeout=120)``: run ``nbscope *args`` in this process
    (:func:`run_in_process`); commands that run notebooks still start real kernels.

    Returns a CompletedProcess (text stdout/stderr, never raises on a non-zero exit). It runs in the
    test's ``tmp_path`` unless ``cwd`` is given, so a default ``.nbscope/`` store never lands in the
    repository. ``env`` overrides variables (``None`` removes one); ``NBSCOPE_DB`` is removed. A test that
    needs a real process (signals, the console script, a child's environment, start-up) uses
    ``run_cli_process``.
    """

    def run(
        *args: str | os.PathLike[str],
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        del timeout  # a subprocess's limit; pytest-timeout bounds an in-process call
        return run_in_process(args, env=env, cwd=cwd if cwd is not None else tmp_path)

    return run


@pytest.fixture
def run_cli_process(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli_process(*args, env=None, cwd=None, timeout=120)``: ``python -m nbscope *args`` in a new
    process, for what only a real process shows; otherwise as ``run_cli``."""

    def run(
        *args: str | os.PathLike[str],
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nbscope", *map(str, args)],
            cwd=cwd if cwd is not None else tmp_path,
            env=cli_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture
def fake_nvml() -> ModuleType:
    """A fresh copy of ``tests/fake_nvml/pynvml.py`` (two GPUs: Tesla T4 and H200), not put in sys.modules.

    Pass it as ``nvml=`` where code accepts an NVML module; for subprocesses, put ``FAKE_NVML_DIR`` first
    on ``PYTHONPATH``. Set ``RETURN_BYTES`` / ``FAIL`` on it to change its behaviour (see its docstring).
    """
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_NVML_DIR / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.RETURN_BYTES = False
    module.FAIL = ""
    return module


class Profiled:
    """``profiled(name, **options)``: the session's one real profile of ``tests/files/<name>.ipynb`` with these
    ``ProfileOptions`` (run in a real kernel the first time it is asked for, as ``diag_support.profile_notebook``
    runs it), returned as a fresh copy each time, so that no test can change what another one reads.

    A ``jax_cache="warm"`` run follows the ``"cold"`` one of the same notebook and options, in the same cache
    folder, as a cold-then-warm pair would be run by hand. ``folder`` is the session's folder for paths that
    options name (``env={"NUMBA_CACHE_DIR": str(profiled.folder / "numba-cache")}``): equal options share a run.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._runs: dict[str, Any] = {}

    def __call__(self, name: str, **options: Any) -> Any:
        from nbscope.record.run import RunRecord

        key = f"{name} {sorted(options.items())!r}"
        if key not in self._runs:
            if options.get("jax_cache") == "warm":
                self(name, **{**options, "jax_cache": "cold"})
            self._runs[key] = self._profile(name, options)
        return RunRecord.from_dict(copy.deepcopy(self._runs[key]))

    def _profile(self, name: str, options: dict[str, Any]) -> dict[str, Any]:
        from diag_support import profile_notebook

        # One folder (and so one JAX cache) for a notebook and its options but the cache mode.
        shared = sorted((k, v) for k, v in options.items() if k != "jax_cache")
        folder = self.folder / f"{name}-{hashlib.sha1(repr(shared).encode()).hexdigest()[:8]}"
        mode = options.get("jax_cache", "off")
        record = profile_notebook(name, folder / mode, **{"cache_root": folder / "jax-cache", **options})
        return record.to_dict()


@pytest.fixture(scope="session")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return Profiled(tmp_path_factory.mktemp("profiled"))


@pytest.fixture(scope="session")
def audited_corpus_once(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``nbscope audit`` of the small test book and the two corpus lectures with two workers, forecasting for the
    T4 (so each CPU run records program data, as ``nbscope profile --forecast t4`` does), run once a session: the
    audit file it exports, with ``_wall_s``, the command's wall time. Skips where the corpus is absent."""
    import time

    from audit_support import BOOK, CORPUS, LECTURES, audit_file

    if not all((CORPUS / name).is_file() for name in LECTURES):
        pytest.skip(f"corpus lectures not found in {CORPUS} (expected {', '.join(LECTURES)})")
    folder = tmp_path_factory.mktemp("audited-corpus")
    started = time.perf_counter()
    # Up to pytest's own limit (pyproject.toml): on a busy machine the two lectures take many minutes.
    document = audit_file(
        BOOK,
        *(CORPUS / name for name in LECTURES),
        "--workers",
        "2",
        "--forecast",
        "t4",
        cwd=folder,
        name="corpus",
        timeout=900,
    )
    document["_wall_s"] = time.perf_counter() - started
    return document


@pytest.fixture
def audited_corpus(audited_corpus_once: dict[str, Any]) -> dict[str, Any]:
    """A copy of the session's audit of the book and the corpus lectures (``audited_corpus_once``): test_audit_run.py
    checks the audit, test_corpus.py and test_forecast_corpus.py each lecture's run in it, and none can change
    what another reads."""
    return copy.deepcopy(audited_corpus_once)


# Under pytest-xdist (``-n 2 --dist loadgroup``, as .ci/run runs): tests that time things against each other
# or against a model (gate statistics, bench and loop fits, a two-worker audit) run one after another on one
# worker, so that only one of them at a time shares the machine with the other worker.
QUIET_FILES = ("test_gate.py", "test_bench.py", "test_loops.py", "test_audit_run.py")
# Session fixtures made once per worker: the files that read one go to one worker together, in its group.
SESSION_FIXTURE_GROUPS = {"profiled": "profiled", "audited_corpus_once": "quiet"}
# xdist hands the next group in the queue to whichever worker frees up first, so a long group left to the end
# keeps one worker busy while the other idles: the groups are queued longest first. These are the seconds
# the groups of 5 s or more took in one run of the whole suite (the sum of their tests' setup, call and teardown
# times from --durations=0, two workers, a busy two-core machine; only their order matters); a group not listed
# is taken to be shorter than every listed one.
GROUP_SECONDS: dict[str, float] = {
    "quiet": 212,
    "test_versions.py": 173,
    "test_adversarial.py": 77,
    "test_book2.py": 88,
    "test_pathways.py": 73,
    "test_adversarial_gate_store.py": 44,
    "test_try.py": 56,
    "test_forecast_bounded.py": 49,
    "test_signals.py": 44,
    "test_action.py": 44,
    "test_adversarial_trust.py": 40,
    "profiled": 41,
    "test_adversarial_processes.py": 37,
    "test_forecast_trace.py": 33,
    "test_trace.py": 31,
    "test_findings_output.py": 27,
    "test_profile.py": 27,
    "test_trace_split.py": 24,
    "test_myst.py": 22,
    "test_probe.py": 20,
    "test_imports.py": 17,
    "test_forecast.py": 16,
    "test_store_location.py": 16,
    "test_forecast_uses.py": 16,
    "test_transport.py": 15,
    "test_adversarial_ci.py": 15,
    "test_adversarial_values.py": 14,
    "test_jupyter_cache_import.py": 14,
    "test_cli_uniform.py": 13,
    "test_api.py": 13,
    "test_adversarial_inputs.py": 13,
    "test_diagnose_first_call.py": 13,
    "test_diagnose_slow_first_call.py": 12,
    "test_views.py": 12,
    "test_layout.py": 12,
    "test_diagnose_host_loop.py": 11,
    "test_timeline.py": 10,
    "test_forecast_result.py": 9,
    "test_publish_browser.py": 8,
    "test_record_captures.py": 8,
    "test_publish.py": 8,
    "test_report_html.py": 7,
    "test_cli_core.py": 7,
    "test_diagnose_eager_flood.py": 7,
    "test_diagnose_retrace_churn.py": 7,
    "test_tpu_device.py": 7,
    "test_forecast_placement.py": 6,
    "test_diagnose_unsynchronised_timing.py": 6,
    "test_forecast_honest.py": 6,
    "test_diagnose_loop_lengths.py": 6,
    "test_store.py": 5,
    "test_diagnose_first_call_across.py": 5,
    "test_forecast_counts.py": 5,
    "test_forecast_gpu_lowering.py": 5,
}
UNLISTED_GROUP_S = 0.0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each file's tests go to one xdist worker (its module-scoped kernels then start once), the files that
    read a session fixture of ``SESSION_FIXTURE_GROUPS`` go to its worker together (so it is made once), and
    ``QUIET_FILES`` go to one; a test's own ``xdist_group`` mark wins. Under ``--dist loadgroup`` the groups
    are then queued longest first (``GROUP_SECONDS``), each group's tests in their own order."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    session_groups: dict[str, str] = {}
    for item in items:
        for fixture, group in SESSION_FIXTURE_GROUPS.items():
            if _uses_session_fixture(item, fixture):
                session_groups.setdefault(item.path.name, group)
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is None:
            name = item.path.name
            group = "quiet" if name in QUIET_FILES else session_groups.get(name, name)
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))
        groups.setdefault(group, []).append(item)
    if getattr(config.option, "loadgroup", False):  # an xdist worker's, from the run's --dist loadgroup
        # sorted() is stable: groups of equal estimate keep their collection order.
        ordered = sorted(groups, key=lambda group: -GROUP_SECONDS.get(group, UNLISTED_GROUP_S))
        items[:] = [item for group in ordered for item in groups[group]]


def _uses_session_fixture(item: pytest.Item, fixture: str) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.get(fixture, ()) if info is not None else ()
    return bool(definitions) and definitions[-1].scope == "session"


# An xdist worker starts with COLUMNS=80 and LINES=24 in its environment; the commands it runs must see the
# terminal settings of the pytest run itself, as they do without xdist.
TERMINAL_VARIABLES = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["nbscope_terminal"] = {name: os.environ.get(name) for name in TERMINAL_VARIABLES}


def pytest_configure(config: pytest.Config) -> None:
    # xdist would queue the groups by their number of tests (--loadscope-reorder): ours come queued by time.
    if getattr(config.option, "dist", "no") == "loadgroup" and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    terminal = getattr(config, "workerinput", {}).get("nbscope_terminal")
    for name, value in (terminal or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
