"""``nbscope try``: a remedy tried on one cell of a stored run's notebook, as the run ran it, without editing the
notebook. Fresh kernels run it as it is and with the remedy, repeats interleaved (as it is, remedy, as it is, ...);
each side is stored as a ``trial`` run linked to the run it tests (``settings.trial``), the remedy's with the
judgement (``measurements.trial``: :class:`nbscope.analyse.trial.TrialResult`)."""

from __future__ import annotations

import hashlib
import pickle
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.analyse import trial as trial_module
from nbscope.analyse.trial import TrialResult
from nbscope.api.gate import changed_since, notebook_file, rerun_options
from nbscope.api.profile import ProfileOptions, _gpus_present, jax_cache_env, preflight
from nbscope.api.runs import link_of as link_of
from nbscope.api.runs import not_a_trial
from nbscope.api.runs import trials_of as trials_of
from nbscope.collect import fingerprint as fp
from nbscope.collect import notebook as notebook_module
from nbscope.collect import remedies
from nbscope.collect.runner import ExecutionOptions, NotebookExecution, execute
from nbscope.record.live import STORE_REFUSED, fill_measurements, keep_unstored, save_or_keep
from nbscope.record.run import PROFILE_KINDS, RunRecord, backend_of
from nbscope.record.secrets import command_for_record
from nbscope.record.store import Store, resolve_run
from nbscope.schema.codec import decode
from nbscope.schema.status import FAILED

SIDES = ("as-is", "remedy")
# A cell that failed as it is bound nothing to compare with: where a placement made it run, one more run with JAX on
# the CPU, through the cell, gives the values it computes there (the reference the remedy's are checked against).
REFERENCE = "reference"
ACCELERATOR = "on a machine whose JAX runs on an accelerator (a GPU or a TPU)"
Progress = Callable[[str, int, int], None]  # side, repeat (1-based), repeats


def try_remedy(
    run: str,
    cell: int,
    remedy: str,
    store: Store,
    *,
    repeats: int = 3,
    progress: Progress | None = None,
    through_cell: bool = False,
    env: dict[str, str] | None = None,
) -> TrialResult:
    """Try ``remedy`` on code cell ``cell`` (1-based) of run ``run``, ``repeats`` times each way (an NbscopeError
    where it cannot be tried, nothing run or stored). ``through_cell``: each run stops after it. ``env``: ``--env``
    values over the run's own that this store signed (a record is data, never instructions). Ctrl-C or SIGTERM
    stores the runs that finished and the one stopped (unjudged trial runs), then the KeyboardInterrupt goes on."""
    check_repeats(repeats)
    source, path = _source_and_file(run, cell, store)
    cells = source.notebook_run().cells
    options, env_note = _options(source, store, env or {})
    last_cell = cell - 1 if through_cell else None
    backend = backend_of(source)["platform"]
    chosen = remedies.parse(remedy, cells[cell - 1].source or "", cell, backend, options.process_env())
    if chosen.placement and backend in (None, "cpu"):
        why = f"JAX ran on the CPU in run {source.run_id}, so placing work on the CPU changes nothing; try it {ACCELERATOR}"
        return trial_module.not_tested(source, cell, remedy, why)
    if chosen.primes_cache and options.jax_cache != "off":
        raise NbscopeError(f"--remedy {remedy}: run {source.run_id} ran with --jax-cache {options.jax_cache} already")
    fingerprint = fp.collect()
    if chosen.placement and not _accelerator_here(fingerprint):
        why = f"this machine has no GPU or TPU, so JAX runs on the CPU either way here; try it {ACCELERATOR}"
        return trial_module.not_tested(source, cell, remedy, why)
    notebook = preflight(path, options, store, fingerprint)
    before = _file_hash(path)
    folder = Path(tempfile.mkdtemp(prefix="nbscope-trial-"))
    settings = options.settings(store.env_key())
    runs = _Runs(notebook, cell, chosen, folder, progress)
    record_of = partial(_record, source, notebook, settings, fingerprint, cell, remedy)  # (side, runs, through_cell)
    try:
        execution = options.execution(options.process_env(), nvml=_gpus_present(fingerprint))
        runs.run(replace(execution, last_cell=last_cell), repeats)
    except KeyboardInterrupt:
        stopped = [record_of(side, runs, through_cell) for side in SIDES if runs.executions[side]]
        _keep_stopped(store, stopped, trial_module.not_tested(source, cell, remedy, "stopped: not judged"))
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if _file_hash(path) != before:
        raise NbscopeError(f"{path} changed while the trial ran (not by nbscope): the trial is not stored")
    records = [record_of(side, runs, through_cell) for side in SIDES]
    if store.find(source) != source.run_id:  # the store removed or replaced while the trial ran
        raise NbscopeError(f"run {source.run_id} is gone from {store.path} (not by nbscope): the trial is not stored")
    as_is_id, refused = _saved(store, records[0])  # refused: judged still, then both sides kept in files to import
    reference_id, reference_note = None, None
    if refused is None and chosen.placement and _failed_as_is_ran_remedied(records, cell):
        make = partial(record_of, REFERENCE, runs, True)
        reference = _reference(runs, replace(execution, last_cell=cell - 1), folder, (records[1], make), store)
        if reference is not None:
            reference_id, refused = _saved(store, reference)
            if refused is not None:  # the remedy's side kept with it, unjudged
                raise keep_unstored(store, [reference, records[1]], refused, "the trial's runs")
            status = reference.notebook_run().cells[cell - 1].status
            if status not in (None, "ok"):  # what it captured is stale or missing: nothing to check against
                reference_note = f"cell {cell} did not run with JAX on the CPU either (run {reference_id}: {status})"
                reference_id = None
    notes = runs.notes() + _notes(source, records[0], cell, chosen, through_cell and cell < len(cells))
    notes += [note for note in (env_note, reference_note) if note]
    result = trial_module.judge(
        source,
        records[0],
        records[1],
        cell,
        remedy,
        (runs.values["as-is"], runs.values["remedy"]),
        notes,
        reference=(reference_id, runs.values[REFERENCE]) if reference_id is not None else None,
    )
    records[1].measurements["trial"] = replace(result, as_is_run=as_is_id).to_dict()
    if refused is not None:
        raise keep_unstored(store, records, refused, "the trial's runs")
    return trial_module.with_runs(result, as_is_id, save_or_keep(store, [records[1]], "the trial's remedy run")[0])


