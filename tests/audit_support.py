"""Helpers shared by test_audit_run.py and the session's corpus audit (tests/conftest.py ``audited_corpus``):
``nbscope audit`` run as a command, in the environment all these audits share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
BOOK = TESTS / "files" / "audit_book"
CORPUS = TESTS.parents[1] / "shared" / "corpus"
LECTURES = ("numpy_vs_numba_vs_jax.md", "jax_intro.md")


def audit_env() -> dict[str, str]:
    """The environment of the audits here: no default store, and NVML off, so that cuda is unavailable on
    every machine (a GPU would otherwise add cuda runs; the GPU scheduling is tested with a fake NVML in
    test_audit.py). All audits of one test share it: their fingerprints must agree to reuse runs."""
    env = dict(os.environ)
    env.pop("NBSCOPE_DB", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["NBSCOPE_NVML"] = "off"
    return env


def nbscope(*args: Any, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=audit_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def audit_file(*args: Any, cwd: Path, name: str, timeout: float = 600) -> dict[str, Any]:
    result = nbscope("audit", *args, "--db", cwd / f"{name}.db", "-o", cwd / f"{name}.json", cwd=cwd, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    document: dict[str, Any] = json.loads((cwd / f"{name}.json").read_text())
    return document
