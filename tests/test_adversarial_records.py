"""Adversarial pass 6, by class: a text is redacted whole before anything shortens it (SC1–SC4: a credential cut in
two is one the patterns no longer know); redaction leaves code, paths and HTML quotes alone (SC6–SC8); a record is
data, never instructions: a rerun gives its kernels no ``--env`` value this store did not record itself (TI1, TI2);
a trial is its run's child only: out of ``history`` and the gate, refused as the run to try, relinked by run uuid on
import, never stored once its run is gone (TI3, TI5, TC4, TC7, TF3). Real kernels, real stores."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_in_process
from nbscope._redact import redact, shorten
from nbscope.render._clean import for_html

SRC = Path(__file__).resolve().parents[1] / "src" / "nbscope"
TOKEN = "ghp_" + "Q1W2E3R4T5Y6U7I8O9P0A1S2D3F4G5H6"
PASSWORD = "S3cr3tPassw0rdXYZ"
# What a head or tail cut is made of, and text that a reader sees: a message, an error, a line of code or output.
_TEXT = re.compile(
    r"message|error|\berr\b|exc|evalue|output|stderr|stdout|detail|reason|why|note|alarm|text|line\b|code"
    r"|unparse|source|stripped|cmdline|first|^f'|^f\"|str\(|repr\(|escape\(|prose\(|literal\(|for_terminal\("
)
# Not text, or not shortened: digests, times, lists of items (``alarms[:5]``), a file's head read to sniff its kind.
_NOT_TEXT = re.compile(
    r"hexdigest|uuid|started_at|last_run|lines|\bsorted\(|\blist\(|read_text|(alarms|calls'\]|gains|errors|ranking)$"
)


def _cuts(path: Path) -> list[str]:
    """The head (``x[:N]``) and tail (``x[-N:]``) cuts of message-like text in ``path``, outside ``shorten``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and function.name == "shorten"
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Slice) or id(node) in inside:
            continue
        lower, upper = node.slice.lower, node.slice.upper
        bound = lower if upper is None else upper if lower is None else None
        negative = isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub)
        if bound is None or (upper is not None and negative) or (lower is not None and not negative):
            continue  # a suffix dropped (``name[:-5]``) or a prefix (``text[3:]``): no cut of a length
        length = ast.unparse(bound)
        if not re.fullmatch(r"-?\d+|-?[A-Z_]+|.*(limit|width|room).*", length):
            continue  # cut at a found position (``text[:text.index(':')]``): a parse, not a shortening
        value = ast.unparse(node.value)
        if _TEXT.search(value) and not _NOT_TEXT.search(value):
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_text_a_reader_sees_is_cut_but_by_shorten() -> None:
    """Every shortening goes through ``nbscope._redact.shorten``, which redacts first (the in-kernel probe, which
    cannot import nbscope, cuts a cell's message between words: the next test)."""
    found = [cut for path in sorted(SRC.rglob("*.py")) if "probe" not in path.parts for cut in _cuts(path)]
    wrapped = [cut for cut in found if cut.startswith("render/terminal.py:") and cut.endswith(" line[:width]")]
    assert found == wrapped and len(wrapped) == 1  # a wrap, not a cut: the rest of the line follows it


def _leaked(text: str) -> list[str]:
    """The parts (6 characters) of the planted token or password in ``text``."""
    return [s[i : i + 6] for s in (TOKEN[4:], PASSWORD) for i in range(len(s) - 5) if s[i : i + 6] in text]


