"""``nbscope versions`` and ``nbscope bisect``: a notebook profiled under several versions of a package.

Each variant (a set of requirement specifiers, e.g. ``jax==0.10.1``) gets an isolated environment built
from the package index (see :mod:`nbscope.collect.environments`) holding the variant's packages, the
notebook's other imports at the versions installed here (or a requirements file's lines) and an IPython
kernel; the notebook is then profiled in that environment's kernel like ``nbscope profile`` does. Each
run is stored with a fingerprint whose ``versions`` are the variant environment's own, read from its
site-packages (not from nbscope's environment, and not from inside the kernel, so that they are known
even for a run whose cells failed), and whose settings name the variant.

``versions`` compares the variants per cell and gates each against the one before; ``bisect`` lists the
released versions between a good and a bad one and bisects with the gate's significance test.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbscope._errors import NbscopeError
from nbscope.analyse import versions as analysis
from nbscope.analyse.gate import GateOptions
from nbscope.api import profile as profile_job
from nbscope.collect import environments
from nbscope.collect import fingerprint as fp
from nbscope.collect import notebook as notebook_module
from nbscope.collect.requirements import kernel_requirements, notebook_requirements
from nbscope.record.cells import target_name

if TYPE_CHECKING:
    from nbscope.record.run import RunRecord
    from nbscope.record.store import Store

EventCallback = Callable[[str], None]

VERSIONS_SOURCE = "the variant environment's site-packages (dist-info), read by nbscope"


@dataclass
class VersionsOptions:
    """Where environments come from and how runs are judged."""

    requirements_file: Path | None = None  # the notebook's requirements (default: its imports, as installed here)
    find_links: list[str] = field(default_factory=list)  # extra wheel folders for pip (--find-links)
    no_index: bool = False  # only those folders (pip --no-index)
    env_cache: Path | None = None  # default: environments.default_cache_root()
    gate: GateOptions = field(default_factory=GateOptions)

    def validate(self) -> None:
        self.gate.validate()
        for folder in self.find_links:
            if not Path(folder).expanduser().is_dir():
                raise NbscopeError(f"--find-links {folder}: not a folder")
        if self.no_index and not self.find_links:
            raise NbscopeError("--no-index needs --find-links DIR: pip would have nowhere to look")
        if self.requirements_file is not None and not Path(self.requirements_file).is_file():
            raise NbscopeError(f"--requirements {self.requirements_file}: no such file")


def versions_options(
    requirements: Path | None,
    find_links: Sequence[str] | None,
    no_index: bool,
    env_cache: Path | None,
    max_slowdown: str,
    alpha: float,
) -> VersionsOptions:
    """The options of ``versions`` and ``bisect`` from their command-line values, checked (one line when bad)."""
    from nbscope.analyse.gate import parse_slowdown

    options = VersionsOptions(
        requirements_file=requirements,
        find_links=list(find_links or []),
        no_index=no_index,
        env_cache=env_cache,
        gate=GateOptions(max_slowdown=parse_slowdown(max_slowdown), alpha=alpha),
    )
    options.validate()
    return options


def parse_variants(texts: Sequence[str]) -> list[list[str]]:
    """Each ``--with`` value as the requirements it names (one line for a malformed one)."""
    return [environments.parse_requirements(text) for text in texts]


def _say(on_event: EventCallback | None, text: str) -> None:
    if on_event is not None:
        on_event(text)


def variant_requirements(
    notebook: notebook_module.Notebook, variant: Sequence[str], options: VersionsOptions
) -> tuple[list[str], list[str]]:
    """Everything a variant's environment installs (the notebook's requirements less the packages the
    variant names, then the variant's own specifiers), and notes on imports that could not be pinned."""
    names = environments.requirement_names(variant)
    notes: list[str] = []
    if options.requirements_file is not None:
        base = environments.without_packages(environments.read_requirements_file(options.requirements_file), names)
        base += kernel_requirements(exclude=[*names, *environments.requirement_names(base)])
    else:
        found = notebook_requirements(notebook, exclude=names)
        base = found.lines
        unresolved = [m for m in found.unresolved if environments.canonical_name(m) not in names]
        if unresolved:
            notes.append(
                f"imports {', '.join(unresolved)}, not installed here: name them in the variant (--with) "
                "or a --requirements file"
            )
    return [*base, *variant], notes


