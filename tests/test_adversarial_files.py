"""Issue Q, items 4 and 5, tried as an adversarial user would: nothing of the user's is destroyed, no secret
leaks. Each test names the bad input, the exit code, the message, and what is kept on disk.

Real kernels on tiny notebooks: one profile of ``tests/files/gate_tiny.ipynb`` (given ``--env HF_TOKEN=...``)
serves the export tests; live files come from real runs (a profile whose live file the caller names, run in a
process of its own, which then ends, as a killed run's would).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import assert_one_line_error
from nbscope.api.profile import CACHE_MARKER, jax_cache_env, owns_folder
from nbscope.record.live import live_folder, read_live
from nbscope.record.store import Store, files_folder

FILES = Path(__file__).resolve().parent / "files"
TINY = FILES / "gate_tiny.ipynb"
SECRET = "hf_Adversarial0Secret1Value2"  # what --env HF_TOKEN= is given; must appear nowhere
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
Cli = Callable[..., subprocess.CompletedProcess[str]]



def env_without_db() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}


def cli(*args: str | os.PathLike[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nbscope", *map(str, args)], cwd=cwd, env=env_without_db(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A store with one real profile of gate_tiny.ipynb, given a secret with --env; its output kept."""
    folder = tmp_path_factory.mktemp("profiled")
    db = folder / "store" / "runs.db"
    done = cli("profile", TINY, "--db", db, "--env", f"HF_TOKEN={SECRET}", "--env", "JAX_PLATFORMS=cpu", cwd=folder)
    assert done.returncode == 0, done.stderr
    return {"folder": folder, "db": db, "profile": done}


# ---- writing files: -o, export, report ------------------------------------------------------------------------


def test_export_refuses_a_symlink_target_and_leaves_link_and_file_as_they_were(profiled: dict, tmp_path: Path) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("the user's file")
    link = tmp_path / "link.json"
    link.symlink_to(kept)
    line = assert_one_line_error(cli("export", "1", "-o", link, "--db", profiled["db"], cwd=tmp_path), "symbolic link")
    assert str(link) in line
    assert link.is_symlink() and os.readlink(link) == str(kept)
    assert kept.read_text() == "the user's file"


