"""Trust by construction (issue AB, items 1-3): each class closed at one place that every path goes through, and
a test that walks the paths. Indexed by class:

1. **Credentials** (one boundary, :func:`nbscope._redact.redact`, which every store write, written file and
   printed line passes; secret-named variables by one rule, :data:`nbscope._redact.SECRET_NAME`):
   ``test_planted_secrets_reach_no_store_file_page_or_output`` (a real profile, trace, audit, publish, report,
   export and gate --summary of a notebook whose cells' first lines hold a URL's password, ``?token=``, a
   ``ghp_`` token, ``aws_secret_access_key=`` and a netrc line, given ``--env XLA_URL=https://u:SECRET@...`` and
   variables named ``*_TOKEN``, ``*_PASS``, ``*PWD*``, ``*KEY*``: the store's raw bytes, the site, every written
   file and all output scanned); ``test_the_store_keeps_no_secret_in_any_table`` (``runs.settings``,
   ``run_summaries`` and gate verdicts, without a kernel); ``test_redact_hides_each_known_form`` and
   ``test_redact_leaves_ordinary_text``; ``test_secret_named_variables_are_hidden_by_one_rule``;
   ``test_redaction_keeps_a_json_document_valid``; ``test_a_first_line_is_redacted_before_it_is_shortened``;
   ``test_an_index_urls_credentials_leave_no_file``
   (``versions -r`` with ``--extra-index-url https://u:SECRET@...``: requirements-options.txt written 0600 and
   gone after the build, the build log and marker redacted; a stand-in Python plays venv and pip).
2. **Readers** (one bounded reader, :mod:`nbscope._files`: regular files only, size, depth and tree-size bounds,
   one-line errors): ``test_a_fifo_or_a_device_named_as_input_is_refused_at_once`` (a FIFO and ``/dev/zero`` for
   ``forecast --devices``, ``NBSCOPE_DEVICES``, ``diagnose``, ``info --diff``, ``import``, ``merge``, ``report``,
   ``compare``); ``test_a_fifo_as_requirements_or_book_table_of_contents_never_hangs`` (``versions -r``, a
   book's ``_toc.yml``); ``test_deep_nesting_is_one_line_never_a_recursion_error`` (``info --diff``, a device
   table, ``import``, a table of contents); ``test_a_table_of_contents_that_expands_without_end_is_one_line``
   (YAML aliases: a billion laughs, a list inside itself); ``test_a_store_among_devices_is_refused_and_nothing_is_made_there``
   (``--db /dev/null``, ``/dev/x.db``, a FIFO, a link to ``/dev/zero``: no ``DEVICE-journal``);
   ``test_a_fifo_named_like_a_notebook_never_hangs_a_search`` (audit's and trace's searches of a folder,
   jupyter-book 2's cache).
3. **Escapes** (one escaper per format, :mod:`nbscope.render._clean`: ``for_terminal``, ``for_html``,
   ``markdown_text``/``code_span``/``markdown_with_code``, JSON by ``json.dumps``):
   ``test_a_notebook_names_controls_reach_no_written_page`` (ESC, BEL and U+202E in the HTML report, the site's
   pages, ``status.md`` and ``gate --summary``); ``test_a_cells_source_puts_no_live_link_in_the_regressions``;
   ``test_each_format_has_one_escaper``; ``test_a_device_entrys_name_stays_inside_its_toml_string`` (the TOML
   that ``forecast --append-to`` writes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, cli_env, run_in_process
from nbscope._redact import REDACTED, redact
from nbscope.record.store import Store
from test_gate import make_cell, make_record

FILES = Path(__file__).resolve().parent / "files"
SRC = Path(__file__).resolve().parents[1] / "src"
RECORD = FILES / "records" / "cpu_unrolled_loop.json"

# ==== 1. credentials ==============================================================================================

# Every planted secret holds PLANTED, which must appear in no stored, written or printed byte.
TOKEN = "ghp_" + "PLANTED" * 5 + "x"
FIRST_LINES = [
    "url = 'https://user:PLANTED1pw@pypi.example.org/simple'",
    "# fetched from https://data.example.org/x.csv?token=PLANTED2query&page=1",
    f"token = '{TOKEN}'",
    "creds = 'aws_secret_access_key=PLANTED3aws'",
    "netrc = 'machine h.example login bob password PLANTED4netrc'",
]
ENV_SECRETS = {"XLA_TOKEN": "PLANTED5", "JAX_PASS": "PLANTED6", "XLA_PWD": "PLANTED7", "JAX_API_KEY": "PLANTED8"}
ENV_OPTION = "XLA_URL=https://u:PLANTED9@cache.example.org/x"


def _nbscope(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None) -> Any:
    run_env = cli_env({"PYTHONPATH": str(SRC), "COLUMNS": "200", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "nbscope", *map(str, args)],
        cwd=cwd,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _nbscope_here(*args: str | os.PathLike[str], cwd: Path) -> Any:
    """As :func:`_nbscope`, in this process (conftest's ``run_in_process``): for the commands that only read the
    store and write files, which need no process of their own."""
    return run_in_process(args, env={"PYTHONPATH": str(SRC), "COLUMNS": "200"}, cwd=cwd)


def _notebook(path: Path, sources: list[str]) -> Path:
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "source": f"{source}\nprint({i!r})",
            "outputs": [],
            "execution_count": None,
        }
        for i, source in enumerate(sources)
    ]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"cells": cells, "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5})
    )
    return path


def _leaks(*roots: Path) -> dict[str, list[str]]:
    """Every file under ``roots`` (raw bytes: SQLite's pages, its WAL) that holds a planted secret."""
    found: dict[str, list[str]] = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            if b"PLANTED" in data:
                found[str(path)] = sorted({m.decode() for m in re.findall(rb"PLANTED\w{0,12}", data)})
    return found


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real profile, trace and audit of a notebook holding secrets, then publish, report, export and the
    gate's summary of what they stored: the folder, the store and every command's output."""
    folder = tmp_path_factory.mktemp("planted")
    book = folder / "book"
    notebook = _notebook(book / "secrets.ipynb", FIRST_LINES)
    db = folder / "store" / "runs.db"
    (folder / "out").mkdir()
    env = {**ENV_SECRETS, "JAX_PLATFORMS": "cpu"}
    outputs = [
        _nbscope("profile", notebook, "--db", db, "--env", ENV_OPTION, "--env", "JAX_PLATFORMS=cpu", cwd=folder, env=env),
        _nbscope(
            "trace", "--db", db, "--",
            sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", notebook,
            "--output-dir", folder / "executed",
            cwd=folder, env=env,
        ),  # fmt: skip
        _nbscope("audit", book, "--db", db, "-o", folder / "out" / "audit.md", "--html", folder / "out" / "audit.html", cwd=folder, env=env),
        _nbscope_here("publish", db, "-o", folder / "site", cwd=folder),
        _nbscope_here("report", "1", "--db", db, "-o", folder / "out" / "report.html", cwd=folder),
        _nbscope_here("export", "1", "--db", db, "-o", folder / "out" / "run.json", cwd=folder),
        _nbscope_here("show", "1", "--db", db, cwd=folder),
        _nbscope_here("diagnose", "1", "--markdown", "--db", db, cwd=folder),
        _nbscope_here("runs", "--json", "--db", db, cwd=folder),
        _nbscope_here("diagnose", "1", "--db", db, cwd=folder),
        _nbscope_here("gate", "--baseline", "1", "--candidate", "1", "--db", db, "--summary", folder / "out" / "gate.md", cwd=folder),
    ]  # fmt: skip
    return {"folder": folder, "db": db, "outputs": outputs}


@pytest.mark.slow
def test_planted_secrets_reach_no_store_file_page_or_output(planted: dict[str, Any]) -> None:
    folder, db = planted["folder"], planted["db"]
    for done in planted["outputs"][:6]:
        assert done.returncode == 0, (done.args, done.stderr[-2000:])
    assert Store(db).count() >= 3  # the profile, the traced run, the audit (and its notebook's run)
    assert (folder / "site" / "index.html").is_file() and (folder / "out" / "gate.md").is_file()
    # Nothing nbscope stored, wrote or printed holds a planted secret (nbconvert's own executed copy is not ours).
    assert _leaks(db.parent, folder / "site", folder / "out") == {}
    printed = "".join(done.stdout + done.stderr for done in planted["outputs"])
    assert "PLANTED" not in printed, re.findall(r".{0,60}PLANTED.{0,20}", printed)
    # What was redacted is still named: the variable, the URL's host, the cell's code around the secret.
    record = json.loads((folder / "out" / "run.json").read_text())
    assert record["fingerprint"]["environment"]["XLA_TOKEN"] == REDACTED
    assert record["settings"]["env"]["XLA_URL"] == "https://REDACTED@cache.example.org/x"
    assert "https://REDACTED@pypi.example.org/simple" in record["measurements"]["cells"][0]["first_line"]
    lecture = next((folder / "site" / "lectures").glob("*.html")).read_text()
    assert "aws_secret_access_key=REDACTED" in lecture and "login bob password REDACTED" in lecture


def test_the_store_keeps_no_secret_in_any_table(tmp_path: Path) -> None:
    """Without a kernel: a run given ``--env XLA_URL=https://u:SECRET@...`` (a readable name: only its URL's
    password is redacted), a cell whose first line holds a token, its publish summary and a gate verdict."""
    cells = [make_cell(0, 0.5), make_cell(1, 0.5)]
    cells[0]["first_line"] = "requests.get('https://x.example/a?token=PLANTEDquery')"
    cells[1]["first_line"] = f"gh = '{TOKEN}'"
    record = make_record(cells, target="lectures/MY_TOKEN=PLANTEDname.ipynb")
    record.settings["env"] = {"XLA_URL": "https://u:PLANTEDenv@cache.example.org/x"}
    store = Store(tmp_path / "s.db")
    run_id = store.save(record)
    assert store.keep_run_summaries({run_id: {"first_line": cells[1]["first_line"], "error": "PASSWORD=PLANTEDx"}})
    store.record_verdict(run_id, baseline_id=None, passed=False, reasons=[f"cell 1: {TOKEN}"])
    assert _leaks(tmp_path) == {}
    with sqlite3.connect(tmp_path / "s.db") as db:
        (settings,) = db.execute("SELECT settings FROM runs").fetchone()
    assert json.loads(settings)["env"]["XLA_URL"] == "https://REDACTED@cache.example.org/x"


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("aws_secret_access_key=wJalrXUtnFEMI", "aws_secret_access_key=REDACTED"),
        ("aws_secret_access_key = wJalrXUtnFEMI", "aws_secret_access_key = REDACTED"),
        ("machine pypi.org login __token__ password pypi-abc", "machine pypi.org login __token__ password REDACTED"),
        ("default\npassword hunter2\n", "default\npassword REDACTED\n"),
        ('{"log": "machine h\\npassword hunter2\\n"}', '{"log": "machine h\\npassword REDACTED\\n"}'),  # in JSON
        ('{"XLA_TOKEN": "abc", "JAX_PLATFORMS": "cpu"}', '{"XLA_TOKEN": "REDACTED", "JAX_PLATFORMS": "cpu"}'),
        (
            "DB_PASS=x MYSQL_PWD=y SSH_KEY=z NPM_AUTH=w",
            "DB_PASS=REDACTED MYSQL_PWD=REDACTED SSH_KEY=REDACTED NPM_AUTH=REDACTED",
        ),
        ('{"client_secret": "abc"}', '{"client_secret": "REDACTED"}'),
        ("db_password: s3cret", "db_password: REDACTED"),
        ("github_pat_" + "A1" * 20, REDACTED),
        ("glpat-" + "x" * 20, REDACTED),
        ("xoxb-1234567890-abcdef", REDACTED),
        ("key AKIAIOSFODNN7EXAMPLE here", "key REDACTED here"),
        ("sk-proj-" + "a" * 24, REDACTED),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_sig", REDACTED),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----\nafter", REDACTED + "\nafter"),
        ("git clone https://oauth2:tok@gitlab.example/x.git", "git clone https://REDACTED@gitlab.example/x.git"),
        ('headers={"Authorization": "Bearer abc123"}', 'headers={"Authorization": "Bearer REDACTED"}'),
        ('os.environ["HF_TOKEN"] = "hf_abc"', 'os.environ["HF_TOKEN"] = "REDACTED"'),
        ('login(token="abc123")', 'login(token="REDACTED")'),
        ('password = "hunter2"', 'password = "REDACTED"'),
    ],
)
def test_redact_hides_each_known_form(raw: str, shown: str) -> None:
    assert redact(raw) == shown


@pytest.mark.parametrize(
    "text",
    [
        "key, subkey = jax.random.split(key)",
        "sorted(x, key=lambda y: y)",
        "max_tokens: 100, tokens: 5, key=3",
        "GIT_AUTHOR_NAME=bob MONKEY=3",
        "HF_TOKEN=hidden-hmac-0123abcd:0123456789abcdef",  # nbscope's own keyed hash of an --env value
        "the password is checked below",
    ],
)
def test_redact_leaves_ordinary_text(text: str) -> None:
    assert redact(text) == text


def test_redaction_keeps_a_json_document_valid() -> None:
    """Every record and page is redacted as JSON text: only a string's content is replaced, never a number,
    null, a quote or a bracket (``"token": 5`` stays, ``"password": "x"`` loses its value only)."""
    names = ["password", "token", "KEY", "XLA_TOKEN", "authorization", "api_key", "db_password", "JAX_PWD", "login"]
    values: list[Any] = [5, None, True, "abc", "Bearer abc", "a,b}", 'x"y', "l1\npassword hunter2", [1, "token: x"]]
    for name in names:
        for value in values:
            keyed = ({name: value}, {"outer": [{name: value}]})  # the name a key: a value not a string stays
            for document in (*keyed, {"s": f"{name}={value}"}, {"s": json.dumps({name: value})}):
                for indent in (None, 1):
                    text = json.dumps(document, indent=indent)
                    kept = json.loads(redact(text))  # valid JSON still
                    assert "hunter2" not in json.dumps(kept)
                    if document in keyed and isinstance(value, (int, bool)):
                        assert kept == document, (text, kept)


def test_secret_named_variables_are_hidden_by_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--env`` and the fingerprint's environment read one rule: a name that says secret keeps no value."""
    from nbscope.collect import fingerprint
    from nbscope.record.secrets import readable

    for name, value in {**ENV_SECRETS, "XLA_SESSION_COOKIE": "PLANTED", "JAX_PLATFORMS": "cpu"}.items():
        monkeypatch.setenv(name, value)
    assert not any(readable(name) for name in ENV_SECRETS) and readable("JAX_PLATFORMS")
    environment = fingerprint._environment()
    assert {environment[name] for name in ENV_SECRETS} == {REDACTED} and environment["JAX_PLATFORMS"] == "cpu"
    assert "PLANTED" not in json.dumps(environment)


def test_a_first_line_is_redacted_before_it_is_shortened(tmp_path: Path) -> None:
    """A long URL whose '@' falls past a display's cut: the password must not show, even in part."""
    from nbscope.collect.notebook import read

    secret_line = "x = 'https://someone:" + "PLANTED" * 20 + "@host.example/p'"
    notebook = read(_notebook(tmp_path / "long.ipynb", [secret_line]))
    [cell] = notebook.code_cells
    described = cell.describe()
    assert "PLANTED" not in described["first_line"] and "PLANTED" not in cell.first_line[:40]


FAKE_PYTHON = """#!/bin/sh
# Stands in for the Python an environment is built with: 'venv' makes the folder, 'pip' notes the options file it
# is given (its mode and text) and prints what pip prints of an index, credentials included (pip masks only a
# password, never a token in the user part).
prev=""
for arg in "$@"; do
  if [ "$prev" = "-r" ]; then stat -c %a "$arg" > "$SEEN/mode"; cat "$arg" > "$SEEN/text"; fi
  prev="$arg"
done
case "$*" in *" venv "*) mkdir -p "$prev/bin" ;; esac
echo "Looking in indexes: https://PLANTEDlog@index.example.org/simple"
"""


def test_an_index_urls_credentials_leave_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``versions -r`` whose requirements name an index with credentials: pip gets them in a file only its owner
    reads, removed once the build is done; the environment's log and marker keep none."""
    from nbscope.collect import environments

    python, seen = tmp_path / "python", tmp_path / "seen"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    seen.mkdir()
    monkeypatch.setenv("SEEN", str(seen))
    index = "--extra-index-url https://u:PLANTEDindex@index.example.org/simple"
    wheel = "pkg @ https://u:PLANTEDwheel@files.example.org/pkg-1-py3-none-any.whl"  # its kernel's name too
    spec = environments.EnvironmentSpec(requirements=(index, wheel), python=str(python))
    with open(tmp_path / "lock", "w") as lock:
        environments._build(tmp_path / "env", spec, None, lock.fileno())
    assert (seen / "mode").read_text().strip() == "600" and "PLANTEDindex" in (seen / "text").read_text()
    assert not (tmp_path / "env" / "requirements-options.txt").exists()
    assert (tmp_path / "env" / environments.COMPLETE_MARKER).is_file()
    assert _leaks(tmp_path / "env") == {}
    assert "https://REDACTED@index.example.org" in (tmp_path / "env" / environments.BUILD_LOG).read_text()


# ==== 2. readers ==================================================================================================


@pytest.fixture
def stored(tmp_path: Path, run_cli: Any) -> Path:
    db = tmp_path / "s.db"
    assert run_cli("import", RECORD, "--db", db).returncode == 0
    return db


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "command, env",
    [
        (("forecast", "1", "--devices", "{f}"), {}),
        (("forecast", "1"), {"NBSCOPE_DEVICES": "{f}"}),
        (("diagnose", "1", "--json"), {"NBSCOPE_DEVICES": "{f}"}),
        (("info", "--diff", "{f}", RECORD), {}),
        (("import", "{f}"), {}),
        (("merge", "{f}", "-o", "{tmp}/m.json"), {}),
        (("report", "{f}", "-o", "{tmp}/r.html"), {}),
        (("compare", "1", "{f}"), {}),
    ],
    ids=["forecast-devices", "NBSCOPE_DEVICES", "diagnose", "info-diff", "import", "merge", "report", "compare"],
)
def test_a_fifo_or_a_device_named_as_input_is_refused_at_once(
    tmp_path: Path, stored: Path, run_cli_process: Any, command: tuple[str, ...], env: dict[str, str], special: str
) -> None:
    named = str(tmp_path / "fifo") if special == "fifo" else special
    if special == "fifo":
        os.mkfifo(named)
    args = [str(part).format(f=named, tmp=tmp_path) for part in command]
    db = [] if command[0] == "info" else ["--db", stored]
    done = run_cli_process(*args, *db, env={k: v.format(f=named) for k, v in env.items()}, timeout=60)
    if command[0] == "diagnose":  # the device table only feeds a finding: the diagnosis says why it is missing
        assert done.returncode in (0, 2), done.stderr
        assert "Traceback" not in done.stderr
        return
    assert_one_line_error(done, named, "not a regular file")


