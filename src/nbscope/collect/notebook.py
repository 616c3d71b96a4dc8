"""Reading notebooks: ``.ipynb`` and MyST ``.md`` (with each cell's line in the source file)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import types
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from nbscope._errors import NbscopeError
from nbscope._redact import redact, shorten
from nbscope.schema.codec import decode
from nbscope.schema.ipynb_document import IpynbDocument, check_cells, shown
from nbscope.schema.notebook_cell import NotebookCell
from nbscope.schema.notebook_metadata import NotebookMetadata

if TYPE_CHECKING:
    import nbformat
    from nbformat import NotebookNode

MYST_SUFFIXES = (".md", ".myst", ".mystnb")
# jsonschema's IRI format checker; importing it builds lark grammars (1-5 s).
_IRI_GRAMMAR = "rfc3987_syntax"


def import_nbformat() -> types.ModuleType:
    """nbformat, imported only by what reads or runs a notebook (nbclient imports it too: call this first).

    ``import nbformat`` imports jsonschema, whose format checkers import ``rfc3987_syntax`` when it is
    installed, and that module builds its lark grammars at import: 1-5 s for an IRI checker that reading
    or running a notebook never calls. While nbformat is imported, that module is stood in for by one
    whose ``is_valid_syntax`` imports the real module at its first call, so jsonschema still checks IRIs
    exactly as before, and pays for the grammar only if it does. Afterwards the name is the real module's
    again for any other importer.
    """
    if "nbformat" in sys.modules or _IRI_GRAMMAR in sys.modules or "jsonschema" in sys.modules:
        import nbformat as module

        return module
    deferred = None
    if importlib.util.find_spec(_IRI_GRAMMAR) is not None:
        deferred = types.ModuleType(_IRI_GRAMMAR)

        def is_valid_syntax(rule: str, value: str) -> bool:
            return bool(importlib.import_module(_IRI_GRAMMAR).is_valid_syntax(rule, value))

        deferred.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
        sys.modules[_IRI_GRAMMAR] = deferred
    try:
        import nbformat as module
    finally:
        if deferred is not None and sys.modules.get(_IRI_GRAMMAR) is deferred:
            del sys.modules[_IRI_GRAMMAR]
    return module


def source_hash(source: str) -> str:
    """First 16 hex digits of SHA-256 of the source without trailing whitespace.

    The probe computes the same hash inside the kernel (``_nbscope_probe.source_hash``), and so does
    ``record.sources`` when it checks a recorded source; it pairs cells across runs, machines and pathways
    (nbclient, MyST conversion and jupyter-book give equal sources).
    """
    return hashlib.sha256(source.rstrip().encode("utf-8")).hexdigest()[:16]


@dataclass
class CodeCell:
    """One code cell and where it sits."""

    index: int  # among code cells
    cell_index: int  # among all cells
    source: str
    source_hash: str
    line: int | None  # 1-based line of the cell's opening fence in a MyST file (what labels show)
    tags: list[str]
    # The cell's first and last line in its file, 1-based: a MyST cell's fences, an .ipynb cell's "source".
    lines: tuple[int, int] | None = None

    @property
    def first_line(self) -> str:
        """The first line that is not blank, its credentials redacted before any display shortens it."""
        for text in self.source.splitlines():
            if text.strip():
                return redact(text.strip())
        return ""

    @property
    def code_line(self) -> str:
        """The first line that is code, not a comment (tables show it); the first line if all are comments."""
        for text in self.source.splitlines():
            if text.strip() and not text.lstrip().startswith("#"):
                return redact(text.strip())
        return self.first_line

    def describe(self) -> dict[str, object]:
        return {
            "index": self.index,
            "cell_index": self.cell_index,
            "source_hash": self.source_hash,
            "line": self.line,
            "lines": list(self.lines) if self.lines else None,
            # The code that ran, whole: analyses read it from the record, never from a file edited since.
            "source": self.source,
            "first_line": shorten(self.first_line, 120),
            "code_line": shorten(self.code_line, 120),
            "tags": self.tags,
        }


@dataclass
class Notebook:
    """A notebook read from disk, ready for nbclient."""

    path: Path
    format: str  # "ipynb" or "myst"
    nb: nbformat.NotebookNode
    code_cells: list[CodeCell]
    # First 16 hex digits of SHA-256 of the file as stored: with the notebook's name, what identifies it.
    content_hash: str = ""
    # Where the file's structure looks broken but it could still be read (MyST fences, options, front matter).
    warnings: list[str] = field(default_factory=list)

    @property
    def kernel_name(self) -> str:
        return decode(NotebookMetadata, self.nb.metadata).kernelspec.name or "python3"

    def describe(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "format": self.format,
            "cells": len(self.nb.cells),
            "code_cells": len(self.code_cells),
            "kernel": self.kernel_name,
            "content_hash": self.content_hash,
        }


def _read_myst(path: Path, text: str, notes: list[str]) -> nbformat.NotebookNode:
    import_nbformat()  # myst-nb builds nbformat notebooks
    from myst_nb.core.read import read_myst_markdown_notebook

    try:
        nb: nbformat.NotebookNode = read_myst_markdown_notebook(text, add_source_map=True, path=path)
        return nb
    except Exception as exc:  # myst-nb raises several types for malformed files
        # Our own look at the structure names the line; myst-nb's message, when we found nothing.
        why = notes[0] if notes else _one_line(exc)
        raise NbscopeError(f"{path}: not a readable MyST notebook: {why}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return shorten(text, 160)


def _where(parts: Iterable[object]) -> str:
    """``cells[3].metadata.tags`` from a JSON path."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the notebook"


