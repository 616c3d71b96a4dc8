"""Cells across runs and notebooks by name: a cell's caption and failure, a notebook's name in the store
(project roots, aliases), and the pairing of two runs' cells. The cell writers are ``schema.build``.

Every command that pairs cells goes through here, so two runs pair the same way in ``compare``, ``gate``, ``pathways``,
``diagnose`` and the report.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from nbscope._redact import redact, shorten

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord
    from nbscope.schema.model import Cell

# Cells whose sources changed pair up when their texts are at least this similar.
SIMILARITY_THRESHOLD = 0.6


# What happened to a cell that did not finish cleanly, as a sentence says it ("the cell died").
FAILURE_WORDS = {
    "error": "raised",
    "expected-error": "raised (expected)",
    "timeout": "timed out",
    "kernel-died": "died",
    "interrupted": "was interrupted",
}


def failure_text(cell: Cell) -> str | None:
    """``died (DeadKernelError: the kernel died …)``: what stopped a cell, with its error (at most 160
    characters of it) or the signal; None for a cell that finished, or never started (``not-run``)."""
    if cell.status not in FAILURE_WORDS:
        return None
    parts = (cell.error.name, cell.error.message) if cell.error is not None else ()
    detail = ": ".join(part for part in parts if part)
    if cell.status == "interrupted" and not detail and cell.interrupted_by:
        detail = f"by {cell.interrupted_by}"
    return FAILURE_WORDS[cell.status] + (f" ({shorten(detail, 160)})" if detail else "")


# Files that mark the root of a Jupyter Book (1 and 2).
BOOK_CONFIGS = ("_toc.yml", "myst.yml")


def project_root(path: str | Path) -> Path:
    """The root of the project holding ``path``: the root of its git work tree, else the nearest folder
    above it with a book configuration (``_toc.yml``, ``myst.yml``), else its own folder.

    Any of these is the same from every working directory, so a lecture keeps one name in the store, and
    the store of a working directory sits at its project root.
    """
    resolved = Path(path).resolve()
    return _marked_root(resolved) or (resolved if resolved.is_dir() else resolved.parent)


def _marked_root(resolved: Path) -> Path | None:
    """The git work tree's or the book's root above ``resolved``; None when there is neither."""
    folder = resolved if resolved.is_dir() else resolved.parent
    ancestors = [folder, *folder.parents]
    for parent in ancestors:
        if (parent / ".git").exists():  # a directory, or a file in a git worktree
            return parent
    for parent in ancestors:
        if any((parent / name).is_file() for name in BOOK_CONFIGS):
            return parent
    return None


def target_name(path: str | Path, base: Path | None = None, store: Path | None = None) -> str:
    """A notebook's name in the store: its path relative to its :func:`project_root`, with ``/``.

    A relative ``path`` is taken from ``base`` (default: the working directory). A notebook in no project
    is named relative to the working directory's project root when it lies there, else by its absolute
    path; so is it when neither is in a project and ``store`` (the store the run goes to) lies outside the working
    directory's folder. Names given before project roots were relative to the working directory, or absolute:
    :func:`aliases_for` finds them too (:meth:`nbscope.record.store.Store.names_of` keeps only those
    whose runs measured this notebook).
    """
    given = Path(path)
    here = base or Path.cwd()
    resolved = (given if given.is_absolute() else here / given).resolve()
    # A notebook in no git tree or book is named from the working directory's project root, where the
    # store is, or else by its absolute path: named from its own folder, ``a/intro.md`` and ``b/intro.md``
    # would be one notebook in the store.
    root = _marked_root(resolved)
    if root is None:
        root = project_root(here)
        # Neither in a project: a store outside the working directory's folder (``--db`` shared by several
        # folders) would hold two unrelated ``nb.ipynb`` under one name, one history: named by its path there.
        if store is not None and _marked_root(root) is None and not Path(store).resolve().is_relative_to(root):
            return resolved.as_posix()
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return resolved.as_posix()


def aliases_for(target: str, file: Path | None, base: Path | None = None) -> list[str]:
    """Every name a stored run of ``target`` may carry, the current name first, given the file it names
    (:func:`notebook_file`, None when it names none).

    When it names a file, the names runs stored before the project-root naming may carry are added: the absolute
    path and every trailing part of it (``jax_intro.md``, ``lectures/jax_intro.md``, ...), since those runs were
    named relative to whatever folder nbscope ran in. A name that is not a file (a benchmark suite, a run from
    another machine) is matched as written. Each as a record stores it: redacted (``nb?token=REDACTED.ipynb``)."""
    names = [target]
    if file is not None:
        names.insert(0, target_name(file, base))
        names.append(file.as_posix())
        parts = file.parts
        names.extend(Path(*parts[i:]).as_posix() for i in range(len(parts) - 1, 0, -1))
    return list(dict.fromkeys(redact(name) for name in names))


def notebook_file(target: str, base: Path | None = None) -> Path | None:
    """The file ``target`` names (a path, absolute or from ``base``, or a stored name given from anywhere in
    the project), resolved; None when it names no file."""
    base = base or Path.cwd()
    given = Path(target)
    candidates = [given if given.is_absolute() else base / given]
    if not given.is_absolute():
        candidates.append(project_root(base) / given)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    return None


def same_notebook(a: RunRecord, b: RunRecord) -> bool:
    """Whether two runs (records) measured one notebook: the same name, or the same file content
    (``measurements.notebook.content_hash``: a renamed lecture), or names of which one ends the other at a
    folder boundary (``jax_intro.md`` and ``lectures/jax_intro.md``: a run named before project roots)
    when their cells are mostly the same (:func:`shares_cells`: two folders' ``intro.md`` are not one)."""
    if a.target == b.target:
        return True
    hash_a, hash_b = a.notebook_run().notebook.content_hash, b.notebook_run().notebook.content_hash
    if hash_a and hash_a == hash_b:
        return True
    parts_a, parts_b = Path(a.target).parts, Path(b.target).parts
    shorter, longer = sorted((parts_a, parts_b), key=len)
    if not shorter or longer[len(longer) - len(shorter) :] != shorter:
        return False
    return shares_cells(cell_hashes(a), cell_hashes(b))


def cell_hashes(record: RunRecord) -> list[str]:
    """The source hashes of a run's code cells, in order."""
    return [c.source_hash for c in record.notebook_run().cells if c.source_hash]


def shares_cells(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two notebooks' code cells (source hashes) are mostly the same: at least half of the smaller
    one's cells are in the other. An edited lecture keeps most of its cells; another notebook that happens
    to share a name shares an import or two."""
    if not a or not b:
        return False
    common = sum((Counter(a) & Counter(b)).values())
    return common * 2 >= min(len(a), len(b))


# ---- pairing cells across runs -------------------------------------------------------------------


CellT = TypeVar("CellT", bound="Cell")


CellMatch = Literal["hash", "moved", "edited", "similar", "only-a", "only-b"]  # as CellPair says


@dataclass
class CellPair(Generic[CellT]):
    """One row of a pairing: a cell of A, of B, or of both, and how they were matched.

    ``match`` is ``"hash"`` (same source, same place), ``"moved"`` (same source, elsewhere),
    ``"edited"`` (source changed in place), ``"similar"`` (source changed, matched by text),
    ``"only-a"`` or ``"only-b"``. The cells are the typed ``Cell``s given.
    """

    a: CellT | None
    b: CellT | None
    match: CellMatch
    similarity: float | None = None

    @property
    def source_changed(self) -> bool:
        return self.match in ("edited", "similar")

    @property
    def paired(self) -> bool:
        return self.a is not None and self.b is not None


def cell_keys(cells: Sequence[Cell], side: str = "") -> list[str]:
    """A key per cell: its source hash, with an occurrence number from the second time a source repeats,
    so a duplicated cell pairs with its own twin. A cell without a hash gets a key of its own, which
    never equals a key of another ``side``."""
    seen: Counter[str] = Counter()
    keys = []
    for position, cell in enumerate(cells):
        digest = cell.source_hash or f"no-hash@{side}{position}"
        seen[digest] += 1
        keys.append(f"{digest}#{seen[digest]}" if seen[digest] > 1 else digest)
    return keys


def _text(cell: Cell, sources: Mapping[str, str] | None) -> str:
    """The text two edited cells are compared by: the code that ran when known, else the first line."""
    if cell.source is not None:
        return cell.source
    if sources and cell.source_hash in sources:
        return sources[cell.source_hash]
    return cell.first_line


def _similarity(a: CellT, b: CellT, sources: Mapping[str, str] | None) -> float:
    return round(difflib.SequenceMatcher(a=_text(a, sources), b=_text(b, sources), autojunk=False).ratio(), 3)


def _pair_gap(block_a: list[CellT], block_b: list[CellT], sources: Mapping[str, str] | None) -> list[CellPair[CellT]]:
    """Cells between two equal stretches: edited in place when the counts agree, else by similarity."""
    if block_a and len(block_b) == len(block_a):
        return [CellPair(a, b, "edited", _similarity(a, b, sources)) for a, b in zip(block_a, block_b, strict=True)]
    pairs: list[CellPair[CellT]] = []
    j = 0
    for a in block_a:
        best, best_k = 0.0, None
        for k in range(j, len(block_b)):
            score = _similarity(a, block_b[k], sources)
            if score > best:
                best, best_k = score, k
        if best_k is not None and best >= SIMILARITY_THRESHOLD:
            pairs.extend(CellPair(None, b, "only-b") for b in block_b[j:best_k])
            pairs.append(CellPair(a, block_b[best_k], "similar", best))
            j = best_k + 1
        else:
            pairs.append(CellPair(a, None, "only-a"))
    pairs.extend(CellPair(None, b, "only-b") for b in block_b[j:])
    return pairs


def pair_cells(
    cells_a: Sequence[CellT], cells_b: Sequence[CellT], *, sources: Mapping[str, str] | None = None
) -> list[CellPair[CellT]]:
    """Pair the cells of two runs of a notebook (A, B), in notebook order.

    Equal sources pair by hash in order (a repeated source with its own repeat); a cell whose source
    is in both runs but at another place pairs as ``moved``; between equal stretches, cells edited in
    place pair by position, others by text similarity (a typed cell's own code; else ``sources``, which maps
    a source hash to its full text; else first lines); the rest are only in A or only in B.
    """
    keys_a, keys_b = cell_keys(cells_a, "a"), cell_keys(cells_b, "b")
    matcher = difflib.SequenceMatcher(a=keys_a, b=keys_b, autojunk=False)
    opcodes = matcher.get_opcodes()
    # A source in both runs that the in-order match left out was moved: pair it before anything else.
    unmatched_a = {keys_a[i]: i for op, a0, a1, _, _ in opcodes if op != "equal" for i in range(a0, a1)}
    moved_b = {
        j: unmatched_a[keys_b[j]]
        for op, _, _, b0, b1 in opcodes
        if op != "equal"
        for j in range(b0, b1)
        if keys_b[j] in unmatched_a and not keys_b[j].startswith("no-hash@")
    }
    moved_a = set(moved_b.values())
    pairs: list[CellPair[CellT]] = []
    for op, a0, a1, b0, b1 in opcodes:
        if op == "equal":
            pairs.extend(CellPair(cells_a[a0 + k], cells_b[b0 + k], "hash") for k in range(a1 - a0))
            continue
        rest_a = [cells_a[i] for i in range(a0, a1) if i not in moved_a]
        gap: list[CellT] = []
        for j in range(b0, b1):
            if j in moved_b:
                pairs.extend(_pair_gap(rest_a, gap, sources))
                rest_a, gap = [], []
                pairs.append(CellPair(cells_a[moved_b[j]], cells_b[j], "moved"))
            else:
                gap.append(cells_b[j])
        pairs.extend(_pair_gap(rest_a, gap, sources))
    return pairs
