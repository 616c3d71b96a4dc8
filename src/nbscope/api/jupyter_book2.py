"""jupyter-book 2 beside jupyter-book 1: where its command comes from, and what its builds need.

jupyter-book 2 is a Node.js program (mystmd) published under the same PyPI name as jupyter-book 1, so
one Python environment cannot hold both. nbscope therefore keeps jupyter-book 2 in an environment of
its own, ``<cache>/nbscope/jupyter-book-2`` (``NBSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbscope``,
else ``~/.cache/nbscope``), made by ``nbscope book2-env --install`` from the package index. Only the
command comes from there (it is installed without dependencies: the launcher runs ``node`` on the
bundled program). Its execution runs on the Python side of *this* environment: jupyter-book 2 starts
``python -m jupyter_server`` with the first ``python`` on PATH, and the server starts kernels by name,
so nbscope puts its own interpreter first on PATH (``nbscope[book2]`` installs ``jupyter-server``).
The kernels then see the same packages as in every other pathway.

A jupyter-book 2 that the user installed (``jupyter-book>=2`` in this environment, or
``NBSCOPE_JUPYTER_BOOK2`` naming a command) is used first.

mystmd (the ``myst`` command, npm package ``mystmd``: the program jupyter-book 2 wraps) is found on PATH, in
``NBSCOPE_MYST``, or in nbscope's own folder ``<cache>/nbscope/mystmd``, which ``nbscope book2-env --install``
fills with ``npm install mystmd`` where npm exists (:func:`find_myst`, :func:`install_myst`).

What a build needs besides the command: Node.js 18, 20 or 22+; as root, ``ServerApp.allow_root`` for
the Jupyter server (a config folder nbscope adds to ``JUPYTER_CONFIG_PATH``, which keeps the user's own
config); offline, a local stand-in for the site theme it would otherwise download (the build then
executes and exits 0 instead of failing after execution).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.schema import process_environment

REQUIREMENT = "jupyter-book>=2,<3"
# The launcher's own imports (used when it has to look for Node.js); the server side is this environment's.
LAUNCHER_PACKAGES = ("platformdirs", "nodeenv")
COMMAND_VARIABLE = "NBSCOPE_JUPYTER_BOOK2"
ENV_FOLDER = "jupyter-book-2"
MADE_MARKER = ".nbscope-made"
COMPLETE_MARKER = ".nbscope-complete"
PATH_FOLDER = "path"  # holds only the `jupyter-book` command, to put first on PATH
MIN_NODE = 18
INSTALL_TIMEOUT_S = 600
# The site template that jupyter-book 2 downloads for a build; a local one with these two keys is enough
# for the build to go on offline (site content is written, no themed HTML).
THEME_STAND_IN = "myst: v1\nkind: site\n"
THEME_FOLDER = Path("_build") / "templates" / "site" / "myst" / "book-theme"

# Lines of a jupyter-book 2 build's log, recognised by literal text, never by a backtracking pattern: a
# log line can be a megabyte of base64 or progress bar, and each is read in time linear in its length.
SERVER_STARTING = "Starting new Jupyter server"
SERVER_STARTED = "Jupyter server started"
SERVER_FAILED = ("Jupyter server did not start", "Jupyter server did not respond")
PAGE_BUILT = "Built "  # Built PAGE in 1.2 s | 340 ms
THEME_REQUEST = "request to "  # request to https://.../templates/... failed
# ... and those naming a page that ran, came from the execution cache or stopped at an error: the
# ``BuildLog`` list each page goes to, the text before the page and (for the last) the text after it.
PAGE_OPENERS = (("executed", "Executing notebook ("), ("cached", "Adding cached notebook outputs ("))
HALTED = " An exception occurred during code execution, halting further execution"
WINDOW = 4096  # characters after a marker in which its page or URL must end


def cache_dir() -> Path:
    """nbscope's cache folder (``NBSCOPE_CACHE_DIR``, ``$XDG_CACHE_HOME/nbscope`` or ``~/.cache/nbscope``)."""
    settings = process_environment.read()
    if settings.cache_dir:
        return Path(settings.cache_dir).expanduser()
    xdg = settings.xdg_cache_home
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "nbscope"


