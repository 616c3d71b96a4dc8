"""Finding a book's notebooks: a jupyter-book 1 ``_toc.yml``, a mystmd ``myst.yml``, a folder or a glob.

Each notebook is known by its path relative to the book's root (POSIX separators), so that audits of
the same book on different machines, or in different CI shards, name the same notebook the same way.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope._files import note_input, note_input_folder
from nbscope.schema.codec import decode
from nbscope.schema.myst_yml import MystYml
from nbscope.schema.notebook_cell import NotebookCells

TOC_NAMES = ("_toc.yml", "_toc.yaml")
MYST_NAMES = ("myst.yml", "myst.yaml")
# Source suffixes tried, in jupyter-book's order, for a toc entry written without one.
SUFFIXES = (".ipynb", ".md")
NOTEBOOK_SUFFIXES = (".ipynb", ".md", ".myst", ".mystnb")
# Folders a book build or an editor writes into; never part of the book.
EXCLUDED_DIRS = {"_build", "node_modules", "__pycache__", "site-packages"}
# Keys under which jupyter-book 1 (and sphinx-external-toc's generic format) nest further entries.
TOC_CHILD_KEYS = ("parts", "chapters", "sections", "subtrees", "entries")
_CODE_CELL = re.compile(r"^\s*(`{3,}|~{3,})\s*\{code-cell\}", re.MULTILINE)
_GLOB_MAGIC = re.compile(r"[*?\[]")


@dataclass
class Book:
    """The notebooks of one audit, in the book's reading order."""

    root: Path
    source: str  # toc | myst | directory | glob | file | several
    config: Path | None
    notebooks: list[Path]
    skipped: list[dict[str, str]] = field(default_factory=list)  # pages that are no notebooks, with why

    def key(self, path: Path) -> str:
        """The notebook's name in audits: its path relative to the book root."""
        return Path(os.path.relpath(path, self.root)).as_posix()

    @property
    def keys(self) -> list[str]:
        return [self.key(p) for p in self.notebooks]

    def describe(self) -> dict[str, object]:
        return {
            "source": self.source,
            "root": str(self.root),
            "config": str(self.config) if self.config else None,
            "notebooks": self.keys,
            "skipped": self.skipped,
        }


def discover(targets: str | Path | Sequence[str | Path]) -> Book:
    """The notebooks named by one or more targets: a book folder, a toc/myst.yml file, a notebook or a glob."""
    if isinstance(targets, (str, Path)):
        targets = [targets]
    if not targets:
        raise NbscopeError("give a book folder, a _toc.yml or myst.yml, a notebook or a glob")
    parts = [_discover_one(str(t)) for t in targets]
    if len(parts) == 1:
        root, source, config, candidates = parts[0]
    else:
        roots = [p[0] for p in parts]
        root = Path(os.path.commonpath([str(r) for r in roots]))
        source, config = "several", None
        candidates = [c for p in parts for c in p[3]]
    notebooks, skipped, seen = [], [], set()
    for path in candidates:
        resolved = path.resolve()
        if resolved in seen:  # a page listed twice (or matched by two globs) is audited once
            continue
        seen.add(resolved)
        reason = _not_a_notebook(resolved)
        if reason:
            skipped.append({"path": Path(os.path.relpath(resolved, root)).as_posix(), "reason": reason})
        else:
            notebooks.append(resolved)
    if not notebooks:
        where = ", ".join(str(t) for t in targets)
        raise NbscopeError(f"no notebooks with code cells found in {where}")
    for read in [*notebooks, *(part[2] for part in parts if part[2] is not None)]:
        note_input(read, "a notebook or book file it audits")  # never the target of -o or --html
    for part in parts:
        note_input_folder(part[0], "the book it audits")  # nor is its _config.yml, a page, a bibliography
    return Book(root=root, source=source, config=config, notebooks=notebooks, skipped=skipped)


