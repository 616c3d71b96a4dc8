"""The lines of a live file (``record.live`` writes and reads them), typed: each line decoded once where the file is
read, by ``schema.codec.decode``. A line of a torn or crafted file reads what it lacks as None, never as a guess.

A cell line and the probe's kernel line go into the run's record as they were written (``schema.model`` is their
typed reader there); only what reading the file needs of them is typed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema import _fields
from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class LiveLine:
    """What any line says it is: ``type`` (run, execution, kernel; none for a cell line), and what each kind
    carries that reading the file needs."""

    type: str | None
    format: str | None  # a run line's format name
    cache_state: str | None  # an execution line's JAX cache state
    status: str | None  # a cell line's status (None: a cell line of no known status)


@dataclass(frozen=True, slots=True)
class LiveHeader:
    """A live file's first line (``{"type": "run"}``): what ran, where, with which settings, and who writes it."""

    version: Annotated[int | None, Read(_fields.integer)]
    uuid: Annotated[str | None, Read(otherwise=None)]  # the run's identity (None: none, or empty)
    kind: str | None
    target: str | None
    started_at: str | None
    command: tuple[Any, ...]
    settings: Mapping[str, Any]
    fingerprint: Mapping[str, Any]
    notebook: Mapping[str, Any]  # the notebook as ``Notebook.describe()`` described it
    code_cells: tuple[Mapping[str, Any], ...]  # each code cell as ``CodeCell.describe()`` described it
    store: str | None  # the store the run goes to (resolved)
    pid: Annotated[int | None, Read(_fields.integer)]  # the process that writes the file
    process_started: float | None  # when that process started (Unix time)
