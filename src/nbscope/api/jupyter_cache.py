"""``nbscope import-jupyter-cache``: jupyter-book's cached execution times stored as runs (kind jupyter-cache)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nbscope.record.jupyter_cache import import_cache
from nbscope.record.run import RunRecord
from nbscope.record.store import Store


@dataclass(frozen=True)
class CacheImport:
    """The runs a cache import stored, and how many of its executions were stored already."""

    records: tuple[RunRecord, ...]
    skipped: int

    store_path: Path | None = None  # where they were stored


def import_jupyter_cache(
    path: Path, store: Store, *, fingerprint: dict[str, object] | None = None, fingerprint_source: str | None = None
) -> CacheImport:
    """One run per notebook execution in the cache of the book at ``path``, on the machine ``fingerprint``
    describes (:func:`nbscope.api.info.load_fingerprint`, read from ``fingerprint_source``; default: this one)."""
    records, skipped = import_cache(path, store, fingerprint=fingerprint, fingerprint_source=fingerprint_source)
    return CacheImport(tuple(records), skipped, store.path)


def import_jupyter_cache_command(
    path: Path, db: Path | None, *, fingerprint_file: Path | None = None, on_skip: Callable[[str], None] | None = None
) -> CacheImport:
    """``nbscope import-jupyter-cache``: the cache at ``path`` imported into the store at ``db``, on the machine
    the fingerprint file (``nbscope info --json`` output, or a run record) describes, else this one; a bad
    fingerprint file is refused before the store is opened (or made)."""
    from nbscope.api.info import load_fingerprint
    from nbscope.api.runs import open_store

    given = load_fingerprint(fingerprint_file) if fingerprint_file is not None else None
    store = open_store(db, on_skip=on_skip)
    return import_jupyter_cache(
        path, store, fingerprint=given, fingerprint_source=str(fingerprint_file) if fingerprint_file else None
    )
