"""The script pathway's worker: a notebook's code cells in a fresh Python process without Jupyter.

Run as ``python -m _nbscope_script_worker CELLS_JSON EVENTS_OUT`` from a probe home (the file is copied
there beside ``_nbscope_probe.py``), so it needs neither nbscope nor Jupyter, only IPython: an
in-process :class:`InteractiveShell` runs each cell, so magics (``%time``) and shell lines (``!pip``)
behave as they do in IPython, and the same probe as in a kernel measures each cell through the
shell's ``pre_run_cell``/``post_run_cell`` events. A cell using a magic this shell lacks is skipped
and reported, not run.

``CELLS_JSON``: ``{"cells": [{"index", "source", "hash", "skip"}]}`` (``skip`` a reason or null).
``EVENTS_OUT``: JSON lines ``worker`` (timestamps of start-up), ``skip`` (a cell not run and why),
``done``. The probe's own lines go to ``NBSCOPE_PROBE_OUT``.
"""

from __future__ import annotations

import time

STARTED_UNIX = time.time()  # first thing: how long the interpreter took to reach this module

import json  # noqa: E402  (after the timestamp on purpose)
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_MAGIC_CALL = re.compile(r"get_ipython\(\)\.run_(line|cell)_magic\(\s*'([^']+)'")
# Inline figures as in a kernel (ipykernel sets the same), so plotting cells render PNGs in both.
_INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def _make_shell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class ScriptShell(InteractiveShell):
        """A plain shell; ``%matplotlib inline`` needs no GUI event loop, which the base class refuses."""

        def enable_gui(self, gui: str | None = None) -> None:
            if gui not in (None, "inline"):
                raise NotImplementedError(f"GUI event loop {gui!r} is not available in a script")

    config = Config()
    # History in memory: execution counts as in a kernel, but nothing written to the user's profile.
    config.HistoryManager.hist_file = ":memory:"
    return ScriptShell.instance(config=config)


def missing_magics(shell: InteractiveShell, source: str) -> list[str]:
    """Magics a cell calls that this shell does not have (``%name`` / ``%%name``)."""
    try:
        python = shell.transform_cell(source)
    except Exception:
        return []  # a syntax problem: let run_cell report it as the cell's error
    missing = []
    for kind, name in _MAGIC_CALL.findall(python):
        if shell.find_magic(name, kind) is None:
            missing.append(("%" if kind == "line" else "%%") + name)
    return missing


def main(argv: list[str]) -> int:
    cells_path, events_path = argv[0], argv[1]
    with open(cells_path, encoding="utf-8") as handle:
        cells = json.load(handle)["cells"]
    events = open(events_path, "a", buffering=1, encoding="utf-8")

    def event(record: dict[str, object]) -> None:
        events.write(json.dumps(record) + "\n")

    # SIGINT is how the runner stops a cell past --timeout, even where nbscope's own parent ignores it (nohup).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if "MPLBACKEND" not in os.environ and _has_module("matplotlib_inline"):
        os.environ["MPLBACKEND"] = _INLINE_BACKEND
    imported = time.time()
    shell = _make_shell()
    import _nbscope_probe

    probe = _nbscope_probe.install(shell)
    event(
        {
            "type": "worker",
            "pid": os.getpid(),
            "started_unix": STARTED_UNIX,
            "imported_unix": imported,
            "ready_unix": time.time(),
            "probe": probe is not None,
            "matplotlib_backend": os.environ.get("MPLBACKEND"),
        }
    )
    for cell in cells:
        reason = cell["skip"]  # the runner writes every cell's index, source, hash and skip (None: run it)
        if reason is None:
            missing = missing_magics(shell, cell["source"])
            if missing:
                reason = f"uses {', '.join(missing)}, which IPython has only inside a Jupyter kernel"
        if reason is not None:
            event({"type": "skip", "index": cell["index"], "hash": cell["hash"], "reason": reason})
            continue
        event({"type": "run", "index": cell["index"], "hash": cell["hash"], "unix": time.time()})
        result = shell.run_cell(cell["source"], store_history=True)
        sys.stdout.flush()
        if isinstance(result.error_in_exec, KeyboardInterrupt):
            break  # the runner's stop at a timeout, as a script ends at Ctrl-C: the probe has written the cell's line
    event({"type": "done", "unix": time.time()})
    events.close()
    return 0


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
