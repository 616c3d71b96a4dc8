"""What nbscope reads of jupyter-book's execution caches (``record.jupyter_cache`` imports them), typed: each
decoded once where it is read, by ``schema.codec.decode``. What a cache entry lacks reads as None, never as a guess.

* jupyter-book 1: an ``nbcache`` row's ``data`` column of jupyter-cache's ``global.db`` (JSON);
* jupyter-book 2: an entry of ``_build/execute`` (a notebook), whose ``metadata.mystContext`` says when the
  page ran and for how long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class CacheData:
    """An ``nbcache`` row's ``data``: how long jupyter-cache saw the notebook execute."""

    execution_seconds: float | None


@dataclass(frozen=True, slots=True)
class MystContext:
    """A jupyter-book 2 cache entry's ``metadata.mystContext``: when the page ran (``timestamp``, UTC) and how
    long, from the kernel's connection to its last cell's reply (``duration_ms``; per page, never per cell)."""

    timestamp: str | None
    duration_ms: float | None

    @property
    def execution_seconds(self) -> float | None:
        return self.duration_ms / 1000.0 if self.duration_ms is not None else None


@dataclass(frozen=True, slots=True)
class EntryMetadata:
    myst_context: Annotated[MystContext | None, Read(key="mystContext")]  # None: not jupyter-book 2's entry


@dataclass(frozen=True, slots=True)
class Book2Entry:
    """A notebook in ``_build/execute``: one of jupyter-book 2's cache entries when its metadata has a context."""

    metadata: EntryMetadata
