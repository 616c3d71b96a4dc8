"""Every command checks what it reads (issue AG, adversarial pass 6: §8, §9, §19, §21, §22), each class closed where
every path goes through it, on the project's own recorded runs:

- a record's impossible figures (``schema``, checked once at load by ``codec.strict``, nested classes' ``refuse``
  included): ``test_a_record_with_impossible_figures_is_refused_in_one_line`` (a device-memory peak below what was
  in use, a device count or a negative memory size, compiles by kind past the compiles, totals past their cells,
  a compile longer than its cell, trial links and judgements out of range or on the wrong run, J7's version and
  empty target); ``test_a_start_in_another_zone_is_shown_in_utc`` (J10);
- a run read as what it is not: ``test_a_forecast_of_a_run_on_an_accelerator_is_refused`` (a TPU run, and a run
  whose JAX used a GPU);
- an option given twice (click keeps the last one, silently): ``test_an_option_given_twice_is_refused``;
- a number written by a user or the environment (one strict parser, ``nbscope._units.whole``/``decimal``):
  ``test_a_number_that_is_not_plain_ascii_digits_is_one_line_never_a_traceback``; ``try``'s remedies:
  ``test_try.py`` ``test_a_remedy_that_cannot_apply_is_refused_in_one_line``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, cli_env, run_in_process

DEVICE = Path(__file__).resolve().parent / "files" / "device" / "tpu_v5e"
TRIAL = DEVICE / "tpu_trial_many_compiles_2_cache_warm.json"  # a trial's remedy side, judged, on the TPU
PROFILE = DEVICE / "tpu_trial_many_compiles_source.json"  # the run it tried
CPU_PROGRAMS = Path(__file__).resolve().parent / "files" / "records" / "cpu_forecast_f64_small.json"


def _crafted(tmp_path: Path, source: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    document = json.loads(source.read_text())
    change(document)
    path = tmp_path / f"crafted_{source.name}"
    path.write_text(json.dumps(document))
    return path


def _cell(d: dict[str, Any]) -> dict[str, Any]:
    cell: dict[str, Any] = d["measurements"]["cells"][0]
    return cell


def _backend(d: dict[str, Any]) -> dict[str, Any]:
    backend: dict[str, Any] = d["measurements"]["kernel"]["jax_backend"]
    return backend


CRAFTED: dict[str, tuple[Path, Callable[[dict[str, Any]], object], str]] = {
    "peak-below-in-use": (PROFILE, lambda d: _cell(d)["device_memory"].update(peak_bytes=1), "below the 64512 bytes"),
    "rss-peak-below": (PROFILE, lambda d: _cell(d)["rss"].update(before_bytes=10**9, peak_bytes=5), "peak_bytes is 5"),
    "devices-10^12": (PROFILE, lambda d: _backend(d).update(devices=10**12), "larger than any device count"),
    "devices-0": (PROFILE, lambda d: _backend(d).update(devices=0), "devices is 0"),
    "memory-negative": (PROFILE, lambda d: _backend(d).update(memory_bytes_per_device=-1), "cannot be negative"),
    "compiles-by-kind": (PROFILE, lambda d: _cell(d)["jax"].update(user_compiles=7, eager_compiles=9), "16 it counts"),
    "totals-past-cells": (
        PROFILE,
        lambda d: d["measurements"]["totals"].update(compiles=10**15),
        "more than its cells",
    ),
    "compile-past-wall": (PROFILE, lambda d: _cell(d).update(compile_s=500.0), "longer than the cell's"),
    "trial-of-negative": (TRIAL, lambda d: d["settings"]["trial"].update(of=-1), "settings.trial.of is -1"),
    "trial-of-text": (TRIAL, lambda d: d["settings"]["trial"].update(of="abc"), "not an integer"),
    "trial-of-other-run": (TRIAL, lambda d: d["settings"]["trial"].update(of=999999), "of run 999999 it links"),
    "trial-cell-0": (TRIAL, lambda d: d["settings"]["trial"].update(cell=0), "cell number cannot be below 1"),
    "trial-cell-other": (TRIAL, lambda d: d["measurements"]["trial"].update(cell=7), "judges cell 7"),
    "trial-side": (TRIAL, lambda d: d["settings"]["trial"].update(side="bogus"), "not one of as-is, remedy"),
    "trial-link-missing": (TRIAL, lambda d: d["settings"].pop("trial"), "settings.trial is missing"),
    "trial-on-a-profile": (
        PROFILE,
        lambda d: d["settings"].update(trial={"of": 1, "cell": 2, "remedy": "unroll:8", "side": "remedy"}),
        "settings.trial is on a profile run",
    ),
    "p-value-5": (TRIAL, lambda d: d["measurements"]["trial"].update(p_value=5.0), "larger than any probability"),
    "floor-negative": (TRIAL, lambda d: d["measurements"]["trial"].update(floor_s=-1.0), "cannot be negative"),
    "repeats-negative": (TRIAL, lambda d: d["measurements"]["trial"].update(repeats=-1), "cannot be negative"),
    "difference-negative": (
        TRIAL,
        lambda d: d["measurements"]["trial"]["values"][0].update(verdict="differs", abs_diff=-1.0, rel_diff=-2.0),
        "abs_diff is -1.0",
    ),
    "verdict-unknown": (
        TRIAL,
        lambda d: d["measurements"]["trial"]["values"][0].update(verdict="<b>fine</b>"),
        "not one of equal",
    ),
    "schema-version-negative": (PROFILE, lambda d: d.update(schema_version=-1), "schema_version"),
    "target-empty": (PROFILE, lambda d: d.update(target=""), "field 'target' is empty"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_record_with_impossible_figures_is_refused_in_one_line(case: str, tmp_path: Path) -> None:
    source, change, words = CRAFTED[case]
    crafted = _crafted(tmp_path, source, change)
    db = tmp_path / "s.db"
    assert run_in_process(["import", source, "--db", db], cwd=tmp_path).returncode == 0  # as recorded: read
    assert_one_line_error(run_in_process(["import", crafted, "--db", db], cwd=tmp_path), words)
    assert_one_line_error(run_in_process(["show", crafted], cwd=tmp_path), words)  # a file read whole, too
    listed = run_in_process(["runs", "--json", "--db", db], cwd=tmp_path)
    assert len(json.loads(listed.stdout)) == 1  # nothing of the crafted record stored


def test_a_start_in_another_zone_is_shown_in_utc(tmp_path: Path) -> None:
    """J10: a run started at 22:51:45+05:00 started at 17:51:45 UTC, as every view that says UTC shows it."""
    crafted = _crafted(tmp_path, PROFILE, lambda d: d.update(started_at="2026-06-30T22:51:45+05:00"))
    shown = run_in_process(["show", crafted], env={"COLUMNS": "200"}, cwd=tmp_path)
    assert shown.returncode == 0 and "2026-06-30 17:51:45 UTC" in shown.stdout, shown.stdout


@pytest.mark.parametrize(
    "source, platform",
    [(DEVICE / "tpu_programs_forecast_many_compiles.json", "TPU"), (_GPU := CPU_PROGRAMS, "GPU")],
    ids=["tpu-run", "gpu-run"],
)
@pytest.mark.parametrize("device", ["t4", "tpu-v5e"])
def test_a_forecast_of_a_run_on_an_accelerator_is_refused(
    source: Path, platform: str, device: str, tmp_path: Path
) -> None:
    """A forecast reads a CPU run's times as a CPU's: one on the TPU or a GPU would be forecast from the device's
    own times (pass 6 FC2: "XLA:GPU compile: 3.38 s on this CPU" of a TPU run)."""
    if platform == "GPU":  # the same CPU run, as its kernel would describe JAX on a GPU
        backend = {"platform": "cuda", "device_kind": "Tesla T4", "devices": 1, "memory_bytes_per_device": 1.5e10}
        source = _crafted(
            tmp_path, source, lambda d: d["measurements"].setdefault("kernel", {}).update(jax_backend=backend)
        )
    assert run_in_process(["forecast", CPU_PROGRAMS, "--device", device], cwd=tmp_path).returncode == 0
    refused = run_in_process(["forecast", source, "--device", device], cwd=tmp_path)
    assert_one_line_error(refused, f"ran on the {platform}", "forecast reads a run on the CPU", "nbscope compare")


@pytest.mark.parametrize(
    "args",
    [
        ["forecast", CPU_PROGRAMS, "--device", "tpu-v5e", "--gpu", "t4"],
        ["forecast", CPU_PROGRAMS, "--gpu", "t4", "--device", "tpu-v5e"],
        ["forecast", CPU_PROGRAMS, "--limit", "3", "--limit", "5"],
        ["diagnose", CPU_PROGRAMS, "--fail-on", "high", "--fail-on", "medium"],
        ["diagnose", CPU_PROGRAMS, "--gpu", "t4", "--gpu", "a100"],
    ],
    ids=["device-then-gpu", "gpu-then-device", "limit-twice", "fail-on-twice", "diagnose-gpu-twice"],
)
def test_an_option_given_twice_is_refused(args: list[Any], tmp_path: Path) -> None:
    done = run_in_process(args, cwd=tmp_path)
    assert_one_line_error(done)
    assert done.stdout == "" and "is given more than once" in done.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["forecast", CPU_PROGRAMS, "--list"], "RUN does nothing with --list"),
        (["forecast", "--list", "--measured", CPU_PROGRAMS], "--measured does nothing with --list"),
        (["forecast", CPU_PROGRAMS, "--calibrate-from", "1", "--name", "x"], "RUN does nothing with --calibrate-from"),
        (["forecast", CPU_PROGRAMS, "--base", "l4"], "--base does nothing without --calibrate-from"),
        (
            ["diagnose", CPU_PROGRAMS, "--other", CPU_PROGRAMS.with_name("cpu_x64.json")],
            "is a run of tests/files/diag_x64",
        ),
    ],
    ids=["run-and-list", "measured-and-list", "run-and-calibrate", "base-without-calibrate", "other-notebook"],
)
def test_options_that_contradict_the_run_or_each_other_are_refused(args: list[Any], words: str, tmp_path: Path) -> None:
    """Item 4: ``forecast RUN --list`` listed the table and ``forecast RUN --base l4`` forecast RUN, each leaving the
    other option unread, silently; ``diagnose A --other B`` took another notebook's run as evidence of A's."""
    assert_one_line_error(run_in_process([*args, "--db", tmp_path / "s.db"], cwd=tmp_path), words)


@pytest.mark.parametrize(
    "args, env, words",
    [
        (["show", CPU_PROGRAMS], {"COLUMNS": "²"}, None),
        (["info"], {"NUMBA_NUM_THREADS": "²"}, None),
        (["loops", "--trips", "²,5", "--db", "s.db"], {}, "--trips expects"),
        (["loops", "--trips", "١٢", "--db", "s.db"], {}, "--trips expects"),
        (["diagnose", CPU_PROGRAMS, "--threshold", "compile-bound.min_compile_s=١"], {}, "--threshold expects"),
        (["diagnose", CPU_PROGRAMS, "--threshold", "compile-bound.min_compile_s=nan"], {}, "--threshold expects"),
    ],
    ids=[
        "columns",
        "numba-threads",
        "trips-superscript",
        "trips-arabic-indic",
        "threshold-arabic-indic",
        "threshold-nan",
    ],
)
def test_a_number_that_is_not_plain_ascii_digits_is_one_line_never_a_traceback(
    args: list[Any], env: dict[str, str], words: str | None, tmp_path: Path
) -> None:
    """``int()`` takes ``١٢`` as 12 and fails on ``²``, which ``str.isdigit`` passes; ``float()`` takes ``inf`` and
    ``nan`` (``inf`` is a threshold's "never"): a number a user or the environment writes is read by one parser, ASCII and finite, else refused (an
    option) or left unset (the terminal's width: read as typer is imported, so in a process of its own)."""
    done = subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        env=cli_env(env, dict(os.environ)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    if words is None:
        assert done.returncode == 0, done.stderr
    else:
        assert_one_line_error(done, words)


def test_compare_names_an_unset_value_and_an_environment_it_has(tmp_path: Path) -> None:
    """Pass 5-6 case 70: ``--env EVIL: None → …`` (Python's None) and ``environment variables: {} → absent``
    though B has one."""
    crafted = _crafted(
        tmp_path,
        CPU_PROGRAMS,
        lambda d: (
            d["fingerprint"].update(environment={"EVIL": "x"}),
            d["settings"].update(env={"EVIL": "hidden-hmac-1234abcd:00112233445566aa"}),
        ),
    )
    (tmp_path / "a").mkdir()
    plain = _crafted(tmp_path / "a", CPU_PROGRAMS, lambda d: d["fingerprint"].update(environment={}))
    done = run_in_process(["compare", plain, crafted, "--markdown"], cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if "EVIL" in line or "environment variables" in line]
    assert len(lines) == 2 and "None" not in done.stdout and "absent (not set)" in lines[0], lines


@pytest.mark.parametrize("label", ["r1.json", "lecture.ipynb", "notes.md"])
def test_a_label_that_reads_as_a_file_name_is_refused(label: str, tmp_path: Path) -> None:
    """N57: ``show r1.json`` reads the file r1.json, never the run labelled so: such a label is refused when given."""
    notebook = Path(__file__).resolve().parent / "files" / "empty.ipynb"
    for given in (["--label", label], []):
        env = {} if given else {"NBSCOPE_LABEL": label}
        done = run_in_process(["profile", notebook, *given, "--db", tmp_path / "s.db"], env=env, cwd=tmp_path)
        assert_one_line_error(done, f"label {label!r} cannot name runs", "file name")
    assert not (tmp_path / "s.db").exists()


def test_the_api_refuses_an_argument_of_another_type_in_one_line(tmp_path: Path) -> None:
    """N84: ``nbscope.compare(run, "garbage")`` ended in AttributeError, ``profile(None)`` in a TypeError."""
    import nbscope
    from nbscope.record.run import loads

    run = loads(CPU_PROGRAMS.read_text())
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: nbscope.compare(run, "garbage"), "b is a str, not RunRecord"),  # type: ignore[arg-type]
        (lambda: nbscope.diagnose("1"), "record is a str, not RunRecord"),  # type: ignore[arg-type]
        (lambda: nbscope.profile(None), "path is a NoneType"),  # type: ignore[arg-type]
        (lambda: nbscope.profile("x.ipynb", timeout="abc"), "timeout is a str"),  # type: ignore[arg-type]
        (lambda: nbscope.open_store(42), "path is a int"),  # type: ignore[arg-type]
    ]
    for call, words in calls:
        with pytest.raises(nbscope.NbscopeError) as refused:
            call()
        assert words in str(refused.value)