def test_a_fifo_as_requirements_or_book_table_of_contents_never_hangs(tmp_path: Path, run_cli_process: Any) -> None:
    from nbscope._errors import NbscopeError
    from nbscope.collect.environments import read_requirements_file

    fifo = tmp_path / "requirements.txt"
    os.mkfifo(fifo)
    with pytest.raises(NbscopeError, match="not a regular file"):
        read_requirements_file(fifo)
    book = tmp_path / "book"
    book.mkdir()
    os.mkfifo(book / "_toc.yml")  # not a table of contents: the folder is searched instead, and holds no notebook
    assert_one_line_error(run_cli_process("audit", book, "--db", tmp_path / "s.db", timeout=60), "no notebooks")
    assert_one_line_error(
        run_cli_process("audit", book / "_toc.yml", "--db", tmp_path / "s.db", timeout=60), "_toc.yml"
    )


BILLION_LAUGHS = "root: a\nl0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 9)
)


@pytest.mark.parametrize("toc", [BILLION_LAUGHS + "parts: *l8\n", "root: a\nparts: &p [*p]\n"], ids=["laughs", "cycle"])
def test_a_table_of_contents_that_expands_without_end_is_one_line(
    tmp_path: Path, run_cli_process: Any, toc: str
) -> None:
    """A few lines of YAML aliases that expand to 48 million lists, or a list inside itself: refused at once."""
    book = tmp_path / "book"
    _notebook(book / "a.ipynb", ["x = 1"])
    (book / "_toc.yml").write_text(toc)
    done = run_cli_process("audit", book, "--db", tmp_path / "s.db", timeout=60)
    assert_one_line_error(done, "_toc.yml", "1,000,000 entries")


