"""Isolated Python environments, one per set of package versions, for ``nbscope versions`` and ``bisect``.

An environment is a virtual environment made with ``venv`` from the Python nbscope runs on, filled by
``pip install`` through pip's own configuration (its index, find-links, constraints and wheel cache: no
other source), with an IPython kernel registered for it. Environments live in a cache folder keyed by
what they hold (Python, requirements, where pip may look), so a later run with the same variant reuses
one; the user clears the cache with ``nbscope versions --clear-cache`` or by deleting the folder.

An environment is built in place (a venv cannot be moved once made: its scripts name their own path).
Its folder carries :data:`BUILDING_MARKER` from the first moment and :data:`COMPLETE_MARKER` only once
everything is installed; a folder without the complete marker is never reused but removed and built
again, so an interrupted build (Ctrl-C, SIGTERM, even SIGKILL) can never be mistaken for a finished one.
A lock file per environment keeps two nbscope processes from building the same one at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope._redact import redact, shorten
from nbscope.collect import fingerprint as fp
from nbscope.schema import codec, process_environment
from nbscope.schema.environment_marker import EnvironmentMarker
from nbscope.schema.machine import Machine

ENV_FORMAT = 1
COMPLETE_MARKER = ".nbscope-env.json"  # written last: everything is installed
BUILDING_MARKER = ".nbscope-env-building"  # written first: nbscope made this folder and is building it
BUILD_LOG = ".nbscope-build.log"
KERNEL_LAUNCHER = "nbscope_kernel.py"
KERNEL_PREFIX = "nbscope-env-"

# Started by the kernelspec instead of ``python -m ipykernel_launcher``: PYTHONPATH reaches the kernel from
# nbscope's own process, and any of its folders but the probe's could put nbscope's packages (another jax)
# ahead of this environment's own.
_LAUNCHER_SOURCE = '''"""Starts an IPython kernel in this environment (made by nbscope), keeping from PYTHONPATH only the
folder of nbscope's probe, so that no package from outside the environment shadows its own."""
import os
import runpy
import sys

entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
probe = [e for e in entries if os.path.isfile(os.path.join(e, "_nbscope_probe.py"))]
dropped = {os.path.abspath(e) for e in entries if e not in probe}
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) not in dropped and os.path.abspath(p) != here]
sys.path.insert(0, "")  # as under ``python -m``: the kernel's working folder (ipykernel manages it)
if probe:
    os.environ["PYTHONPATH"] = os.pathsep.join(probe)
else:
    os.environ.pop("PYTHONPATH", None)
runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
'''


def default_cache_root() -> Path:
    """Where environments are kept: ``$NBSCOPE_ENV_CACHE``, else ``$XDG_CACHE_HOME/nbscope/envs``, else
    ``~/.cache/nbscope/envs``."""
    settings = process_environment.read()
    if settings.environments_dir:
        return Path(settings.environments_dir).expanduser()
    base = settings.xdg_cache_home or str(Path.home() / ".cache")
    return Path(base).expanduser() / "nbscope" / "envs"


# ---- requirements -------------------------------------------------------------------------------------


_OPERATOR_CHARS = "<>=!~,;"


def parse_requirements(text: str) -> list[str]:
    """``"jax==0.10.2 jaxlib==0.10.2"`` (or with spaces around operators: ``"jax >= 0.4, <0.5"``, or PEP 508's
    ``"six @ file:///wheels/six.whl"``) to a list of requirement specifiers, each checked; a one-line error for one
    pip could not read."""
    from packaging.requirements import InvalidRequirement, Requirement

    merged: list[str] = []
    for token in text.replace("\n", " ").split():
        if merged and "@" in (token[0], merged[-1][-1]):  # a direct reference, written with its spaces
            merged[-1] += " " + token
        elif merged and (token[0] in _OPERATOR_CHARS or merged[-1][-1] in _OPERATOR_CHARS):
            merged[-1] += token
        else:
            merged.append(token)
    if not merged:
        raise NbscopeError("--with needs at least one requirement, e.g. --with 'jax==0.10.2'")
    for requirement in merged:
        try:
            Requirement(requirement)
        except InvalidRequirement as exc:
            raise NbscopeError(f"not a requirement pip can read: {requirement!r} ({exc})") from None
    return merged


def canonical_name(name: str) -> str:
    """A distribution name as the package index compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Sequence[str]) -> list[str]:
    """The canonical distribution names the requirement specifiers name (options and URLs skipped)."""
    from packaging.requirements import InvalidRequirement, Requirement

    names = []
    for line in requirements:
        with contextlib.suppress(InvalidRequirement):
            names.append(canonical_name(Requirement(line).name))
    return names


def read_requirements_file(path: str | Path) -> list[str]:
    """A requirements file's lines (comments and blank lines dropped); pip reads them as given."""
    from nbscope._files import read_text

    text = read_text(path, what="requirements file", limit=2**20)
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def without_packages(lines: Sequence[str], names: Sequence[str]) -> list[str]:
    """``lines`` less those naming one of ``names``: a variant's own specifiers decide those packages."""
    named = set(names)
    return [line for line in lines if not (set(requirement_names([line])) & named)]


# ---- the environment ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvironmentSpec:
    """What an environment holds: requirement lines for pip, in order, and where pip may look."""

    requirements: tuple[str, ...]
    find_links: tuple[str, ...] = ()  # extra folders of wheels (pip --find-links)
    no_index: bool = False  # look only in find_links (pip --no-index)
    python: str = field(default_factory=lambda: sys.executable)

    def describe(self) -> dict[str, Any]:
        return {
            "format": ENV_FORMAT,
            "python": os.path.realpath(self.python),
            "python_version": platform.python_version() if self.python == sys.executable else None,
            "requirements": list(self.requirements),
            "find_links": [str(Path(p).expanduser().resolve()) for p in self.find_links],
            "no_index": self.no_index,
        }

    def key(self) -> str:
        """A short hash of what the environment holds: its folder's name in the cache."""
        canonical = json.dumps(self.describe(), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass
class Environment:
    """A complete environment in the cache."""

    path: Path
    spec: EnvironmentSpec
    reused: bool
    build_s: float | None = None

    @property
    def kernel_name(self) -> str:
        return KERNEL_PREFIX + self.path.name

    @property
    def jupyter_data(self) -> Path:
        return self.path / "share" / "jupyter"

    def site_packages(self) -> list[Path]:
        return sorted(self.path.glob("lib/python*/site-packages"))

    def installed(self) -> dict[str, str]:
        """Normalised distribution name -> version, read from the environment's own site-packages."""
        return fp.installed_distributions([str(p) for p in self.site_packages()])

    def python_version(self) -> str:
        """The environment's Python version, from its ``pyvenv.cfg``."""
        try:
            text = (self.path / "pyvenv.cfg").read_text(encoding="utf-8")
        except OSError:
            return platform.python_version()
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version_info", "version"):
                return value.strip()
        return platform.python_version()

    @contextmanager
    def kernelspec_visible(self) -> Iterator[None]:
        """Inside the block, jupyter_client (in this process) finds this environment's kernel by name."""
        before = process_environment.read().jupyter_path
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(self.jupyter_data), before) if p)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = before


def variant_fingerprint(base: dict[str, Any], environment: Environment, packages: Sequence[str]) -> dict[str, Any]:
    """``base`` (this machine's fingerprint) with the software of ``environment``: ``versions`` read from the
    environment's site-packages (plus the packages a variant names, whatever they are), and BLAS and Numba
    threading kept only where the environment has the same NumPy / Numba as nbscope's own (they were read
    there), else marked unknown."""
    installed = environment.installed()
    document = json.loads(json.dumps(base, default=str))
    versions = fp.versions_from(installed, environment.python_version(), sys.implementation.name)
    for name in packages:
        versions.setdefault(name, installed.get(name) or fp.absent("not installed"))
    own = codec.decode(Machine, base).recorded_versions or {}  # nbscope's own environment's
    for section, package in (("blas", "numpy"), ("numba_threading", "numba")):  # both VERSIONED_PACKAGES
        recorded = own.get(package)
        if versions[package] != recorded:
            document[section] = fp.absent(
                f"read only for nbscope's own environment ({package} {_shown(recorded)}); "
                f"this environment has {package} {_shown(versions[package])}"
            )
    document["versions"] = versions
    document["digest"] = fp.digest(document)
    return dict(document)


def _shown(value: object) -> str:
    return "not installed" if value is None or fp.is_absent(value) else str(value)


# ---- building -----------------------------------------------------------------------------------------


ProgressCallback = Callable[[str], None]


def is_complete(path: Path) -> bool:
    """A finished environment: the complete marker is there (it is written last) and the building one gone."""
    marker = path / COMPLETE_MARKER
    if not marker.is_file() or (path / BUILDING_MARKER).exists():
        return False
    try:
        json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (path / "bin" / "python").exists()


def made_by_nbscope(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file() or (path / BUILDING_MARKER).is_file()


@contextmanager
def _locked(lock_path: Path) -> Iterator[int]:
    """An exclusive lock on ``lock_path``; yields its file descriptor, which build steps inherit so that
    the lock outlives a killed nbscope until the pip it started has finished too."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle.fileno()


def ensure(
    spec: EnvironmentSpec, root: Path | None = None, *, on_progress: ProgressCallback | None = None
) -> Environment:
    """The environment for ``spec``: reused from the cache when complete, else built (a half-built one is
    removed first). Raises :class:`NbscopeError` with pip's reason when the requirements cannot be installed;
    on an interrupt the half-built folder is removed and the interrupt re-raised."""
    root = Path(root) if root is not None else default_cache_root()
    path = root / spec.key()
    with _locked(root / f".{spec.key()}.lock") as lock:
        if is_complete(path):
            return Environment(path=path, spec=spec, reused=True)
        if path.exists() or path.is_symlink():
            if not made_by_nbscope(path):
                raise NbscopeError(
                    f"{path} exists and was not made by nbscope (no {BUILDING_MARKER} or {COMPLETE_MARKER} in it); "
                    "nbscope never deletes what it did not create: move it away"
                )
            if on_progress is not None:
                on_progress(f"removing an unfinished environment {path.name} (its build was stopped)")
            shutil.rmtree(path)
        started = time.perf_counter()
        _build(path, spec, on_progress, lock)
        return Environment(path=path, spec=spec, reused=False, build_s=time.perf_counter() - started)


def _build(path: Path, spec: EnvironmentSpec, on_progress: ProgressCallback | None, lock: int) -> None:
    path.mkdir(parents=True)
    (path / BUILDING_MARKER).write_text(
        "nbscope is building this environment; without .nbscope-env.json beside this file it is unfinished "
        "and nbscope will remove it.\n",
        encoding="utf-8",
    )
    try:
        if on_progress is not None:
            on_progress(f"building environment {path.name}: {' '.join(spec.requirements)}")
        _run([spec.python, "-m", "venv", "--without-pip", str(path)], path, "create the virtual environment", lock)
        command = [
            spec.python,
            "-m",
            "pip",
            "--python",
            str(path / "bin" / "python"),
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            *_index_options(spec.find_links, spec.no_index),
        ]
        options = [r for r in spec.requirements if r.startswith("-")]
        options_file = path / "requirements-options.txt"
        if options:  # lines such as --extra-index-url from a requirements file: pip reads them from a file
            # An index URL's credentials are pip's to use, no one else's: the file is its owner's only, and
            # is gone once pip has read it (the environment's marker keeps the options, redacted).
            handle = os.open(options_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write("\n".join(options) + "\n")
            command += ["-r", str(options_file)]
        packages = [r for r in spec.requirements if not r.startswith("-")]
        try:
            _run(command + packages, path, "install " + " ".join(packages), lock)
        finally:
            options_file.unlink(missing_ok=True)
        _register_kernel(path, spec)
        marker = path / COMPLETE_MARKER
        partial = path / (COMPLETE_MARKER + ".tmp")
        built = {**spec.describe(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        partial.write_text(redact(json.dumps(built, indent=1)), encoding="utf-8")
        os.replace(partial, marker)
        (path / BUILDING_MARKER).unlink()
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # we made it: an unfinished environment must not stay
        raise


def _index_options(find_links: Sequence[str], no_index: bool) -> list[str]:
    """pip's options for where it may look besides its own configuration."""
    options: list[str] = []
    for folder in find_links:
        options += ["--find-links", str(Path(folder).expanduser().resolve())]
    return [*options, "--no-index"] if no_index else options


def _run(command: list[str], path: Path, what: str, lock: int) -> None:
    """Run a build step with its output in the build log; on an interrupt, stop it and every process it
    started (pip starts another Python) before the caller removes the folder they write into."""
    log_path = path / BUILD_LOG
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    with open(log_path, "ab") as log:
        log.write(("$ " + redact(" ".join(command)) + "\n").encode())  # a --with URL's token stays out of the log
        log.flush()
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            pass_fds=(lock,),
        )
        try:
            returncode = process.wait()
        except BaseException:
            _stop_group(process)
            raise
        finally:  # pip's own output keeps no credential of an index either (it masks passwords, not tokens)
            text = log_path.read_bytes().decode("utf-8", "surrogateescape")
            if (cleaned := redact(text)) != text:
                log_path.write_bytes(cleaned.encode("utf-8", "surrogateescape"))
    if returncode != 0:
        raise NbscopeError(f"could not {what}: {_pip_reason(log_path)}")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, to the build step's process group; returns once no member is left (or
    after a few seconds)."""
    for signum, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except OSError:
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        break
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)  # what the leader started may outlive it
    process.poll()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except OSError:
            return  # the group is empty
        time.sleep(0.05)


def _pip_reason(log_path: Path) -> str:
    """The lines of pip's output that say why it failed, on one line."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "see the build log"
    errors = [line.strip() for line in lines if line.startswith("ERROR:")]
    chosen = errors[:2] if errors else [line.strip() for line in lines[-3:] if line.strip()]
    text = " ".join(chosen)
    return shorten(text, 400) if text else "no output"


def _register_kernel(path: Path, spec: EnvironmentSpec) -> None:
    """A kernelspec in the environment's own Jupyter data folder (found through JUPYTER_PATH, never
    added to the user's kernel list) starting the environment's Python through the launcher."""
    launcher = path / KERNEL_LAUNCHER
    launcher.write_text(_LAUNCHER_SOURCE, encoding="utf-8")
    kernel_dir = path / "share" / "jupyter" / "kernels" / (KERNEL_PREFIX + path.name)
    kernel_dir.mkdir(parents=True, exist_ok=True)
    spec_document = {
        # -s: no user site-packages (~/.local) either
        "argv": [str(path / "bin" / "python"), "-s", str(launcher), "-f", "{connection_file}"],
        # A requirement's URL (pkg @ https://user:token@host/...) keeps no credential here either.
        "display_name": "nbscope: " + redact(" ".join(r for r in spec.requirements if not r.startswith("-")))[:80],
        "language": "python",
        "metadata": {"nbscope": {"environment": str(path)}},
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec_document, indent=1), encoding="utf-8")


# ---- the cache ----------------------------------------------------------------------------------------


def list_environments(root: Path | None = None) -> list[dict[str, Any]]:
    """The environments nbscope made in the cache: folder, whether complete, what they hold, size."""
    root = Path(root) if root is not None else default_cache_root()
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.iterdir()):
        if not path.is_dir() or path.is_symlink() or not made_by_nbscope(path):
            continue
        described: object = {}
        complete = is_complete(path)
        if complete:
            with contextlib.suppress(OSError, ValueError):
                described = json.loads((path / COMPLETE_MARKER).read_text(encoding="utf-8"))
        found.append(
            {
                "path": str(path),
                "complete": complete,
                "requirements": codec.decode(EnvironmentMarker, described).requirements,
                "bytes": _size(path),
            }
        )
    return found


def clear_cache(root: Path | None = None) -> dict[str, Any]:
    """Remove every environment nbscope made in the cache (and their lock files); anything else there is
    left alone. Returns what was removed."""
    root = Path(root) if root is not None else default_cache_root()
    removed, freed = [], 0
    for entry in list_environments(root):
        path = Path(entry["path"])
        with _locked(root / f".{path.name}.lock"):  # not while another nbscope (or its pip) builds it
            freed += entry["bytes"]
            shutil.rmtree(path, ignore_errors=True)
        (root / f".{path.name}.lock").unlink(missing_ok=True)
        removed.append(str(path))
    for lock in root.glob(".*.lock") if root.is_dir() else []:
        if not (root / lock.name[1 : -len(".lock")]).exists():
            lock.unlink(missing_ok=True)
    return {"root": str(root), "removed": removed, "bytes": freed}


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


# ---- released versions --------------------------------------------------------------------------------


def released_versions(
    package: str, *, find_links: Sequence[str] = (), no_index: bool = False, pre: bool = False
) -> list[str]:
    """Every version of ``package`` that pip's configured index (and ``find_links``) offers, oldest first."""
    from packaging.version import InvalidVersion, Version

    command = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    command += _index_options(find_links, no_index)
    if pre:
        command.append("--pre")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NbscopeError(f"the package index did not list the versions of {package} within 300 s") from None
    listed = None
    for line in done.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            listed = line.split(":", 1)[1]
    if listed is None:
        reason = " ".join(line.strip() for line in done.stderr.splitlines() if line.startswith("ERROR"))
        raise NbscopeError(f"the package index lists no versions of {package}" + (f" ({reason})" if reason else ""))
    versions = []
    for text in listed.split(","):
        with contextlib.suppress(InvalidVersion):
            versions.append(Version(text.strip()))
    return [str(v) for v in sorted(set(versions))]


def versions_between(all_versions: Sequence[str], good: str, bad: str) -> list[str]:
    """The released versions from ``good`` to ``bad`` (both included), oldest first; both must be released."""
    from packaging.version import InvalidVersion, Version

    try:
        low, high = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise NbscopeError(f"not a version: {exc}") from None
    if low >= high:
        raise NbscopeError(f"--good {good} must be an older version than --bad {bad}")
    parsed = {Version(v): v for v in all_versions}
    for name, version in (("--good", low), ("--bad", high)):
        if version not in parsed:
            raise NbscopeError(f"{name} {version} is not among the released versions: {', '.join(all_versions[-12:])}")
    return [parsed[v] for v in sorted(parsed) if low <= v <= high and (not v.is_prerelease or v in (low, high))]
