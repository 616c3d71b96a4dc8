"""The job behind ``nbscope gate``: pick the candidate and baseline runs from the store, judge them, and
remember the verdict so that a run that failed is never the next automatic baseline.

The automatic baseline (:func:`latest_baseline`) is an earlier complete run (status ``ok``) of the same
target, kind and environment digest, measured with the same settings (backend, JAX cache mode, timeline,
repeat count), that did not fail the gate: the last one that passed it, else (no run has passed yet) the
newest one never judged.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from nbscope._errors import NbscopeError
from nbscope._files import read_bounded
from nbscope._redact import REDACTED, redact
from nbscope.analyse.gate import CELL_KINDS, Confirmation, GateOptions, GateResult, gate, history_noise
from nbscope.analyse.gate import parse_slowdown as parse_slowdown  # the CLI reads --max-slowdown with it
from nbscope.api._saving import save_run
from nbscope.api.runs import not_a_trial
from nbscope.record.cells import project_root
from nbscope.record.run import RunRecord, describe_settings, platform_of
from nbscope.record.store import STORE_FOLDER, Store, resolve_run, settings_key

if TYPE_CHECKING:
    from nbscope.api.profile import ProfileOptions

# The runs a gate judges: per-cell profiles, and jupyter-cache imports (totals only).
GATE_KINDS = (*CELL_KINDS, "jupyter-cache")
# The earlier runs a candidate may be judged against, as summaries, and those left out by reason.
Comparable = tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]


def _comparable_earlier(store: Store, candidate: RunRecord) -> Comparable:
    """Stored runs that may stand for the candidate's past, newest first, and those left out by reason:
    the store's summaries of them (no document is read; the callers read the runs they choose).

    Same target, kind and digest; started no later than the candidate (any time for a candidate from a
    file that is not in the store); status ``ok``; same measurement settings; not failed by the gate.
    """
    if not store.path.exists():
        return [], {}  # no store: runs named by files have no stored past
    settings = json.loads(settings_key(candidate.measurement_settings()))  # as the store gives them back
    kept: list[dict[str, Any]] = []
    left_out: dict[str, list[dict[str, Any]]] = {}
    names = store.names_of(candidate.target)  # runs stored under the notebook's older names too
    rows = store.summaries(
        ("started_at", "status", "settings"), target=names, digest=candidate.digest, kind=candidate.kind
    )
    failed = {run_id for run_id, verdict in store.verdicts(row["id"] for row in rows).items() if not verdict["passed"]}
    for row in rows:
        if candidate.run_id is not None and (row["id"] == candidate.run_id or row["started_at"] > candidate.started_at):
            continue
        measured = row["settings"]
        if measured is None:  # its document could not be read when the store was migrated
            record = store.readable(row["id"])
            if record is None:
                continue  # reported by the store, as any unreadable row
            measured = record.measurement_settings()
        measured = {k: v for k, v in measured.items() if k != "env"}  # a run under other --env values still counts
        if row["status"] != "ok":
            reason = f"status {row['status']}"
        elif measured != settings:
            reason = "other settings"
        elif row["id"] in failed:
            reason = "failed the gate"
        else:
            kept.append(row)
            continue
        left_out.setdefault(reason, []).append(row)
    return kept, left_out


def _runs_text(rows: list[dict[str, Any]], most: int = 5) -> str:
    ids = [str(r["id"]) for r in rows]
    if len(ids) == 1:
        return f"run {ids[0]}"
    return f"runs {', '.join(ids[:most])}" + (f" and {len(ids) - most} more" if len(ids) > most else "")


def latest_baseline(
    store: Store, candidate: RunRecord, notes: list[str] | None = None, *, comparable: Comparable | None = None
) -> RunRecord:
    """The run a candidate is judged against when none is named: among the earlier runs with its target,
    kind, digest and measurement settings, complete (status ``ok``) and not failed by the gate, the last
    one that passed the gate, else the newest one never judged.

    ``notes`` receives one line naming the chosen run and the newer runs passed over, when there are any.
    ``comparable``: what :func:`_comparable_earlier` gave for this candidate, when it was asked already.
    """
    kept, left_out = comparable or _comparable_earlier(store, candidate)
    kept = list(kept)
    verdicts = store.verdicts(row["id"] for row in kept) if kept else {}
    passed_ids = {run_id for run_id, verdict in verdicts.items() if verdict["passed"]}
    chosen: RunRecord | None = None
    while kept and chosen is None:
        passed = [r for r in kept if r["id"] in passed_ids]
        row = passed[0] if passed else kept[0]
        chosen = store.readable(row["id"])  # the only document read
        if chosen is None:
            kept.remove(row)  # unreadable: reported by the store, and passed over
    if chosen is None:
        why = "; ".join(f"{_runs_text(rows)}: {reason}" for reason, rows in left_out.items())
        raise NbscopeError(
            f"no earlier complete {candidate.kind} run of {candidate.target} with digest {candidate.digest} and the "
            f"same settings ({describe_settings(candidate.measurement_settings())}) that did not fail the gate, in "
            f"{store.path}" + (f" (left out: {why})" if why else "") + "; name one with --baseline"
        )
    newer = {"not judged by the gate": kept[: kept.index(row)]}
    for reason, rows in left_out.items():
        newer[reason] = [r for r in rows if (r["started_at"], r["id"]) > (chosen.started_at, chosen.run_id or 0)]
    passed_over = "; ".join(f"{_runs_text(rows)} ({reason})" for reason, rows in newer.items() if rows)
    if notes is not None and passed_over:
        how = "the last run that passed the gate" if passed else "the newest comparable run"
        notes.append(f"baseline run {chosen.run_id} is {how}; newer runs passed over: {passed_over}")
    return chosen


def history_runs(
    store: Store, candidate: RunRecord, count: int, *, comparable: Comparable | None = None
) -> list[RunRecord]:
    """Up to ``count`` newest stored runs that started before the candidate, with its target, digest,
    kind and measurement settings, complete and not failed by the gate: the run-to-run noise of this
    notebook in this environment. Only their documents are read."""
    if count <= 0:
        return []
    kept, _ = comparable or _comparable_earlier(store, candidate)
    found: list[RunRecord] = []
    for row in kept:
        if len(found) >= count:
            break
        if row["started_at"] < candidate.started_at and (record := store.readable(row["id"])) is not None:
            found.append(record)
    return found


def latest_run(store: Store, target: str | None) -> RunRecord:
    """The newest stored profile/trace/jupyter-cache run (of ``target`` when given, by any of its names)."""
    if not store.path.exists():
        raise store.missing()
    found = store.latest(target=store.names_of(target) if target else None, kind=list(GATE_KINDS))
    if found is None:
        where = f" of {target}" if target else ""
        raise NbscopeError(f"no run{where} in {store.path} to use as the candidate")
    return found


@dataclass(frozen=True, slots=True)
class GateRequest:
    """What ``nbscope gate`` is asked: the runs (references), the thresholds as given, how much history, whether
    to confirm a regression on a rerun, and the file its markdown summary is appended to."""

    candidate: str = "latest"
    baseline: str = "latest"
    target: str | None = None
    max_slowdown: str = "10%"  # 10%, 0.1 or 1.1x
    alpha: float = 0.05
    min_cell_s: float = 0.05
    floor_s: float = 0.02
    mad_k: float = 3.0
    check_status: bool = True
    history: int = 10
    confirm: bool = False
    summary: Path | None = None


def run_gate(
    store: Store, request: GateRequest, *, summary_text: Callable[[GateResult], str] | None = None
) -> GateResult:
    """``nbscope gate``: the options checked, the summary file opened (a target that cannot be appended to is
    refused before a verdict is stored), the candidate judged (:func:`gate_stored`), and ``summary_text`` of the
    result appended to ``request.summary``."""
    options = GateOptions(
        max_slowdown=parse_slowdown(request.max_slowdown),
        alpha=request.alpha,
        min_cell_s=request.min_cell_s,
        abs_floor_s=request.floor_s,
        mad_k=request.mad_k,
        check_status=request.check_status,
    )
    options.validate()
    summary = request.summary
    handle = _open_summary(summary) if summary is not None else None
    try:
        result = gate_stored(
            store,
            candidate=request.candidate,
            baseline=request.baseline,
            target=request.target,
            options=options,
            history=request.history,
            confirm=request.confirm,
        )
        if handle is not None and summary is not None and summary_text is not None:
            with _appending(summary):
                # Redacted as every file nbscope writes (a run given as a file was read unredacted), and flushed
                # now, so that a full disk (/dev/full) is this one-line error.
                handle.write(redact(summary_text(result) + "\n"))
                handle.flush()
    finally:
        if handle is not None and summary is not None:
            with _appending(summary):
                handle.close()
    return result


def _steady_baseline(base: RunRecord, runs: list[RunRecord], notes: list[str]) -> RunRecord:
    """The automatic baseline, unless the series shows it is an outlier (a manual profile on a loaded machine, an
    imported record: one run must not blind the gate); then the newest run of the series that is not, noted."""
    outliers, name = history_noise(runs).outliers, f"run {base.run_id}"
    steady = next((run for run in runs if f"run {run.run_id}" not in outliers), None)
    if name not in outliers or steady is None:
        return base
    ratio = outliers[name]
    notes.append(
        f"baseline run {steady.run_id}: run {base.run_id}, newer, is far from the other runs of its series "
        f"(×{ratio:.2f} the series' median)"
    )
    return steady


def gate_stored(
    store: Store,
    *,
    candidate: str = "latest",
    baseline: str = "latest",
    target: str | None = None,
    options: GateOptions | None = None,
    history: int = 10,
    confirm: bool = False,
) -> GateResult:
    """Judge a candidate run against a baseline (each a run reference: an id, ``latest:NOTEBOOK``, a label,
    a run JSON file; or ``latest``), with the run-to-run noise of up to ``history`` earlier comparable
    runs; the verdict is stored with the candidate when it is a stored run.

    ``latest`` means: for the candidate, the newest run (of ``target`` when given); for the baseline, the
    automatic baseline (:func:`latest_baseline`).

    ``confirm``: a candidate judged slower is not failed at once: its notebook is profiled once more (stored as a
    new run) and judged against the same baseline; the gate fails only when that rerun is slower too (a one-off
    slowdown's false alarm, at rate p, then fails at p²). See :func:`confirm_regression`.
    """
    if history < 0:
        raise NbscopeError("--history must be 0 or more")
    cand = latest_run(store, target) if candidate == "latest" else resolve_run(candidate, store, kinds=GATE_KINDS)
    notes: list[str] = []
    comparable = _comparable_earlier(store, cand)  # one search of the store for both
    base = (
        latest_baseline(store, cand, notes, comparable=comparable)
        if baseline == "latest"
        else resolve_run(baseline, store, kinds=GATE_KINDS)
    )
    for run in (cand, base):
        if run is not None:  # a trial is its run's child (``nbscope try``): no baseline nor candidate
            not_a_trial(run)
    runs = history_runs(store, cand, history, comparable=comparable)
    if baseline == "latest":
        base = _steady_baseline(base, runs, notes)
    ran_on = [platform_of(run) or "?" for run in (base, cand)]
    if ran_on[0] != ran_on[1]:  # a change of backend, not of the code: its verdict would judge the device
        raise NbscopeError(
            f"the baseline ran on the {ran_on[0].upper()} and the candidate on the {ran_on[1].upper()}: the gate "
            f"judges a change of the notebook on one backend; compare them instead (nbscope compare {base.run_id} "
            f"{cand.run_id})"
        )
    result = gate(base, cand, options, history=runs)
    result = replace(result, warnings=[*notes, *result.warnings])
    if cand.run_id is not None:
        # Remembered so that a run that failed is never the next automatic baseline.
        try:
            store.record_verdict(cand.run_id, baseline_id=base.run_id, passed=result.passed, reasons=result.reasons)
        except NbscopeError as exc:  # a read-only or locked store still gets its verdict; it is only not stored
            note = f"the verdict on run {cand.run_id} is not stored ({exc}): a later gate may take it as its baseline"
            result = replace(result, warnings=[*result.warnings, note])
            logging.getLogger("nbscope").warning("nbscope: warning: %s", note)  # on stderr too: CI logs show it
    if confirm and not result.passed:
        result = confirm_regression(
            store, base, cand, result, options, history=history_runs(store, cand, history, comparable=comparable)
        )
    return result


def confirm_regression(
    store: Store,
    base: RunRecord,
    cand: RunRecord,
    result: GateResult,
    options: GateOptions | None,
    *,
    history: list[RunRecord],
) -> GateResult:
    """``result`` (a failed gate) judged once more: the candidate's notebook profiled again with its settings,
    stored, and gated against ``base``; the rerun's result, with its :class:`Confirmation`. A failing cell is not
    rerun (a rerun does not excuse an error), nor a notebook that cannot be found or run as it was (``--env``
    values kept only as hashes): the failure then stands, and a note says why."""
    from nbscope.api.profile import ProfileOptions, profile

    why_not = (
        "a cell failed, which a rerun does not excuse" if any(c.verdict == "failed" for c in result.failures) else None
    )
    path = None if why_not else notebook_file(store, cand)
    if why_not is None and path is None:
        why_not = f"its notebook {cand.target} is not found in this project"
    if why_not is None and path is not None and changed_since(path, cand):
        why_not = f"{cand.target} changed since run {cand.run_id}; a rerun would measure other code"
    again, left_out = rerun_options(cand, store.env_key()) if why_not is None else (None, [])
    if left_out:
        why_not = f"its {', '.join(left_out)}: not recorded so by this store (imported, or kept as a hash)"
    if why_not is not None or path is None or not isinstance(again, ProfileOptions):
        return replace(result, warnings=[*result.warnings, f"not rerun to confirm: {why_not}; the failure stands"])
    # The rerun is stored beside the candidate (a command that only read the store opened it read-only).
    writable = Store(store.path) if getattr(store, "read_only", False) else store
    kept_in = writable if cand.run_id is not None else None
    rerun = profile(path, again, store=kept_in)
    not_kept: list[str] = []
    save_run(kept_in, rerun, notes=not_kept)
    second = gate(base, rerun, options, history=history)
    if rerun.run_id is not None:
        try:
            writable.record_verdict(rerun.run_id, baseline_id=base.run_id, passed=second.passed, reasons=second.reasons)
        except NbscopeError:
            pass  # a read-only store: the first verdict's note says so already
    confirmation = Confirmation(
        first_run_id=cand.run_id, first_reasons=result.reasons, rerun_id=rerun.run_id, confirmed=not second.passed
    )
    warnings = [confirmation.sentence(), *second.warnings, *not_kept]
    return replace(second, warnings=warnings, confirmation=confirmation)


def notebook_file(store: Store, cand: RunRecord) -> Path | None:
    """The candidate's notebook on this machine: its recorded name taken from the store's project (the folder
    holding ``.nbscope/``), the working directory's project root, or the working directory."""
    name = Path(cand.target)
    if ".." in name.parts:
        return None
    if name.is_absolute():
        # A notebook in no project, stored by its absolute path (its store elsewhere): that very file, and only
        # while it holds what the run ran, so that a record from elsewhere never runs some other file.
        recorded = cand.notebook_run().notebook.content_hash
        return name if recorded and name.is_file() and not changed_since(name, cand) else None
    store_path = Path(store.path).resolve()
    roots = [store_path.parent.parent] if store_path.parent.name == STORE_FOLDER else []
    roots += [project_root(Path.cwd()), Path.cwd()]
    if REDACTED in cand.target:  # a name that reads as holding a credential (``nb?token=x.ipynb``), stored redacted
        pattern = glob.escape(cand.target).replace(REDACTED, "*")
        found = (
            path
            for root in roots
            for path in root.glob(pattern)
            if path.is_file() and redact(path.relative_to(root).as_posix()) == cand.target
        )
        return next(found, None)
    return next((root / name for root in roots if (root / name).is_file()), None)


def changed_since(path: Path, cand: RunRecord) -> bool:
    """Whether the notebook file differs from the one the candidate ran (by the content hash it recorded)."""
    import hashlib

    recorded = cand.notebook_run().notebook.content_hash
    if not recorded:
        return False  # an older record: nothing to compare
    try:
        return hashlib.sha256(read_bounded(path, what="notebook", note=False)).hexdigest()[: len(recorded)] != recorded
    except NbscopeError:
        return True


def rerun_options(cand: RunRecord, key: bytes) -> tuple[ProfileOptions, list[str]]:
    """The profile options the candidate ran with (those that shape what is measured), and the options left out
    of them (``--env NAME``, ``--jax-cache``): every value this store (``key``) did not record as it stands
    (``record.secrets.trusted``): a folder of compiled programs is code too."""
    from nbscope.api.profile import JAX_CACHE_MODES, ProfileOptions
    from nbscope.record.secrets import trusted

    settings = cand.run_settings()
    signatures = settings.env_signed or {}
    env, left_out = trusted(settings.env, signatures, key)
    left_out = [f"--env {name}" for name in left_out]
    cache = settings.jax_cache
    if cache not in JAX_CACHE_MODES and not trusted({"--jax-cache": cache}, signatures, key)[0]:
        cache, left_out = "off", [*left_out, "--jax-cache"]
    options = ProfileOptions(
        kernel=settings.kernel,
        timeout=settings.timeout,
        on_error="stop" if settings.on_error == "stop" else "continue",
        env=env,
        env_store_values=settings.env_values_stored,
        jax_platform=settings.jax_platform,
        jax_cache=cache,
        repeat=settings.repeat,
        timeline=settings.timeline,
    )
    return options, left_out


def _open_summary(summary: Path) -> TextIO:
    """``--summary`` opened for appending; a target that cannot take it (a directory, a missing folder, no
    permission, /proc), a FIFO or socket (opening one would wait for a reader) and a file this command reads
    (the run store) are a one-line error, exit 2."""
    from nbscope._files import refuse_input

    if summary.is_dir():
        raise NbscopeError(f"--summary {summary} is a directory")
    refuse_input(summary, option="--summary")
    try:
        mode = os.stat(summary).st_mode
    except OSError:
        mode = 0
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
        raise NbscopeError(f"--summary {summary} is {kind}, not a file to append to")
    with _appending(summary):
        return open(summary, "a", encoding="utf-8")


@contextlib.contextmanager
def _appending(summary: Path) -> Iterator[None]:
    """Opening, writing or closing ``--summary``: an OSError is one line."""
    try:
        yield
    except OSError as exc:
        raise NbscopeError(f"--summary {summary}: cannot append to it ({exc.strerror or exc})") from None
