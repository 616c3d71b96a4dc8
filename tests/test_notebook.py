"""Reading notebooks: .ipynb and MyST .md, cell lines in the source file, tags, hashes, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbscope._errors import NbscopeError
from nbscope.api.profile import ProfileOptions, profile
from nbscope.collect import notebook
from nbscope.collect.probe import _nbscope_probe
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
MYST = FILES / "myst_lines.md"


def fence_lines(path: Path) -> list[int]:
    """1-based lines of the ```{code-cell} fences in a MyST file, found independently of myst-nb."""
    return [
        number
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.match(r"^(`{3,}|~{3,})\{code-cell\}", text)
    ]


def test_myst_cells_keep_their_fence_line() -> None:
    nb = notebook.read(MYST)
    assert nb.format == "myst"
    assert nb.kernel_name == "python3"
    fences = fence_lines(MYST)
    assert len(fences) == 4  # guards the test file itself
    assert [c.line for c in nb.code_cells] == fences
    assert [c.index for c in nb.code_cells] == [0, 1, 2, 3]
    # +++ breaks and prose make markdown cells: code cells sit at these positions among all cells
    assert [c.cell_index for c in nb.code_cells] == [1, 3, 6, 7]
    assert all(nb.nb.cells[c.cell_index].cell_type == "code" for c in nb.code_cells)


def test_myst_cell_options_become_tags_and_leave_the_source() -> None:
    cells = notebook.read(MYST).code_cells
    assert cells[1].tags == ["hide-output"]  # `:tags:` option line
    assert cells[2].tags == ["hide-input"]  # YAML option block
    assert cells[0].tags == [] and cells[3].tags == []
    assert cells[1].source == "b = a + 1\nprint(b)"
    assert cells[2].source == "c = b * 2"
    assert cells[1].first_line == "b = a + 1"


def test_ipynb_cells_have_no_line_and_keep_tags() -> None:
    nb = notebook.read(FILES / "raises_exception.ipynb")
    assert nb.format == "ipynb"
    assert [c.line for c in nb.code_cells] == [None, None, None]
    assert [c.tags for c in nb.code_cells] == [[], ["raises-exception"], []]
    described = nb.describe()
    assert described["code_cells"] == 3 and described["kernel"] == "python3"


@pytest.mark.parametrize("name, cells", [("empty.ipynb", 0), ("markdown_only.ipynb", 2)])
def test_notebooks_without_code_cells(name: str, cells: int) -> None:
    nb = notebook.read(FILES / name)
    assert nb.code_cells == []
    assert nb.describe()["cells"] == cells


def test_source_hash_matches_the_probe_and_ignores_trailing_whitespace() -> None:
    for source in ("a = 1", "x = 1\n\n", "def f():\n    return 2  \n", ""):
        assert notebook.source_hash(source) == _nbscope_probe.source_hash(source)
        assert len(notebook.source_hash(source)) == 16
    assert notebook.source_hash("a = 1\n   \n") == notebook.source_hash("a = 1")
    assert notebook.source_hash("a = 1") != notebook.source_hash("a = 2")


def test_same_source_same_hash_across_formats(tmp_path: Path) -> None:
    """A MyST cell and an .ipynb cell with the same code pair up by hash (how runs match across pathways)."""
    myst = notebook.read(MYST)
    ipynb = tmp_path / "same.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(c.source + "\n") for c in myst.code_cells]), ipynb)
    assert [c.source_hash for c in notebook.read(ipynb).code_cells] == [c.source_hash for c in myst.code_cells]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.ipynb", None, "no such file"),
        ("notes.txt", "hello", "unsupported notebook type '.txt'"),
        ("broken.ipynb", "{not json", "not a valid .ipynb notebook"),
        ("binary.ipynb", b"\xff\xfe\x00\x81", "not a text file"),
        ("folder", "dir", "is a directory"),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path: Path, name: str, content: object, message: str) -> None:
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    with pytest.raises(NbscopeError) as info:
        notebook.read(path)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.slow