def check_repeats(repeats: int) -> None:
    if not 1 <= repeats <= 50:
        raise NbscopeError(f"--repeats must be from 1 to 50, not {repeats}")


def _saved(store: Store, record: RunRecord) -> tuple[int | None, BaseException | None]:
    """The run stored (its id), or why the store refused it."""
    try:
        return store.save(record), None
    except STORE_REFUSED as exc:
        return None, exc


def _keep_stopped(store: Store, records: list[RunRecord], unjudged: TrialResult) -> None:
    """What a stopped trial measured, kept as partial runs (the last side listed under its run, unjudged) and named
    in the command's closing line."""
    from nbscope import _signals

    if not records:  # stopped before a run ended
        return
    for record in records:
        record.finish("partial")
    records[-1].measurements["trial"] = unjudged.to_dict()  # the as-is side's when the remedy's never started
    ids = save_or_keep(store, records, "the stopped trial's runs")
    _signals.note_saved(f"the stopped trial's {' and '.join(f'partial run {i}' for i in ids)}")


def _reference(
    runs: _Runs,
    execution: ExecutionOptions,
    folder: Path,
    records: tuple[RunRecord, Callable[[], RunRecord]],
    store: Store,
) -> RunRecord | None:
    """The run with JAX on the CPU a fixed cell's values are checked against (None: the cell binds nothing the
    remedy's runs captured). Stopped or failing, the remedy's side is kept, unjudged, as a stopped trial's is."""
    if not runs.compared_names or not any(runs.values["remedy"]):
        return None
    remedied, make = records  # the remedy's side as recorded, and how the reference's record is made
    try:
        runs.reference(execution)
    except BaseException:
        store.save(remedied)
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return make()


def _failed_as_is_ran_remedied(records: list[RunRecord], cell: int) -> bool:
    """Whether the cell failed (raised or timed out) in the runs as it is and ran in the remedy's."""
    statuses = [cells[cell - 1].status if len(cells := r.notebook_run().cells) >= cell else None for r in records]
    return statuses[0] in FAILED and statuses[1] in (None, "ok")


def _options(source: RunRecord, store: Store, env: dict[str, str]) -> tuple[ProfileOptions, str | None]:
    """The options ``source`` ran with, ``env`` over its ``--env`` values, and what was not given again: a record
    is data, so only the values this store recorded as given (``record.secrets.trusted``)."""
    options, left_out = rerun_options(source, store.env_key())
    left_out = [name for name in left_out if name.removeprefix("--env ") not in env]
    note = (
        f"run {source.run_id}'s {', '.join(left_out)} not given to the trial: this store did not record it as "
        "given (imported, edited or kept as a hash); give a value with --env NAME=VALUE"
    )
    return replace(options, repeat=1, timeline=False, env={**options.env, **env}), note if left_out else None