def environment_dir() -> Path:
    """Where nbscope keeps its own jupyter-book 2."""
    return cache_dir() / ENV_FOLDER


def _bin(env: Path) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin")


def this_environment_version() -> str | None:
    try:
        return importlib.metadata.version("jupyter-book")
    except importlib.metadata.PackageNotFoundError:
        return None


def major(version: str | None) -> int | None:
    match = re.match(r"v?(\d+)", (version or "").strip())
    return int(match.group(1)) if match else None


@dataclass
class FoundCommand:
    """A builder's command, or why there is none (``command`` is then empty)."""

    command: list[str] = field(default_factory=list)
    version: str | None = None
    origin: str = ""  # where it came from: the variable, this environment, nbscope's own, PATH
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return bool(self.command) and self.problem is None

    @property
    def path_folder(self) -> Path | None:
        """The folder holding the command, to put first on PATH."""
        return Path(self.command[0]).parent if self.command else None


@dataclass
class JupyterBook2(FoundCommand):
    """A jupyter-book 2 command, or why there is none."""

    @property
    def path_folder(self) -> Path | None:
        """A folder to put first on PATH so that `jupyter book` / `jupyter-book` is this one."""
        if not self.command:
            return None
        command = Path(self.command[0])
        own = environment_dir() / PATH_FOLDER
        return own if command.parent == _bin(environment_dir()) and own.is_dir() else command.parent


def command_version(command: list[str]) -> str | None:
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[-1].strip().lstrip("v") if done.returncode == 0 and text else None


def node_major() -> int | None:
    node = shutil.which("node")
    if node is None:
        return None
    try:
        text = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return major(text)


def find() -> JupyterBook2:
    """The jupyter-book 2 to use: ``NBSCOPE_JUPYTER_BOOK2``, this environment's, nbscope's own, or ``myst``."""
    given = process_environment.read().jupyter_book2
    here = this_environment_version()
    beside = Path(sys.executable).parent / "jupyter-book"
    own = _bin(environment_dir()) / "jupyter-book"
    if given:
        found = JupyterBook2([given], origin=f"${COMMAND_VARIABLE}")
    elif (major(here) or 0) >= 2 and (beside.exists() or shutil.which("jupyter-book")):
        found = JupyterBook2(
            [str(beside) if beside.exists() else str(shutil.which("jupyter-book"))],
            version=here,
            origin="this environment",
        )
    elif _complete(environment_dir()):
        found = JupyterBook2([str(own)], origin=f"nbscope's own environment ({environment_dir()})")
    elif shutil.which("myst"):
        found = JupyterBook2([str(shutil.which("myst"))], origin="mystmd on PATH")
    else:
        have = f"jupyter-book {here}" if here else "no jupyter-book"
        return JupyterBook2(
            problem=f"jupyter-book 2 is not installed ({have} here): run `nbscope book2-env --install`, which puts it "
            f"in an environment of its own under {environment_dir()} (it shares jupyter-book 1's package name), "
            f"or set {COMMAND_VARIABLE} to a jupyter-book 2 command"
        )
    node = node_major()
    if node is None or node < MIN_NODE:
        found.problem = f"jupyter-book 2 needs Node.js {MIN_NODE} or newer; found {'none' if node is None else node}"
        return found
    if importlib.util.find_spec("jupyter_server") is None:
        found.problem = (
            "jupyter-book 2 runs its kernels through a Jupyter server, and jupyter_server is not installed in "
            "this environment: pip install 'nbscope[book2]'"
        )
        return found
    found.version = found.version or command_version(found.command)
    if found.version is None:
        found.problem = f"{found.command[0]} --version failed: it does not run"
    elif major(found.version) is not None and (major(found.version) or 0) < 2 and found.origin != "mystmd on PATH":
        found.problem = f"{found.command[0]} is jupyter-book {found.version}, not jupyter-book 2"
    return found


