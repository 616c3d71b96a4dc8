"""Adversarial pass 6, by class: a text is redacted whole before anything shortens it (SC1–SC4: a credential cut in
two is one the patterns no longer know); redaction leaves code, paths and HTML quotes alone (SC6–SC8); a record is
data, never instructions: a rerun gives its kernels no ``--env`` value this store did not record itself (TI1, TI2);
a trial is its run's child only: out of ``history`` and the gate, refused as the run to try, relinked by run uuid on
import, never stored once its run is gone (TI3, TI5, TC4, TC7, TF3). Real kernels, real stores."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, run_in_process
from nbscope._redact import redact, shorten
from nbscope.api.runs import trials_of
from nbscope.collect.probe._nbscope_words import whole_words
from nbscope.record.store import Store
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
    """The head (``x[:N]``) and tail (``x[-N:]``) cuts of message-like text in ``path``, outside the shorteners."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and function.name in ("shorten", "whole_words")
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
    """Every shortening goes through ``nbscope._redact.shorten``, which redacts first; in the kernel, which cannot
    import nbscope, through ``_nbscope_words.whole_words``, which never cuts inside a word (the next test)."""
    found = [cut for path in sorted(SRC.rglob("*.py")) for cut in _cuts(path)]
    wrapped = [cut for cut in found if cut.startswith("render/terminal.py:") and cut.endswith(" line[:width]")]
    assert found == wrapped and len(wrapped) == 1  # a wrap, not a cut: the rest of the line follows it


def _leaked(text: str) -> list[str]:
    """The parts (6 characters) of the planted token or password in ``text``."""
    return [s[i : i + 6] for s in (TOKEN[4:], PASSWORD) for i in range(len(s) - 5) if s[i : i + 6] in text]


@pytest.mark.parametrize("limit", [40, 80, 160, 500])
def test_a_credential_at_any_cut_is_redacted_whole_not_shown_in_part(limit: int) -> None:
    for before in range(0, limit + 2):
        for secret in (f"{'a' * before} {TOKEN} tail", f"{'a' * before} https://deploy:{PASSWORD}@pypi.example/x"):
            assert _leaked(shorten(secret, limit)) == [], (before, shorten(secret, limit))
            assert _leaked(redact(whole_words(secret, limit))) == [], (before, whole_words(secret, limit))
            assert len(shorten(secret, limit)) <= limit and len(whole_words(secret, limit)) <= limit


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("MAX_TOKENS = 512\npwd = os.getcwd()\nsecret = 42", "MAX_TOKENS = 512\npwd = os.getcwd()\nsecret = 42"),
        ("N_STEPS_KEY = 1000", "N_STEPS_KEY = 1000"),
        ("entry /etc/passwd: execution_seconds is -5.0", "entry /etc/passwd: execution_seconds is -5.0"),
        ("PASSWORD=12345678 secret = 42abc", "PASSWORD=REDACTED secret = REDACTED"),
        (
            "password = None; MAX_TOKENS: int = 512; N_KEYS = 2**10",
            "password = None; MAX_TOKENS: int = 512; N_KEYS = 2**10",
        ),
        ("TOKEN_COUNT = 10_000 token: Optional[str] = None", "TOKEN_COUNT = 10_000 token: Optional[str] = None"),
        ("TOKEN=dXNlcjpwYXNz= token: abc123", "TOKEN=REDACTED token: REDACTED"),
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
    # OMP_NUM_THREADS unset, whatever an earlier test in this process left: the trial's remedy (threads:1) sets it
    return run_in_process(args, cwd=folder, env={"OMP_NUM_THREADS": None})


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


ENV_SEEN = (
    "import os\nopen('seen.txt', 'a').write(' '.join(os.environ.get(n, 'unset') for n in ('FOO', 'HF_TOKEN')) + '\\n')"
)


def _try(folder: Path, run: str, *args: str, db: str = "t.db") -> Any:
    return _nbscope(folder, "try", run, "--cell", "2", "--remedy", "threads:1", "--repeats", "1", "--db", db, *args)