@pytest.mark.parametrize("form", ["info", "devices", "import", "config"])
def test_deep_nesting_is_one_line_never_a_recursion_error(
    tmp_path: Path, stored: Path, run_cli_process: Any, form: str
) -> None:
    shallow_enough = {"a": {}}
    inner = shallow_enough["a"]
    for _ in range(300):  # deeper than the bound, shallower than Python's recursion limit
        inner["a"] = {}
        inner = inner["a"]
    deep = tmp_path / "deep.json"
    if form == "devices":
        deep = tmp_path / "deep.toml"
        deep.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
        done = run_cli_process("forecast", "1", "--devices", deep, "--db", stored, timeout=60)
    elif form == "config":
        book = tmp_path / "book"
        _notebook(book / "a.ipynb", ["x = 1"])
        (book / "_toc.yml").write_text("root: a\nparts: " + "[" * 200 + "]" * 200 + "\n")
        done = run_cli_process("audit", book, "--db", stored, timeout=60)
        deep = book / "_toc.yml"
    else:
        deep.write_text("[" * 100_000 + "]" * 100_000 if form == "import" else json.dumps(shallow_enough))
        args = ("info", "--diff", deep, RECORD) if form == "info" else ("import", deep, "--db", stored)
        done = run_cli_process(*args, timeout=60)
    assert_one_line_error(done, str(deep), "nested deeper than")
    assert "RecursionError" not in done.stderr


