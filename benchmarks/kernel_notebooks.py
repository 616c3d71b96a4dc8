"""Which notebooks the test suite executes in real kernels: a pytest plugin, and a script that lists them.

    python -m pytest -p kernel_notebooks ...           # with benchmarks/ on PYTHONPATH
    python benchmarks/kernel_notebooks.py LOG [LOG2]   # list (or compare) what a run recorded

The plugin records every kernel nbclient starts for a notebook, in the test process and in every Python
process started under it that inherits the environment (``python -m nbscope``, audit workers, jupyter-book 1
builds through jupyter-cache): a ``sitecustomize`` on ``PYTHONPATH`` patches ``nbclient.NotebookClient`` once
nbclient is imported (never earlier, so no process pays for importing it). Each kernel start appends one JSON
line (the digest of the notebook's code cells, its folder, the first code line) to the log that
``NBSCOPE_KERNEL_NOTEBOOKS`` names (a new file in the temporary folder unless it is set; the summary at the
end of the run says where). Under pytest-xdist every worker appends to the same log.

A notebook is identified by its code, so a test's copy in ``tmp_path`` counts as the notebook it copies; the
list names a digest after the files of ``tests/files``, ``examples`` and the corpus that have the same code.
Not seen: kernels that nbclient does not start (jupyter-book 2's server, driven from node), and processes
started with an environment of their own that drops ``PYTHONPATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LOG_ENV = "NBSCOPE_KERNEL_NOTEBOOKS"
SITE_ENV = "NBSCOPE_KERNEL_NOTEBOOKS_SITE"

# Runs in every Python process that has the folder on its path. Kept to the standard library.
_SITECUSTOMIZE = r"""
import importlib.abc, importlib.machinery, json, os, sys, hashlib

def _digest(nb):
    code = [c.get("source", "") for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    code = ["".join(s) if isinstance(s, list) else s for s in code]
    return hashlib.sha1("\x1e".join(code).encode("utf-8", "replace")).hexdigest()[:16], code

def _note(client):
    log = os.environ.get("NBSCOPE_KERNEL_NOTEBOOKS")
    if not log:
        return
    try:
        digest, code = _digest(client.nb)
        folder = ((client.resources or {}).get("metadata") or {}).get("path")
        first = next((line for s in code for line in s.splitlines() if line.strip()), "")
        row = {"digest": digest, "folder": str(folder) if folder else None, "first": first[:80],
               "pid": os.getpid(), "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]}
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:
        pass

def _patch(module):
    cls = module.NotebookClient
    if getattr(cls, "_kernel_notebooks_patched", False):
        return
    original_async = cls.async_start_new_kernel_client
    original_sync = cls.start_new_kernel_client

    async def async_start_new_kernel_client(self):
        _note(self)
        return await original_async(self)

    def start_new_kernel_client(self):
        _note(self)
        return original_sync(self)

    cls.async_start_new_kernel_client = async_start_new_kernel_client
    cls.start_new_kernel_client = start_new_kernel_client
    cls._kernel_notebooks_patched = True

class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "nbclient.client":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec

if "nbclient.client" in sys.modules:
    _patch(sys.modules["nbclient.client"])
else:
    sys.meta_path.insert(0, _Finder())

# Chain to a sitecustomize this one shadows (only when Python's site module ran this one; never another copy
# of this one).
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in (sys.path if __name__ == "sitecustomize" else []):
    _other = os.path.join(_entry, "sitecustomize.py") if _entry else ""
    if _other and os.path.abspath(_entry) != _here and os.path.isfile(_other):
        with open(_other) as _f:
            _text = _f.read()
        if "NBSCOPE_KERNEL_NOTEBOOKS" not in _text:
            exec(compile(_text, _other, "exec"), {"__name__": "sitecustomize", "__file__": _other})
        break
"""


def pytest_configure(config: Any) -> None:
    if not os.environ.get(LOG_ENV):
        os.environ[LOG_ENV] = str(Path(tempfile.gettempdir()) / f"nbscope-kernel-notebooks-{os.getpid()}.jsonl")
    if not os.environ.get(SITE_ENV):  # an xdist worker inherits the controller's
        site = Path(tempfile.mkdtemp(prefix="nbscope-kernel-notebooks-"))
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        os.environ[SITE_ENV] = str(site)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    site = Path(os.environ[SITE_ENV])
    exec(
        compile(_SITECUSTOMIZE, str(site / "sitecustomize.py"), "exec"),
        {"__file__": str(site / "sitecustomize.py"), "__name__": "kernel_notebooks_site"},
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    log = Path(os.environ[LOG_ENV])
    rows = read_log(log)
    terminalreporter.write_line(
        f"kernel notebooks: {len(rows)} kernel starts, {len({r['digest'] for r in rows})} "
        f"distinct notebooks (log {log}; list it with benchmarks/kernel_notebooks.py)"
    )


def read_log(log: Path) -> list[dict[str, Any]]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _code_digest(cells: Iterable[dict[str, Any]]) -> str:
    code = [c.get("source", "") for c in cells if c.get("cell_type") == "code"]
    code = ["".join(s) if isinstance(s, list) else s for s in code]
    return hashlib.sha1("\x1e".join(code).encode("utf-8", "replace")).hexdigest()[:16]


def known_notebooks(roots: Iterable[Path]) -> dict[str, str]:
    """Digest -> file name, for the notebooks under ``roots``, read as nbscope reads them."""
    from nbscope.collect.notebook import read

    names: dict[str, str] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if "_build" in path.parts or path.suffix not in (".ipynb", ".md"):
                continue
            try:
                names.setdefault(_code_digest(read(path).nb["cells"]), str(path))
            except Exception:
                continue
    return names


def listing(rows: list[dict[str, Any]], names: dict[str, str]) -> dict[str, str]:
    """Digest -> a readable name: a known file, else the folder and first code line the log saw."""
    seen: dict[str, str] = {}
    for row in rows:
        digest = row["digest"]
        if digest in seen:
            continue
        seen[digest] = names.get(digest) or f"{row.get('folder')} :: {row.get('first')!r} (test {row.get('test')})"
    return seen


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__)
        return 2
    here = Path(__file__).resolve().parents[1]
    names = known_notebooks([here / "tests" / "files", here / "examples", here.parent / "shared" / "corpus"])
    lists = [listing(read_log(Path(a)), names) for a in argv]
    for arg, found in zip(argv, lists, strict=True):
        print(f"# {arg}: {len(found)} distinct notebooks")
        for digest, name in sorted(found.items(), key=lambda item: item[1]):
            print(f"{digest}  {name}")
    if len(lists) == 2:
        before, after = lists
        lost = sorted(before.keys() - after.keys())
        print(
            f"# before {len(before)}, after {len(after)}; only before: {len(lost)}; only after: "
            f"{len(after.keys() - before.keys())}"
        )
        for digest in lost:
            print(f"only before: {digest}  {before[digest]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
