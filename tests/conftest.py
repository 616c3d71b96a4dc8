"""Shared fixtures. Keep this file to generic helpers; feature-specific fixtures live in their tests."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

import pytest

TESTS_DIR = Path(__file__).resolve().parent
FAKE_NVML_DIR = TESTS_DIR / "fake_nvml"


@pytest.fixture
def tmp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's temporary files (ours, and those of the tools it starts) go to this folder, so that a
    leftover is easy to see."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a run store that does not exist yet (``Store(tmp_db)`` or ``--db tmp_db`` creates it)."""
    return tmp_path / "store" / "nbscope.db"


def cli_env(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with ``env`` laid over it; a value of ``None`` removes the variable."""
    merged = dict(os.environ)
    merged.pop("NBSCOPE_DB", None)  # tests name their store explicitly
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args, env=None, cwd=None, timeout=120)``: run ``python -m nbscope *args`` in a subprocess.

    Returns the CompletedProcess (text stdout/stderr, never raises on a non-zero exit). It runs in the
    test's ``tmp_path`` unless ``cwd`` is given, so a default ``.nbscope/`` store never lands in the
    repository. ``env`` overrides variables (``None`` removes one); ``NBSCOPE_DB`` is removed.
    """

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
