"""The process environment, decoded once into typed settings (``nbscope.schema.process_environment``)."""

from __future__ import annotations

import os

import pytest

from nbscope.schema import process_environment


def test_each_setting_reads_as_the_environment_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBSCOPE_DB", "/tmp/runs.db")
    monkeypatch.setenv("NBSCOPE_LABEL", "main-cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # empty: every GPU hidden, not unset
    monkeypatch.delenv("NBSCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("NBSCOPE_NVML", "OFF")
    settings = process_environment.read()
    assert settings.store == "/tmp/runs.db" and settings.label == "main-cpu"
    assert settings.cuda_visible_devices == "" and settings.cache_dir is None
    assert settings.nvml == "off"  # lower case, as its reader compares it


def test_it_is_read_as_the_environment_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBSCOPE_LABEL", "before")
    assert process_environment.read().label == "before"
    monkeypatch.setenv("NBSCOPE_LABEL", "after")  # --label sets it for the length of a command
    assert process_environment.read().label == "after"


def test_an_absent_variable_reads_as_its_default() -> None:
    settings = process_environment.read({})
    assert settings.path == os.defpath  # what a command search uses without PATH
    assert settings.nvml == "auto"
    assert settings.store is None and settings.ci.github_actions is None and not settings.ci.runs_on


def test_a_child_process_environment_is_read_the_same_way() -> None:
    env = {"PATH": "/opt/bin", "PYTHONPATH": "/src", "RUNS_ON_B": "2", "GITHUB_ACTIONS": "true", "RUNS_ON_A": "1"}
    settings = process_environment.read(env)
    assert settings.path == "/opt/bin" and settings.pythonpath == "/src"
    assert settings.ci.github_actions == "true"
    assert list(settings.ci.runs_on.items()) == [("RUNS_ON_B", "2"), ("RUNS_ON_A", "1")]  # the environment's order
