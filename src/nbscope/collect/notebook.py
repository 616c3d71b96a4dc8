"""Reading notebooks: ``.ipynb`` and MyST ``.md`` (with each cell's line in the source file)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError

if TYPE_CHECKING:
    import nbformat

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
        for text in self.source.splitlines():
            if text.strip():
                return text.strip()
        return ""

    @property
    def code_line(self) -> str:
        """The first line that is code, not a comment (tables show it); the first line if all are comments."""
        for text in self.source.splitlines():
            if text.strip() and not text.lstrip().startswith("#"):
                return text.strip()
        return self.first_line

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cell_index": self.cell_index,
            "source_hash": self.source_hash,
            "line": self.line,
            "lines": list(self.lines) if self.lines else None,
            # The code that ran, whole: analyses read it from the record, never from a file edited since.
            "source": self.source,
            "first_line": self.first_line[:120],
            "code_line": self.code_line[:120],
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

    @property
    def kernel_name(self) -> str:
        return str(self.nb.metadata.get("kernelspec", {}).get("name") or "python3")

    def describe(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "cells": len(self.nb.cells),
            "code_cells": len(self.code_cells),
            "kernel": self.kernel_name,
            "content_hash": self.content_hash,
        }


def _read_myst(path: Path, text: str) -> nbformat.NotebookNode:
    import_nbformat()  # myst-nb builds nbformat notebooks
    from myst_nb.core.read import read_myst_markdown_notebook

    try:
        return read_myst_markdown_notebook(text, add_source_map=True, path=path)
    except Exception as exc:  # myst-nb raises several types for malformed files
        raise NbscopeError(f"{path}: not a readable MyST notebook ({exc})") from None


def read(path: str | Path) -> Notebook:
    """Read an ``.ipynb`` or MyST ``.md`` notebook; errors are one-line NbscopeErrors."""
    path = Path(path)
    if not path.exists():
        raise NbscopeError(f"{path}: no such file")
    if path.is_dir():
        raise NbscopeError(f"{path} is a directory, not a notebook")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NbscopeError(f"{path} is not a text file, so not a notebook") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text would: universal newlines
    if path.suffix.lower() == ".ipynb":
        try:
            nb = import_nbformat().reads(text, as_version=4)
        except Exception as exc:
            raise NbscopeError(f"{path}: not a valid .ipynb notebook ({type(exc).__name__})") from None
        fmt = "ipynb"
        ranges = _ipynb_line_ranges(text, nb)
    elif path.suffix.lower() in MYST_SUFFIXES:
        nb = _read_myst(path, text)
        fmt = "myst"
        ranges = _myst_line_ranges(text, nb.metadata.pop("source_map", None))
    else:
        raise NbscopeError(f"{path}: unsupported notebook type {path.suffix!r} (use .ipynb or MyST .md)")
    code_cells = []
    for cell_index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = list(cell.get("metadata", {}).get("tags", []) or [])
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
    return Notebook(path=path, format=fmt, nb=nb, code_cells=code_cells,
                    content_hash=hashlib.sha256(data).hexdigest()[:16])


LineRange = tuple[int, int]


def _myst_line_ranges(text: str, starts: list[int] | None) -> list[LineRange]:
    """Each cell's first and last line in a MyST file: from its start (a code cell's opening fence) to the
    fence that closes it, or for other cells to the line before the next cell starts."""
    if not starts:
        return []
    lines = text.split("\n")
    ranges: list[LineRange] = []
    for i, start in enumerate(starts):
        following = starts[i + 1] - 1 if i + 1 < len(starts) else len(lines)
        end = following
        opening = lines[start - 1].lstrip() if 0 < start <= len(lines) else ""
        fence = re.match(r"(`{3,}|~{3,})", opening)
        if fence:
            for number in range(start + 1, len(lines) + 1):
                if lines[number - 1].strip() == fence.group(1):
                    end = number
                    break
        ranges.append((start, max(start, end)))
    return ranges


def _ipynb_line_ranges(text: str, nb: Any) -> list[LineRange]:
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