def _read_ipynb(path: Path, text: str) -> nbformat.NotebookNode:
    """Parse and check an ``.ipynb``; errors name the JSON line or the field that is wrong."""
    nbformat = import_nbformat()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NbscopeError(
            f"{path}: not a valid .ipynb notebook: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise NbscopeError(f"{path}: not a valid .ipynb notebook: {shown(data)} is not a JSON object")
    major = decode(IpynbDocument, data).nbformat
    if major != 4 and (not isinstance(major, int) or major < 1 or major > 4):
        raise NbscopeError(f"{path}: nbformat: {shown(major)} is not a notebook format version (4 expected)")
    try:
        if major == 4:
            check_cells(data)
        nb = cast("NotebookNode", nbformat.reads(text, as_version=4))
        check_cells(nb)
        with warnings.catch_warnings():  # nbformat.reads has warned already (a missing cell id, ...)
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except Exception as exc:  # ours (ValueError), nbformat's schema errors (with a path), and others
        path_parts = getattr(exc, "absolute_path", None)
        message = getattr(exc, "message", None)
        if path_parts is not None and message:
            text = f"{_where(path_parts)}: {_one_line(Exception(message))}"
        elif isinstance(exc, ValueError):
            text = _one_line(exc)
        else:
            text = f"{type(exc).__name__}: {_one_line(exc)}"
        raise NbscopeError(f"{path}: not a valid .ipynb notebook: {text}") from None
    return nb


_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>\S.*)?$")
_OPTION = re.compile(r"^:[A-Za-z_][\w-]*:(\s|$)")


def myst_warnings(text: str) -> list[str]:
    """Where a MyST notebook's structure looks broken: front matter never closed, a ``{code-cell}``
    fence never closed (the rest of the file becomes its code), a code cell's option block that is not
    ``:key: value`` lines or a closed YAML block of ``key: value``. Line numbers are the file's."""
    import yaml

    found: list[str] = []
    lines = text.split("\n")
    start = 0
    if lines and lines[0].strip() == "---":
        closing = next((n for n in range(1, len(lines)) if lines[n].strip() in ("---", "...")), None)
        if closing is None:
            found.append("line 1: the front matter (---) is never closed: the whole file is read as front matter")
            return found
        start = closing + 1
    number = start
    while number < len(lines):
        match = _FENCE.match(lines[number])
        if not match:
            number += 1
            continue
        fence, info = match["fence"], (match["info"] or "").strip()
        close = next(
            (
                n
                for n in range(number + 1, len(lines))
                if re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[n])
            ),
            None,
        )
        if info.startswith("{code-cell}"):
            if close is None:
                found.append(
                    f"line {number + 1}: this {fence}{{code-cell}} fence is never closed: the rest of the "
                    "file is read as its code"
                )
                return found
            found += _option_warnings(lines, number, close, yaml)
        number = (close if close is not None else len(lines)) + 1
    return found


def _option_warnings(lines: list[str], fence: int, close: int, yaml: types.ModuleType) -> list[str]:
    """Warnings about the option block of the code cell whose fence is at ``fence`` (0-based)."""
    body = lines[fence + 1 : close]
    if body and body[0].strip() == "---":
        end = next((n for n in range(1, len(body)) if body[n].strip() == "---"), None)
        if end is None:
            return [f"line {fence + 2}: the code cell's option block (---) is never closed: it is read as code"]
        try:
            options = yaml.safe_load("\n".join(body[1:end]))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = fence + 3 + mark.line if mark is not None else fence + 2
            return [
                f"line {at}: the code cell's option block is not valid YAML ({getattr(exc, 'problem', None) or exc})"
            ]
        if options is not None and not isinstance(options, dict):
            return [f"line {fence + 2}: the code cell's option block is not a mapping of key: value"]
        return []
    found = []
    for offset, line in enumerate(body):
        if not line.startswith(":"):
            break
        if not _OPTION.match(line):
            found.append(f"line {fence + 2 + offset}: {shorten(line.strip(), 40)!r} is not a :key: value option line")
    return found