def _complete(env: Path) -> bool:
    folder = env / PATH_FOLDER
    return (env / COMPLETE_MARKER).exists() and (folder / "jupyter-book").exists() and (folder / "jupyter").exists()


def install(*, quiet: bool = True) -> Path:
    """Make nbscope's own jupyter-book 2 environment (from the package index); returns its folder.

    The folder gets a marker when it is made and another when the install ran to its end: an interrupted
    or failed install is made again next time, and a folder nbscope did not make is never touched.
    """
    target = environment_dir()
    if _complete(target) and command_version([str(_bin(target) / "jupyter-book")]):
        return target
    if target.exists() and not (target / MADE_MARKER).exists():
        raise NbscopeError(f"{target} exists and was not made by nbscope: move it away or set NBSCOPE_CACHE_DIR")
    shutil.rmtree(target, ignore_errors=True)  # an earlier, unfinished install of nbscope's own
    target.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(target)],
        [
            str(_bin(target) / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            *(["--quiet"] if quiet else []),
            "--no-deps",
            REQUIREMENT,
            *LAUNCHER_PACKAGES,
        ],
    ]
    for number, step in enumerate(steps):
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            done = None
        if number == 0 and target.exists():
            (target / MADE_MARKER).write_text("made by nbscope book2-env\n", encoding="utf-8")
        if done is None or done.returncode != 0:
            lines = [
                ln.strip()
                for ln in ((done.stderr + done.stdout) if done else "").splitlines()
                if ln.strip() and not ln.startswith("WARNING")
            ]
            why = f"exited {done.returncode}" if done else f"ran past {INSTALL_TIMEOUT_S} s"
            if target.exists() and (target / MADE_MARKER).exists():
                shutil.rmtree(target, ignore_errors=True)
            raise NbscopeError(
                f"could not install jupyter-book 2 ({' '.join(step[1:4])} {why}): {lines[-1] if lines else 'no output'}"
            )
    if not command_version([str(_bin(target) / "jupyter-book")]):
        shutil.rmtree(target, ignore_errors=True)
        raise NbscopeError(f"jupyter-book 2 was installed in {target} but `jupyter-book --version` fails there")
    write_path_folder(target)
    (target / COMPLETE_MARKER).write_text(REQUIREMENT + "\n", encoding="utf-8")
    return target


JUPYTER_DISPATCH = """#!/bin/sh
# Made by nbscope: `jupyter book ...` runs jupyter-book 2 from this folder (jupyter itself would prefer a
# jupyter-book 1 installed beside it); any other `jupyter ...` goes to the next jupyter on PATH.
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$1" = "book" ]; then
    shift
    exec "$here/jupyter-book" "$@"
fi
PATH="$(printf '%s' "$PATH" | tr ':' '\\n' | grep -vx "$here" | paste -sd: -)"
export PATH
exec jupyter "$@"
"""


def write_path_folder(env: Path) -> Path:
    """``<env>/path``: the command alone, to put first on PATH.

    The environment's bin folder also holds its own ``python``, without jupyter_server, so it must not go
    first on PATH. This folder holds ``jupyter-book`` and a ``jupyter`` that sends ``jupyter book`` to it.
    """
    folder = env / PATH_FOLDER
    folder.mkdir(exist_ok=True)
    link = folder / "jupyter-book"
    if not link.is_symlink():
        link.symlink_to(Path("..") / _bin(env).name / "jupyter-book")
    dispatch = folder / "jupyter"
    dispatch.write_text(JUPYTER_DISPATCH, encoding="utf-8")
    dispatch.chmod(0o755)
    return folder