def test_export_refuses_a_fifo_without_opening_it(profiled: dict, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert_one_line_error(cli("export", "1", "-o", fifo, "--db", profiled["db"], cwd=tmp_path, timeout=60), "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_to_dev_stdout_and_dash_writes_standard_output_and_makes_no_file(profiled: dict, tmp_path: Path) -> None:
    was_link = os.path.islink("/dev/stdout")
    for target in ("/dev/stdout", "-"):
        done = cli("export", "1", "-o", target, "--db", profiled["db"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)  # the record alone: the confirmation went to stderr
        assert document["format"] == "nbscope-run" and document["target"].endswith("gate_tiny.ipynb")
        assert "written to standard output" in done.stderr
    assert not (tmp_path / "-").exists() and list(tmp_path.iterdir()) == []
    assert os.path.islink("/dev/stdout") == was_link  # /dev/stdout is still what it was


def test_a_users_file_tmp_beside_the_target_is_never_touched(profiled: dict, tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    target.write_text("old export")
    mine = tmp_path / "run.json.tmp"
    mine.write_text("the user's own temporary file")
    done = cli("export", "1", "-o", target, "--db", profiled["db"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(target.read_text())["format"] == "nbscope-run"
    assert mine.read_text() == "the user's own temporary file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.json.tmp"]  # no temporary left


def test_a_parent_that_is_a_file_is_one_line_and_missing_folders_are_made(profiled: dict, tmp_path: Path) -> None:
    blocker = tmp_path / "notes"
    blocker.write_text("a file, not a folder")
    assert_one_line_error(cli("export", "1", "-o", blocker / "run.json", "--db", profiled["db"], cwd=tmp_path), str(blocker))
    assert blocker.read_text() == "a file, not a folder"
    made = tmp_path / "new" / "deeper" / "run.json"
    assert cli("export", "1", "-o", made, "--db", profiled["db"], cwd=tmp_path).returncode == 0
    assert json.loads(made.read_text())["format"] == "nbscope-run"


def test_report_to_standard_output_and_a_refused_link(profiled: dict, tmp_path: Path) -> None:
    done = cli("report", "1", "--db", profiled["db"], "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists()
    (tmp_path / "real.html").write_text("mine")
    (tmp_path / "r.html").symlink_to(tmp_path / "real.html")
    assert_one_line_error(cli("report", "1", "--db", profiled["db"], "-o", tmp_path / "r.html", cwd=tmp_path), "symbolic link")
    assert (tmp_path / "real.html").read_text() == "mine"


def test_the_safe_writer_keeps_a_replaced_files_permissions(tmp_path: Path) -> None:
    from nbscope._files import write_text

    target = tmp_path / "shared.json"
    target.write_text("old")
    target.chmod(0o640)
    write_text(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


# ---- --jax-cache cold --------------------------------------------------------------------------------------


def test_jax_cache_cold_removes_only_what_jax_wrote(tmp_path: Path) -> None:
    notebook = tmp_path / "jit.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("import jax, jax.numpy as jnp\n"
                                                     "y = jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()")],
                                metadata={"kernelspec": KERNELSPEC}), notebook)
    db = tmp_path / "db" / "nbscope.db"
    warm = cli("profile", notebook, "--db", db, "--jax-cache", "warm", "--json", cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    cache = files_folder(db) / "jax-cache"
    assert owns_folder(cache)
    written = sorted(p.name for p in cache.iterdir() if p.name != CACHE_MARKER)
    assert written and all(name.endswith("-cache") for name in written), written  # what jax 0.10 writes
    (cache / "my_notes.txt").write_text("mine")
    (cache / "mydir").mkdir()
    (cache / "mydir" / "keep.txt").write_text("also mine")
    cold = cli("profile", notebook, "--db", db, "--jax-cache", "cold", "--json", cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert json.loads(cold.stdout)["measurements"]["totals"]["cache_state"] == "cold"
    assert (cache / "my_notes.txt").read_text() == "mine"
    assert (cache / "mydir" / "keep.txt").read_text() == "also mine"
    # Emptied again directly: JAX's entries go, the marker and the user's files stay.
    assert jax_cache_env("cold", cache)[1] == "cold"
    assert sorted(p.name for p in cache.iterdir()) == sorted([CACHE_MARKER, "my_notes.txt", "mydir"])
    assert not (db.parent / "jax-cache").exists() and not (db.parent / "live").exists()  # nothing loose


# ---- live files: import, two stores, double import -------------------------------------------------------------


def _live_run(tmp_path: Path, live: Path, env: dict[str, str] | None = None) -> None:
    """A real profile whose live file stays (the caller names it), in a process that then ends."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom nbscope.api.profile import ProfileOptions, profile\n"
        f"profile(sys.argv[1], ProfileOptions(env={env or {}!r}), live_path=Path(sys.argv[2]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(TINY), str(live)], cwd=tmp_path, env=env_without_db(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert live.is_file()


def test_import_keeps_a_foreign_file_removes_its_own_and_stores_a_live_run_once(tmp_path: Path) -> None:
    elsewhere = tmp_path / "downloads" / "run.jsonl"
    elsewhere.parent.mkdir()
    _live_run(tmp_path, elsewhere, env={"HF_TOKEN": SECRET})
    assert SECRET not in elsewhere.read_text()  # the live file has the hash, never the value
    db = tmp_path / "project" / "a.db"
    first = cli("import", elsewhere, "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "imported as run 1" in first.stdout and "the file is kept" in first.stdout
    assert elsewhere.is_file()  # given from elsewhere: the user's file, kept
    again = cli("import", elsewhere, "--db", db, cwd=tmp_path)
    assert again.returncode == 0 and "already in" in again.stdout and "not imported again" in again.stdout
    # A copy in the store's own live folder: the same run (its uuid), stored once; that copy is removed.
    own = live_folder(db) / "copy.jsonl"
    own.parent.mkdir(parents=True)
    shutil.copy(elsewhere, own)
    third = cli("import", own, "--db", db, cwd=tmp_path)
    assert third.returncode == 0 and "already in" in third.stdout and "the live file is removed" in third.stdout
    assert not own.exists() and elsewhere.is_file()
    assert Store(db).count() == 1


def test_two_stores_in_one_folder_keep_their_live_files_apart(tmp_path: Path) -> None:
    folder = tmp_path / "stores"
    a, b = folder / "a.db", folder / "b.db"
    assert live_folder(a) != live_folder(b) and live_folder(a).parent == files_folder(a)
    live = live_folder(a) / "killed.jsonl"
    live.parent.mkdir(parents=True)
    _live_run(tmp_path, live)
    assert read_live(live).header["uuid"]
    listed = cli("runs", "--unfinished", "--db", a, cwd=tmp_path)
    assert listed.returncode == 0 and str(live) in listed.stdout
    assert f"nbscope import {live} --db {a}" in listed.stdout  # the hint names the store it belongs to
    other = cli("runs", "--unfinished", "--db", b, cwd=tmp_path)
    assert other.returncode == 0 and other.stdout.strip() == "No unfinished runs."
    # Importing a's live file into b stores it in b but leaves the file: it is not b's.
    into_b = cli("import", live, "--db", b, cwd=tmp_path)
    assert into_b.returncode == 0 and "the file is kept" in into_b.stdout and live.is_file()
    into_a = cli("import", live, "--db", a, cwd=tmp_path)
    assert into_a.returncode == 0 and "the live file is removed" in into_a.stdout and not live.exists()
    assert not (folder / "live").exists()


# ---- secrets ----------------------------------------------------------------------------------------------------


def test_an_env_secret_is_never_printed_stored_or_exported(profiled: dict, tmp_path: Path) -> None:
    db = Path(str(profiled["db"]))
    done = profiled["profile"]
    assert isinstance(done, subprocess.CompletedProcess)
    assert SECRET not in done.stdout + done.stderr
    for path in db.parent.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path  # the store, its WAL, its live folder
    record = Store(db).get(1)
    hidden = record.settings["env"]["HF_TOKEN"]
    assert hidden.startswith("hidden-sha256:") and record.settings["env"]["JAX_PLATFORMS"] == "cpu"
    assert any(arg.startswith("HF_TOKEN=hidden-sha256:") for arg in record.command)
    outputs = [cli("show", "1", "--db", db, cwd=tmp_path), cli("show", "1", "--json", "--db", db, cwd=tmp_path),
               cli("export", "1", "-o", "-", "--db", db, cwd=tmp_path),
               cli("export", "1", "-o", "-", "--portable", "--db", db, cwd=tmp_path),
               cli("report", "1", "-o", "-", "--db", db, cwd=tmp_path)]
    for output in outputs:
        assert output.returncode == 0, output.stderr
        assert SECRET not in output.stdout + output.stderr


def test_compare_says_a_hidden_value_differs_without_showing_it(profiled: dict, tmp_path: Path) -> None:
    db = Path(str(profiled["db"]))
    other = "hf_AnotherSecretValue9"
    second = cli("profile", TINY, "--db", db, "--env", f"HF_TOKEN={other}", "--env", "JAX_PLATFORMS=cpu", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    for extra in ((), ("--markdown",)):
        done = cli("compare", "1", "2", "--db", db, *extra, cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr
        text = done.stdout + done.stderr
        assert "HF_TOKEN" in text and "hidden-sha256:" in text
        assert SECRET not in text and other not in text
    kept = cli("profile", TINY, "--db", db, "--env", "MY_SETTING=visible", "--env-store-values", "--json", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    document = json.loads(kept.stdout)
    assert document["settings"]["env"] == {"MY_SETTING": "visible"} and document["settings"]["env_values_stored"]


def test_a_portable_export_carries_no_machine_local_path(profiled: dict, tmp_path: Path) -> None:
    db = Path(str(profiled["db"]))
    done = cli("export", "1", "-o", tmp_path / "shared.json", "--portable", "--db", db, cwd=FILES.parent.parent)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "shared.json").read_text()
    document = json.loads(text)
    for local in (str(Path.home()), str(FILES.parent.parent), str(profiled["folder"]), sys.executable):
        assert local not in text, local
    assert document["command"][0] == "nbscope" and document["measurements"]["portable"] is True
    assert document["measurements"]["notebook"]["path"] == document["target"] == "tests/files/gate_tiny.ipynb"
    assert document["measurements"]["kernel"]["cwd"] == "tests/files"
    assert "/" not in document["measurements"]["kernel"]["executable"]
    assert document["fingerprint"]["digest"] == Store(db).get(1).digest
    imported = cli("import", tmp_path / "shared.json", "--db", tmp_path / "other.db", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr


def test_every_spelling_of_env_on_a_command_line_is_hidden() -> None:
    from nbscope.record.secrets import command_for_record, env_for_record

    argv = ["nbscope", "profile", "x.md", "--env", f"HF_TOKEN={SECRET}", f"--env=OPENAI_API_KEY={SECRET}",
            "--env", "JAX_PLATFORMS=cpu", "--env", f"JAX_AUTH_TOKEN={SECRET}"]
    kept = command_for_record(argv)
    assert SECRET not in " ".join(kept) and "JAX_PLATFORMS=cpu" in kept
    assert kept[4].startswith("HF_TOKEN=hidden-sha256:") and kept[5].startswith("--env=OPENAI_API_KEY=hidden-sha256:")
    assert command_for_record([*argv, "--env-store-values"]) == [*argv, "--env-store-values"]
    assert env_for_record({"A": "x"}) == env_for_record({"A": "x"}) != env_for_record({"A": "y"})  # compare can tell


def test_a_portable_record_replaces_only_whole_folder_names() -> None:
    from nbscope.record.portable import portable

    document = {"target": "a.md", "command": ["/usr/bin/nbscope", "profile", "/home/me/proj/a.md", "--db=/srv/x.db"],
                "measurements": {"notebook": {"path": "/home/me/proj/a.md"},
                                 "kernel": {"cwd": "/elsewhere/run", "executable": "/opt/py/bin/python3"},
                                 "cells": [{"error": {"message": "see /home/me/proj/a.md and /home/melanie/b"}}]},
                "fingerprint": {}}
    shared = portable(document, root="/home/me/proj", home="/home/me")
    assert shared["command"] == ["nbscope", "profile", "a.md", "--db=…/x.db"]
    assert shared["measurements"]["notebook"]["path"] == "a.md"
    assert shared["measurements"]["kernel"] == {"cwd": "…/run", "executable": "python3"}
    assert shared["measurements"]["cells"][0]["error"]["message"] == "see a.md and /home/melanie/b"
    assert document["measurements"]["notebook"]["path"] == "/home/me/proj/a.md"  # the original is untouched