def test_a_line_of_figures_wraps_between_them_never_inside_one(tmp_path: Path) -> None:
    """N83: at 80 columns the totals line ended ``kernel start 623`` with ``ms`` on the next line, and the header
    ``digest`` with its value on the next."""
    shown = run_in_process(["show", PROFILE], env={"COLUMNS": "80"}, cwd=tmp_path).stdout
    assert re.search(r"digest [0-9a-f]{12}", shown) and re.search(r"kernel start [0-9.]+ (µs|ms|s)\b", shown), shown
    assert all(len(line) <= 80 for line in shown.splitlines())


def test_a_gate_between_two_backends_is_refused(tmp_path: Path) -> None:
    """Item 4, a case of the class: ``gate --baseline CPU_RUN --candidate TPU_RUN`` of one lecture passed ("✅ faster
    ×0.20"), judging the device as a change of the notebook."""
    db = tmp_path / "s.db"
    runs = [DEVICE / "cpu_kesten_processes.json", DEVICE / "tpu_kesten_processes.json"]
    assert run_in_process(["import", *runs, "--db", db], cwd=tmp_path).returncode == 0
    done = run_in_process(["gate", "--baseline", "1", "--candidate", "2", "--db", db], cwd=tmp_path)
    assert_one_line_error(done, "the baseline ran on the CPU and the candidate on the TPU", "nbscope compare 1 2")


