"""What changed between two runs of a notebook, and why a run failed: the causes a change point, a regression
or a failure is attributed to.

``attribute(before, after)`` compares two stored runs and names each difference that can move a figure:

* ``code``: the notebook's code (cells whose source hash is new, cells gone);
* ``packages``: package versions from the fingerprint (jax plugins included). When both runs recorded a hash of
  each compiled program and the hashes agree, the change says ``program unchanged``: the same compiled program
  ran faster or slower, so the cause is the backend (``nbscope bisect`` finds the release);
* ``machine``: the CPU or GPU the run ran on, or its JAX backend (a CPU runner against a GPU runner);
* ``cache``: the persistent compile cache's state at the start (cold against warm);
* ``settings``: how the run was asked to measure (backend, cache mode, timeline, repeat, ``--env`` by hash,
  ``--timeout``, program data recorded or not, the pathway).

``classify_failure(record)`` names why a run did not end ok, from its cells' statuses and the runner's notes:
``runner-stopped`` (a SIGTERM or SIGHUP to nbscope: a spot reclamation, a cancelled job), ``out-of-memory`` (the
kernel died with its memory near the machine's), ``kernel-killed`` (the kernel died otherwise), ``timeout``
and ``cell-error``. An analysis only: nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from nbscope import _units
from nbscope.analyse.history import short_hashes
from nbscope.record.run import RunRecord, backend_of, describe_settings, measurement_settings
from nbscope.schema.codec import Encoded
from nbscope.schema.model import Cell, NotebookRun
from nbscope.schema.run_index import IndexedMeasurements

# Where Linux's OOM kill counts could not be read (``runner.oom_kill`` absent): a kernel that died with its peak
# memory at or above this share of the machine's was most likely killed by the out-of-memory killer.
OOM_SHARE = 0.85
# The signals with which a runner stops nbscope itself (a CI cancel, a spot reclamation), not the user's Ctrl-C.
RUNNER_SIGNALS = ("SIGTERM", "SIGHUP")
FailureKind = Literal["runner-stopped", "out-of-memory", "kernel-killed", "timeout", "cell-error", "interrupted"]


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two runs that can move their figures."""

    kind: str  # code, packages, machine, cache or settings
    text: str  # one line, the two sides' values
    details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a run did not end ok."""

    kind: FailureKind
    text: str
    cell: int | None = None  # the code cell (0-based) where it happened


@dataclass(frozen=True, slots=True)
class Attribution(Encoded):
    """What differs between ``before`` and ``after`` (run ids), and why ``after`` failed if it did."""

    before_id: int | None
    after_id: int | None
    changes: tuple[Change, ...]
    program: str  # unchanged, changed, or not recorded (a hash of each compiled program on both sides)
    failure: Failure | None
    document_keys: ClassVar = ("before_id", "after_id", "text", "program", "changes", "failure")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(change.kind for change in self.changes)

    @property
    def text(self) -> str:
        """One line: the failure first, then each change; ``nothing recorded changed`` when none."""
        parts = [f"failed: {self.failure.text}"] if self.failure else []
        parts += [change.text for change in self.changes]
        return "; ".join(parts) or "nothing recorded changed (code, packages, machine, cache and settings agree)"


def program_hashes(record: RunRecord) -> tuple[str, ...] | None:
    """The distinct hashes of the compiled programs a run executed, sorted; None when the run recorded none
    (``schema.run_index``: where a run records them)."""
    return record.measured(IndexedMeasurements).program_hashes


def _code_change(before: Sequence[Cell], after: Sequence[Cell]) -> Change | None:
    old = {cell.source_hash for cell in before}
    new = {cell.source_hash for cell in after}
    changed = [cell for cell in after if cell.source_hash not in old]
    gone = [cell for cell in before if cell.source_hash not in new]
    if not changed and not gone:
        return None
    # A cell whose place held other code before was edited; the rest were added or removed.
    gone_places = {cell.index for cell in gone}
    edited = [cell for cell in changed if cell.index in gone_places]
    added = [cell for cell in changed if cell.index not in gone_places]
    removed = len(gone) - len(edited)

    def named(cells: list[Cell], verb: str) -> str:
        shown = ", ".join(cell.label for cell in cells[:4]) + (" …" if len(cells) > 4 else "")
        return f"{_units.count(len(cells), 'cell')} {verb} ({shown})"

    parts = [named(cells, verb) for cells, verb in ((edited, "edited"), (added, "added")) if cells]
    if removed > 0:
        parts.append(f"{_units.count(removed, 'cell')} removed")
    return Change(
        "code", "code: " + ", ".join(parts), tuple(f"{cell.label}: {cell.first_line}" for cell in changed[:20])
    )


def _versions(record: RunRecord) -> dict[str, str]:
    machine = record.machine()
    return {**machine.versions, **{f"{name} (jax plugin)": v for name, v in machine.jax_plugins.items()}}


def _package_change(before: RunRecord, after: RunRecord, program: str) -> Change | None:
    old, new = _versions(before), _versions(after)
    moved = [
        f"{name} {was} → {now}"
        for name in sorted(set(old) | set(new))
        if (was := old.get(name, "absent")) != (now := new.get(name, "absent"))
    ]
    if not moved:
        return None
    text = "packages: " + ", ".join(moved[:4]) + (f" and {len(moved) - 4} more" if len(moved) > 4 else "")
    if program == "unchanged":
        text += (
            " (program unchanged: the compiled programs are identical, so the backend changed; try `nbscope bisect`)"
        )
    return Change("packages", text, tuple(moved))


def _runner(record: RunRecord) -> str:
    machine = record.machine()
    return f"{backend_of(record)['platform'] or '?'} on {machine.summary}"


def _machine_change(before: RunRecord, after: RunRecord) -> Change | None:
    old, new = _runner(before), _runner(after)
    return None if old == new else Change("machine", f"machine: {old} → {new}")


def _cache_change(before: NotebookRun, after: NotebookRun) -> Change | None:
    # The persistent compile cache at the start of each run (off, cold, warm), as its totals recorded it.
    old, new = before.totals.cache_state, after.totals.cache_state
    if old == new or new is None:
        return None
    word = {"cold": "a cold cache: every program compiled again", "warm": "a warm cache: programs read from it"}
    return Change("cache", f"cache: {old or 'unknown'} → {new} ({word.get(new, new)})")


def _settings_text(record: RunRecord) -> str:
    settings = record.run_settings()
    text = describe_settings(measurement_settings(record.settings))
    if settings.env:
        text += " · " + " ".join(
            f"--env {name} #{digest}" for name, digest in sorted(short_hashes(settings.env).items())
        )
    if settings.timeout is not None:
        text += f" · --timeout {settings.timeout:g}"
    if settings.programs or settings.forecast:  # the probe records each compiled program: it costs time
        text += " · --programs"
    if settings.pathway not in (None, "kernel"):
        text += f" · --pathway {settings.pathway}"
    return text


def _settings_change(before: RunRecord, after: RunRecord) -> Change | None:
    def without_cache(record: RunRecord) -> RunRecord:
        # The cache mode is the cache change's to name; here only the other settings.
        return RunRecord(
            kind=record.kind,
            target=record.target,
            fingerprint=record.fingerprint,
            settings={k: v for k, v in record.settings.items() if k != "jax_cache"},
            command=[],
        )

    old, new = _settings_text(without_cache(before)), _settings_text(without_cache(after))
    return None if old == new else Change("settings", f"settings: {old} → {new}")


def _peak_memory(cells: Sequence[Cell]) -> float | None:
    peaks = [_units.number(cell.rss.peak_bytes) for cell in cells]
    return max((p for p in peaks if p is not None), default=None)


def classify_failure(record: RunRecord, run: NotebookRun | None = None) -> Failure | None:
    """Why the run did not end ok; None for a run whose cells all ended ok (or as expected). ``run``: the record's
    cells, when the caller has them already."""
    run = run if run is not None else record.notebook_run()
    cells = run.cells
    stopped = next((c for c in cells if c.status == "interrupted"), None)
    signal = (stopped.interrupted_by if stopped else None) or run.runner.interrupted
    if signal in RUNNER_SIGNALS:
        where = f" in {stopped.label}" if stopped else ""
        return Failure(
            "runner-stopped",
            f"runner stopped: nbscope got {signal}{where} (the build was stopped, not the notebook's fault)",
            stopped.index if stopped else None,
        )
    died = next((c for c in cells if c.status == "kernel-died"), None)
    if died is not None:
        killed = run.runner.oom_kill
        if killed is not None:
            under = f", under a memory limit of {_units.size(killed.limit_bytes)}" if killed.limit_bytes else ""
            where = "the machine's" if killed.where == "the machine" else f"memory cgroup {killed.where}'s"
            return Failure(
                "out-of-memory",
                f"kernel killed in {died.label}: out of memory ({where} OOM killer ended it{under})",
                died.index,
            )
        peak, total = _peak_memory(cells), record.machine().memory.total_bytes
        if peak is not None and total and peak >= OOM_SHARE * total:
            return Failure(
                "out-of-memory",
                f"kernel killed in {died.label}: out of memory (peak "
                f"{_units.size(peak)} of the machine's {_units.size(total)})",
                died.index,
            )
        memory = f" (peak {_units.size(peak)}, far from the machine's memory)" if peak is not None and total else ""
        return Failure("kernel-killed", f"kernel killed in {died.label}: a signal ended it{memory}", died.index)
    timed_out = next((c for c in cells if c.status == "timeout"), None)
    if timed_out is not None:
        limit = record.run_settings().timeout
        return Failure(
            "timeout",
            f"timeout in {timed_out.label}" + (f" (--timeout {limit:g} s)" if limit is not None else ""),
            timed_out.index,
        )
    error = next((c for c in cells if c.status == "error"), None)
    if error is not None:
        name = error.error.name if error.error and error.error.name else "an error"
        return Failure("cell-error", f"cell error: {name} in {error.label}", error.index)
    if stopped is not None:
        return Failure("interrupted", f"interrupted by {signal or 'the user'} in {stopped.label}", stopped.index)
    if record.status != "ok":
        return Failure("cell-error", f"run ended {record.status} with no failed cell recorded")
    return None


def _program(before: RunRecord, after: RunRecord) -> str:
    old, new = program_hashes(before), program_hashes(after)
    if old is None or new is None:
        return "not recorded"
    return "unchanged" if old == new else "changed"


def attribute(
    before: RunRecord, after: RunRecord, *, runs: tuple[NotebookRun, NotebookRun] | None = None
) -> Attribution:
    """What differs between two runs of a notebook (``before`` the earlier), and why ``after`` failed. ``runs``:
    their cells and totals typed (``notebook_run``), when the caller has them already."""
    program = _program(before, after)
    old, new = runs if runs is not None else (before.notebook_run(), after.notebook_run())
    found = (
        _code_change(old.cells, new.cells),
        _package_change(before, after, program),
        _machine_change(before, after),
        _cache_change(old, new),
        _settings_change(before, after),
    )
    return Attribution(
        before_id=before.run_id,
        after_id=after.run_id,
        changes=tuple(change for change in found if change is not None),
        program=program,
        failure=classify_failure(after, new),
    )