@pytest.mark.slow
def test_a_rerun_gives_no_env_value_this_store_did_not_record_itself(tmp_path: Path) -> None:
    """TI1: an imported record's ``PYTHONPATH`` would run another's ``sitecustomize.py`` (its ``--jax-cache`` folder,
    another's compiled programs); TI2: a secret kept as ``REDACTED`` is no value. Each is left out, named, and
    given again only with ``--env``."""
    _notebook(tmp_path / "env.ipynb", [ENV_SEEN, "y = 2"])
    token = "hf_" + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12"
    env = ["--env", "FOO=bar", "--env", f"HF_TOKEN={token}", "--env-store-values", "--no-diagnose"]
    assert _nbscope(tmp_path, "profile", "env.ipynb", "--db", "t.db", *env).returncode == 0
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "sitecustomize.py").write_text("open(__file__ + '.PWNED', 'w').write('x')\n")
    assert _nbscope(tmp_path, "export", "1", "--db", "t.db", "-o", "e1.json").returncode == 0
    record = json.loads((tmp_path / "e1.json").read_text())
    record["measurements"]["run_uuid"] = "0" * 32
    record["settings"] |= {"env": {"PYTHONPATH": str(tmp_path / "evil"), "FOO": "edited"}, "jax_cache": "evil/cache"}
    (tmp_path / "e2.json").write_text(json.dumps(record))
    assert _nbscope(tmp_path, "import", "e2.json", "--db", "t.db").returncode == 0
    (tmp_path / "seen.txt").unlink()
    imported, own, given = _try(tmp_path, "2"), _try(tmp_path, "1"), _try(tmp_path, "1", "--env", f"HF_TOKEN={token}")
    assert not (tmp_path / "evil" / "sitecustomize.py.PWNED").exists()
    assert "--env PYTHONPATH, --env FOO, --jax-cache not given" in imported.stdout, imported.stdout
    assert "--env HF_TOKEN not given" in own.stdout and "--env NAME=VALUE" in own.stdout, own.stdout
    assert "not given" not in given.stdout, given.stdout
    seen = (tmp_path / "seen.txt").read_text().splitlines()  # two kernels per trial
    assert seen == ["unset unset"] * 2 + ["bar unset"] * 2 + ["bar " + token] * 2
    assert token not in (tmp_path / "t.db").read_bytes().decode("utf-8", "replace")


@pytest.mark.slow
def test_a_trial_is_its_runs_child_only(tmp_path: Path) -> None:
    """TI5: out of ``history`` and the gate; TC4: no run to try; TI3: imported, linked by run uuid or not at all;
    TC7: a refused ``try`` makes no store; TF3: a store removed while the trial ran stores no trial."""
    deleting = (
        "import os\nif os.path.exists('ARM'):\n    for f in ('t.db', 't.db-wal', 't.db-shm'):\n        os.remove(f)"
    )
    _notebook(tmp_path / "a.ipynb", ["x = 1", deleting + "\ny = 2"])
    _notebook(tmp_path / "b.ipynb", ["z = 3", "w = 4"])
    for name, db in (("a.ipynb", "t.db"), ("b.ipynb", "other.db")):
        assert _nbscope(tmp_path, "profile", name, "--db", db, "--no-diagnose").returncode == 0
    assert _try(tmp_path, "1").returncode == 0  # runs 2 (as it is) and 3 (remedy)
    history = _nbscope(tmp_path, "history", "a.ipynb", "--db", "t.db").stdout
    assert "trial" not in history and "· 1 run ·" in history, history
    trials = _nbscope(tmp_path, "history", "a.ipynb", "--kind", "trial", "--db", "t.db")
    assert_one_line_error(trials, "trial runs make no history")
    assert_one_line_error(_try(tmp_path, "3"), "run 3 is a trial of run 1", "give run 1")
    gate = _nbscope(tmp_path, "gate", "--baseline", "2", "--candidate", "3", "--db", "t.db")
    assert_one_line_error(gate, "run 3 is a trial of run 1")
    assert_one_line_error(_try(tmp_path, "1", db="nope.db"), "nope.db")
    assert not (tmp_path / "nope.db").exists()
    for run in ("1", "2", "3"):
        assert _nbscope(tmp_path, "export", run, "--db", "t.db", "-o", f"r{run}.json").returncode == 0
    alone = _nbscope(tmp_path, "import", "r3.json", "--db", "other.db")  # its run 1 is b.ipynb
    assert "a trial of a run not in this store: its link is dropped" in alone.stdout, alone.stdout
    assert "trial threads:1" not in _nbscope(tmp_path, "show", "1", "--db", "other.db").stdout
    both = _nbscope(tmp_path, "import", "r1.json", "r2.json", "r3.json", "--db", "other.db")
    assert "dropped" not in both.stdout and "imported as run 3" in both.stdout, both.stdout
    store = Store(tmp_path / "other.db")
    [trial] = trials_of(store, store.get(3))  # r1.json is run 3 here, r2.json run 4
    assert (trial.of_run, trial.as_is_run, trial.remedy_run) == (3, 4, 5)
    (tmp_path / "ARM").touch()
    assert_one_line_error(_try(tmp_path, "1", "--json"), "run 1 is gone from t.db", "not stored")
    assert not (tmp_path / "t.db").exists()


@pytest.mark.slow
def test_a_notebook_whose_name_reads_as_a_credential_can_still_be_named(tmp_path: Path) -> None:
    """SC9: ``nb?token=FILETOK9&x=1.ipynb`` is stored as ``nb?token=REDACTED&x=1.ipynb``; every command that names
    it, or reruns it, still finds it."""
    name = "nb?token=FILETOK9&x=1.ipynb"
    _notebook(tmp_path / name, ["x = 1", "y = x + 1"])
    assert _nbscope(tmp_path, "profile", name, "--db", "t.db", "--no-diagnose").returncode == 0
    for args in (["history", name], ["show", f"latest:{name}"], ["try", "1", "--cell", "2", "--remedy", "threads:1"]):
        done = _nbscope(tmp_path, *args, "--db", "t.db", *(["--repeats", "1"] if args[0] == "try" else []))
        assert done.returncode == 0 and "FILETOK9" not in done.stdout, (args, done.stdout, done.stderr)