@pytest.mark.parametrize("db", ["/dev/null", "/dev/nbscope-trust-test.db", "fifo", "{tmp}/devlink.db"])
def test_a_store_among_devices_is_refused_and_nothing_is_made_there(
    tmp_path: Path, run_cli_process: Any, db: str
) -> None:
    (tmp_path / "devlink.db").symlink_to("/dev/zero")
    if db == "fifo":
        db = str(tmp_path / "fifo")
        os.mkfifo(db)
    db = db.format(tmp=tmp_path)
    notebook = _notebook(tmp_path / "nb.ipynb", ["x = 1"])
    before = set(os.listdir("/dev"))
    try:
        for command in (("runs",), ("profile", notebook), ("import", RECORD)):
            done = run_cli_process(*command, "--db", db, timeout=60)
            assert_one_line_error(done, db)
        assert set(os.listdir("/dev")) == before  # no DEVICE-journal, no new store
    finally:  # what a regression made there (as root) is this test's to remove, and only that
        for name in set(os.listdir("/dev")) - before:
            if name.startswith(("null-journal", "zero-journal", "nbscope-trust-test.db")):
                made = Path("/dev") / name
                shutil.rmtree(made) if made.is_dir() else made.unlink()
    assert sorted(os.listdir(tmp_path)) == sorted(["devlink.db", "nb.ipynb", *(["fifo"] if "fifo" in db else [])])