def profile_variant(
    path: str | Path,
    variant: Sequence[str],
    profile_options: profile_job.RunSpec,
    options: VersionsOptions,
    *,
    store: Store | None = None,
    machine: dict[str, Any] | None = None,
    on_event: EventCallback | None = None,
) -> analysis.VariantRun:
    """Build (or reuse) the variant's environment and profile the notebook in its kernel. A variant that
    cannot be installed, or whose kernel will not start, comes back with its ``error``; an interrupt
    during the run saves the partial run and is re-raised."""
    notebook = notebook_module.read(path)
    label = " ".join(variant)
    requirements, notes = variant_requirements(notebook, variant, options)
    for note in notes:
        _say(on_event, f"{label}: {note}")
    spec = environments.EnvironmentSpec(
        requirements=tuple(requirements), find_links=tuple(options.find_links), no_index=options.no_index
    )
    try:
        environment = environments.ensure(spec, options.env_cache, on_progress=lambda text: _say(on_event, text))
    except NbscopeError as exc:
        _say(on_event, f"{label}: {exc}")
        return analysis.variant_run(label, requirements, error=str(exc))
    built = functools.partial(
        analysis.variant_run,
        label,
        requirements,
        environment=str(environment.path),
        reused=environment.reused,
        build_s=environment.build_s,
    )
    if environment.reused:
        _say(on_event, f"{label}: reusing environment {environment.path}")
    packages = environments.requirement_names(variant)
    fingerprint = environments.variant_fingerprint(machine or fp.collect(), environment, packages)
    settings = {
        "requirements": list(variant),
        "installed": requirements,
        "environment": environment.path.name,
        "versions_from": VERSIONS_SOURCE,
    }
    run_options = profile_options.for_variant(settings, environment.kernel_name)
    _say(on_event, f"profiling under {label} …")
    try:
        with environment.kernelspec_visible():
            record = profile_job.profile(path, run_options, store=store, fingerprint=fingerprint)
    except NbscopeError as exc:  # the kernel would not start in that environment
        _say(on_event, f"{label}: {exc}")
        return built(error=str(exc))
    return built(record=record)


def profile_versions(
    path: str | Path,
    variants: Sequence[Sequence[str]],
    profile_options: profile_job.RunSpec | None = None,
    options: VersionsOptions | None = None,
    *,
    store: Store | None = None,
    on_event: EventCallback | None = None,
) -> analysis.VersionsResult:
    """Profile the notebook once per variant (each a list of requirement specifiers), then compare them.

    A variant that cannot be installed is reported in the result and the others still run. Ctrl-C (or
    SIGTERM / SIGHUP under the CLI) keeps the runs already stored and the current one as partial.
    """
    profile_options = profile_options or profile_job.RunSpec()
    profile_options.validate()
    options = options or VersionsOptions()
    options.validate()
    if not variants:
        raise NbscopeError("name at least one variant: --with 'jax==0.10.2'")
    notebook = notebook_module.read(path)  # a missing or unreadable notebook fails before any build
    # Each run reads the machine afresh: its load average when it starts is the gate's busy-machine evidence.
    runs = [profile_variant(path, list(v), profile_options, options, store=store, on_event=on_event) for v in variants]
    return analysis.compare_variants(target_name(notebook.path), runs, options.gate)


@dataclass(frozen=True)
class VersionsOutcome:
    """What ``nbscope versions`` found: every variant side by side, and the store that holds their runs."""

    result: analysis.VersionsResult
    store: Store

    @property
    def exit_status(self) -> int:
        """1 when no variant ran, else 0."""
        return 0 if self.result.ran else 1


def versions_command(
    path: str | Path,
    variants: Sequence[Sequence[str]],
    profile_options: profile_job.RunSpec,
    options: VersionsOptions,
    store: Store,
    *,
    on_event: EventCallback | None = None,
) -> VersionsOutcome:
    """``nbscope versions``: the notebook profiled once per variant (each :func:`parse_variants`'s), compared."""
    result = profile_versions(path, variants, profile_options, options, store=store, on_event=on_event)
    return VersionsOutcome(result=result, store=store)