def read(path: str | Path) -> Notebook:
    """Read an ``.ipynb`` or MyST ``.md`` notebook; errors are one-line NbscopeErrors."""
    path = Path(path)
    if not path.exists():
        raise NbscopeError(f"{path}: no such file")
    if path.is_dir():
        raise NbscopeError(f"{path} is a directory, not a notebook")
    try:
        str(path.resolve()).encode("utf-8")
    except UnicodeEncodeError:  # a name no record, store or page can hold as text: refused before it runs
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise NbscopeError(f"{shown}: the notebook's path is not valid UTF-8; rename it (or its folder)") from None
    from nbscope._files import read_bounded

    # A FIFO or a device never hangs it; noted: no -o replaces it.
    data = read_bounded(path, limit=512 * 2**20, what="notebook")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NbscopeError(f"{path} is not a text file, so not a notebook") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text would: universal newlines
    notes: list[str] = []
    if path.suffix.lower() == ".ipynb":
        nb = _read_ipynb(path, text)
        fmt = "ipynb"
        ranges = _ipynb_line_ranges(text, nb)
    elif path.suffix.lower() in MYST_SUFFIXES:
        notes = myst_warnings(text)
        nb = _read_myst(path, text, notes)
        notes = [f"{path}: {w}" for w in notes]
        fmt = "myst"
        ranges = _myst_line_ranges(text, nb.metadata.pop("source_map", None))
    else:
        raise NbscopeError(f"{path}: unsupported notebook type {path.suffix!r} (use .ipynb or MyST .md)")
    code_cells: list[CodeCell] = []
    for cell_index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = list(decode(NotebookCell, cell).metadata.tags)
        code_cells.append(
            CodeCell(
                index=len(code_cells),
                cell_index=cell_index,
                source=cell.source,
                source_hash=source_hash(cell.source),
                line=ranges[cell_index][0] if fmt == "myst" and cell_index < len(ranges) else None,
                lines=ranges[cell_index] if cell_index < len(ranges) else None,
                tags=tags,
            )
        )
    if not code_cells:
        notes.append(_no_code_warning(path, text if fmt == "myst" else None))
    return Notebook(
        path=path,
        format=fmt,
        nb=nb,
        code_cells=code_cells,
        content_hash=hashlib.sha256(data).hexdigest()[:16],
        warnings=notes,
    )


def _no_code_warning(path: Path, myst_text: str | None) -> str:
    """The one-line warning for a notebook with no code cell; in MyST, where a plain code fence may be the cause."""
    text = f"{path}: no code cells: nothing is run or measured"
    for number, line in enumerate((myst_text or "").split("\n"), start=1):
        match = _FENCE.match(line)
        if match and (match["info"] or "").strip().split()[:1] in (["python"], ["python3"], ["ipython"], ["ipython3"]):
            return (
                text
                + f" (line {number} is a plain {match['fence']}{match['info'].split()[0]} fence: MyST runs only {{code-cell}} fences)"
            )
    return text


LineRange = tuple[int, int]


def _myst_line_ranges(text: str, starts: list[int] | None) -> list[LineRange]:
    """Each cell's first and last line in a MyST file: from its start (a code cell's opening fence) to the
    fence that closes it, or for other cells to the line before the next cell starts."""
    if not starts:
        return []
    lines = text.split("\n")
    ranges: list[LineRange] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(lines)  # the line before the next cell
        opening = lines[start - 1].lstrip() if 0 < start <= len(lines) else ""
        fence = re.match(r"(`{3,}|~{3,})", opening)
        if fence:
            for number in range(start + 1, len(lines) + 1):
                if lines[number - 1].strip() == fence.group(1):
                    end = number
                    break
        ranges.append((start, max(start, end)))
    return ranges


def _ipynb_line_ranges(text: str, nb: nbformat.NotebookNode) -> list[LineRange]:
    """Each cell's lines in an ``.ipynb`` file: from its ``"source"`` key to the end of that value.

    Found by reading the JSON text in order; a file whose ``"source"`` keys do not match its cells one to one
    (a hand-written layout) gets no line ranges rather than wrong ones."""
    lines = text.split("\n")
    keys = [number for number, line in enumerate(lines, 1) if re.match(r'\s*"source"\s*:', line)]
    if len(keys) != len(nb.cells):
        return []
    ranges: list[LineRange] = []
    for number in keys:
        rest = lines[number - 1].split(":", 1)[1].strip()
        end = number
        if rest.startswith("[") and not rest.rstrip(",").endswith("]"):
            for later in range(number + 1, len(lines) + 1):
                if lines[later - 1].strip().startswith("]"):
                    end = later
                    break
        ranges.append((number, end))
    return ranges