def test_a_fifo_named_like_a_notebook_never_hangs_a_search(tmp_path: Path) -> None:
    from nbscope.api.audit._discover import scan_directory
    from nbscope.api.trace import discover_sources

    (tmp_path / "real.ipynb").write_text("{}")
    os.mkfifo(tmp_path / "blocked.ipynb")
    os.mkfifo(tmp_path / "blocked.md")
    assert discover_sources(tmp_path) == [tmp_path / "real.ipynb"]
    assert scan_directory(tmp_path) == [tmp_path / "real.ipynb"]
    from nbscope.record.jupyter_cache import find_book2_cache, read_book2_cache

    cache = tmp_path / "_build" / "execute"  # jupyter-book 2's execution cache, one entry a FIFO
    cache.mkdir(parents=True)
    os.mkfifo(cache / "0123abcd.ipynb")
    assert find_book2_cache(tmp_path) is None and read_book2_cache(cache) == []


# ==== 3. escapes ==================================================================================================

CONTROLS = ("\x1b", "\x07", "\u202e")
NASTY_NAME = "lectures/evil\x1b]0;title\x07\x1b[2Jname\u202egpj.ipynb"
LINKS = ["[click me](https://evil.example/x)", "![pixel](https://evil.example/p.png)", "<img src=x onerror=alert(1)>"]


