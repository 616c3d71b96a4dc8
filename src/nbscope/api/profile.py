"""``nbscope profile``: a per-cell ledger of a notebook, measured inside a real Jupyter kernel."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope._files import machine_limit
from nbscope.api._saving import save_run
from nbscope.collect import fingerprint as fp
from nbscope.collect import notebook as notebook_module
from nbscope.collect.runner import CellCallback, ExecutionOptions, NotebookExecution, StartCallback, execute
from nbscope.record.cells import target_name
from nbscope.record.live import fill_measurements, new_live_path
from nbscope.record.run import RunRecord as RunRecord  # re-exported for the CLI's types
from nbscope.record.run import check_label, default_label, object_in, objects_in
from nbscope.record.secrets import command_for_record, env_for_record, signed
from nbscope.record.store import Store as Store  # re-exported for the CLI's types
from nbscope.record.store import files_folder, make_folder
from nbscope.schema.codec import decode

if TYPE_CHECKING:
    from nbscope.analyse.diagnose import Findings as Findings
    from nbscope.analyse.forecast import Forecast
    from nbscope.collect.notebook import CodeCell as CodeCell  # re-exported for the CLI's types
    from nbscope.collect.notebook import Notebook as Notebook
    from nbscope.schema.model import Cell as Cell

JAX_CACHE_MODES = ("off", "cold", "warm")


@dataclass(frozen=True)
class RunSpec:
    """Everything that shapes a profile, from the command line to the worker that runs it (an audit job, a
    pathway, a package-version variant): stored as the record's ``settings``, with the run's ``label``."""

    timeout: float | None = None
    on_error: str = "continue"
    kernel: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    env_store_values: bool = False  # keep --env values in the record (default: a hash, nbscope.record.secrets)
    jax_platform: str | None = None
    jax_cache: str = "off"  # off | cold | warm | a folder
    repeat: int = 1
    cache_root: Path | None = None  # where "cold"/"warm" keep their cache; default beside the store
    timeline: bool = False  # per-cell jax.profiler trace summaries (opt-in: it costs time)
    keep_traces: Path | None = None
    programs: bool = False  # per-cell program data for the GPU forecast (implied by ``forecast``)
    forecast: Sequence[str] = ()  # GPUs to forecast for (nbscope.analyse.forecast)
    label: str | None = None  # names the run (--label); None: $NBSCOPE_LABEL, which a worker process inherits
    variant: Mapping[str, object] | None = None  # the package-version variant the run belongs to (nbscope versions)

    def for_forecast(self, gpus: Sequence[str], *, programs: bool = False) -> RunSpec:
        """This spec forecasting for ``gpus`` (device keys), which implies recording program data."""
        return replace(self, forecast=tuple(gpus), programs=programs or bool(gpus))

    def for_variant(self, variant: Mapping[str, object], kernel: str) -> RunSpec:
        """This spec run as a package-version variant, in the kernel of its environment."""
        return replace(self, variant=dict(variant), kernel=kernel)

    def execution(self, env: Mapping[str, str], *, nvml: bool) -> ExecutionOptions:
        """How one execution of the notebook runs (``env``: the kernel's whole overrides)."""
        return ExecutionOptions(
            timeout=self.timeout,
            on_error=self.on_error,
            kernel_name=self.kernel,
            env=dict(env),
            nvml=nvml,
            timeline=self.timeline,
            keep_traces=self.keep_traces,
            programs=self.collects_programs,
        )

    def process_env(self) -> dict[str, str]:
        """The kernel's environment overrides: ``env``, with ``JAX_PLATFORMS`` when a platform is named."""
        env = dict(self.env)
        if self.jax_platform:
            env["JAX_PLATFORMS"] = self.jax_platform
        return env

    @property
    def collects_programs(self) -> bool:
        return self.programs or bool(self.forecast)

    def validate(self) -> None:
        if self.on_error not in ("continue", "stop"):
            raise NbscopeError(f"--on-error must be 'continue' or 'stop', not {self.on_error!r}")
        if self.repeat < 1:
            raise NbscopeError(f"repeat (--repeat) must be at least 1, not {self.repeat}")
        check_label(self.label)
        check_timeout(self.timeout)
        if self.jax_cache not in JAX_CACHE_MODES:
            folder = Path(self.jax_cache).expanduser()
            looks_like_path = os.sep in self.jax_cache or self.jax_cache.startswith((".", "~"))
            if not (folder.is_dir() or looks_like_path):
                raise NbscopeError(
                    f"--jax-cache must be off, cold, warm or a folder (an existing one, or a path with "
                    f"'{os.sep}'), not {self.jax_cache!r}"
                )
            check_folder_option("--jax-cache", folder)
        if self.keep_traces is not None:
            check_folder_option("--keep-traces", Path(self.keep_traces))

    def settings(self, env_key: bytes | None = None) -> dict[str, object]:
        """The record's settings; ``--env`` values hidden under ``env_key`` (the store's; None: this process's)."""
        env = env_for_record(self.env, store_values=self.env_store_values, key=env_key)
        folder = {} if self.jax_cache in JAX_CACHE_MODES else {"--jax-cache": self.jax_cache}  # signed as --env is
        return {
            "pathway": "kernel",
            "kernel": self.kernel,
            "timeout": self.timeout,
            "on_error": self.on_error,
            "jax_platform": self.jax_platform,
            "jax_cache": self.jax_cache,
            "env": env,
            **({"env_signed": signed(env | folder, env_key)} if env or folder else {}),
            **({"env_values_stored": True} if self.env_store_values else {}),
            "repeat": self.repeat,
            "timeline": self.timeline,
            "programs": self.collects_programs,
            "forecast": list(self.forecast),
            **({"variant": dict(self.variant)} if self.variant is not None else {}),
        }


# The earlier name of :class:`RunSpec`, kept for callers of the Python API.
ProfileOptions = RunSpec


def check_folder_option(option: str, folder: Path) -> None:
    """A folder an option names must be one, or be one nbscope can make: one line otherwise."""
    if folder.exists() and not folder.is_dir():
        raise NbscopeError(f"{option} {folder}: exists and is not a folder")
    if not folder.exists():
        check_can_create(option, folder)
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise NbscopeError(f"{option} {folder}: the folder is not writable")


def check_can_create(option: str, path: Path) -> None:
    """``path`` does not exist yet: its nearest existing parent must be a folder nbscope may write in."""
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NbscopeError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        mounted = os.statvfs(parent).f_flag & os.ST_RDONLY
        why = "the file system there is mounted read-only" if mounted else "it is not writable"
        raise NbscopeError(f"{option} {path}: cannot create it in {parent}: {why}")


def check_kernel(name: str) -> None:
    """The Jupyter kernel ``name`` is installed (one line naming those that are, otherwise)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        manager.get_kernel_spec(name)
    except NoSuchKernel:
        installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise NbscopeError(
            f"no Jupyter kernel named {name!r} (installed: {installed}; `jupyter kernelspec list` shows them)"
        ) from None


def check_store(store: Store) -> None:
    """Before anything runs: the store opens, this nbscope can use it and it takes a write, and its live
    folder can be written. A store that does not exist yet is not created here (only its folder checked)."""
    from nbscope.record.live import live_folder

    path = Path(store.path)
    if path.exists():
        store.check_writable()
    else:
        check_can_create("--db", path)
    folder = live_folder(path)
    check_folder_option("live folder", folder)


def check_timeout(timeout: float | None, option: str = "--timeout") -> None:
    """A per-cell limit is a positive, finite number of seconds (NaN would reach the kernel client as a
    traceback; infinity is no limit: leave the option out)."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise NbscopeError(f"{option} must be a positive number of seconds, not {timeout}")


def preflight(
    path: str | Path, options: RunSpec, store: Store | None = None, fingerprint: dict[str, object] | None = None
) -> notebook_module.Notebook:
    """Every check a profile makes before a kernel starts, so that a bad option, notebook, kernel, backend
    or store is one line (an NbscopeError) with nothing run, nothing stored and no live file left; the
    notebook, read."""
    from nbscope.collect.platforms import check_platforms

    options.validate()
    notebook = notebook_module.read(path)
    check_kernel(options.kernel or notebook.kernel_name)
    if options.jax_platform:
        check_platforms(options.jax_platform, fingerprint, option="--jax-platform")
    if store is not None:
        check_store(store)
    return notebook


class RunNotStored(NbscopeError):
    """The run was measured but the store refused it; ``record`` holds it and ``live_file`` keeps its cells."""

    def __init__(self, record: RunRecord, store_path: Path, live_file: Path, why: str) -> None:
        self.record, self.store_path, self.live_file = record, store_path, live_file
        super().__init__(
            f"the run could not be stored in {store_path} ({why}); its cells are kept in {live_file}: "
            f"store them with `nbscope import {live_file} --db {store_path}`"
        )


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict, with a one-line error for a malformed pair."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise NbscopeError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key.strip()] = value
    return env


# Written into every cache folder nbscope makes; "cold" empties only folders that carry it.
CACHE_MARKER = ".nbscope-jax-cache"
CACHE_MARKER_TEXT = (
    "This folder was made by nbscope for JAX's compile cache; `--jax-cache cold` removes the entries JAX wrote\n"
    "here (and only those: any other file or folder of yours stays).\n"
)
OLD_MARKER_TEXTS = ("This folder was made by nbscope for JAX's compile cache; `--jax-cache cold` empties it.\n",)
# What JAX's persistent cache writes in its folder (jax/_src/lru_cache.py, checked on jax 0.10.2): one
# ``<key>-cache`` file per compiled program, ``<key>-atime`` beside it when the cache has a size limit, and a
# ``.lockfile``; older JAX (GFileCache) wrote ``<key>`` alone. A key is ``<function name>-<sha256 hex>``.
JAX_ENTRY = re.compile(r".+-[0-9a-f]{64}(-cache|-atime)?")
JAX_LOCK_FILE = ".lockfile"


def default_cache_root(store_path: Path | None, *, make: bool = False) -> Path:
    """The JAX cache ``--jax-cache cold|warm`` uses: ``jax-cache/`` in the store's own files folder
    (:func:`nbscope.record.store.files_folder`), never shared with another store; ``make`` creates that
    files folder (with its ``.gitignore``), not the cache folder itself."""
    base = files_folder(store_path)
    if make:
        make_folder(base, ignored=base)
    return base / "jax-cache"


def is_jax_entry(entry: Path) -> bool:
    """Whether ``entry`` (in a cache folder) is a file JAX's persistent cache wrote: a regular file, not a link,
    named as JAX names its entries."""
    if entry.is_symlink() or not entry.is_file():
        return False
    return entry.name == JAX_LOCK_FILE or JAX_ENTRY.fullmatch(entry.name) is not None


def jax_cache_env(mode: str, cache_root: Path) -> tuple[dict[str, str], str]:
    """Environment for a JAX persistent-cache mode, and the cache state it starts in."""
    if mode == "off":
        return {}, "off"
    folder = cache_root if mode in ("cold", "warm") else Path(mode)
    if mode == "cold":
        _empty_owned_folder(folder)
    elif mode == "warm":
        _make_owned_folder(folder)
    elif folder.exists() and not folder.is_dir():
        raise NbscopeError(f"--jax-cache {mode}: not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    state = "warm" if any(is_jax_entry(e) and e.name != JAX_LOCK_FILE for e in folder.iterdir()) else "cold"
    env = {
        "JAX_COMPILATION_CACHE_DIR": str(folder.resolve()),
        # JAX caches only compiles over 1 s by default: a notebook's many small compiles would be missed.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    return env, state


def owns_folder(folder: Path) -> bool:
    """Whether nbscope made this cache folder (it holds the marker nbscope wrote)."""
    marker = folder / CACHE_MARKER
    try:
        text = marker.read_text(encoding="utf-8") if marker.is_file() and not marker.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        return False
    return text == CACHE_MARKER_TEXT or text in OLD_MARKER_TEXTS


def _make_owned_folder(folder: Path) -> None:
    """Create the cache folder with nbscope's marker; an existing empty folder is adopted, one with
    files in it is used as it is (and never emptied)."""
    if folder.exists() and not folder.is_dir():
        raise NbscopeError(f"--jax-cache: {folder} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    if not owns_folder(folder) and not any(folder.iterdir()):
        (folder / CACHE_MARKER).write_text(CACHE_MARKER_TEXT, encoding="utf-8")


def _empty_owned_folder(folder: Path) -> None:
    """Remove JAX's entries from a cache folder for a cold start (:func:`is_jax_entry`); anything else in it,
    a file or folder of the user's, stays. A folder nbscope did not make is refused."""
    _check_can_empty(folder)
    _make_owned_folder(folder)
    if not owns_folder(folder):
        _check_can_empty(folder)  # files appeared since: still refuse
    try:
        for entry in folder.iterdir():
            if is_jax_entry(entry):
                entry.unlink()
    except OSError as exc:
        raise NbscopeError(f"--jax-cache cold: cannot empty {folder}: {exc.strerror or exc}") from None


def _gpus_present(fingerprint: dict[str, object]) -> bool:
    from nbscope.schema.machine import Machine

    return bool(decode(Machine, fingerprint).gpus)


# The note a run gets when the notebook removed nbscope's files as it ran (`!rm -rf .nbscope`, `git clean -fdx`).
REMOVED_FILES = (
    "the notebook removed nbscope's files while it ran (its live file, maybe the store): nbscope wrote the live "
    "file again with every cell measured so far; runs stored before in a removed store are gone"
)


def profile(
    path: str | Path,
    options: RunSpec | None = None,
    *,
    store: Store | None = None,
    live_path: Path | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
    fingerprint: dict[str, object] | None = None,
    on_notebook: Callable[[notebook_module.Notebook], None] | None = None,
) -> RunRecord:
    """Profile a notebook per cell; saves the run in ``store`` (a :class:`nbscope.Store`) when given (the other
    arguments: those of :func:`profile_until_stopped`).

    A failing cell, a timeout or a dead kernel never raises: the record says so (status ``partial``)
    and keeps everything measured before it. Ctrl-C (or SIGTERM / SIGHUP under the CLI) saves the run,
    then re-raises KeyboardInterrupt.
    """
    record, interrupted = profile_until_stopped(
        path,
        options,
        store=store,
        live_path=live_path,
        on_cell_start=on_cell_start,
        on_cell_done=on_cell_done,
        fingerprint=fingerprint,
        on_notebook=on_notebook,
    )
    if interrupted:
        raise KeyboardInterrupt
    return record


def profile_until_stopped(
    path: str | Path,
    options: RunSpec | None = None,
    *,
    store: Store | None = None,
    live_path: Path | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
    fingerprint: dict[str, object] | None = None,
    on_notebook: Callable[[notebook_module.Notebook], None] | None = None,
) -> tuple[RunRecord, bool]:
    """:func:`profile` that returns ``(record, interrupted)`` instead of re-raising an interrupt, so a
    caller (the kernel pathway) can keep the partial record; the record is saved in ``store`` either way.

    The live file (see :mod:`nbscope.record.live`) is removed once the record is stored (or returned, without a
    store) when nbscope chose its path; a ``live_path`` the caller names stays. ``on_notebook`` receives the
    notebook once every check passed, before a kernel starts (its cells, its warnings).
    """
    from nbscope import _signals
    from nbscope.record import live

    options = options or RunSpec()
    fingerprint = fingerprint or fp.collect()
    notebook = preflight(path, options, store, fingerprint)
    if on_notebook is not None:
        on_notebook(notebook)
    store_path = getattr(store, "path", None)
    repeats = _Repeats(path, notebook, options, _checked_cache_root(options, store_path), fingerprint)
    env_key = store.env_key() if store is not None else None  # the store's: equal --env values hash equal there
    record = RunRecord(
        kind="profile",
        target=target_name(notebook.path, store=store.path if store is not None else None),
        fingerprint=fingerprint,
        settings=options.settings(env_key),
        command=command_for_record(sys.argv, env_key),
        label=options.label if options.label is not None else default_label(),
    )
    owned_live = live_path is None
    if live_path is None:
        live_path = new_live_path(store_path)
    described = [c.describe() for c in notebook.code_cells]
    live.write_header(live_path, record, notebook.describe(), described, store_path)
    interrupted = False
    not_started: NbscopeError | None = None
    try:
        interrupted = repeats.run(live_path, on_cell_start, on_cell_done)
    except KeyboardInterrupt:  # between cells' reach: starting a kernel, between repeats
        interrupted = True
    except (NbscopeError, OSError) as exc:  # a kernel that would not start; the machine refusing a write
        limit = exc if isinstance(exc, NbscopeError) else machine_limit(exc)
        if limit is None:
            raise
        if repeats.executions:
            raise limit from None  # the repeats that ran are kept (below)
        not_started = limit
    finally:  # also when an error ends the run (a kernel that would not start): what ran is kept
        executions = repeats.executions
        fill_measurements(record, notebook.describe(), described, executions, repeats.cache_state, live_path)
        if live.rewritten(live_path):
            kernel = object_in(record.measurements, "kernel")
            kernel["warnings"] = [*objects_in(kernel, "warnings"), {"hash": None, "message": REMOVED_FILES}]
            record.measurements["kernel"] = kernel
        if interrupted and len(executions) < options.repeat:
            record.status = "partial"  # fewer repeats than asked (a cut-short execution is partial itself)
        if owned_live:
            record.measurements["live_file"] = None  # removed below once stored
        if store is not None and not_started is None:
            interrupted = _save(record, store, live_path if owned_live else None) or interrupted
            if interrupted:
                _signals.note_saved(f"partial run {record.run_id} ({_how_far(record, executions, options.repeat)})")
    if not_started is not None:  # nothing ran: nothing is stored, and no live file is left
        if owned_live:
            live.remove_live_file(live_path)
        raise not_started
    if owned_live and (store is not None or not interrupted):
        live.remove_live_file(live_path)  # its cells are in the record now
    return record, interrupted


def _checked_cache_root(options: RunSpec, store_path: Path | None) -> Path:
    """The JAX cache folder of ``--jax-cache``, refused (before anything runs or is stored) when ``cold``
    could not empty it or it cannot be a folder."""
    cache_root = options.cache_root or default_cache_root(store_path, make=options.jax_cache in ("cold", "warm"))
    if options.jax_cache == "cold":
        _check_can_empty(cache_root)
    if options.jax_cache in ("cold", "warm"):
        check_folder_option("--jax-cache", cache_root)
    return Path(cache_root)


@dataclass
class _Repeats:
    """The ``--repeat`` executions of one profile, each in a fresh kernel; what ran is kept in
    ``executions`` and the cache state of the last one in ``cache_state`` even when one is cut short."""

    path: str | Path
    notebook: Any
    options: RunSpec
    cache_root: Path
    fingerprint: dict[str, object]
    executions: list[NotebookExecution] = field(default_factory=list)
    cache_state: str = "off"

    def run(self, live_path: Path, on_cell_start: StartCallback | None, on_cell_done: CellCallback | None) -> bool:
        """Run the repeats until one fails or is interrupted; whether a signal stopped them."""
        from nbscope.record import live

        options = self.options
        env = options.process_env()
        for number in range(options.repeat):
            # "cold" empties the cache before every repeat, so medians over repeats stay cold ones.
            cache_env, self.cache_state = jax_cache_env(options.jax_cache, self.cache_root)
            live.write_execution(live_path, number, self.cache_state)
            execution = execute(
                notebook_module.read(self.path) if self.executions else self.notebook,  # a fresh copy per repeat
                options.execution({**cache_env, **env}, nvml=_gpus_present(self.fingerprint)),
                live_sink=live.LiveWriter(live_path),
                on_cell_start=on_cell_start,
                on_cell_done=on_cell_done,
            )
            self.executions.append(execution)
            if execution.interrupted:
                return True
            if execution.status != "ok":
                return False
        return False


def _save(record: RunRecord, store: Store, live_path: Path | None) -> bool:
    """Store the run (whether a signal came meanwhile); when the store refuses it, :class:`RunNotStored` names
    the live file that keeps its cells (the record keeps its path then) and the command that stores them later."""
    import sqlite3

    try:
        _cache_saving(record, store)
        try:
            store.save(record)
            return False
        except KeyboardInterrupt:  # the signal came while saving: the next one is only noted, so save
            store.save(record)
            return True
    except (NbscopeError, sqlite3.Error, OSError) as exc:
        if live_path is None:
            raise
        record.measurements["live_file"] = str(live_path)
        why = str(exc) if isinstance(exc, NbscopeError) else f"{type(exc).__name__}: {exc}"
        raise RunNotStored(record, Path(store.path), live_path, why.removeprefix(f"{store.path}: ")) from None


def _how_far(record: RunRecord, executions: list[NotebookExecution], repeats: int) -> str:
    """How much of a stopped run finished: repeats, when several were asked and one finished, else cells."""
    finished = sum(1 for e in executions if not e.interrupted)
    if repeats > 1 and finished:
        return f"{finished} of {repeats} repeats finished"
    done = record.notebook_run().totals
    return f"{done.cells_run} of {done.cells} cells ran"


def _check_can_empty(folder: Path) -> None:
    """``--jax-cache cold`` on a folder with files that nbscope did not make: a one-line refusal."""
    if folder.is_dir() and not owns_folder(folder) and any(folder.iterdir()):
        raise NbscopeError(
            f"--jax-cache cold: {folder} holds files and was not made by nbscope (no {CACHE_MARKER} in it); "
            "nbscope empties only folders it made: move it away, or pass --jax-cache DIR to use it as a cache"
        )


def _cache_saving(record: RunRecord, store: Store) -> None:
    """For a warm-cache run: compile time saved against the latest cold run of the same notebook and
    environment (measured cold vs warm: JAX's own compile_time_saved is wrong under 1 s)."""
    warm = record.notebook_run().totals
    if warm.cache_state != "warm":
        return
    for stored in store.records(kind="profile", target=record.target, digest=record.digest, limit=50):
        cold = stored.notebook_run().totals
        if cold.cache_state == "cold":
            totals_ = object_in(record.measurements, "totals")
            totals_["cache_baseline_run"] = stored.run_id
            totals_["cache_saving_s"] = (cold.compile_s or 0.0) - (warm.compile_s or 0.0)
            totals_["cold_compiles"] = cold.compiles
            return


def diagnosis_of(
    record: RunRecord, notebook: str | Path | None = None, *, devices_file: str | Path | None = None
) -> tuple[Findings | None, str | None]:
    """The findings of a run just measured (``nbscope.analyse.diagnose.Findings``, most important first), with the
    cell sources read from ``notebook`` when given (else from the path the record names) and GPUs forecast from
    ``devices_file`` too; ``(None, why)`` when the run cannot be diagnosed. Never raises: the measurements stand
    without their causes."""
    from nbscope.analyse.diagnose import diagnose

    try:
        return diagnose(record, sources=notebook, devices_file=devices_file), None
    except Exception as exc:  # a rule or a source that fails costs the run its findings, not its ledger
        return None, f"{type(exc).__name__}: {exc}" if not isinstance(exc, NbscopeError) else str(exc)


@dataclass(frozen=True)
class ProfileOutcome:
    """What ``nbscope profile`` found: the run, its findings (or why it has none), its GPU forecast when one was
    asked for, the probe's warnings, the cells that failed it, and the store's refusal when it could not keep it."""

    record: RunRecord
    findings: Findings | None
    why_not_diagnosed: str | None
    forecast: Forecast | None
    warnings: tuple[str, ...]
    failed: tuple[tuple[RunRecord, Cell], ...]
    not_stored: RunNotStored | None = None
    allow_errors: bool = False

    @property
    def exit_status(self) -> int:
        """2 when the store refused the run, 1 when a cell failed it (unless errors are allowed), else 0."""
        if self.not_stored is not None:
            return self.not_stored.exit_code
        return 1 if self.failed and not self.allow_errors else 0


def forecast_devices(names: str | None, devices_file: str | Path | None) -> list[str]:
    """The device-table keys of ``--forecast GPU[,GPU...]`` (one-line error for an unknown GPU), checked before
    anything runs; none for none."""
    if not names:
        return []
    from nbscope.analyse.forecast.devices import load_table, resolve

    return [device.key for device in resolve(load_table(devices_file), names)]


def run_profile(
    path: str | Path,
    options: RunSpec,
    store: Store,
    *,
    devices_file: Path | None = None,
    diagnose: bool = True,
    allow_errors: bool = False,
    on_notebook: Callable[[notebook_module.Notebook], None] | None = None,
    on_cell_start: StartCallback | None = None,
    on_cell_done: CellCallback | None = None,
) -> ProfileOutcome:
    """``nbscope profile``: the notebook checked and read once, run, stored, diagnosed and forecast once (the
    findings' forecast is reused when the GPU rules made one). A signal re-raises KeyboardInterrupt once the run
    is saved, as :func:`profile` does."""
    not_stored = None
    try:
        record = profile(
            path, options, store=store, on_notebook=on_notebook, on_cell_start=on_cell_start, on_cell_done=on_cell_done
        )
    except RunNotStored as exc:  # measured, not stored: the ledger still shows, then how to store it
        record, not_stored = exc.record, exc
    findings, why_not = (
        (None, "--no-diagnose")
        if not diagnose or not_stored is not None
        else diagnosis_of(record, path, devices_file=devices_file)
    )
    not_kept: list[str] = []
    if not_stored is None:
        save_run(store, record, findings=findings, diagnose=diagnose, notes=not_kept)
    try:
        forecast = _forecast_of(record, options.forecast, findings, devices_file, path)
    except NbscopeError as exc:  # a run on an accelerator: its times are the device's, measured
        forecast, not_kept = None, [*not_kept, f"--forecast: {exc}"]
    return ProfileOutcome(
        record=record,
        findings=findings,
        why_not_diagnosed=why_not,
        forecast=forecast,
        warnings=(*probe_warnings(record), *not_kept),
        failed=failures([record]),
        not_stored=not_stored,
        allow_errors=allow_errors,
    )


def _forecast_of(
    record: RunRecord, gpus: Sequence[str], findings: Findings | None, devices_file: Path | None, path: str | Path
) -> Forecast | None:
    """The run's forecast on ``gpus``: the one the findings made for the same GPUs, else made here; none unasked."""
    if not gpus:
        return None
    made = findings.forecast if findings is not None else None
    if made is not None and [device.key for device in made.devices] == list(gpus):
        return made
    from nbscope.analyse.forecast import forecast

    return forecast(record, list(gpus), devices_file=devices_file, notebook_path=path)


def failures(records: Iterable[RunRecord]) -> tuple[tuple[RunRecord, Cell], ...]:
    """Each cell that failed these runs, with its run: an error, a timeout, a dead kernel."""
    from nbscope.schema.status import FAILED

    return tuple((record, cell) for record in records for cell in record.notebook_run().cells if cell.status in FAILED)


@dataclass(frozen=True, slots=True)
class _ProbeWarning:
    hash: str | None  # the source hash of the cell it concerns
    message: str


@dataclass(frozen=True, slots=True)
class _ProbeKernel:
    warnings: tuple[_ProbeWarning, ...]


@dataclass(frozen=True, slots=True)
class _ProbeSaid:
    """What the probe said about the kernel, as the record keeps it (``measurements.kernel``)."""

    kernel: _ProbeKernel | None


def probe_warnings(record: RunRecord) -> list[str]:
    """The probe's warnings about the run (``kernel.warnings``), each naming its cell as the ledger does."""
    kernel = decode(_ProbeSaid, record.measurements).kernel
    if kernel is None or not kernel.warnings:
        return []
    by_hash = {c.source_hash: c for c in record.notebook_run().cells}
    found = []
    for warning in kernel.warnings:
        cell = by_hash.get(warning.hash) if warning.hash is not None else None
        where = f"cell {cell.index + 1}: " if cell is not None else ""
        found.append(f"{where}{warning.message}")
    return found


def diagnose_command(record: RunRecord, store: Store, devices: Path | None = None) -> str:
    """The command that shows a stored run's findings in full (with the device file they were forecast from)."""
    from nbscope.api.runs import db_option

    command = f"nbscope diagnose {record.run_id}" + (f" --devices {devices}" if devices is not None else "")
    return command + db_option(store)