def bisect(
    path: str | Path,
    package: str,
    good: str,
    bad: str,
    *,
    cell: int | None = None,
    profile_options: profile_job.RunSpec | None = None,
    options: VersionsOptions | None = None,
    store: Store | None = None,
    on_event: EventCallback | None = None,
) -> analysis.BisectResult:
    """The first released version of ``package`` after ``good`` whose run the gate calls significantly
    slower than ``good``'s on cell ``cell`` (1-based) or, for ``None``, on the total.

    At most ``ceil(log2(n)) + 1`` profiles for ``n`` versions from ``good`` to ``bad``: the good version is
    profiled first (the baseline), then versions are chosen by halving; ``bad`` itself is profiled only
    when every version before it is good. A version that cannot be installed or whose cell fails is
    skipped (the answer may then be a range).
    """
    profile_options = profile_options or profile_job.RunSpec(repeat=3)
    profile_options.validate()
    options = options or VersionsOptions()
    options.validate()
    if cell is not None and cell < 1:
        raise NbscopeError("--cell counts code cells from 1")
    notebook = notebook_module.read(path)
    from packaging.version import InvalidVersion, Version

    try:
        pre = Version(good).is_prerelease or Version(bad).is_prerelease
    except InvalidVersion as exc:
        raise NbscopeError(f"not a version: {exc}") from None
    _say(on_event, f"listing the released versions of {package} …")
    released = environments.released_versions(
        package, find_links=options.find_links, no_index=options.no_index, pre=pre
    )
    versions = environments.versions_between(released, good, bad)
    result = analysis.BisectResult(
        target=target_name(notebook.path),
        package=package,
        good=good,
        bad=bad,
        cell=cell,
        on=analysis.target_label(cell),
        versions=versions,
    )
    records: dict[int, RunRecord] = {}

    def measure(position: int) -> RunRecord | None:
        version = versions[position]
        run = profile_variant(path, [f"{package}=={version}"], profile_options, options, store=store, on_event=on_event)
        if run.record is None:
            result.add(
                analysis.BisectStep(
                    version=version, run_id=None, verdict="untestable", bad=None, error=run.error, profiled=False
                )
            )
            return None
        records[position] = run.record
        return run.record

    baseline = measure(0)
    if baseline is None:
        raise NbscopeError(f"the good version {package}=={good} could not be profiled: {result.steps[-1].error}")
    analysis.check_baseline(baseline, cell)
    result.add(analysis.BisectStep(version=good, run_id=baseline.run_id, verdict="baseline", bad=False))
    low, high, untestable = _halve(result, baseline, measure, options.gate, on_event)
    _conclude(result, records, low, high, untestable, options.gate)
    return result


def _halve(
    result: analysis.BisectResult,
    baseline: RunRecord,
    measure: Callable[[int], RunRecord | None],
    gate: GateOptions,
    on_event: EventCallback | None,
) -> tuple[int, int, set[int]]:
    """Halve the versions between the last known good and the first known bad until none is left between;
    returns (last good, first bad — ``len(versions)`` when none is bad, the untestable positions)."""
    versions, cell = result.versions, result.cell
    low, high = 0, len(versions)  # low: known good; high: known bad (len: nothing known bad yet)
    untestable: set[int] = set()
    while (position := analysis.next_probe(low, high, untestable)) is not None:
        _say(
            on_event,
            f"bisecting: {versions[low]} is good; trying {versions[position]} "
            f"({high - low - 1} version(s) left between)",
        )
        record = measure(position)
        if record is None:
            untestable.add(position)
            continue
        comparison = analysis.judge_version(baseline, record, cell, gate)
        testable = comparison.verdict not in ("failed", "not-comparable")
        bad_here = analysis.is_bad(comparison) if testable else None
        result.add(
            analysis.BisectStep(
                version=versions[position],
                run_id=record.run_id,
                verdict=comparison.verdict if testable else "untestable",
                bad=bad_here,
                comparison=comparison,
                error=None if testable else comparison.note or f"status {comparison.cand_status}",
            )
        )
        if not testable:
            untestable.add(position)
        elif bad_here:
            high = position
        else:
            low = position
    return low, high, untestable


def _conclude(
    result: analysis.BisectResult,
    records: dict[int, RunRecord],
    low: int,
    high: int,
    untestable: set[int],
    gate: GateOptions,
) -> None:
    """The answer: the first bad version (or a range, or none), its slowdown and the evidence for it."""
    versions, cell = result.versions, result.cell
    result.untestable = [versions[i] for i in sorted(untestable)]
    result.last_good = versions[low]
    if high == len(versions):
        result.note = (
            f"no version from {result.good} to {result.bad} is significantly slower than {result.good} "
            f"on {analysis.target_label(cell)}"
        )
        return
    result.first_bad = versions[high]
    result.ambiguous = [versions[i] for i in range(low + 1, high)]
    if result.ambiguous:
        result.note = (
            f"the first bad version is one of {', '.join([*result.ambiguous, versions[high]])}: "
            f"{', '.join(result.ambiguous)} could not be tested"
        )
    result.slowdown = analysis.judge_version(records[0], records[high], cell, gate)
    result.step_slowdown = (
        result.slowdown if low == 0 else analysis.judge_version(records[low], records[high], cell, gate)
    )
    from nbscope.analyse.diagnose import diagnose

    result.evidence = analysis.evidence(
        records[low], records[high], cell, findings_good=diagnose(records[low]), findings_bad=diagnose(records[high])
    )


def clear_cache(env_cache: Path | None = None) -> dict[str, Any]:
    """Remove every environment nbscope built (``nbscope versions --clear-cache``)."""
    return environments.clear_cache(env_cache)


def list_cache(env_cache: Path | None = None) -> list[dict[str, Any]]:
    """The environments nbscope built, with what they hold and their size."""
    return environments.list_environments(env_cache)
