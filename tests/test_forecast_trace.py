"""``nbscope trace --forecast GPU`` records program data inside real jupyter-book 1 and 2 builds, so a
traced build is forecast without running any notebook a second time (slow: a book build each)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbscope.analyse.forecast import forecast
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
SCAN_PAGE = """\
---
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A scan

```{code-cell} ipython3
import jax
from jax import lax
```

```{code-cell} ipython3
@jax.jit
def path(x0):
    return lax.scan(lambda x, _: (4.0 * x * (1 - x), x), x0, None, length=123_456)[1]

y = path(0.1).block_until_ready()
```
"""
pytestmark = pytest.mark.slow


def _nbscope(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbscope", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _check(db: Path, page: str) -> None:
    (record,) = [r for r in Store(db).records(kind="trace") if r.target == page]
    assert record.measurements["programs"]["programs"], "no program data in the traced run"
    assert record.settings["forecast"] == ["t4"]
    result = forecast(record, "t4")
    loops = [t for c in result.cells for t in c.gpu["t4"].terms if t.kind == "loop"]
    assert [t.iterations for t in loops] == [123_456]


def test_trace_forecast_inside_a_jupyter_book_1_build(tmp_path: Path) -> None:
    if shutil.which("jupyter-book") is None:
        pytest.skip("jupyter-book (1.x) is not installed")
    version = subprocess.run(["jupyter-book", "--version"], capture_output=True, text=True).stdout
    if "Jupyter Book      : 1." not in version and not version.strip().startswith("1."):
        pytest.skip(f"needs jupyter-book 1, found {version.strip()[:80]!r}")
    book = tmp_path / "book"
    book.mkdir()
    (book / "_config.yml").write_text(
        "title: t\nauthor: nbscope\nonly_build_toc_files: true\nexecute:\n  execute_notebooks: force\n  timeout: 300\n"
    )
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: scan\n")
    (book / "intro.md").write_text("# Intro\n")
    (book / "scan.md").write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        + SCAN_PAGE.split("---\n", 1)[1]
    )
    db = tmp_path / "db" / "nbscope.db"
    done = _nbscope(
        "trace",
        "--db",
        str(db),
        "--forecast",
        "t4",
        "--no-diagnose",
        "--",
        "jupyter-book",
        "build",
        "--all",
        str(book),
        cwd=book,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check(db, "scan.md")


def test_trace_forecast_inside_a_jupyter_book_2_build(tmp_path: Path) -> None:
    from nbscope.api import jupyter_book2

    found = jupyter_book2.find()
    if not found.usable or found.path_folder is None:
        pytest.skip(f"jupyter-book 2 is not available here: {found.problem}")
    book = tmp_path / "book"
    shutil.copytree(FILES / "book2", book)
    (book / "arrays.md").write_text(SCAN_PAGE)
    jupyter_book2.write_theme_stand_in(book)
    env = dict(os.environ)
    env.pop("NBSCOPE_DB", None)
    env["PATH"] = os.pathsep.join([str(found.path_folder), env.get("PATH", "")])
    db = tmp_path / "db" / "nbscope.db"
    done = _nbscope(
        "trace",
        "--db",
        str(db),
        "--forecast",
        "t4",
        "--no-diagnose",
        "--",
        "jupyter",
        "book",
        "build",
        "--execute",
        cwd=book,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check(db, "arrays.md")