def _source_and_file(run: str, cell: int, store: Store) -> tuple[RunRecord, Path]:
    """The run to try and its notebook here, unchanged since it ran; one line where either is missing."""
    if not store.path.exists():
        raise NbscopeError(f"{store.path}: no such store, so no run {run} to try")
    source = not_a_trial(resolve_run(run, store, kinds=PROFILE_KINDS))
    if source.run_id is None:
        raise NbscopeError(f"run {run} is not in {store.path}: store it first (`nbscope import {run}`)")
    count = len(source.notebook_run().cells)
    if not 1 <= cell <= count:
        raise NbscopeError(f"--cell {cell}: run {source.run_id} has {count} code cells (1 to {count})")
    path = notebook_file(store, source)
    if path is None:
        raise NbscopeError(f"the notebook of run {source.run_id}, {source.target}, is not found in this project")
    if changed_since(path, source):
        raise NbscopeError(f"{source.target} changed since run {source.run_id}: profile it again, then try")
    return source, path


def _notes(source: RunRecord, trial: RunRecord, cell: int, remedy: remedies.Remedy, stopped_early: bool) -> list[str]:
    """What the reader should know of how the trial ran against how its run did."""
    notes = []
    if stopped_early:
        notes.append(f"each run stopped after cell {cell} (--through-cell): the notebook's total is through it")
    if source.kind == "trace":
        notes.append(f"run {source.run_id} was traced in a book build; the trial runs the notebook in a kernel")
    here = trial.machine().summary
    if source.machine().summary != here:
        notes.append(f"run {source.run_id} was measured on {source.machine().summary}; the trial ran on {here}")
    if remedy.whole_kernel:
        notes.append(f"{remedy.text} acts on the whole kernel, every cell, not only cell {cell}")
    return notes


