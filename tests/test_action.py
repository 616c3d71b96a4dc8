"""The composite GitHub Action (``action.yml``): its shell steps, run locally in a temporary git repository
with a fake ``$GITHUB_STEP_SUMMARY``, ``$GITHUB_OUTPUT`` and artifact folder, as a runner would run them.

Steps that ``uses:`` another action (the artifact upload) are left out: the artifact folder is what it
would upload. ``${{ inputs.* }}`` and ``${{ steps.*.outputs.* }}`` are filled in, and a step's ``if:``
of the form ``inputs.NAME == 'VALUE'`` (or ``!=``) is honoured; any other expression fails the test, so the action
cannot grow one that this emulation would silently get wrong.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ACTION = Path(__file__).resolve().parents[1] / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
CONDITION = re.compile(r"^inputs\.([\w-]+) (==|!=) '([^']*)'$")

# The cell that a commit slows down reads its delay from a file, so its source (and so its pairing with the
# baseline's cell) stays the same: 0.2 s, then 1 s (5×), far from any noise; the gate allows 100 %.
NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# A lecture that CI builds"},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import pathlib\nimport time",
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "delay = float(pathlib.Path('delay.txt').read_text())",
        },
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "time.sleep(delay)"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "done = True"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@dataclass
class ActionRun:
    exit_code: int
    outputs: dict[str, dict[str, str]]  # step id → its outputs
    summary: str
    artifacts: Path
    log: str


def _expression(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    parts = text.split(".")
    if parts[0] == "inputs" and len(parts) == 2:
        return inputs[parts[1]]
    if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
        return outputs.get(parts[1], {}).get(parts[3], "")
    raise AssertionError(f"action.yml uses an expression this test cannot run locally: {text!r}")


def run_action(workspace: Path, artifacts: Path, **given: str) -> ActionRun:
    """Run the action's shell steps in ``workspace`` as a runner would; ``given`` are its inputs."""
    action = yaml.safe_load(ACTION.read_text())
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    unknown = set(given) - set(inputs)
    assert not unknown, f"no such inputs: {unknown}"
    inputs.update({"artifact-dir": str(artifacts)} | given)
    summary = artifacts.parent / f"{artifacts.name}-step-summary.md"
    summary.write_text("")
    outputs: dict[str, dict[str, str]] = {}
    code, log = 0, []
    for number, step in enumerate(action["runs"]["steps"]):
        if "uses" in step:
            continue
        condition = step.get("if")
        if condition is not None:
            match = CONDITION.match(condition.strip())
            assert match, f"unsupported if: {condition!r}"
            if (inputs[match[1]] == match[3]) != (match[2] == "=="):
                continue
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        env.pop("NBSCOPE_DB", None)
        output_file = artifacts.parent / f"{artifacts.name}-output-{number}"
        output_file.write_text("")
        env.update(
            GITHUB_OUTPUT=str(output_file),
            GITHUB_STEP_SUMMARY=str(summary),
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_ACTION_PATH=str(ACTION.parent),
            RUNNER_TEMP=str(artifacts.parent),
        )
        for key, value in (step.get("env") or {}).items():
            env[key] = EXPRESSION.sub(lambda m: _expression(m[1], inputs, outputs), str(value))
        assert "${{" not in step["run"], "a run: block reads inputs through env:, never ${{ }}"
        script = artifacts.parent / f"{artifacts.name}-step-{number}.sh"
        script.write_text(step["run"])
        # How GitHub runs `shell: bash`.
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        log.append(f"--- {step.get('name')}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        outputs[step.get("id", str(number))] = dict(
            line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line
        )
        code = done.returncode
        if code != 0:
            break  # a runner stops a composite action at its first failing step
    return ActionRun(code, outputs, summary.read_text(), artifacts, "\n".join(log))


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if (
        shutil.which("jupyter-execute", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        is None
    ):
        pytest.skip("jupyter-execute (nbclient) is not on PATH")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "lecture.ipynb").write_text(json.dumps(NOTEBOOK, indent=1))
    (repo / "delay.txt").write_text("0.2")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "a lecture")
    return repo


