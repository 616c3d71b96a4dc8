"""Loading the probe into kernels without editing notebooks.

A *probe home* is a temporary folder holding ``_nbscope_probe.py`` (made importable through
``PYTHONPATH``) and, for tools that start kernels by name, ``kernels/<name>/kernel.json`` copies of the
installed IPython kernelspecs whose argv also loads the probe as an IPython extension
(``JUPYTER_PATH`` puts them first). Extensions are loaded *in addition to* the user's IPython profile,
so a user's own start-up files and extensions keep working.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nbscope.collect.probe import PROBE_FILE, PROBE_MODULE

PROBE_ARGUMENT = f"--InteractiveShellApp.extra_extensions={PROBE_MODULE}"


class ProbeHome:
    """A temporary folder from which kernels load the probe; remove it with :meth:`cleanup`."""

    def __init__(self, root: str | Path | None = None) -> None:
        self._owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="nbscope-probe-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lib = self.root / "lib"
        self.lib.mkdir(exist_ok=True)
        for module in PROBE_FILE.parent.glob("_nbscope_*.py"):  # the probe and its optional parts
            shutil.copyfile(module, self.lib / module.name)
        self.kernels = self.root / "share" / "kernels"

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
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.lib), env.get("PYTHONPATH", "")) if p)
        if out_file is not None:
            env["NBSCOPE_PROBE_OUT"] = str(out_file)
        if out_dir is not None:
            env["NBSCOPE_PROBE_DIR"] = str(out_dir)
        if nvml:
            env["NBSCOPE_PROBE_NVML"] = "1"
        if timeline_dir is not None:
            env["NBSCOPE_PROBE_TIMELINE"] = str(timeline_dir)
        if kernelspecs:
            share = str(self.kernels.parent)
            env["JUPYTER_PATH"] = os.pathsep.join(p for p in (share, env.get("JUPYTER_PATH", "")) if p)
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
            document: dict[str, Any] = spec.to_dict()
            document["argv"] = [*spec.argv, PROBE_ARGUMENT]
            (target / "kernel.json").write_text(json.dumps(document, indent=1))
            for extra in Path(spec_dir).iterdir():
                if extra.name != "kernel.json" and extra.is_file():
                    shutil.copyfile(extra, target / extra.name)
            written.append(name)
        return written

    def cleanup(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ProbeHome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _is_ipython_kernel(argv: list[str]) -> bool:
    return any("ipykernel" in part for part in argv)