def _gated_store(tmp_path: Path, *, target: str, first_lines: list[str]) -> Path:
    """A baseline and a 5x slower candidate of one notebook whose cells have these first lines."""
    db = tmp_path / "s.db"
    store = Store(db)
    for wall, started in ((0.5, "2026-01-01T00:00:00.000Z"), (2.5, "2026-01-02T00:00:00.000Z")):
        cells = [make_cell(i, wall) for i in range(len(first_lines))]
        for cell, line in zip(cells, first_lines, strict=True):
            cell["first_line"] = line
        store.save(make_record(cells, target=target, started=started))
    return db


def test_a_notebook_names_controls_reach_no_written_page(tmp_path: Path, run_cli: Any) -> None:
    db = _gated_store(tmp_path, target=NASTY_NAME, first_lines=["work()"])
    outputs = [
        run_cli("gate", "--baseline", "1", "--candidate", "2", "--db", db, "--summary", tmp_path / "gate.md"),
        run_cli("report", "2", "--db", db, "-o", tmp_path / "report.html"),
        run_cli("publish", db, "-o", tmp_path / "site"),
        run_cli("diagnose", "2", "--markdown", "--db", db),
        run_cli("compare", "1", "2", "--markdown", "--db", db),
        run_cli("history", NASTY_NAME, "--markdown", "--db", db),
        run_cli("cells", "2", "--markdown", "--db", db),
    ]
    assert [done.returncode for done in outputs] == [1, 0, 0, 0, 0, 0, 0], [done.stderr for done in outputs]
    written = [tmp_path / "gate.md", tmp_path / "report.html", *sorted((tmp_path / "site").rglob("*.*"))]
    assert {p.name for p in written} >= {"status.md", "index.html", "status.json"}
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert not [c for c in CONTROLS if c in text], path
        assert "evil" in text or path.suffix == ".json" or "lectures" not in str(path.parent), path
    for done in outputs:
        assert not [c for c in CONTROLS if c in done.stdout + done.stderr]
    assert "lectures/evilnamegpj.ipynb" in (tmp_path / "site" / "status.md").read_text()  # the OSC title, whole, gone