def interpreter_first(folder: Path, base_path: str | None = None) -> str:
    """A PATH whose first ``python`` is this interpreter (a small script in ``folder``), so that the
    Jupyter server jupyter-book 2 starts, and the kernels it starts, run in this environment."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    base = process_environment.read().path if base_path is None else base_path
    return os.pathsep.join([str(folder), base])


def server_config_for_root(folder: Path) -> dict[str, str]:
    """Environment that lets a Jupyter server run as root (only when this process is root; else empty).

    The setting sits in a config folder of nbscope's on ``JUPYTER_CONFIG_PATH``, which comes after the
    user's own config folder, so the user's settings stay in force.
    """
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"allow_root": True}}), encoding="utf-8"
    )
    existing = process_environment.read().jupyter_config_path
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join(p for p in (str(folder), existing) if p)}


MYST_PACKAGE = "mystmd"
MYST_FOLDER = "mystmd"
MYST_VARIABLE = "NBSCOPE_MYST"


def myst_dir() -> Path:
    """Where nbscope keeps its own mystmd (an npm prefix)."""
    return cache_dir() / MYST_FOLDER


def _own_myst() -> Path:
    return myst_dir() / "node_modules" / ".bin" / "myst"


@dataclass
class Myst(FoundCommand):
    """A ``myst`` command, or why there is none."""


def find_myst() -> Myst:
    """The mystmd to use: ``NBSCOPE_MYST``, ``myst`` on PATH, or nbscope's own (``book2-env --install``)."""
    given = process_environment.read().myst
    on_path = shutil.which("myst")
    own = _own_myst()
    if given:
        found = Myst([given], origin=f"${MYST_VARIABLE}")
    elif on_path:
        found = Myst([on_path], origin="PATH")
    elif (myst_dir() / COMPLETE_MARKER).exists() and own.exists():
        found = Myst([str(own)], origin=f"nbscope's own folder ({myst_dir()})")
    else:
        return Myst(
            problem=f"mystmd is not installed: run `nbscope book2-env --install` (needs npm), which puts it "
            f"under {myst_dir()}, or set {MYST_VARIABLE} to a myst command"
        )
    node = node_major()
    if node is None or node < MIN_NODE:
        found.problem = f"mystmd needs Node.js {MIN_NODE} or newer; found {'none' if node is None else node}"
        return found
    found.version = command_version(found.command)
    if found.version is None:
        found.problem = f"{found.command[0]} --version failed: it does not run"
    return found


def install_myst() -> Path:
    """Put mystmd in nbscope's own folder with npm (from the npm registry); returns the folder. Markers as
    in :func:`install`: an unfinished install is made again, a folder nbscope did not make is never touched."""
    target = myst_dir()
    if (target / COMPLETE_MARKER).exists() and command_version([str(_own_myst())]):
        return target
    npm = shutil.which("npm")
    if npm is None or (node_major() or 0) < MIN_NODE:
        raise NbscopeError(
            f"mystmd needs npm and Node.js {MIN_NODE} or newer, and this machine has "
            f"{'no npm' if npm is None else 'an older Node.js'}"
        )
    if target.exists() and not (target / MADE_MARKER).exists():
        raise NbscopeError(f"{target} exists and was not made by nbscope: move it away or set NBSCOPE_CACHE_DIR")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    (target / MADE_MARKER).write_text("made by nbscope book2-env\n", encoding="utf-8")
    step = [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error", MYST_PACKAGE]
    try:
        done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0 or not command_version([str(_own_myst())]):
        lines = [ln.strip() for ln in ((done.stderr + done.stdout) if done else "").splitlines() if ln.strip()]
        why = f"ran past {INSTALL_TIMEOUT_S} s" if done is None else f"exited {done.returncode}"
        shutil.rmtree(target, ignore_errors=True)
        raise NbscopeError(
            f"could not install mystmd (npm install {MYST_PACKAGE} {why}): "
            f"{lines[-1] if lines else 'myst --version fails'}"
        )
    (target / COMPLETE_MARKER).write_text(MYST_PACKAGE + "\n", encoding="utf-8")
    return target


def write_theme_stand_in(project: Path) -> Path:
    """A local stand-in for the book theme in ``project``'s build folder, so the build needs no network."""
    folder = project / THEME_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "template.yml").write_text(THEME_STAND_IN, encoding="utf-8")
    return folder


