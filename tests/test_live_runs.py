"""``nbscope runs --live``: a real profile's running cell named while it runs, and a plain sentence when
nothing runs. (A traced mystmd build's running cell: tests/test_myst.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

FILES = Path(__file__).resolve().parent / "files"


@pytest.mark.slow
def test_runs_live_names_the_cell_a_profile_runs_then_says_nothing_runs(run_cli: Any, tmp_path: Path) -> None:
    running = tmp_path / "running"
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    env.update(NBSCOPE_RUNNING_DIR=str(running), NBSCOPE_GATE_SLOW="120")  # the notebook's second cell sleeps
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbscope",
            "profile",
            str(FILES / "gate_sleep.ipynb"),
            "--db",
            str(tmp_path / "db"),
            "--no-diagnose",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        live: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline and not live:
            shown = run_cli("runs", "--live", "--json", env={"NBSCOPE_RUNNING_DIR": str(running)})
            live = [k for k in json.loads(shown.stdout) if k["cell"] == 2]
            time.sleep(0.2)
        text = run_cli("runs", "--live", env={"NBSCOPE_RUNNING_DIR": str(running)}).stdout
    finally:
        process.send_signal(signal.SIGTERM)  # the profile keeps what it measured and ends
        _, stderr = process.communicate(timeout=60)
    assert live, stderr[-2000:]
    [kernel] = live
    assert kernel["kind"] == "profile" and Path(kernel["notebook"]).name == "gate_sleep.ipynb"
    assert kernel["first_line"].startswith("time.sleep(") and kernel["cells_done"] == 1
    assert kernel["elapsed_s"] >= 0 and kernel["kernel_pid"] != process.pid
    assert "gate_sleep.ipynb: cell 2 " in text and "running for" in text
    done = run_cli("runs", "--live", env={"NBSCOPE_RUNNING_DIR": str(running)})
    assert done.returncode == 0 and done.stdout.startswith("Nothing runs")
    assert json.loads(run_cli("runs", "--live", "--json", env={"NBSCOPE_RUNNING_DIR": str(running)}).stdout) == []


def test_runs_live_names_a_run_whose_kernel_has_not_started_and_forgets_it_when_it_ends(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbscope.collect.inject import ProbeHome

    monkeypatch.setenv("NBSCOPE_RUNNING_DIR", str(tmp_path / "running"))
    home = ProbeHome()
    try:
        home.announce("trace", [FILES / "gate_sleep.ipynb"], [home.root / "kernels-out"], command=["myst", "build"])
        shown = run_cli("runs", "--live")
        assert shown.stdout.startswith(f"trace (nbscope {os.getpid()}): no kernel runs at this moment"), shown.stdout
    finally:
        home.cleanup()
    assert run_cli("runs", "--live").stdout.startswith("Nothing runs")
