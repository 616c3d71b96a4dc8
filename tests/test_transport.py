"""Kernels where no loopback TCP works: nbscope falls back to the ``ipc`` transport and records which one ran.

The sandbox is real: ``unshare -n`` gives the command a network namespace whose loopback is down, so a TCP
connection to 127.0.0.1 fails there as it does on the lent accelerator machines (where no inet socket can be
opened at all). Skipped, with the reason, where a network namespace cannot be made (not root, no unshare).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbscope._errors import NbscopeError
from nbscope.collect import transport

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _namespace_reason() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", "from nbscope.collect import transport as t; print(t.choose({}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot make a network namespace here: {probe.stderr.strip()[-200:]}"
    if probe.stdout.strip() != "ipc":
        return "the loopback still works inside unshare -n here"
    return None


NO_NAMESPACE = _namespace_reason()
needs_namespace = pytest.mark.skipif(NO_NAMESPACE is not None, reason=NO_NAMESPACE or "")


def test_tcp_is_chosen_where_the_loopback_works() -> None:
    assert transport.loopback_tcp_works()
    assert transport.choose({}) == "tcp"


def test_the_variable_names_the_transport() -> None:
    assert transport.choose({transport.TRANSPORT_VARIABLE: "ipc"}) == "ipc"
    assert transport.choose({transport.TRANSPORT_VARIABLE: "TCP"}) == "tcp"
    assert transport.choose({transport.TRANSPORT_VARIABLE: " auto "}) == "tcp"  # decided by the loopback
    with pytest.raises(NbscopeError, match="use tcp, ipc or auto"):  # a typo is not quietly "auto" (IP5)
        transport.choose({transport.TRANSPORT_VARIABLE: "carrier-pigeon"})


def _notebook(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "sandboxed.ipynb"
    cells = [
        new_code_cell("import numpy as np\ntotal = int(np.arange(10).sum())\nprint(total)"),
        new_code_cell("raise ValueError('kept message ' + str(total))"),
    ]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC}), path)
    return path


def _runner(db: Path, run: str = "1") -> dict[str, object]:
    out = db.parent / f"run{run}.json"
    subprocess.run([sys.executable, "-m", "nbscope", "export", run, "--db", str(db), "-o", str(out)], check=True)
    measurements = json.loads(out.read_text())["measurements"]
    return {"runner": measurements["runner"], "cells": measurements["cells"]}


@pytest.mark.slow
@needs_namespace
def test_a_kernel_starts_and_is_profiled_without_a_loopback(tmp_path: Path) -> None:
    notebook = _notebook(tmp_path / "nb")
    db = tmp_path / "store" / "nbscope.db"
    command = [sys.executable, "-m", "nbscope", "profile", str(notebook), "--db", str(db), "--allow-errors"]
    ran = subprocess.run(["unshare", "-n", *command], capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    record = _runner(db)
    assert record["runner"]["transport"] == "ipc"  # type: ignore[index]
    cells = record["cells"]
    assert [c["status"] for c in cells] == ["ok", "error"]  # type: ignore[index,union-attr]
    assert "kept message 45" in json.dumps(cells[1]["error"])  # type: ignore[index]
    # nothing of the kernel's sockets is left in the notebook's folder, nor in nbscope's temporary one
    assert sorted(p.name for p in notebook.parent.iterdir()) == ["sandboxed.ipynb"]
    # the same notebook where the loopback works runs over tcp, and says so
    subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    assert _runner(db, "2")["runner"]["transport"] == "tcp"  # type: ignore[index]


@pytest.mark.slow
@needs_namespace
@pytest.mark.skipif(shutil.which("jupyter-book") is None, reason="jupyter-book (1.x) is not installed")
def test_a_traced_jupyter_book_build_runs_without_a_loopback(tmp_path: Path) -> None:
    book = tmp_path / "book"
    book.mkdir()
    (book / "_config.yml").write_text(
        "title: t\nauthor: t\nonly_build_toc_files: true\nexecute:\n  execute_notebooks: force\n  timeout: 300\n"
    )
    (book / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    cells = [new_code_cell("total = sum(range(10))\nprint(total)")]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC}), book / "page.ipynb")
    db = tmp_path / "store" / "nbscope.db"
    command = [sys.executable, "-m", "nbscope", "trace", "--db", str(db), "--", "jupyter-book", "build", "."]
    ran = subprocess.run(["unshare", "-n", *command], cwd=book, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    record = _runner(db)
    assert record["runner"]["transport"] == "ipc"  # type: ignore[index]
    assert [c["status"] for c in record["cells"]] == ["ok"]  # type: ignore[union-attr,index]
    assert not list(book.glob("kernel-ipc*"))  # jupyter_client's default would put its sockets here
