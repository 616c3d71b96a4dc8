"""The cell model: how a cell's figures derive, how repeats combine, notebook totals, and cell pairing.

Every command that reads cells goes through here, so ``wall = compile + run + overhead`` means the
same thing everywhere and two runs pair the same way in ``compare``, ``gate``, ``pathways``,
``diagnose`` and the report.
"""

from __future__ import annotations

import difflib
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from nbscope._units import number  # re-exported: the cell model's callers read figures with it
from nbscope.record._fields import without_collection
from nbscope.record.model import RAN_STATUSES

if TYPE_CHECKING:
    from nbscope.record.model import Cell

# Cells whose sources changed pair up when their texts are at least this similar.
SIMILARITY_THRESHOLD = 0.6
# Statuses of a cell that ran to its end (an expected error is the notebook's own intent).
FINISHED = ("ok", "expected-error")
FAILED = ("error", "timeout", "kernel-died")




def _field(cell: Cell | Mapping[str, Any], name: str) -> Any:
    return cell.get(name) if isinstance(cell, Mapping) else getattr(cell, name, None)


# ---- one cell ------------------------------------------------------------------------------------


def derive(cell: dict[str, Any]) -> dict[str, Any]:
    """compile_s, run_s, overhead_s and compile_share from a cell's wall, code time and compile events.

    ``wall`` is the kernel's whole request (busy → idle), ``code`` the time inside the cell's code, and
    ``collection`` what nbscope's own collection took after the code (``--forecast``; 0 when not recorded):
    ``wall = compile + run + overhead + collection`` with ``run = code − compile`` and
    ``overhead = wall − code − collection``.
    """
    jax, numba = cell.get("jax") or {}, cell.get("numba") or {}
    wall = number(cell.get("wall_s"))
    if wall is None:
        return cell
    compile_s = sum(number(jax.get(key)) or 0.0 for key in ("trace_s", "lower_s", "backend_s"))
    compile_s += number(numba.get("compile_s")) or 0.0
    cell.update(_split(wall, number(cell.get("code_s")), compile_s, number(cell.get("collection_s")) or 0.0))
    return cell


def _split(wall: float, code: float | None, compile_s: float, collection: float = 0.0) -> dict[str, float]:
    """``wall = compile + run + overhead + collection``: the one place the parts and the compile share are
    derived. The compile share is of the notebook's own time."""
    code = wall if code is None else code
    own = without_collection(wall, collection) or 0.0
    return {
        "compile_s": compile_s,
        "run_s": max(0.0, code - compile_s),
        "overhead_s": max(0.0, own - code),
        "compile_share": min(1.0, compile_s / own) if own > 0 else 0.0,
    }


