"""The parts of a run document the store indexes (``record.store``'s figure and hash columns): its totals' wall,
compile and run seconds and cache state, its cells' source hashes, the hashes of the programs it ran and its
package versions, as frozen dataclasses read by ``schema.codec.decode``.

The store reads them from a loaded record and from each stored document when it migrates (a document of any
earlier version, read as stored), so every field reads as None or empty when the document lacks it or holds
something else: a corrupt part leaves its column empty, never fails the migration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbscope.schema.codec import Name


@dataclass(frozen=True, slots=True)
class IndexedTotals:
    wall_s: float | None
    compile_s: float | None
    run_s: float | None
    cache_state: str | None


@dataclass(frozen=True, slots=True)
class CompiledProgram:
    """A program a cell compiled (``cells[].programs_hash``: ``{name, hash}``)."""

    hash: str | None


@dataclass(frozen=True, slots=True)
class IndexedCell:
    source_hash: Name  # as written (None: the cell has none)
    programs_hash: tuple[CompiledProgram, ...]


@dataclass(frozen=True, slots=True)
class TabledProgram:
    """A program of the run's programs table (``measurements.programs.programs``)."""

    program_hash: str | None


@dataclass(frozen=True, slots=True)
class ProgramTable:
    # None: no table; an entry that is not an object is kept as None (the table then names no program's hash)
    programs: Mapping[str, TabledProgram | None] | None


@dataclass(frozen=True, slots=True)
class IndexedMeasurements:
    totals: IndexedTotals
    cells: tuple[IndexedCell, ...]
    programs: ProgramTable

    @property
    def program_hashes(self) -> tuple[str, ...] | None:
        """The distinct hashes of the compiled programs the run executed, sorted; None when it recorded none.
        Read from its cells' ``programs_hash`` (every run of a probe that hashes programs), else from the
        programs table, which counts only when every program in it has one."""
        hashes = [entry.hash for cell in self.cells for entry in cell.programs_hash]
        if not hashes:
            if self.programs.programs is None:
                return None
            hashes = [entry.program_hash if entry is not None else None for entry in self.programs.programs.values()]
        if not hashes or not all(hashes):
            return None
        return tuple(sorted({str(h) for h in hashes}))


@dataclass(frozen=True, slots=True)
class IndexedFingerprint:
    versions: Mapping[str, Any] | None  # as recorded: ``jax_plugins`` is an object of versions


@dataclass(frozen=True, slots=True)
class IndexedRun:
    measurements: IndexedMeasurements
    fingerprint: IndexedFingerprint


@dataclass(frozen=True, slots=True)
class LabelledRun:
    """A stored document's label, which version 3 of the store copied into its ``label`` column."""

    label: str | None  # None: unlabelled, or a label that is not a string