def test_a_stopped_import_prints_the_line_of_every_run_it_stored(tmp_path: Path) -> None:
    """G9: SIGTERM during ``import`` of many files left the last stored run without its "imported as run N" line."""
    document = json.loads(CPU_PROGRAMS.read_text())
    for number in range(80):
        document["measurements"]["run_uuid"] = f"g9-{number}"
        (tmp_path / f"r{number:03d}.json").write_text(json.dumps(document))
    for attempt in range(6):
        db = tmp_path / f"imp{attempt}.db"
        files = sorted(str(p) for p in tmp_path.glob("r*.json"))
        process = subprocess.Popen(
            [sys.executable, "-m", "nbscope", "import", *files, "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
            cwd=tmp_path,
        )
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3 + 5 * attempt)]  # stopped as it stores the next
        time.sleep(attempt * 0.004)  # into the next run's storing, at another point each time
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=120)
        printed = sum("imported as run" in line for line in [*lines, *out.splitlines()])
        with closing(sqlite3.connect(db)) as connection:
            stored = connection.execute("SELECT count(*) FROM runs").fetchone()[0]
        assert process.returncode == 143 and printed == stored, (printed, stored)


def test_a_store_named_through_a_link_keeps_its_live_files_beside_the_database(tmp_path: Path) -> None:
    """N15: with ``link.db -> real/r.db``, a killed profile's live file went to ``link.db.d/``, so ``runs
    --unfinished --db real/r.db`` said "No unfinished runs."; a store's files now sit beside its database."""
    from nbscope.record.live import live_folder, new_live_path

    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "r.db"
    assert run_in_process(["import", CPU_PROGRAMS, "--db", real], cwd=tmp_path).returncode == 0
    (tmp_path / "link.db").symlink_to(real)
    made = new_live_path(tmp_path / "link.db")
    assert made.parent == live_folder(real) == live_folder(tmp_path / "link.db")
    assert made.parent.is_dir() and not (tmp_path / "link.db.d").exists()


def test_a_direct_reference_written_with_spaces_is_one_requirement() -> None:
    """N53: ``versions --with "six @ file:///some/x"`` was split at its spaces and refused (``'@'`` is no
    requirement), though PEP 508 writes a direct reference so."""
    from nbscope.collect.environments import parse_requirements

    assert parse_requirements("six @ file:///some/x numpy>=2") == ["six @ file:///some/x", "numpy>=2"]
    assert parse_requirements("six@ file:///x jax >= 0.4, <0.5") == ["six@ file:///x", "jax>=0.4,<0.5"]