def _discover_one(target: str) -> tuple[Path, str, Path | None, list[Path]]:
    path = Path(target).expanduser()
    if path.is_dir():
        path = path.resolve()
        for name in TOC_NAMES:
            if (path / name).is_file():
                return path, "toc", path / name, read_toc(path / name)
        for name in MYST_NAMES:
            if (path / name).is_file():
                return path, "myst", path / name, read_myst_yml(path / name)
        return path, "directory", None, scan_directory(path)
    if path.is_file():
        path = path.resolve()
        if path.name in TOC_NAMES:
            return path.parent, "toc", path, read_toc(path)
        if path.name in MYST_NAMES:
            return path.parent, "myst", path, read_myst_yml(path)
        if path.suffix.lower() in (".yml", ".yaml"):
            if decode(MystYml, _load_yaml(path)).project is not None:
                return path.parent, "myst", path, read_myst_yml(path)
            return path.parent, "toc", path, read_toc(path)
        if path.suffix.lower() not in NOTEBOOK_SUFFIXES:
            raise NbscopeError(f"{target}: not a notebook, book folder, _toc.yml or myst.yml")
        return path.parent, "file", None, [path]
    if _GLOB_MAGIC.search(target):
        matches = sorted(Path(m).resolve() for m in glob.glob(os.path.expanduser(target), recursive=True))
        matches = [m for m in matches if m.is_file() and m.suffix.lower() in NOTEBOOK_SUFFIXES]
        if not matches:
            raise NbscopeError(f"{target}: no .ipynb or .md files match this glob")
        return _glob_root(target), "glob", None, matches
    raise NbscopeError(f"{target}: no such file or directory")


def _glob_root(pattern: str) -> Path:
    """The folder a glob starts from: its leading parts without wildcards."""
    parts = Path(os.path.expanduser(pattern)).parts
    fixed = []
    for part in parts:
        if _GLOB_MAGIC.search(part):
            break
        fixed.append(part)
    return Path(*fixed).resolve() if fixed else Path.cwd().resolve()


