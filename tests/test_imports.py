"""Read-only commands import no notebook stack: nbformat, jupytext, jax and jsonschema stay out of their
process; and no command, ``profile`` and ``trace`` included, builds jsonschema's IRI grammar
(``rfc3987_syntax``, 1-5 s at import) that reading or running a notebook never uses.

Each command runs in a fresh interpreter on a store of real recorded runs, carrying their code as records
do since schema version 2 (and one real profile with program data, for ``forecast``), in the repository, so
that a command that read the notebooks the runs name would find them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbscope.record import run as record_module
from nbscope.record.store import Store

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "tests" / "files"
NOTEBOOK_STACK = ("nbformat", "jupytext", "jax", "jsonschema")
IRI_GRAMMAR = "rfc3987_syntax"
# Runs the CLI as `python -m nbscope` does, then reports the modules the command left imported.
PROBE = """
import json, sys
from nbscope.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
loaded = sorted({name.split(".")[0] for name in sys.modules})
print("\\nnbscope-imports " + json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


def carrying_sources(record: record_module.RunRecord) -> record_module.RunRecord:
    """A recorded version-1 run as version 2 records it: each cell with the code that ran (read here, in the
    test's own process, from the notebook it names)."""
    from nbscope.collect import notebook as notebook_module

    code = {c.source_hash: c.source for c in notebook_module.read(ROOT / record.target).code_cells}
    for cell in record.measurements["cells"]:
        cell["source"] = code[cell["source_hash"]]
    record.schema_version = record_module.SCHEMA_VERSION
    return record


def command_modules(*args: str | os.PathLike[str], timeout: float = 300) -> tuple[int, set[str], str]:
    """(exit code, top-level modules imported, stderr) of one nbscope command in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "NBSCOPE_DB"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    head, _, report = done.stderr.rpartition("nbscope-imports ")
    assert report, done.stderr
    found = json.loads(report)
    return int(found["code"]), set(found["modules"]), head


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Recorded runs of two notebooks (two of one notebook, in one environment) and a real profile of
    ``forecast_matmul.md`` with program data."""
    folder = tmp_path_factory.mktemp("imports")
    db = folder / "nbscope.db"
    store = Store(db)
    ids = {
        name: store.save(carrying_sources(record_module.load(FILES / "records" / f"{name}.json")))
        for name in ("cpu_unrolled_loop", "synthetic_cpu_slow_compile_alarm", "cpu_latency_loop")
    }
    code, _, stderr = command_modules(
        "profile", FILES / "forecast_matmul.md", "--forecast", "t4", "--no-diagnose", "--db", db
    )
    assert code == 0, stderr
    latest = store.latest()
    assert latest is not None and json.loads(latest.to_json())["measurements"].get("programs")
    return {"db": db, "ids": ids, "forecast": latest.run_id, "folder": folder}


def read_only_commands(s: dict[str, Any]) -> dict[str, list[str]]:
    one, other, third = (
        str(s["ids"][n]) for n in ("cpu_unrolled_loop", "synthetic_cpu_slow_compile_alarm", "cpu_latency_loop")
    )
    return {
        "runs": ["runs", "--limit", "20"],
        "show": ["show", "latest"],
        "diagnose": ["diagnose", one],
        "compare": ["compare", one, other],
        "gate": ["gate", "--candidate", other, "--baseline", one],
        "history": ["history", "tests/files/diag_unrolled_loop.ipynb"],
        "forecast": ["forecast", str(s["forecast"]), "--gpu", "t4"],
        "report": ["report", one, other, "-o", str(s["folder"] / "report.html")],
        "cells": ["cells", one, third],
        "lectures": ["lectures", one, third],
        "export": ["export", third, "-o", str(s["folder"] / "run.json")],
    }


COMMANDS = [
    "runs",
    "show",
    "diagnose",
    "compare",
    "gate",
    "history",
    "forecast",
    "report",
    "cells",
    "lectures",
    "export",
]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_read_only_command_imports_no_notebook_stack(store: dict[str, Any], name: str) -> None:
    args = read_only_commands(store)[name]
    code, modules, stderr = command_modules(*args, "--db", store["db"])
    assert code in (0, 1), (args, stderr)  # gate may fail its candidate; nothing else may go wrong
    assert not modules & {*NOTEBOOK_STACK, IRI_GRAMMAR}, (args, sorted(modules & {*NOTEBOOK_STACK, IRI_GRAMMAR}))


def test_profile_and_trace_do_not_build_the_iri_grammar(store: dict[str, Any]) -> None:
    code, modules, stderr = command_modules("profile", FILES / "empty.ipynb", "--no-diagnose", "--db", store["db"])
    assert code == 0, stderr
    assert "nbclient" in modules and "jsonschema" in modules  # it ran a notebook, and validated it
    assert IRI_GRAMMAR not in modules
    code, modules, stderr = command_modules("trace", "--db", store["db"], "--", sys.executable, "-c", "pass")
    assert code == 2 and "no IPython kernel" in stderr, stderr
    assert IRI_GRAMMAR not in modules


def test_jsonschema_still_checks_iris_after_nbformat_is_imported() -> None:
    """The grammar is built at the first IRI check instead of at import: the check gives what it gave."""
    pytest.importorskip(IRI_GRAMMAR)
    script = f"""
import sys
from nbscope.collect.notebook import import_nbformat
nbformat = import_nbformat()
assert {IRI_GRAMMAR!r} not in sys.modules and "jsonschema" in sys.modules
import jsonschema
checker = jsonschema.Draft7Validator.FORMAT_CHECKER
print(checker.conforms("https://example.org/π?q=1", "iri"), checker.conforms("not an iri", "iri"))
print({IRI_GRAMMAR!r} in sys.modules, sys.modules[{IRI_GRAMMAR!r}].is_valid_syntax.__module__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True", "rfc3987_syntax.syntax_helpers"]