def _outside_code_spans(markdown: str) -> str:
    return re.sub(r"`[^`\n]*`", "", markdown)


def test_a_cells_source_puts_no_live_link_in_the_regressions(tmp_path: Path, run_cli: Any) -> None:
    db = _gated_store(tmp_path, target="nb.ipynb", first_lines=LINKS)
    summary = tmp_path / "gate.md"
    done = run_cli("gate", "--baseline", "1", "--candidate", "2", "--db", db, "--summary", summary)
    assert done.returncode == 1, done.stderr
    text = summary.read_text()
    regressions = text.split("**Regressions:**", 1)[1].split("\n\n", 2)[1].splitlines()
    assert len(regressions) >= len(LINKS), text
    for line in LINKS:
        assert f"`{line}`" in text  # shown as written, in a code span
    prose = _outside_code_spans(text)
    assert "](" not in prose and "<img" not in prose, prose
    markdown = run_cli("gate", "--baseline", "1", "--candidate", "2", "--db", db, "--markdown").stdout
    assert "](" not in _outside_code_spans(markdown) and "<img" not in _outside_code_spans(markdown)


def test_a_device_entrys_name_stays_inside_its_toml_string() -> None:
    """``forecast --calibrate ... --append-to FILE`` writes TOML: a GPU's name from a record (a newline, a
    quote, ESC) never starts a table of its own in the user's device file."""
    import tomllib

    from nbscope.analyse.forecast.calibrate import CalibratedDevice, to_toml
    from nbscope.analyse.forecast.devices import load_table

    h100 = load_table(environ={}).devices["h100"]
    name = 'Lab GPU"\n[devices.evil]\nname = "x\x1b[2J'
    text = to_toml(CalibratedDevice(key="lab.x]", name=name, match=[name], figures=h100.figures))
    assert "\x1b" not in text
    document = tomllib.loads(text)
    assert list(document["devices"]) == ["lab.x]"] and document["devices"]["lab.x]"]["name"] == name


