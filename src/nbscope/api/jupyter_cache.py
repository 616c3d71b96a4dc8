"""``nbscope import-jupyter-cache``: jupyter-book's cached execution times stored as runs (kind jupyter-cache)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbscope.record.jupyter_cache import import_cache
from nbscope.record.run import RunRecord
from nbscope.record.store import Store


@dataclass(frozen=True)
class CacheImport:
    """The runs a cache import stored, and how many of its executions were stored already."""

    records: tuple[RunRecord, ...]
    skipped: int


def import_jupyter_cache(path: Path, store: Store, *, fingerprint: dict[str, Any] | None = None,
                         fingerprint_source: str | None = None) -> CacheImport:
    """One run per notebook execution in the cache of the book at ``path``, on the machine ``fingerprint``
    describes (:func:`nbscope.api.info.load_fingerprint`, read from ``fingerprint_source``; default: this one)."""
    records, skipped = import_cache(path, store, fingerprint=fingerprint, fingerprint_source=fingerprint_source)
    return CacheImport(tuple(records), skipped)
