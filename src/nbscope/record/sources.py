"""The code that ran: each cell's source as its run record carries it.

A record made since schema version 2 carries every code cell's whole source (``cells[].source``, with its
hash and line range), so every analysis reads the code that ran from the record itself, on any machine and
in any folder, and a notebook edited after its run cannot lend its new code to old figures.

A record made before (schema version 1) carries only each cell's hash and first line. For those, and only
those, the sources are read from a notebook the user names (:func:`naming`: ``--notebook``, ``sources=`` in
Python), else from the notebook file when it is present and its cells' hashes match; the note returned says
exactly what could not be had and why, so that the rules that need code say so.

This module is the one owner of a run's code: analyses call :func:`load_sources` on the record they are given,
and no analysis takes sources of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope._errors import NbscopeError
from nbscope.collect.notebook import source_hash

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord
    from nbscope.schema.model import NotebookRun

Sources = dict[str, str]  # cell source by its source hash


def _trusted(run: NotebookRun) -> Sources:
    return {key: source for key, source in run.sources.items() if source_hash(source) == key}


def notebook_sources(path: str | Path) -> Sources:
    """Every code cell's source in the notebook file at ``path``, by hash (a notebook the user names)."""
    from nbscope.collect import notebook as notebook_module  # only a named notebook pays for reading one

    return {c.source_hash: c.source for c in notebook_module.read(path).code_cells}


def naming(record: RunRecord, sources: Mapping[str, str] | str | Path | None) -> RunRecord:
    """The record with the code of a notebook the user named (sources by hash, or the notebook's path) for
    the cells it does not carry; the record itself when nothing is named. Only a source whose hash is its
    cell's is ever used (:func:`load_sources`)."""
    if sources is None or (isinstance(sources, Mapping) and not sources):
        return record
    named = notebook_sources(sources) if isinstance(sources, (str, Path)) else dict(sources)
    return record.with_named_sources({**(record.named_sources or {}), **named})


def load_sources(record: RunRecord, *, root: Path | None = None) -> tuple[Sources, str | None]:
    """Every code cell's source by hash, and a note saying which cells' code is unknown and why (None when
    none is missing).

    The record's own sources come first. Only for cells it does not carry (a record from before sources were
    recorded) is the notebook file read, and then only a cell whose hash equals the record's is used. A record
    may come from anywhere (an import, a CI artifact), so for that fallback the paths it names are only opened
    when they resolve inside ``root`` (default: the working directory); a notebook elsewhere is read only when
    the user names it (``--notebook``).
    """
    run = record.notebook_run()  # parsed once for the record's code, its cells and its notebook's path
    sources = _trusted(run)
    missing = {c.source_hash for c in run.cells if c.source_hash} - set(sources)
    named = {
        key: source
        for key, source in (record.named_sources or {}).items()
        if key in missing and source_hash(source) == key
    }
    sources.update(named)
    missing -= set(named)
    if not missing:
        return sources, None
    if record.named_sources:  # the user named the notebook: it is the one place to look
        return sources, (
            f"{len(missing)} cell(s) of the run are not in the notebook named for it (edited since?): "
            "their code is unknown"
        )
    from_file, note = _from_notebook_file(record, run.notebook.path, missing, root)
    sources.update(from_file)
    return sources, note


def sources_of(*records: RunRecord) -> Sources:
    """The cell sources of several runs, merged by hash."""
    merged: Sources = {}
    for record in records:
        merged.update(load_sources(record)[0])
    return merged


def _from_notebook_file(
    record: RunRecord, notebook_path: str | None, wanted: set[str], root: Path | None
) -> tuple[Sources, str | None]:
    """Sources of the cells in ``wanted``, read from the run's notebook file when it is there and unchanged."""

    version = record.schema_version
    why = (
        f"the record (schema version {version}) does not carry its cells' code"
        if version == 1
        else f"{len(wanted)} cell(s) of the record carry no code"
    )
    candidates = []
    for value in (notebook_path, record.target):
        if isinstance(value, str) and value and value not in candidates:
            candidates.append(value)
    base = (root or Path.cwd()).resolve()
    outside = []
    for value in candidates:
        try:
            path = (base / value).resolve()  # an absolute path stays itself
        except (OSError, ValueError):
            continue
        if not path.is_relative_to(base):
            outside.append(value)
            continue
        if not path.is_file():
            continue
        try:
            found = {key: source for key, source in notebook_sources(path).items() if key in wanted}
        except NbscopeError:
            continue
        changed = len(wanted - set(found))
        if not changed:
            return found, None  # the file holds exactly the code that ran
        return found, f"{why}, and {changed} cell(s) of {value} changed since the run: their code is unknown"
    if outside:
        return {}, (
            f"{why}, and its notebook {outside[0]} is outside the working directory, so it is not read without "
            "being named: pass it with --notebook (sources= in Python)"
        )
    shown = " or ".join(candidates) or "no path recorded"
    return {}, f"{why}, and its notebook is not here ({shown}): pass it with --notebook"
