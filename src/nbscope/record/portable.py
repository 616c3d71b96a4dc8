"""A run record without what only this machine knows: for records that are shared (``nbscope export
--portable``, the GitHub Action's artifacts). docs/run-record.md lists the fields.

- The project root (:func:`nbscope.record.cells.project_root` of the working directory) becomes relative and
  the home folder becomes ``~``, in every string of the record (error messages and tracebacks included).
- The command line: an absolute path left after that keeps only its last part (``…/nbscope.db``); the
  program's own path is ``nbscope``.
- ``measurements.notebook.path`` becomes the notebook's name in the store (``target``).
- ``measurements.kernel.cwd`` becomes relative to the project root (else ``…/folder``), and
  ``measurements.kernel.executable`` the interpreter's file name (``python3``).
- ``fingerprint.blas.pools[].path``: the library's file name.
- ``measurements.live_file`` and ``recovered_from`` (live files on this machine): their file names.
- Captured output tails (any ``*_tail`` field: what a kernel or a build printed last): every absolute path left
  after that keeps only its last part (``/opt/conda/lib/python3.11/site-packages/jax/api.py`` → ``…/api.py``).

Every figure, setting and fingerprint field used to compare runs stays as it was; the fingerprint's digest
is unchanged. A portable record is marked ``measurements.portable = true``.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, cast

from nbscope.schema import codec
from nbscope.schema.machine import Machine
from nbscope.schema.model import NotebookRun

ELLIPSIS = "…/"


def _last_part(text: str) -> str:
    name = PurePosixPath(text.replace(os.sep, "/")).name
    return f"{ELLIPSIS}{name}" if name else text


def _absolute(text: str) -> bool:
    return text.startswith("/") or (len(text) > 2 and text[1] == ":" and text[2] in "\\/")


def _mention(folder: str) -> re.Pattern[str] | None:
    """A folder's path where it stands whole in a text (``/home/me`` in ``/home/me/x``, not in ``/home/mel``)."""
    folder = folder.rstrip("/")
    if not folder:
        return None
    return re.compile(re.escape(folder) + r"(/|(?=$|[\s'\"`),:;\]]))")


class _Localiser:
    def __init__(self, root: Path, home: Path | None) -> None:
        self.root = _mention(str(root.resolve()))
        self.home = _mention(str(home.resolve())) if home is not None else None

    def text(self, value: str) -> str:
        """Every mention of the project root made relative, of the home folder made ``~``."""
        if self.root is not None:
            value = self.root.sub(lambda m: "" if m.group(1) else ".", value)
        if self.home is not None:
            value = self.home.sub(lambda m: "~/" if m.group(1) else "~", value)
        return value

    def walk(self, value: object) -> object:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.walk(v) for v in value]
        if isinstance(value, dict):
            return {k: self.walk(v) for k, v in value.items()}
        return value


def _home() -> Path | None:
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def portable(
    document: dict[str, Any], *, root: str | Path | None = None, home: str | Path | None = None
) -> dict[str, Any]:
    """A copy of a run document (``RunRecord.to_dict()``) with the machine-local paths dropped (see the module).
    ``root``: the project root (default: that of the working directory); ``home``: the home folder."""
    from nbscope.record.cells import project_root

    document = copy.deepcopy(document)
    root_path = Path(root) if root is not None else project_root(Path.cwd())
    localiser = _Localiser(root_path, Path(home) if home is not None else _home())
    measurements = document["measurements"]
    if isinstance(measurements, dict):
        run = codec.decode(NotebookRun, measurements)  # what the document holds, typed; the copy is rewritten
        if run.notebook.path is not None:
            measurements["notebook"]["path"] = document["target"] or _last_part(run.notebook.path)
        if run.kernel is not None and run.kernel.executable is not None:
            measurements["kernel"]["executable"] = PurePosixPath(run.kernel.executable.replace("\\", "/")).name
        if run.kernel is not None and run.kernel.cwd is not None:
            relative = localiser.text(run.kernel.cwd)
            measurements["kernel"]["cwd"] = _last_part(relative) if _absolute(relative) else relative
        for name, live in (("live_file", run.live_file), ("recovered_from", run.recovered_from)):
            if live is not None:
                measurements[name] = _last_part(live)
        if run.runner.recovered_from is not None:
            measurements["runner"]["recovered_from"] = _last_part(run.runner.recovered_from)
        for position, runner in enumerate(run.repeat_runners):
            if runner is not None and runner.recovered_from is not None:
                measurements["repeat_runners"][position]["recovered_from"] = _last_part(runner.recovered_from)
        measurements["portable"] = True
    for position, pool in enumerate(codec.decode(Machine, document["fingerprint"]).blas.pools):
        if pool is not None and pool.path is not None:
            document["fingerprint"]["blas"]["pools"][position]["path"] = PurePosixPath(
                pool.path.replace("\\", "/")
            ).name
    document = cast(dict[str, Any], localiser.walk(document))  # a document walks into a document
    _strip_tails(document)
    command = document["command"]
    if isinstance(command, list) and command:
        args = [str(a) for a in command]
        program = (
            "nbscope" if PurePosixPath(args[0]).name in ("__main__.py", "nbscope") else PurePosixPath(args[0]).name
        )
        document["command"] = [program] + [_portable_arg(a) for a in args[1:]]
    return document


# An absolute POSIX path in free text (not a URL's ``//host/...``): a folder part, then a name.
_PATH_IN_TEXT = re.compile(r"(?<![\w~.:/])/(?:[^\s'\"`:,;()\[\]<>/]+/)+(?=[^\s'\"`:,;()\[\]<>/])")


def _strip_tails(value: object) -> None:
    """Every ``*_tail`` string (captured output) with its absolute paths cut to their last part, in place."""
    if isinstance(value, list):
        for item in value:
            _strip_tails(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and key.endswith("_tail"):
                value[key] = _PATH_IN_TEXT.sub(ELLIPSIS, item)
            else:
                _strip_tails(item)


def _portable_arg(arg: str) -> str:
    name, sep, value = arg.partition("=")
    if sep and arg.startswith("--") and _absolute(value):
        return f"{name}={_last_part(value)}"
    return _last_part(arg) if _absolute(arg) else arg