@dataclass
class BuildLog:
    """What a jupyter-book 2 build's log says, with the times (seconds from the start) its lines arrived."""

    executed: list[str] = field(default_factory=list)  # pages whose notebooks ran
    cached: list[str] = field(default_factory=list)  # pages served from the execution cache, not run
    halted: list[str] = field(default_factory=list)  # pages whose execution stopped at an error
    page_built_s: dict[str, float] = field(default_factory=dict)
    server_start_s: float | None = None
    server_failed: bool = False
    theme_unreachable: bool = False  # it could not download its site theme (offline): the build fails after executing

    @property
    def is_jupyter_book2(self) -> bool:
        return bool(self.executed or self.cached or self.server_start_s is not None or self.server_failed)


def _page_line(line: str) -> tuple[str, str] | None:
    """(``BuildLog`` list, page) for a log line that names a page, else None."""
    for pages, opener in PAGE_OPENERS:
        start = line.find(opener)
        if start >= 0:
            start += len(opener)
            end = line.find(")", start + 1)  # the page is not empty
            if end > start:
                return pages, line[start:end]
    at = line.find(HALTED)
    if at > 0 and not line[at - 1].isspace():
        return "halted", line[:at].split()[-1]
    return None


def _page_built(line: str) -> tuple[str, float] | None:
    """(page, seconds) from ``Built PAGE in 1.2 s`` (or ``340 ms``)."""
    start = line.find(PAGE_BUILT)
    while start >= 0:
        begin = start + len(PAGE_BUILT)
        words = line[begin : begin + WINDOW].split(" ", 4)
        if len(words) >= 4 and words[0] and words[1] == "in" and words[2].strip("0123456789.") == "" and words[2]:
            unit = _leading_word(words[3])
            if unit in ("ms", "s"):
                try:
                    return words[0], float(words[2]) / (1000.0 if unit == "ms" else 1.0)
                except ValueError:  # 1.2.3
                    pass
        start = line.find(PAGE_BUILT, begin)
    return None


def _leading_word(text: str) -> str:
    end = 0
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return text[:end]


def _theme_unreachable(line: str) -> bool:
    """``request to URL failed`` where URL is one of the site templates."""
    start = line.find(THEME_REQUEST)
    while start >= 0:
        begin = start + len(THEME_REQUEST)
        rest = line[begin : begin + WINDOW]
        url = rest.split(None, 1)[0] if rest.strip() else ""
        if "/templates/" in url[1:-1] and rest[len(url) :].startswith(" failed"):
            return True
        start = line.find(THEME_REQUEST, begin)
    return False


def read_build_log(lines: list[tuple[float, str]]) -> BuildLog:
    log = BuildLog()
    starting: float | None = None
    for at, line in lines:
        page = _page_line(line)
        built = None
        if page is not None:
            getattr(log, page[0]).append(page[1])
        elif SERVER_STARTING in line:
            starting = at
        elif SERVER_STARTED in line and starting is not None:
            log.server_start_s = max(0.0, at - starting)
        elif any(failed in line for failed in SERVER_FAILED):
            log.server_failed = True
        elif _theme_unreachable(line):
            log.theme_unreachable = True
        elif (built := _page_built(line)) is not None:
            log.page_built_s[built[0]] = built[1]
    return log


# ---- `nbscope book2-env` ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Book2Env:
    """What ``nbscope book2-env`` found (after installing, when asked): the jupyter-book 2 and the mystmd, the
    folders nbscope keeps them in, and the notes of an optional install that could not be done."""

    book: JupyterBook2
    myst: Myst
    environment: Path
    myst_folder: Path
    notes: tuple[str, ...] = ()


def book2_env(*, install_missing: bool = False) -> Book2Env:
    """``nbscope book2-env``: the jupyter-book 2 that ``--via book2`` uses and the mystmd beside it;
    ``install_missing`` puts either in nbscope's own folders when none is found (mystmd is optional: without npm it is a note)."""
    found = find()
    if install_missing and not found.command:
        install()
        found = find()
    myst = find_myst()
    notes: list[str] = []
    if install_missing and not myst.command:
        try:
            install_myst()
        except NbscopeError as exc:
            notes.append(str(exc))
        myst = find_myst()
    return Book2Env(found, myst, environment_dir(), myst_dir(), tuple(notes))