@pytest.mark.parametrize("limit", [40, 80, 160, 500])
def test_a_credential_at_any_cut_is_redacted_whole_not_shown_in_part(limit: int) -> None:
    sys.path.insert(0, str(SRC / "collect" / "probe"))
    try:
        import _nbscope_probe as probe
    finally:
        sys.path.pop(0)
    for before in range(0, limit + 2):
        for secret in (f"{'a' * before} {TOKEN} tail", f"{'a' * before} https://deploy:{PASSWORD}@pypi.example/x"):
            assert _leaked(shorten(secret, limit)) == [], (before, shorten(secret, limit))
            assert _leaked(redact(probe._whole_words(secret, limit))) == [], (before, probe._whole_words(secret, limit))
            assert len(shorten(secret, limit)) <= limit and len(probe._whole_words(secret, limit)) <= limit


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("MAX_TOKENS = 512\npwd = os.getcwd()\nsecret = 42", "MAX_TOKENS = 512\npwd = os.getcwd()\nsecret = 42"),
        ("N_STEPS_KEY = 1000", "N_STEPS_KEY = 1000"),
        ("entry /etc/passwd: execution_seconds is -5.0", "entry /etc/passwd: execution_seconds is -5.0"),
        ("PASSWORD=12345678 secret = 42abc", "PASSWORD=REDACTED secret = REDACTED"),
        ("GITHUB_TOKEN = &quot;ghp_AAAAbbbbCCCCddddEEEEffffGGGG&quot;", "GITHUB_TOKEN = &quot;REDACTED&quot;"),
    ],
)
def test_redaction_leaves_code_paths_and_html_quotes_alone(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_page_redacted_twice_keeps_its_quotes() -> None:
    page = for_html('GITHUB_TOKEN = "ghp_AAAAbbbbCCCCddddEEEEffffGGGGhhhhIIII"  # S1')
    assert redact(page) == page == "GITHUB_TOKEN = &quot;REDACTED&quot;  # S1"


def _notebook(path: Path, sources: list[str]) -> Path:
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None} for s in sources
    ]
    document = {"cells": cells, "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(document))
    return path


def _nbscope(folder: Path, *args: str) -> Any:
    return run_in_process(args, cwd=folder)


def _files_text(*paths: Path) -> str:
    return "".join(
        p.read_bytes().decode("utf-8", "replace") for root in paths for p in [root, *root.rglob("*")] if p.is_file()
    )


@pytest.mark.slow
def test_a_credential_split_by_any_cut_reaches_no_output_store_report_or_page(tmp_path: Path) -> None:
    """SC1–SC4: the ledger's cut (160), the probe's (500) and a trial's verdict (80) each fall inside a credential."""
    raising = "raise RuntimeError('a' * {} + ' {}')"
    pip = (
        "import subprocess\nsubprocess.run(['false', '-m', 'pip', 'install', '--quiet', '--no-cache-dir', "
        "'--disable-pip-version-check', '--upgrade', '--index-url', "
        f"'https://deploy:{PASSWORD}@pypi.example.com/simple', 'mypkg'], check=True)"
    )
    remedied = f"import os\nif os.environ.get('OMP_NUM_THREADS') == '1':\n    {raising.format(47, TOKEN)}"
    _notebook(tmp_path / "sec.ipynb", [remedied, raising.format(126, TOKEN), raising.format(470, TOKEN), pip])
    shown = [_nbscope(tmp_path, "profile", "sec.ipynb", "--db", "s.db", "--no-diagnose")]
    assert shown[0].returncode == 1 and "cell 2: error RuntimeError" in shown[0].stdout, shown[0].stdout
    shown.append(
        _nbscope(tmp_path, "try", "1", "--cell", "1", "--remedy", "threads:1", "--repeats", "1", "--db", "s.db")
    )
    assert "failed with the remedy" in shown[1].stdout, shown[1].stdout
    for args in (
        ["publish", "s.db", "-o", "site"],
        ["report", "1", "--db", "s.db", "-o", "r.html"],
        ["show", "1", "--db", "s.db"],
    ):
        shown.append(_nbscope(tmp_path, *args))
        assert shown[-1].returncode == 0, shown[-1].stderr
    text = "".join(r.stdout + r.stderr for r in shown) + _files_text(
        tmp_path / "s.db", tmp_path / "site", tmp_path / "r.html"
    )
    assert "REDACTED" in text and _leaked(text) == []
