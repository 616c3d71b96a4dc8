"""``nbscope audit`` and ``nbscope merge`` as one call each: the audit run (or the files merged), stored, written
with its runs when asked, and returned with its typed measurements for the views."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope._files import check_target, note_input
from nbscope.api.audit._discover import discover
from nbscope.api.audit._merge import export_audit, merge
from nbscope.api.audit._run import AuditOptions, EventCallback, audit
from nbscope.record.run import RunRecord
from nbscope.schema.audit import Audit
from nbscope.schema.codec import decode

if TYPE_CHECKING:
    from nbscope.record.store import Store


@dataclass(frozen=True)
class AuditOutcome:
    """What ``nbscope audit`` or ``nbscope merge`` made: the audit record, its measurements typed (decoded once,
    for every view), the store that holds it and the file it was written to with its runs (``-o``)."""

    record: RunRecord
    audit: Audit
    store: Store
    output: Path | None

    @property
    def missing(self) -> tuple[str, ...]:
        """A merge: the book's notebooks in none of the files."""
        return self.audit.missing


def _check_outputs(output: Path | None, html: Path | None) -> None:
    """``-o`` and ``--html`` refused early in one line: a link, a device, the store, a file the command reads."""
    for path, option in ((output, "-o"), (html, "--html")):
        if path is not None:
            check_target(path, option=option)


def _outcome(record: RunRecord, store: Store, output: Path | None) -> AuditOutcome:
    if output is not None:
        export_audit(record, output, store=store)
    return AuditOutcome(record=record, audit=decode(Audit, record.measurements), store=store, output=output)


def run_audit(
    targets: Sequence[str | Path],
    options: AuditOptions,
    store: Store,
    *,
    output: Path | None = None,
    html: Path | None = None,
    label: str | None = None,
    on_event: EventCallback | None = None,
) -> AuditOutcome:
    """``nbscope audit``: the options, the book and the outputs (``-o``, ``--html``) checked before anything runs
    (one-line errors), every notebook profiled on each backend under ``label`` (its workers, here or on other
    machines, record their runs with it), the audit stored, and written to ``output`` with its runs when given."""
    if label is not None:
        options = replace(options, label=label)
    options.validate()
    discover(targets)  # notes the notebooks as read: an output naming one is refused before the audit runs
    _check_outputs(output, html)
    record = audit(targets, options, store=store, on_event=on_event)
    return _outcome(record, store, output)


def run_merge(
    files: Sequence[Path], store: Store, *, output: Path | None = None, html: Path | None = None
) -> AuditOutcome:
    """``nbscope merge``: one audit from audit files, their runs imported into ``store``; written to ``output``
    with its runs when given. The outputs are checked first: never one of the files merged."""
    for path in files:
        note_input(path, "a run record it reads")
    _check_outputs(output, html)
    return _outcome(merge(files, store=store), store, output)