def _load_yaml(path: Path) -> Any:
    import yaml

    from nbscope._files import parse_nested, read_text

    text = read_text(path, what="book configuration", limit=2**24)
    try:
        return parse_nested(text, yaml.safe_load, path=path, what="book configuration", form="YAML")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise NbscopeError(f"{path}: not valid YAML{where}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NbscopeError(f"{path}: cannot read ({exc})") from None


def _resolve_entry(config: Path, ref: Any) -> Path:
    """A toc entry's file: as written, else with ``.ipynb`` or ``.md`` added (jupyter-book drops suffixes)."""
    if not isinstance(ref, str) or not ref.strip():
        raise NbscopeError(f"{config}: a 'file' entry must be a path, not {ref!r}")
    for name in (ref, *(ref + suffix for suffix in SUFFIXES)):
        if (config.parent / name).is_file():
            return config.parent / name
    raise NbscopeError(f"{config}: entry {ref!r} names no file (tried {ref}, {ref}.ipynb, {ref}.md)")


def _glob_entry(config: Path, pattern: Any, *, add_suffixes: bool) -> list[Path]:
    if not isinstance(pattern, str):
        raise NbscopeError(f"{config}: a glob/pattern entry must be a string, not {pattern!r}")
    patterns = [pattern] + ([pattern + s for s in SUFFIXES] if add_suffixes else [])
    found: set[Path] = set()
    for p in patterns:
        found.update(Path(m) for m in glob.glob(str(config.parent / p), recursive=True) if os.path.isfile(m))
    return sorted(found)


def _walk_toc(
    path: Path,
    entries: Any,
    key: str,
    pages: list[Path],
    *,
    children: tuple[str, ...],
    pattern: str,
    add_suffixes: bool,
) -> None:
    """Pages of a table of contents in order: ``file`` entries, ``pattern`` globs, then each child list."""
    if not isinstance(entries, list):
        raise NbscopeError(f"{path}: '{key}' must be a list of entries")
    for entry in entries:
        if not isinstance(entry, dict):
            raise NbscopeError(f"{path}: each entry under '{key}' must be a mapping, not {entry!r}")
        if "file" in entry:
            pages.append(_resolve_entry(path, entry["file"]))
        if pattern in entry:
            pages.extend(_glob_entry(path, entry[pattern], add_suffixes=add_suffixes))
        for child in children:
            if child in entry:
                _walk_toc(
                    path, entry[child], child, pages, children=children, pattern=pattern, add_suffixes=add_suffixes
                )


def read_toc(path: Path) -> list[Path]:
    """Pages of a jupyter-book 1 ``_toc.yml`` in reading order: root, then parts/chapters/sections."""
    data = _load_yaml(path)
    if not isinstance(data, dict):
        raise NbscopeError(f"{path}: not a jupyter-book table of contents (expected a mapping with 'root')")
    pages: list[Path] = []
    if "root" in data:
        pages.append(_resolve_entry(path, data["root"]))

    for key in TOC_CHILD_KEYS:
        if key in data:
            _walk_toc(path, data[key], key, pages, children=TOC_CHILD_KEYS, pattern="glob", add_suffixes=True)
    if not pages:
        raise NbscopeError(f"{path}: the table of contents names no files")
    return pages


def read_myst_yml(path: Path) -> list[Path]:
    """Pages of a mystmd (jupyter-book 2) ``myst.yml``: ``project.toc`` files and patterns, in order.

    Without a ``toc``, mystmd takes every page in the project folder; so does this.
    """
    data = _load_yaml(path)
    if not isinstance(data, dict):
        raise NbscopeError(f"{path}: not a myst.yml (expected a mapping with 'project')")
    config = decode(MystYml, data)
    if config.project_malformed:
        raise NbscopeError(f"{path}: 'project' must be a mapping")
    toc = config.project.toc if config.project is not None else None
    if toc is None:
        return scan_directory(path.parent)
    pages: list[Path] = []

    _walk_toc(path, toc, "toc", pages, children=("children",), pattern="pattern", add_suffixes=False)
    if not pages:
        raise NbscopeError(f"{path}: project.toc names no files")
    return pages


def scan_directory(root: Path) -> list[Path]:
    """Every ``.ipynb`` and ``.md`` under a folder, sorted, skipping build output and hidden folders."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_build")) and d not in EXCLUDED_DIRS)
        for name in sorted(files):
            # A regular file only: a FIFO or a device named like a notebook would block or never end.
            if Path(name).suffix.lower() in NOTEBOOK_SUFFIXES and os.path.isfile(Path(folder) / name):
                found.append(Path(folder) / name)
    return found


def _not_a_notebook(path: Path) -> str | None:
    """Why a page is not profiled (no code cells), or None for a notebook.

    An unreadable .ipynb counts as a notebook: its profile then reports the error instead of the audit
    hiding it.
    """
    suffix = path.suffix.lower()
    if suffix not in NOTEBOOK_SUFFIXES:
        return f"not a notebook ({suffix or 'no suffix'})"
    from nbscope._files import read_text

    try:
        text = read_text(path, what="notebook", note=False)
    except NbscopeError:
        return None
    if suffix == ".ipynb":
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(document, dict):
            return None
        has_code = any(cell.cell_type == "code" for cell in decode(NotebookCells, document).cells)
        return None if has_code else "no code cells"
    return None if _CODE_CELL.search(text) else "no code cells"


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` to ``(i, n)`` with 1 ≤ i ≤ n."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise NbscopeError(f"--shard expects i/n (for example 1/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise NbscopeError(f"--shard {text}: i must be between 1 and n")
    return index, count


def select_shard(keys: Iterable[str], index: int, count: int) -> list[str]:
    """Shard ``index`` of ``count``: every count-th notebook of the sorted list, starting at index.

    Sorting makes the partition the same on every machine (keys are book-relative); dealing round-robin
    keeps shard sizes within one notebook of each other, and book order is kept inside a shard.
    """
    keys = list(keys)
    chosen = {k for position, k in enumerate(sorted(set(keys))) if position % count == index - 1}
    return [k for k in keys if k in chosen]