def test_myst_profile_records_lines_in_a_real_kernel(tmp_path: Path) -> None:
    store = Store(tmp_path / "db" / "nbscope.db")
    record = profile(MYST, ProfileOptions(), store=store, live_path=tmp_path / "live.jsonl")
    assert record.status == "ok"
    m = record.measurements
    assert m["notebook"]["format"] == "myst"
    assert m["notebook"]["code_cells"] == 4
    cells = m["cells"]
    assert [c["line"] for c in cells] == fence_lines(MYST)
    assert [c["status"] for c in cells] == ["ok"] * 4
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4]
    assert [c["first_line"] for c in cells] == ["a = 1", "b = a + 1", "c = b * 2", "d = c + 1"]
    assert cells[1]["tags"] == ["hide-output"]
    # the stored copy says the same
    stored = store.get(record.run_id)
    assert [c["line"] for c in stored.measurements["cells"]] == fence_lines(MYST)


# --- malformed notebooks: the error names the field or the line -----------------------------------------

ODD = FILES / "odd"


@pytest.mark.parametrize(
    "name, message",
    [
        ("source_number.ipynb", "cells[3].source: 42 is not a string or list of strings"),
        ("tags_string.ipynb", 'cells[1].metadata.tags: "hide-input" is not a list of strings'),
        ("execution_count_text.ipynb", "cells[0].execution_count: 'one' is not of type"),
        ("cell_type_unknown.ipynb", 'cells[1].cell_type: "python" is not code, markdown or raw'),
        ("no_cells.ipynb", "cells: missing"),
        ("trailing_comma.ipynb", "line 3, column 43: not valid JSON"),
        ("bad_option_line.md", "line 13: ':tags [hide-input]' is not a :key: value option line"),
        ("bad_option_yaml.md", "the code cell's option block is not valid YAML"),
    ],
)
def test_a_malformed_notebook_names_the_field_or_line(name: str, message: str) -> None:
    with pytest.raises(NbscopeError) as info:
        notebook.read(ODD / name)
    text = str(info.value)
    assert text.startswith(str(ODD / name)) and message in text, text
    assert "\n" not in text and "Error" not in text  # one line, no exception class names


@pytest.mark.parametrize(
    "name, line, message",
    [
        ("unclosed_fence.md", 18, "fence is never closed"),
        ("unclosed_front_matter.md", 1, "front matter (---) is never closed"),
    ],
)
def test_a_broken_looking_myst_file_reads_with_a_warning(name: str, line: int, message: str) -> None:
    nb = notebook.read(ODD / name)
    assert len(nb.warnings) == 1 and f"line {line}: " in nb.warnings[0] and message in nb.warnings[0]
    fences = fence_lines(ODD / name)
    assert line in fences or line == 1


def test_well_formed_notebooks_get_no_warning() -> None:
    for path in [MYST, *sorted(FILES.glob("*.md")), *sorted(FILES.glob("*.ipynb"))]:
        read = notebook.read(path)
        if not read.code_cells:  # nothing to run: that one warning (tests/test_adversarial_ci.py)
            assert len(read.warnings) == 1 and "no code cells" in read.warnings[0], path
        else:
            assert read.warnings == [], path


def test_source_number_on_the_command_line_is_one_line_exit_2(run_cli: object, tmp_path: Path) -> None:
    result = run_cli("profile", str(ODD / "source_number.ipynb"), "--db", str(tmp_path / "n.db"))  # type: ignore[operator]
    assert result.returncode == 2, result.stderr
    assert "cells[3].source: 42 is not a string or list of strings" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "n.db").exists()


def test_profile_prints_the_myst_warning(run_cli: object, tmp_path: Path) -> None:
    result = run_cli("profile", str(ODD / "unclosed_fence.md"), "--db", str(tmp_path / "n.db"))  # type: ignore[operator]
    assert result.returncode in (0, 1), result.stderr
    assert "warning:" in result.stderr and "line 18: this ```{code-cell} fence is never closed" in result.stderr
