"""Issue T, "one store per project by default": the default store lives at the project root that names
notebooks (the git work tree, else the book's root, else the folder), every command finds it from any
subfolder, ``.nbscope/`` keeps itself out of git, and the first-run message says how to record a run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbscope.record.live import live_folder
from nbscope.record.store import GITIGNORE_TEXT, Store, default_path, files_folder

TINY = Path(__file__).resolve().parent / "files" / "gate_tiny.ipynb"


def cli(
    *args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    # Wide enough that a long store path is printed on one line (piped output is 80 columns by default).
    merged = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"} | {"COLUMNS": "400"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=merged,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project with a notebook in ``lectures/`` and a deeper folder with nothing in it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "project"
    (root / "lectures" / "deeper").mkdir(parents=True)
    shutil.copy(TINY, root / "lectures" / "tiny.ipynb")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "a lecture")
    return root


def test_every_command_from_any_subfolder_uses_the_one_store(project: Path) -> None:
    lectures, deeper = project / "lectures", project / "lectures" / "deeper"
    profiled = cli("profile", "tiny.ipynb", cwd=lectures)
    assert profiled.returncode == 0, profiled.stderr
    store = project / ".nbscope" / "nbscope.db"
    assert store.is_file() and Store(store).count() == 1
    assert f"saved as run 1 in {store}" in profiled.stdout
    assert not (lectures / ".nbscope").exists() and not (deeper / ".nbscope").exists()

    for folder in (project, lectures, deeper):
        runs = cli("runs", cwd=folder)
        assert runs.returncode == 0 and "lectures/tiny.ipynb" in runs.stdout, (folder, runs.stderr)
        show = cli("show", "latest", cwd=folder)
        assert show.returncode == 0 and "total = sum(range(1000))" in show.stdout, (folder, show.stderr)
        diagnosed = cli("diagnose", "latest", cwd=folder)
        assert diagnosed.returncode == 0, (folder, diagnosed.stderr)
    history = cli("history", "../tiny.ipynb", cwd=deeper)
    assert history.returncode == 0 and "1" in history.stdout, history.stderr
    second = cli("profile", "lectures/tiny.ipynb", cwd=project)  # from the root: the same store, the same name
    assert second.returncode == 0, second.stderr
    assert [r["target"] for r in Store(store).runs()] == ["lectures/tiny.ipynb", "lectures/tiny.ipynb"]
    assert not list((project / "lectures").rglob(".nbscope"))


def test_the_store_folder_keeps_itself_out_of_git(project: Path) -> None:
    done = cli("profile", "tiny.ipynb", cwd=project / "lectures")
    assert done.returncode == 0, done.stderr
    assert (project / ".nbscope" / ".gitignore").read_text() == GITIGNORE_TEXT
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_first_run_message_says_how_to_record_a_run(project: Path) -> None:
    done = cli("runs", cwd=project / "lectures")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert f"no run store at {project / '.nbscope' / 'nbscope.db'}" in line
    assert "nbscope profile NOTEBOOK" in line
    assert not (project / ".nbscope").exists()  # a read-only command creates nothing


def test_the_book_root_holds_the_store_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = tmp_path / "book"
    (book / "chapter").mkdir(parents=True)
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    monkeypatch.delenv("NBSCOPE_DB", raising=False)
    monkeypatch.chdir(book / "chapter")
    assert default_path() == book.resolve() / ".nbscope" / "nbscope.db"
    monkeypatch.chdir(tmp_path)
    assert default_path() == Path(".nbscope") / "nbscope.db"  # no project around it: this folder
    monkeypatch.setenv("NBSCOPE_DB", str(tmp_path / "mine.db"))
    monkeypatch.chdir(book / "chapter")
    assert default_path() == tmp_path / "mine.db"


def test_a_store_given_with_db_keeps_its_files_in_its_own_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    db = shared / "team.db"
    done = cli("profile", TINY, "--db", db, "--jax-cache", "warm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert files_folder(db) == shared / "team.db.d" and (shared / "team.db.d" / "jax-cache").is_dir()
    assert live_folder(db).is_dir() and not list(live_folder(db).iterdir())  # stored: its live file is gone
    assert (shared / "team.db.d" / ".gitignore").read_text() == GITIGNORE_TEXT
    assert sorted(p.name for p in shared.iterdir() if not p.name.startswith("team.db-")) == ["team.db", "team.db.d"]
    assert not (shared / ".gitignore").exists()  # the user's folder is not given one
