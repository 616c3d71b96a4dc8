"""The kinds of run a record names, and those that are runs of a notebook cell by cell.

Apart from the run record (``record.run``) so that a reader of the store's columns alone (``publish`` of a book)
knows them without importing the record's model.
"""

from __future__ import annotations

KINDS = ("profile", "trace", "bench", "pathways", "loops", "audit", "jupyter-cache", "trial")
PROFILE_KINDS = ("profile", "trace")  # runs of a notebook, cell by cell