@pytest.mark.parametrize(
    "raw",
    [
        "a\x1b[31mred\x07 \u202eright",
        "[link](https://e.example) ![i](https://e.example/i.png) <b>x</b> &amp; `code` *em* _u_ | pipe",
    ],
)
def test_each_format_has_one_escaper(raw: str) -> None:
    from nbscope.render import _clean, _markdown
    from nbscope.render.html import _base, _svg
    from nbscope.render.site import e as site_e

    assert _base.e is _clean.for_html and site_e is _clean.for_html and _svg._text is _clean.for_html
    assert _markdown.plain_text is _clean.markdown_text and _markdown.table_cell is _clean.markdown_code
    for shown in (_clean.for_terminal(raw), _clean.for_html(raw), _clean.markdown_text(raw), _clean.code_span(raw)):
        assert not [c for c in CONTROLS if c in shown], shown
    html = _clean.for_html(raw)
    assert "<" not in html and ">" not in html and '"' not in html
    prose = _clean.markdown_text(raw)
    assert "](" not in prose.replace("\\]", "") and "<" not in prose and "&amp;amp;" in prose or "&" not in raw
    mixed = _clean.markdown_with_code(f"keep {raw} and `{raw}` apart")
    assert "](" not in _outside_code_spans(mixed).replace("\\]", "") and "<" not in _outside_code_spans(mixed)
    span = _clean.code_span(raw)
    assert span.startswith("`") and span.endswith("`") and span.count("`") == 2 and "\n" not in span
    assert json.loads(json.dumps(raw)) == raw and "\x1b" not in json.dumps(raw)  # JSON keeps controls as escapes
