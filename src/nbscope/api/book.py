"""The runs behind the book-level views (``nbscope cells``, ``nbscope lectures``): what one argument names.

An argument is

- a book (a folder, a ``_toc.yml`` or ``myst.yml``): the newest stored profile of each of its notebooks;
- an audit (stored, or a file written by ``nbscope audit -o`` / ``nbscope merge -o``): the profiles it refers
  to, from the file's embedded runs or the store;
- a label (``main-cpu``): the newest run of each notebook recorded with ``--label main-cpu``;
- any other run reference (an id, ``latest``, ``latest:NOTEBOOK``, a run JSON file): that run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope._files import read_json
from nbscope.analyse.book import CELL_KINDS, Lectures, RunSet, SlowestCells
from nbscope.record.run import LABEL_PATTERN, RunRecord
from nbscope.record.store import Store, resolve_run, run_id_of
from nbscope.schema.audit import Audit
from nbscope.schema.audit_file import AuditFile
from nbscope.schema.codec import decode

BOOK_FILES = ("_toc.yml", "_toc.yaml", "myst.yml", "myst.yaml")


def run_set(reference: str, store: Store) -> RunSet:
    """The profile runs ``reference`` names (see the module's docstring); a one-line error when none."""
    path = Path(reference)
    if path.is_dir() or (path.is_file() and path.name in BOOK_FILES):
        return _book(reference, store)
    if path.is_file() or run_id_of(reference) is not None or reference == "latest" or reference.startswith("latest:"):
        record = resolve_run(reference, store, kinds=(*CELL_KINDS, "audit"))
        if record.kind == "audit":
            return _audit(reference, record, store, path if path.is_file() else None)
        if record.kind not in CELL_KINDS:
            raise NbscopeError(f"{reference} is a {record.kind} run: give profile runs, an audit, a book or a label")
        name = f"run {record.run_id}" if record.run_id is not None and not path.is_file() else reference
        return RunSet(name, [record])
    label, _, notebook = reference.partition(":")
    if LABEL_PATTERN.fullmatch(label) and store.path.exists():
        records = store.newest_per_target(
            label=label, kind=list(CELL_KINDS), target=store.names_of(notebook) if notebook else None
        )
        if records:
            return RunSet(reference, records)
        audit = store.latest(label=label, kind="audit")
        if audit is not None:
            return _audit(reference, audit, store, None)
    return RunSet(reference, [resolve_run(reference, store, kinds=CELL_KINDS)])  # says what is missing


def _book(reference: str, store: Store) -> RunSet:
    from nbscope.api.audit import discover

    book = discover(reference)
    found = RunSet(reference)
    if not store.path.exists():
        raise store.missing()
    for notebook in book.notebooks:
        record = store.latest(target=store.names_of(str(notebook)), kind=list(CELL_KINDS))
        if record is None:
            found.missing.append(book.key(notebook))
        else:
            found.records.append(record)
    if not found.records:
        raise NbscopeError(f"none of the {len(book.notebooks)} notebooks of {reference} has a profile in {store.path}")
    return found


def _audit(reference: str, audit: RunRecord, store: Store, file: Path | None) -> RunSet:
    """The profiles an audit refers to: embedded in its file, else in the store."""
    embedded: Mapping[int, Mapping[str, object]] = {}
    if file is not None:
        embedded = decode(AuditFile, read_json(file, what="audit file")).runs or {}
    found = RunSet(reference)
    for entry in decode(Audit, audit.measurements).notebooks:
        run_id = entry.run_id
        name = f"{entry.path} ({entry.backend})"
        if not isinstance(run_id, int):
            found.missing.append(f"{name}: {entry.status}")
            continue
        document = embedded.get(run_id)
        record = None if document is None else RunRecord.from_dict(document, source=f"{file}: an embedded run")
        if record is None and store.path.exists():
            try:
                record = store.get(run_id)
            except NbscopeError:
                record = None
        if record is None or record.kind not in CELL_KINDS:
            found.missing.append(f"{name}: run {run_id} is not in {file or store.path}")
        else:
            found.records.append(record)
    if not found.records:
        raise NbscopeError(f"audit {reference} refers to no profile that can be read")
    return found


def cells(sources: list[str], store: Store, *, limit: int | None) -> SlowestCells:
    """``nbscope cells``: the slowest cells across the runs each source names (``limit`` None: every cell)."""
    from nbscope.analyse.book import slowest_cells

    return slowest_cells([run_set(source, store) for source in sources], limit=limit)


def lectures(a: str, b: str, store: Store) -> Lectures:
    """``nbscope lectures``: two sets of runs lecture by lecture."""
    from nbscope.analyse.book import by_lecture

    return by_lecture(run_set(a, store), run_set(b, store))
