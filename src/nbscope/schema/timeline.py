"""The typed view of a cell's timeline summary (``profile --timeline``): what ``collect.timeline.summarise_cell``
writes into a cell's ``timeline``, read once into frozen dataclasses by ``schema.codec.decode``.

The cell model reads it as this view once, at load (``Cell.timeline_summary``), and keeps it as recorded too
(``Cell.timeline``: its op tables and newer figures stay in the document, and a finding's evidence quotes it). A
figure the summary lacks, or holds as something other than a finite number, reads as None (unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from nbscope.schema.codec import Measured, given


@dataclass(frozen=True, slots=True)
class OpCount:
    """A counted kind of device event (host↔device copies, waits for the device)."""

    count: Measured


@dataclass(frozen=True, slots=True)
class TopOp:
    """One of the cell's longest device ops."""

    name: str | None
    count: Measured
    longest_s: Measured


@dataclass(frozen=True, slots=True)
class TimelineSummary:
    """A cell's timeline summary: how its time split on the device, and what bound it."""

    classification: str | None  # launch-bound, compute-bound, ...; None: not traced (``skipped`` or ``error`` says why)
    skipped: str | None
    error: str | None
    wall_s: Measured
    device_busy_s: Measured
    device_busy_share: Measured
    ops: Measured
    mean_op_s: Measured
    dispatch_s: Measured
    dispatches: Measured
    transfers: OpCount | None
    syncs: OpCount | None
    top_ops: tuple[TopOp, ...]

    present = staticmethod(given)  # an empty summary is none
