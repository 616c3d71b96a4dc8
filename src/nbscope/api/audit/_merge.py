"""Audit files: exporting one (with its profile runs embedded) and merging shards into one audit.

An exported audit is a run record of kind ``audit`` with one extra top-level field, ``runs``: the
profile records its entries point to, keyed by their run id in the exporting store. Readers that do not
know the field ignore it; ``nbscope merge`` imports those runs into the local store, so ``show`` and
``compare`` work on a merged audit as on a local one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope._files import write_text
from nbscope.analyse import audit as _report
from nbscope.api._saving import save_run
from nbscope.collect import fingerprint as fp
from nbscope.record.run import RunRecord
from nbscope.schema.audit import Audit, AuditEntry, AuditSettings, Availability, Coverage, Discovery, MergedFile
from nbscope.schema.audit_file import AuditFile
from nbscope.schema.codec import decode, encode

if TYPE_CHECKING:
    from nbscope.record.store import Store

# Which entry wins when two files hold the same notebook on the same backend: a measured run beats a
# failed one, which beats "unavailable" (a CPU runner reports cuda unavailable; the GPU runner's file
# has the real run).
_PRIORITY = {"ok": 3, "partial": 3, "error": 2, "not-run": 1, "unavailable": 0}


def export_audit(record: RunRecord, path: str | Path, *, store: Store | None = None) -> Path:
    """Write an audit record to ``path``, with the profile runs it refers to when ``store`` has them."""
    document = record.to_dict()
    runs: dict[str, object] = {}
    if store is not None:
        for entry in decode(Audit, record.measurements).notebooks:
            run_id = entry.run_id
            if isinstance(run_id, int) and str(run_id) not in runs:
                try:
                    runs[str(run_id)] = store.get(run_id).to_dict()
                except NbscopeError:
                    pass  # pruned from the store: the entry's figures still stand
    document["runs"] = runs
    write_text(path, json.dumps(document, indent=1, default=str) + "\n")
    return Path(path)


def load_audit(path: str | Path) -> tuple[RunRecord, Mapping[int, Mapping[str, object]]]:
    """An audit file as a record, and its embedded runs by their id (``{}`` when none)."""
    from nbscope.record import run as record_module

    path = Path(path)
    record = record_module.load(path)  # validates the envelope with a one-line error
    if record.kind != "audit":
        raise NbscopeError(f"{path} is a {record.kind} run, not an audit")
    from nbscope._files import read_json

    exported = decode(AuditFile, read_json(path, what="run record"))
    if exported.runs is None:
        raise NbscopeError(f"{path}: 'runs' must be an object of run records")
    if exported.entries == "missing":
        raise NbscopeError(f"{path}: audit has no 'notebooks' list")
    if exported.entries == "incomplete":
        raise NbscopeError(f"{path}: an entry of 'notebooks' lacks path or backend")
    return record, exported.runs


def _import_run(store: Store, document: Mapping[str, object], source: str) -> int | None:
    """Save an embedded run in ``store`` (once: the same run merged twice keeps its first id)."""
    try:
        run = RunRecord.from_dict(document, source=source)
    except NbscopeError:
        return None
    for row in store.runs(target=run.target, digest=run.digest, kind=run.kind):
        if row["started_at"] == run.started_at:
            return int(row["id"])
    save_run(store, run)
    return run.run_id


def _add_new(items: list[str], new: Iterable[str]) -> None:
    items.extend(item for item in dict.fromkeys(new) if item not in items)


class _Merged:
    """What the files merged so far hold: each (notebook, backend)'s winning entry, in the order first seen."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.chosen: dict[tuple[str, str], tuple[tuple[int, int], AuditEntry]] = {}
        self.order: list[str] = []
        self.backends: list[str] = []
        self.availability: dict[str, Availability] = {}
        self.expected: list[str] = []
        self.inputs: list[MergedFile] = []
        self.embedded: dict[tuple[str, int | None], Mapping[str, object]] = {}

    def add(self, position: int, path: Path, record: RunRecord, runs: Mapping[int, Mapping[str, object]]) -> None:
        self.embedded.update({(str(path), old_id): document for old_id, document in runs.items()})
        audit = decode(Audit, record.measurements)
        store = self.store
        id_map: dict[int, int | None] = {}
        if store is not None:
            id_map = {old: _import_run(store, doc, f"{path} run {old}") for old, doc in runs.items()}
        asked = decode(AuditSettings, record.settings)
        _add_new(self.backends, [*asked.backends, *audit.backends, *(e.backend for e in audit.notebooks)])
        for backend, info in audit.backends.items():
            known = self.availability.get(backend)
            if known is None or not known.available:
                self.availability[backend] = info
        _add_new(self.expected, decode(Discovery, audit.discovery).notebooks)
        for entry in audit.notebooks:
            if entry.run_id is not None:
                entry = replace(
                    entry, source_run_id=entry.run_id, run_id=id_map.get(entry.run_id) if store is not None else None
                )
            entry = replace(entry, source_file=str(path))
            _add_new(self.order, [entry.path])
            key = (entry.path, entry.backend)
            rank = (_PRIORITY.get(str(entry.status), 0), position)  # ties: the file given later wins
            if key not in self.chosen or rank >= self.chosen[key][0]:
                self.chosen[key] = (rank, entry)
        self.inputs.append(
            MergedFile(
                file=str(path),
                target=record.target,
                started_at=record.started_at,
                status=record.status,
                digest=record.digest,
                machine=record.machine().summary,
                shard=asked.shard,
                wall_s=audit.totals.wall_s,
                runs_imported=sum(1 for v in id_map.values() if v),
            )
        )

    def load_run(self, entry: AuditEntry) -> RunRecord | None:
        document = self.embedded.get((str(entry.source_file), entry.source_run_id))
        try:
            source = f"{entry.source_file} run {entry.source_run_id}"
            return None if document is None else RunRecord.from_dict(document, source=source)
        except NbscopeError:
            return None