def test_every_step_is_bash_or_an_action() -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        assert ("uses" in step) != ("run" in step)
        if "run" in step:
            assert step["shell"] == "bash"
    assert {"build", "baseline", "max-slowdown", "forecast-gpus", "store"} <= set(action["inputs"])


@pytest.mark.slow
def test_the_action_gates_a_slowed_cell_and_passes_an_unchanged_rerun(repository: Path, tmp_path: Path) -> None:
    build = f"{Path(sys.executable).parent / 'jupyter-execute'} lecture.ipynb"
    common = {"build": build, "install": "false", "python": sys.executable, "max-slowdown": "100%"}

    first = run_action(repository, tmp_path / "art1", **common)
    assert first.exit_code == 0, first.log
    assert first.outputs["trace"]["runs"] == "1" and first.outputs["gate"]["exit-code"] == "0"
    assert "`lecture.ipynb`: no earlier run" in first.summary  # the store was empty: nothing to gate
    runs = list((tmp_path / "art1" / "runs").glob("*.json"))
    assert len(runs) == 1 and json.loads(runs[0].read_text())["target"] == "lecture.ipynb"
    assert (tmp_path / "art1" / "report.html").stat().st_size > 1000
    status = json.loads((tmp_path / "art1" / "site" / "status.json").read_text())["notebooks"]
    assert status and all(entry["status"] == "ok" for entry in status)
    assert (tmp_path / "art1" / "nbscope.db").exists()
    assert (repository / ".nbscope" / "nbscope.db").exists()

    unchanged = run_action(repository, tmp_path / "art2", **common)
    assert unchanged.exit_code == 0, unchanged.log + unchanged.summary
    assert "nbscope gate passed" in unchanged.summary

    (repository / "delay.txt").write_text("1.0")
    _git(repository, "commit", "-q", "-am", "a slower lecture")
    slowed = run_action(repository, tmp_path / "art3", **common)
    assert slowed.exit_code == 1, slowed.log + slowed.summary
    assert slowed.outputs["gate"]["exit-code"] == "1"
    assert "nbscope gate failed (regression confirmed by a rerun)" in slowed.summary  # `confirm` is on by default
    assert "`time.sleep(delay)`" in slowed.summary
    assert "nbscope: a notebook is slower than its baseline allows" in slowed.log

    # The baseline can also be the run files of an earlier run's artifact (downloaded into a folder).
    downloaded = tmp_path / "downloaded"
    shutil.copytree(tmp_path / "art1" / "runs", downloaded)
    from_artifact = run_action(repository, tmp_path / "art4", **common, baseline=str(downloaded), confirm="false")
    assert from_artifact.exit_code == 1, from_artifact.log + from_artifact.summary
    assert "`time.sleep(delay)`" in from_artifact.summary and "rerun" not in from_artifact.summary


@pytest.mark.slow
def test_a_failing_build_fails_the_action_with_its_exit_code(repository: Path, tmp_path: Path) -> None:
    build = f"{Path(sys.executable).parent / 'jupyter-execute'} lecture.ipynb && exit 3"
    done = run_action(repository, tmp_path / "art", build=build, install="false", python=sys.executable)
    assert done.exit_code == 3, done.log
    assert "the build exited 3" in done.summary
    assert len(list((tmp_path / "art" / "runs").glob("*.json"))) == 1  # what it measured is still kept


@pytest.mark.slow
def test_gpu_forecasts_go_into_the_summary(repository: Path, tmp_path: Path) -> None:
    has_forecast = subprocess.run(
        [sys.executable, "-m", "nbscope", "forecast", "--help"], capture_output=True, text=True, timeout=120
    )
    if has_forecast.returncode != 0:
        pytest.skip("this nbscope has no `forecast` command")
    build = f"{Path(sys.executable).parent / 'jupyter-execute'} lecture.ipynb"
    done = run_action(
        repository,
        tmp_path / "art",
        build=build,
        install="false",
        python=sys.executable,
        baseline="none",
        **{"forecast-gpus": "t4"},
    )
    assert done.exit_code == 0, done.log + done.summary
    assert "#### GPU forecast: `lecture.ipynb`" in done.summary, done.summary + done.log
    assert "no GPU forecast" not in done.summary
    assert (tmp_path / "art" / "forecast.md").read_text() in done.summary
