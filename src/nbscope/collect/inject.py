"""Loading the probe into kernels without editing notebooks.

A *probe home* is a temporary folder holding ``_nbscope_probe.py`` (made importable through
``PYTHONPATH``) and, for tools that start kernels by name, ``kernels/<name>/kernel.json`` copies of the
installed IPython kernelspecs whose argv also loads the probe as an IPython extension
(``JUPYTER_PATH`` puts them first). Extensions are loaded *in addition to* the user's IPython profile,
so a user's own start-up files and extensions keep working.

While kernels run, a probe home can be *announced* (:meth:`ProbeHome.announce`): a small JSON file in the
user's running folder (:func:`running_folder`) names the nbscope process, what it runs and where its kernels'
probe lines go, so ``nbscope runs --live`` can show every running kernel's cell; the file goes with the home.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from nbscope.collect.probe import PROBE_FILE, PROBE_MODULE
from nbscope.schema import process_environment

PROBE_ARGUMENT = f"--InteractiveShellApp.extra_extensions={PROBE_MODULE}"


class ProbeHome:
    """A temporary folder from which kernels load the probe; remove it with :meth:`cleanup`."""

    def __init__(self, root: str | Path | None = None) -> None:
        self._owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="nbscope-probe-")) if root is None else Path(root)
        self.kernels = self.root / "share" / "kernels"
        self._announced: list[Path] = []
        self.transport = "tcp"
        self.ipc_dir: Path | None = None
        self.lib = self.root / "lib"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.lib.mkdir(exist_ok=True)
            for module in PROBE_FILE.parent.glob("_nbscope_*.py"):  # the probe and its optional parts
                shutil.copyfile(module, self.lib / module.name)
        except BaseException as exc:
            raise self.abandon(exc) from None

    def use_transport(self, transport: str) -> str:
        """Kernels of this home (and the tools that start them) talk over ``transport``; for ``ipc`` every
        Python process started with :meth:`env` runs ``_nbscope_ipc.py`` as its ``sitecustomize``."""
        from nbscope.collect import transport as transports

        self.transport = transport
        if transport == "ipc":
            self.ipc_dir = transports.ipc_folder(self.root)
            shutil.copyfile(PROBE_FILE.parent / "_nbscope_ipc.py", self.lib / "sitecustomize.py")
        return transport

    def env(
        self,
        *,
        out_file: str | Path | None = None,
        out_dir: str | Path | None = None,
        nvml: bool = False,
        timeline_dir: str | Path | None = None,
        base: dict[str, str] | None = None,
        kernelspecs: bool = False,
    ) -> dict[str, str]:
        """Environment for a kernel (or a tool that starts kernels) that should load the probe."""
        env = dict(os.environ if base is None else base)
        given = process_environment.read(env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.lib), given.pythonpath) if p)
        if out_file is not None:
            env["NBSCOPE_PROBE_OUT"] = str(out_file)
        if out_dir is not None:
            env["NBSCOPE_PROBE_DIR"] = str(out_dir)
        if nvml:
            env["NBSCOPE_PROBE_NVML"] = "1"
        if timeline_dir is not None:
            env["NBSCOPE_PROBE_TIMELINE"] = str(timeline_dir)
        if self.ipc_dir is not None:
            env["NBSCOPE_IPC_DIR"] = str(self.ipc_dir)
            env["NBSCOPE_KERNEL_TRANSPORT"] = "ipc"
        if kernelspecs:
            share = str(self.kernels.parent)
            env["JUPYTER_PATH"] = os.pathsep.join(p for p in (share, given.jupyter_path) if p)
        return env

    def override_kernelspecs(self) -> list[str]:
        """Write probe-loading copies of every installed IPython kernelspec; returns their names."""
        from jupyter_client.kernelspec import KernelSpecManager

        manager = KernelSpecManager()
        written = []
        for name, spec_dir in manager.find_kernel_specs().items():
            try:
                spec = manager.get_kernel_spec(name)
            except Exception:
                continue
            if not _is_ipython_kernel(spec.argv):
                continue
            target = self.kernels / name
            target.mkdir(parents=True, exist_ok=True)
            document: dict[str, object] = spec.to_dict()
            document["argv"] = [*spec.argv, PROBE_ARGUMENT]
            (target / "kernel.json").write_text(json.dumps(document, indent=1))
            for extra in Path(spec_dir).iterdir():
                if extra.name != "kernel.json" and extra.is_file():
                    shutil.copyfile(extra, target / extra.name)
            written.append(name)
        return written

    def announce(
        self, kind: str, sources: list[Path], outputs: list[Path], *, command: list[str] | None = None
    ) -> Path:
        """Tell ``nbscope runs --live`` that kernels of this home run: ``kind`` (profile, trace), the notebook
        ``sources`` their cells come from and the probe ``outputs`` (files, or folders of them) they write."""
        folder = running_folder()
        entry = folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        document = {
            "pid": os.getpid(),
            "kind": kind,
            "started_unix": time.time(),
            "command": command,
            "sources": [str(Path(p).resolve()) for p in sources],
            "outputs": [str(Path(p)) for p in outputs],
        }
        partial = entry.with_suffix(".tmp")
        self._announced += [partial, entry]  # removed with the home, whether written or not (a full disk)
        for attempt in (1, 2):  # another run's cleanup may remove the empty folder between mkdir and write
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                partial.write_text(json.dumps(document), encoding="utf-8")
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        partial.replace(entry)  # a reader never sees half a file
        return entry

    def abandon(self, exc: BaseException) -> BaseException:
        """What to raise when setting up the home (or a run in it) failed, the home removed first: a full disk or a
        file size limit leaves no half-made home behind, and a failed write that names no file names the folder."""
        self.cleanup()
        if isinstance(exc, OSError) and not exc.filename:
            return OSError(exc.errno, exc.strerror, f"its temporary files in {self.root.parent}")
        return exc

    def cleanup(self) -> None:
        for entry in self._announced:
            entry.unlink(missing_ok=True)
        if self._announced and not process_environment.read().running_dir:
            with contextlib.suppress(OSError):  # still holding another run's entry, or gone: either is fine
                self._announced[0].parent.rmdir()  # nbscope's own folder, left only while runs are listed
        self._announced.clear()
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.ipc_dir is not None and not self.ipc_dir.is_relative_to(self.root):
                shutil.rmtree(self.ipc_dir, ignore_errors=True)  # a short folder of nbscope's own under /tmp

    def __enter__(self) -> ProbeHome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _is_ipython_kernel(argv: list[str]) -> bool:
    return any("ipykernel" in part for part in argv)


def running_folder() -> Path:
    """Where announced probe homes are listed: ``NBSCOPE_RUNNING_DIR``, else ``$XDG_RUNTIME_DIR/nbscope``, else
    ``<tmp>/nbscope-running-<uid>`` (one per user: it names only that user's runs)."""
    settings = process_environment.read()
    if settings.running_dir:
        return Path(settings.running_dir).expanduser()
    runtime = settings.xdg_runtime_dir
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "nbscope"
    user = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"nbscope-running-{user}"


def announced() -> list[dict[str, object]]:
    """Every announced probe home whose nbscope process still runs (``path`` added); an entry of a process
    that ended without removing it (SIGKILL) is removed: nbscope wrote it."""
    import psutil

    folder = running_folder()
    found = []
    for entry in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            document = json.loads(entry.read_text(encoding="utf-8"))
            pid = int(document["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not psutil.pid_exists(pid):
            entry.unlink(missing_ok=True)
            continue
        found.append(document | {"path": str(entry)})
    return found