def merge(
    paths: Sequence[str | Path], *, store: Store | None = None, fingerprint: dict[str, object] | None = None
) -> RunRecord:
    """One audit from several audit files (CI shards, or a CPU runner's and a GPU runner's audits)."""
    if not paths:
        raise NbscopeError("give at least one audit file to merge")
    loaded = [(Path(p), *load_audit(p)) for p in paths]
    _refuse_twice(loaded)
    merged = _Merged(store)
    for position, (path, record, runs) in enumerate(loaded):
        merged.add(position, path, record, runs)
    order, backends, expected = merged.order, merged.backends, merged.expected
    entries = [merged.chosen[k, b][1] for k in order for b in backends if (k, b) in merged.chosen]
    # Diagnosed again: a GPU run from one file now has the CPU run of another file as evidence.
    entries = _report.diagnose_entries(entries, merged.load_run)
    covered = set(order)
    missing = [k for k in expected if k not in covered]
    unexpected = [k for k in order if expected and k not in expected]
    record = RunRecord(
        kind="audit",
        target=loaded[0][1].target,
        fingerprint=fingerprint or fp.collect(),
        settings={"merged": [str(p) for p in paths], "backends": backends},
    )
    coverage = Coverage(
        expected=len(expected) or len(order),
        covered=len(covered),
        missing=tuple(missing),
        unexpected=tuple(unexpected),
        shards=tuple(sorted({i.shard for i in merged.inputs if i.shard})),
    )
    discovery = {"source": "merge", "notebooks": expected or order, "skipped": []}
    record.measurements = encode(
        _report.measurements(
            entries,
            backends=backends,
            availability=merged.availability,
            discovery=discovery,
            wall_s=None,
            merged_from=merged.inputs,
            coverage=coverage,
        )
    )
    record.finish("partial" if missing or any(i.status != "ok" for i in merged.inputs) else "ok")
    save_run(store, record)
    return record


def _refuse_twice(loaded: Sequence[tuple[Path, RunRecord, Any]]) -> None:
    """A one-line NbscopeError when two files are one run, or the same shard of an audit on the same backends (a
    shard counted twice would hide the one missing)."""
    seen: dict[Any, Path] = {}
    for path, record, _ in loaded:
        asked = decode(AuditSettings, record.settings)
        keys: list[tuple[Any, ...]] = [("run", record.content_hash())]
        if asked.shard:
            keys.append(("shard", asked.shard, tuple(sorted(asked.backends))))
        for key in keys:
            if key in seen:
                what = f"shard {asked.shard} of the same audit" if key[0] == "shard" else "the same audit run"
                raise NbscopeError(f"{seen[key]} and {path} are {what}: give each shard once")
            seen[key] = path


def missing_notebooks(record: RunRecord) -> list[str]:
    """The notebooks of the book that a merged audit has no entry for (in none of the files)."""
    return list(decode(Audit, record.measurements).missing)