def combine_repeats(executions: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One record per cell with medians over repeats; ``samples`` keeps each repeat's figures.

    The medians are taken per quantity (wall, code, compile), then derived as for a single run, so
    ``run_s`` is ``median(code) − median(compile)`` with or without repeats.
    """
    combined = []
    for cells in zip(*executions, strict=True):
        base = dict(cells[-1])  # the last repeat's details (compiles, status) stand for the cell
        walls = [w for w in (number(c.get("wall_s")) for c in cells) if w is not None]
        codes = [w for w in (number(c.get("code_s")) for c in cells) if w is not None]
        compiles = [w for w in (number(c.get("compile_s")) for c in cells) if w is not None]
        collections = [w for w in (number(c.get("collection_s")) for c in cells) if w is not None]
        base["samples"] = {
            "wall_s": walls, "code_s": codes, "compile_s": compiles, "status": [c.get("status") for c in cells]
        }
        waits = [number((c.get("sched") or {}).get("wait_s")) for c in cells]
        if walls and len(waits) == len(walls) and None not in waits:
            base["samples"]["wait_s"] = waits  # each repeat's wait for a CPU, beside its wall
        if walls:
            median = statistics.median(walls)
            base["wall_s"] = median
            base["code_s"] = statistics.median(codes) if codes else None
            base["spread"] = statistics.median(abs(w - median) for w in walls) / median if median > 0 else 0.0
            if collections:
                base["collection_s"] = statistics.median(collections)
            base.update(_split(median, base["code_s"], statistics.median(compiles) if compiles else 0.0,
                               base.get("collection_s") or 0.0))
        worst = next((c for c in cells if c.get("status") not in (*FINISHED, "skipped")), None)
        if worst is not None:
            base["status"], base["error"] = worst.get("status"), worst.get("error")
        combined.append(base)
    return combined


def label(cell: Mapping[str, Any]) -> str:
    """``cell 3 (line 41)``: the cell's number as a reader counts code cells, and its line when known."""
    index = cell.get("index")
    name = f"cell {index + 1}" if isinstance(index, int) else "cell ?"
    return f"{name} (line {cell['line']})" if cell.get("line") else name


# What happened to a cell that did not finish cleanly, as a sentence says it ("the cell died").
FAILURE_WORDS = {"error": "raised", "expected-error": "raised (expected)", "timeout": "timed out",
                 "kernel-died": "died", "interrupted": "was interrupted"}


def failure_text(cell: Cell | Mapping[str, Any]) -> str | None:
    """``died (DeadKernelError: the kernel died …)``: what stopped a cell, with its error (at most 160
    characters of it) or the signal; None for a cell that finished, or never started (``not-run``)."""
    status = _field(cell, "status")
    if status not in FAILURE_WORDS:
        return None
    error = _field(cell, "error")
    if isinstance(error, Mapping):
        parts = (error.get("name"), error.get("message"))
    else:
        parts = (error.name, error.message) if error is not None else ()
    detail = ": ".join(str(x) for x in parts if x)
    if status == "interrupted" and not detail and _field(cell, "interrupted_by"):
        detail = f"by {_field(cell, 'interrupted_by')}"
    return FAILURE_WORDS[str(status)] + (f" ({detail[:160]})" if detail else "")


# ---- a notebook's cells --------------------------------------------------------------------------


def totals(cells: Sequence[Mapping[str, Any]], runner: Mapping[str, Any], cache_state: str) -> dict[str, Any]:
    """Per-notebook figures from cell records; each cell's ``jax.cache_state`` is set to the notebook's.

    The probe hears JAX say once per process whether its compile cache feature is enabled ("on" by default,
    with or without a cache folder); what a cell's compiles met is the run's cache state (``off``,
    ``cold``, ``warm``). JAX's word is kept as ``jax.cache_feature``.
    """

    def total(key: str, sub: str | None = None) -> float:
        values = [((c.get(sub) or {}).get(key) if sub else c.get(key)) for c in cells]
        return sum(v for v in (number(v) for v in values) if v is not None)

    peaks = [(c.get("rss") or {}).get("peak_bytes") for c in cells]
    hits = int(total("cache_hits", "jax"))
    if cache_state == "cold" and hits:
        cache_state = "warm"  # a cold cache that still hit: the notebook compiled the same thing twice
    for cell in cells:
        jax = cell.get("jax")
        if isinstance(jax, dict) and jax.get("cache_state") != cache_state:
            if jax.get("cache_state") is not None:
                jax["cache_feature"] = jax["cache_state"]
            jax["cache_state"] = cache_state
    return {
        "cells": len(cells),
        "cells_run": sum(1 for c in cells if c.get("status") in RAN_STATUSES),
        "cells_ok": sum(1 for c in cells if c.get("status") in FINISHED),
        "cells_failed": sum(1 for c in cells if c.get("status") in FAILED),
        "wall_s": total("wall_s"),
        "compile_s": total("compile_s"),
        "run_s": total("run_s"),
        "compiles": int(total("compiles", "jax")),
        "user_compiles": int(total("user_compiles", "jax")),
        "eager_compiles": int(total("eager_compiles", "jax")),
        "library_compiles": int(total("library_compiles", "jax")),
        "numba_compiles": int(total("compiles", "numba")),
        "numba_compile_s": total("compile_s", "numba"),
        "cache_state": cache_state,
        "cache_hits": hits,
        "cache_misses": int(total("cache_misses", "jax")),
        "cache_retrieval_s": total("cache_retrieval_s", "jax"),
        "kernel_start_s": runner.get("kernel_start_s"),
        "execute_s": runner.get("execute_s"),
        "peak_rss_bytes": max((p for p in peaks if isinstance(p, int) and not isinstance(p, bool)), default=None),
    }


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


def target_name(path: str | Path, base: Path | None = None) -> str:
    """A notebook's name in the store: its path relative to its :func:`project_root`, with ``/``.

    A relative ``path`` is taken from ``base`` (default: the working directory). A notebook in no project
    is named relative to the working directory's project root when it lies there, else by its absolute
    path. Names given before project roots were relative to the working directory, or absolute:
    :func:`target_aliases` finds them too (:meth:`nbscope.record.store.Store.names_of` keeps only those
    whose runs measured this notebook).
    """
    given = Path(path)
    here = base or Path.cwd()
    resolved = (given if given.is_absolute() else here / given).resolve()
    # A notebook in no git tree or book is named from the working directory's project root, where the
    # store is, or else by its absolute path: named from its own folder, ``a/intro.md`` and ``b/intro.md``
    # would be one notebook in the store.
    root = _marked_root(resolved) or project_root(here)
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return resolved.as_posix()


def target_aliases(target: str, base: Path | None = None) -> list[str]:
    """Every name a stored run of ``target`` may carry, the current name first.

    ``target`` is a stored name (``lectures/jax_intro.md``) or a path to the notebook, absolute or relative
    to ``base`` (default: the working directory). When it names a file, the names runs stored before the
    project-root naming may carry are added: the absolute path and every trailing part of it
    (``jax_intro.md``, ``lectures/jax_intro.md``, ...), since those runs were named relative to whatever
    folder nbscope ran in. A name that is not a file (a benchmark suite, a run from another machine) is
    matched as written.
    """
    return aliases_for(target, notebook_file(target, base), base)


def aliases_for(target: str, file: Path | None, base: Path | None = None) -> list[str]:
    """:func:`target_aliases` of a ``target`` whose file (:func:`notebook_file`) is known already."""
    names = [target]
    if file is not None:
        names.insert(0, target_name(file, base))
        names.append(file.as_posix())
        parts = file.parts
        names.extend(Path(*parts[i:]).as_posix() for i in range(len(parts) - 1, 0, -1))
    return list(dict.fromkeys(names))


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


def same_notebook(a: Any, b: Any) -> bool:
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
    if not shorter or longer[len(longer) - len(shorter):] != shorter:
        return False
    return shares_cells(cell_hashes(a), cell_hashes(b))


def cell_hashes(record: Any) -> list[str]:
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


CellT = TypeVar("CellT", "Cell", Mapping[str, Any])


@dataclass
class CellPair(Generic[CellT]):
    """One row of a pairing: a cell of A, of B, or of both, and how they were matched.

    ``match`` is ``"hash"`` (same source, same place), ``"moved"`` (same source, elsewhere),
    ``"edited"`` (source changed in place), ``"similar"`` (source changed, matched by text),
    ``"only-a"`` or ``"only-b"``. The cells are those given: typed ``Cell``s, or cell dicts of a
    document or a result that pairs like one (the forecast's cells).
    """

    a: CellT | None
    b: CellT | None
    match: str
    similarity: float | None = None

    @property
    def source_changed(self) -> bool:
        return self.match in ("edited", "similar")

    @property
    def paired(self) -> bool:
        return self.a is not None and self.b is not None


def cell_keys(cells: Sequence[Cell | Mapping[str, Any]], side: str = "") -> list[str]:
    """A key per cell: its source hash, with an occurrence number from the second time a source repeats,
    so a duplicated cell pairs with its own twin. A cell without a hash gets a key of its own, which
    never equals a key of another ``side``."""
    seen: dict[str, int] = {}
    keys = []
    for position, cell in enumerate(cells):
        digest = str(_field(cell, "source_hash") or f"no-hash@{side}{position}")
        seen[digest] = seen.get(digest, 0) + 1
        keys.append(f"{digest}#{seen[digest]}" if seen[digest] > 1 else digest)
    return keys


def _text(cell: Cell | Mapping[str, Any], sources: Mapping[str, str] | None) -> str:
    """The text two edited cells are compared by: the code that ran when known, else the first line."""
    own = _field(cell, "source")
    if isinstance(own, str):
        return own
    if sources and _field(cell, "source_hash") in sources:
        return sources[_field(cell, "source_hash")]
    return str(_field(cell, "first_line") or "")


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
    cells_a: Sequence[CellT],
    cells_b: Sequence[CellT],
    *,
    sources: Mapping[str, str] | None = None,
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
