"""``nbscope trace -- COMMAND``: per-cell ledgers from tools that start kernels by name.

Matching a kernel's probe lines to a notebook source (no kernel), a traced ``jupyter execute`` (real
kernel, a few seconds), command-line errors, and a jupyter-book 1 build (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from nbscope.api.trace import discover_sources
from nbscope.collect import notebook as notebook_module
from nbscope.collect.kernel_logs import KernelLine, KernelLog, cells_from_log, match, probe_line, read_kernel_log
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def probe_cell(seq: int, source_hash: str, status: str = "ok", wall: float = 0.01) -> dict[str, Any]:
    return {
        "type": "cell",
        "seq": seq,
        "hash": source_hash,
        "execution_count": seq,
        "wall_s": wall,
        "code_s": wall,
        "status": status,
        "error": None if status == "ok" else {"name": "ZeroDivisionError", "message": "division by zero"},
        "jax": None,
        "numba": None,
        "alarms": [],
        "rss": None,
        "gpu_memory": None,
    }


# ---- matching, without a kernel ------------------------------------------------------------------------


def logged(documents: list[dict[str, Any]]) -> list[KernelLine]:
    """Probe lines as a kernel log holds them: each written, then decoded once, as the probe's file is read."""
    return [line for line in map(probe_line, map(json.dumps, documents)) if line is not None]


def test_a_kernel_log_matches_the_source_whose_cells_it_ran() -> None:
    myst = notebook_module.read(FILES / "myst_lines.md")
    other = notebook_module.read(FILES / "error.ipynb")
    hashes = [c.source_hash for c in myst.code_cells]
    log = KernelLog(Path("k.jsonl"), cells=logged([probe_cell(i + 1, h) for i, h in enumerate(hashes)]))
    assert match(log, [other, myst]) is myst
    # a kernel that ran mostly something else is not claimed
    stranger = KernelLog(
        Path("s.jsonl"), cells=logged([probe_cell(1, hashes[0])] + [probe_cell(i, f"{i:016x}") for i in range(2, 6)])
    )
    assert match(stranger, [other, myst]) is None
    assert match(KernelLog(Path("e.jsonl")), [myst]) is None  # a kernel that ran nothing


def test_cells_from_log_marks_the_cell_that_killed_the_kernel() -> None:
    nb = notebook_module.read(FILES / "kernel_dies.ipynb")
    first, second, killer = (c.source_hash for c in nb.code_cells[:3])
    log = KernelLog(
        Path("k.jsonl"),
        cells=logged([probe_cell(1, first), probe_cell(2, second)]),
        started=logged([{"type": "start", "seq": s, "hash": h} for s, h in ((1, first), (2, second), (3, killer))]),
    )
    cells, status = cells_from_log(nb, log)
    assert status == "partial"
    assert [c["status"] for c in cells] == ["ok", "ok", "kernel-died", "not-run", "not-run"]
    assert cells[2]["error"]["name"] == "DeadKernelError"
    assert [c["execution_count"] for c in cells[:2]] == [1, 2]


def test_cells_from_log_expected_errors_and_repeated_sources(tmp_path: Path) -> None:
    nb = notebook_module.read(FILES / "raises_exception.ipynb")
    hashes = [c.source_hash for c in nb.code_cells]
    log = KernelLog(
        Path("k.jsonl"),
        cells=logged([probe_cell(1, hashes[0]), probe_cell(2, hashes[1], status="error"), probe_cell(3, hashes[2])]),
    )
    cells, status = cells_from_log(nb, log)
    assert status == "ok"
    assert [c["status"] for c in cells] == ["ok", "expected-error", "ok"]
    # two cells with the same source take the probe's lines in order
    path = tmp_path / "twice.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("x = 1")]), path)
    twice = notebook_module.read(path)
    same = twice.code_cells[0].source_hash
    cells, _ = cells_from_log(
        twice, KernelLog(path, cells=logged([probe_cell(1, same, wall=0.1), probe_cell(2, same, wall=0.2)]))
    )
    assert [c["wall_s"] for c in cells] == [0.1, 0.2]