def _accelerator_here(fingerprint: dict[str, object]) -> bool:
    """Whether this machine has a GPU (NVML) or another accelerator (a TPU) for JAX to run on."""
    from nbscope.schema.machine import Machine

    machine = decode(Machine, fingerprint)
    return bool(machine.gpus) or machine.accelerator is not None


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class _Runs:
    """The trial's executions, each side's repeats interleaved, with the values the cell bound in each."""

    notebook: notebook_module.Notebook
    cell: int
    remedy: remedies.Remedy
    folder: Path
    progress: Progress | None
    executions: dict[str, list[NotebookExecution]] = field(
        default_factory=lambda: {side: [] for side in (*SIDES, REFERENCE)}
    )
    values: dict[str, list[dict[str, tuple[str, object]]]] = field(
        default_factory=lambda: {side: [] for side in (*SIDES, REFERENCE)}
    )
    calls: list[int] = field(default_factory=list)  # the remedy's calls of what it changes, per run
    moved: set[str] = field(default_factory=set)  # arrays the `cpu` remedy copied to the CPU for the cell
    after_errors: list[str] = field(default_factory=list)
    uuids: dict[str, str] = field(default_factory=lambda: {side: uuid.uuid4().hex for side in (*SIDES, REFERENCE)})
    cache_state: str = "off"

    def run(self, base: ExecutionOptions, repeats: int) -> None:
        cache_env: dict[str, str] = {}
        if self.remedy.primes_cache:  # a first kernel, not timed, fills the compile cache
            cache_env, _ = jax_cache_env(str(self.folder / "jax-cache"), self.folder)
            execute(self.notebook, replace(base, env={**base.env, **cache_env}))
            self.cache_state = "warm"
        names = self.compared_names
        for number in range(repeats):
            for side in SIDES:
                if self.progress is not None:
                    self.progress(side, number + 1, repeats)
                out = self.folder / f"{side}-{number}.pickle"
                remedied = side == "remedy"
                hooks = (self.remedy.before, self.remedy.after) if remedied else ("", "")
                around = (self.cell - 1, hooks[0], hooks[1] + "\n" + remedies.capture(names, str(out)))
                env = {**base.env, **self.remedy.env, **cache_env} if remedied else base.env
                execution = execute(notebook_module.read(self.notebook.path), replace(base, env=env, around=around))
                self._keep(side, execution, out)

    @cached_property
    def clock_names(self) -> list[str]:
        """The names the cell binds to clock readings (read once from its code)."""
        return remedies.clock_names(self.notebook.code_cells[self.cell - 1].source)

    @cached_property
    def compared_names(self) -> list[str]:
        """The names the cell binds whose values the trial compares: not its clock readings."""
        source = self.notebook.code_cells[self.cell - 1].source
        return [name for name in remedies.bound_names(source) if name not in self.clock_names]

    def reference(self, base: ExecutionOptions) -> None:
        """One run as it is with JAX on the CPU (``JAX_PLATFORMS=cpu``), through the cell: the values it computes
        where it runs, for a cell that failed as it is on the run's device."""
        if self.progress is not None:
            self.progress(REFERENCE, 1, 1)
        self.folder.mkdir(parents=True, exist_ok=True)
        out = self.folder / "reference.pickle"
        around = (self.cell - 1, "", remedies.capture(self.compared_names, str(out)))
        env = {**base.env, "JAX_PLATFORMS": "cpu"}
        execution = execute(notebook_module.read(self.notebook.path), replace(base, env=env, around=around))
        self._keep(REFERENCE, execution, out)

    def _keep(self, side: str, execution: NotebookExecution, out: Path) -> None:
        errors = execution.runner["trial_errors"] if "trial_errors" in execution.runner else {}
        if "before" in errors:  # the remedy refused in the kernel (float64 off already, JAX not imported)
            raise NbscopeError(f"--remedy {self.remedy.text}: {errors['before'].removeprefix('RuntimeError: ')}")
        if execution.interrupted:
            self.executions[side].append(execution)
            raise KeyboardInterrupt
        if "after" in errors:
            self.after_errors.append(errors["after"])
        self.executions[side].append(execution)
        if out.is_file():
            with out.open("rb") as handle:
                captured = pickle.load(handle)
            self.values[side].append(captured["values"])
            if side == "remedy" and "calls" in captured["notes"]:
                self.calls.append(int(captured["notes"]["calls"]))
            if side == "remedy" and "moved" in captured["notes"]:
                self.moved.update(str(name) for name in captured["notes"]["moved"])

    def notes(self) -> list[str]:
        found = []
        if self.calls and not any(self.calls) and self.remedy.kind == "cpu":
            found.append(f"cell {self.cell} never called {self.remedy.text[4:]}: the remedy had nothing to act on")
        elif self.calls and not any(self.calls):
            found.append(
                f"cell {self.cell} traced no lax.scan or fori_loop of known length (a program compiled in an earlier "
                "cell is reused as it was): the remedy had nothing to act on"
            )
        if self.clock_names:
            names = ", ".join(f"`{name}`" for name in self.clock_names)
            found.append(f"not compared: {names}, clock readings (they differ in every run)")
        if self.moved:
            names = ", ".join(f"`{name}`" for name in sorted(self.moved))
            found.append(
                f"cell {self.cell} reads {names} from off the CPU: the remedy copied them to the CPU for the cell "
                "(`jax.device_put(x, jax.devices('cpu')[0])`); after it, a name the cell left alone holds the "
                "notebook's own array again, and one it rebound to an array on the CPU holds a copy on the run's "
                "device"
            )
        if not self.values["as-is"] or not self.values["remedy"]:
            why = f" ({self.after_errors[0]})" if self.after_errors else ""
            found.append(f"the cell's values could not be read in every run{why}: results not compared")
        return found


def _record(
    source: RunRecord,
    notebook: notebook_module.Notebook,
    settings: dict[str, object],
    fingerprint: dict[str, object],
    cell: int,
    remedy: str,
    side: str,
    runs: _Runs,
    through_cell: bool = False,
) -> RunRecord:
    """One side of the trial as a run: its repeats' figures, linked to the run it tests."""
    link: dict[str, object] = {"of": source.run_id, "cell": cell, "remedy": remedy, "side": side}
    link |= {"of_uuid": source.notebook_run().run_uuid} | (
        {"as_is_uuid": runs.uuids["as-is"]} if side == "remedy" else {}
    )
    if through_cell:
        link["through_cell"] = True
    record = RunRecord(
        measurements={"run_uuid": runs.uuids[side]},
        kind="trial",
        target=source.target,
        fingerprint=dict(fingerprint),
        settings={**settings, "repeat": len(runs.executions[side]), "trial": link},
        command=command_for_record(sys.argv),
        label=None,
    )
    described = [c.describe() for c in notebook.code_cells]
    state = runs.cache_state if side == "remedy" else "off"
    fill_measurements(record, notebook.describe(), described, runs.executions[side], state, None)
    return record.finish()