def test_read_kernel_log_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    lines = [{"type": "kernel", "pid": 7}, {"type": "start", "seq": 1, "hash": "a"}, probe_cell(1, "a")]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"type": "start", "se')
    log = read_kernel_log(path)
    assert log.header is not None and log.header.document == {"type": "kernel", "pid": 7} and log.header.pid == 7
    assert [c.seq for c in log.cells] == [1] and log.unfinished == []


def test_discover_sources_skips_build_folders(tmp_path: Path) -> None:
    (tmp_path / "_build" / "jupyter_execute").mkdir(parents=True)
    shutil.copy(FILES / "error.ipynb", tmp_path / "_build" / "jupyter_execute" / "error.ipynb")
    shutil.copy(FILES / "error.ipynb", tmp_path / "error.ipynb")
    shutil.copy(FILES / "myst_lines.md", tmp_path / "lines.md")
    (tmp_path / "prose.md").write_text("# Just prose\n")
    assert discover_sources(tmp_path) == [tmp_path / "error.ipynb", tmp_path / "lines.md"]


# ---- real kernels ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_trace_jupyter_execute(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    shutil.copy(FILES / "recompile_shapes.ipynb", tmp_path / "shapes.ipynb")
    db = tmp_path / "db" / "nbscope.db"
    result = run_cli(
        "trace", "--db", db, "--json", "--label", "traced", "--", "jupyter", "execute", "shapes.ipynb", timeout=180
    )
    assert result.returncode == 0, result.stderr
    [printed] = json.loads(result.stdout)
    assert printed["kind"] == "trace" and printed["target"] == "shapes.ipynb"
    cells = printed["measurements"]["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 4
    assert [c["jax"]["compiles"] for c in cells] == [0, 0, 3, 0]
    assert cells[2]["jax"]["user_compiles"] == 3
    # A hash of each compiled program, in every run: one per shape, and none for a call served from memory.
    hashes = cells[2]["programs_hash"]
    assert [p["name"] for p in hashes] == ["jit_scale_sum"] * 3 and len({p["hash"] for p in hashes}) == 3
    assert all(len(p["hash"]) == 16 and int(p["hash"], 16) >= 0 for p in hashes)
    assert "programs_hash" not in cells[3] and "programs_hash" not in cells[1]
    assert printed["settings"]["traced_command"] == ["jupyter", "execute", "shapes.ipynb"]
    [stored] = Store(db).records(kind="trace")
    assert stored.target == "shapes.ipynb" and stored.status == "ok" and stored.label == printed["label"] == "traced"


@pytest.mark.slow
def test_cell_timeout_ends_a_kernel_whose_cell_ignores_the_interrupt(
    run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """The interrupt first; a cell that ignores it has its kernel ended: recorded as ``timeout``, with the
    cells before it kept."""
    from nbscope.collect.kernel_logs import INTERRUPT_GRACE_S

    shutil.copy(FILES / "ignores_interrupt.ipynb", tmp_path / "stubborn.ipynb")
    started = time.monotonic()
    result = run_cli(
        "trace",
        "--db",
        tmp_path / "nbscope.db",
        "--json",
        "--cell-timeout",
        "2",
        "--",
        "jupyter",
        "execute",
        "stubborn.ipynb",
        timeout=180,
    )
    assert time.monotonic() - started < 120  # not the cell's 300 s
    assert result.returncode != 0  # the kernel died under jupyter execute, which exits non-zero
    [printed] = json.loads(result.stdout)
    cells = printed["measurements"]["cells"]
    assert [c["status"] for c in cells] == ["ok", "timeout", "not-run"]
    assert "its kernel was ended" in cells[1]["error"]["message"]
    assert 2 + INTERRUPT_GRACE_S <= cells[1]["wall_s"] < 300
    assert printed["status"] == "partial" and printed["settings"]["cell_timeout"] == 2


@pytest.mark.parametrize(
    "command, message",
    [
        ([], "nothing to trace"),
        (["no-such-command-nbscope"], "command not found: no-such-command-nbscope"),
        ([sys.executable, "-c", "pass"], "no IPython kernel started by"),
    ],
    ids=["empty", "not-found", "no-kernel"],
)
def test_trace_errors_are_one_line(
    run_cli: Callable[..., Any], tmp_path: Path, command: list[str], message: str
) -> None:
    result = run_cli("trace", "--db", tmp_path / "db" / "nbscope.db", "--", *command)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nbscope: error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


# ---- jupyter-book 1 ------------------------------------------------------------------------------------

JAX_PAGE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A JAX page

```{code-cell} ipython3
import jax
import numpy as np
```

```{code-cell} ipython3
@jax.jit
def double(x):
    return x * 2.0
```

```{code-cell} ipython3
:tags: [hide-output]

for n in (3, 4):
    double(np.ones(n, dtype=np.float32)).block_until_ready()
```
"""


def make_book(root: Path) -> Path:
    root.mkdir()
    (root / "_config.yml").write_text(
        "title: nbscope trace test\nauthor: nbscope\nonly_build_toc_files: true\n"
        "execute:\n  execute_notebooks: force\n  timeout: 300\n"
    )
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: jaxpage\n  - file: plain\n")
    (root / "intro.md").write_text("# Intro\n\nA book for `nbscope trace`.\n")
    (root / "jaxpage.md").write_text(JAX_PAGE)
    plain = new_notebook(
        cells=[
            new_markdown_cell("# A plain page"),
            new_code_cell("total = sum(range(10))"),
            new_code_cell("print(total)"),
        ],
        metadata={"kernelspec": KERNELSPEC},
    )
    nbformat.write(plain, root / "plain.ipynb")
    return root


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("jupyter-book") is None, reason="jupyter-book (1.x) is not installed")
def test_trace_jupyter_book_build(tmp_path: Path) -> None:
    version = subprocess.run(["jupyter-book", "--version"], capture_output=True, text=True).stdout
    if "Jupyter Book      : 1." not in version and not version.strip().startswith("1."):
        pytest.skip(f"needs jupyter-book 1, found {version.strip()[:80]!r}")
    book = make_book(tmp_path / "book")
    db = tmp_path / "db" / "nbscope.db"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbscope",
            "trace",
            "--db",
            str(db),
            "--json",
            "--",
            "jupyter-book",
            "build",
            "--all",
            str(book),
        ],
        cwd=book,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (book / "_build" / "html" / "jaxpage.html").exists()
    store = Store(db)
    records = {r.target: r for r in store.records(kind="trace")}
    assert sorted(records) == ["jaxpage.md", "plain.ipynb"]  # one run per executed page, none for intro.md
    assert len(json.loads(result.stdout)) == 2
    for target, record in records.items():
        source = notebook_module.read(book / target)
        cells = record.measurements["cells"]
        assert [c["source_hash"] for c in cells] == [c.source_hash for c in source.code_cells]
        assert all(c["status"] == "ok" and c["wall_s"] is not None for c in cells), target
        assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))
        assert record.status == "ok"
    jax_cells = records["jaxpage.md"].measurements["cells"]
    assert [c["line"] for c in jax_cells] == [14, 19, 25]
    assert [c["jax"]["compiles"] for c in jax_cells] == [0, 0, 2]
    assert jax_cells[2]["jax"]["user_compiles"] == 2
    assert records["jaxpage.md"].measurements["totals"]["compiles"] == 2
    assert records["plain.ipynb"].measurements["totals"]["compiles"] == 0


def test_a_traced_command_past_its_timeout_is_stopped_with_its_children(tmp_path: Path) -> None:
    from nbscope.api.trace import _run_command

    marker = f"nbscope-trace-timeout-{os.getpid()}"
    started = time.perf_counter()
    code, output, _, _ = _run_command(
        ["bash", "-c", f"sleep 60 & exec -a {marker} sleep 60"],
        cwd=tmp_path,
        env=dict(os.environ),
        echo=False,
        timeout=1.0,
    )
    assert time.perf_counter() - started < 20
    assert code != 0 and "ran past its 1 s limit" in output
    time.sleep(0.5)
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
