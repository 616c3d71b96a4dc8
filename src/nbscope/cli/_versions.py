"""``nbscope versions`` (a notebook under several package versions, side by side) and ``nbscope bisect``
(the release that made a cell slower)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from nbscope.cli import app, output_may_close
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, open_store

WithOption = Annotated[
    list[str] | None,
    typer.Option(
        "--with",
        help="One variant: requirement specifiers, e.g. 'jax==0.10.2' or 'jax==0.10.2 numpy==2.1'; repeatable.",
    ),
]
RequirementsOption = Annotated[
    Path | None,
    typer.Option(
        "--requirements",
        "-r",
        help="The notebook's requirements (default: its imports, at the versions installed here).",
    ),
]
FindLinksOption = Annotated[
    list[str] | None,
    typer.Option(
        "--find-links", metavar="DIR", help="Also take wheels from this folder (pip --find-links); repeatable."
    ),
]
NoIndexOption = Annotated[bool, typer.Option("--no-index", help="Take packages only from --find-links folders.")]
EnvCacheOption = Annotated[
    Path | None,
    typer.Option(
        "--env-cache", envvar="NBSCOPE_ENV_CACHE", help="Where environments are kept. Default: ~/.cache/nbscope/envs"
    ),
]
MaxSlowdownOption = Annotated[
    str,
    typer.Option(
        "--max-slowdown",
        help="The gate's allowed slowdown: 10%, 0.1 (a bare number is a fraction, at most 1) or 1.1x (a ratio).",
    ),
]
AlphaOption = Annotated[float, typer.Option(help="Significance level of the gate's Mann–Whitney test.")]
TimeoutOption = Annotated[float | None, typer.Option(help="Per-cell time limit in seconds.")]
EnvOption = Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE for the kernel; repeatable.")]
PlatformOption = Annotated[
    str | None, typer.Option("--jax-platform", help="JAX_PLATFORMS for the kernel: cpu, cuda, ...")
]


def _events(quiet: bool) -> Any:
    if quiet:
        return None
    from nbscope.render.terminal import console, literal

    return lambda text: console.print(f"[dim]{literal(text)}[/dim]")


@app.command()
def versions(
    path: Annotated[Path | None, typer.Argument(help="Notebook: .ipynb or MyST .md")] = None,
    variants: WithOption = None,
    requirements: RequirementsOption = None,
    repeat: Annotated[
        int, typer.Option(help="Run N times per variant, each in a fresh kernel (the gate tests with N ≥ 3).")
    ] = 1,
    timeout: TimeoutOption = None,
    env: EnvOption = None,
    jax_platform: PlatformOption = None,
    find_links: FindLinksOption = None,
    no_index: NoIndexOption = False,
    env_cache: EnvCacheOption = None,
    max_slowdown: MaxSlowdownOption = "10%",
    alpha: AlphaOption = 0.05,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    clear_cache: Annotated[
        bool, typer.Option("--clear-cache", help="Remove every environment nbscope built, and exit.")
    ] = False,
    list_cache: Annotated[
        bool, typer.Option("--list-cache", help="List the environments nbscope built, and exit.")
    ] = False,
) -> None:
    """Profile a notebook under several versions of its packages (one isolated environment per --with),
    side by side per cell, with the fingerprint fields that differ and the gate between consecutive variants."""
    from nbscope.api import NbscopeError
    from nbscope.api import versions as job

    if clear_cache or list_cache:
        _cache(env_cache, clear=clear_cache, as_json=as_json)
        return
    if path is None:
        raise NbscopeError("versions needs a NOTEBOOK (or --clear-cache / --list-cache)")
    if not variants:
        raise NbscopeError("name at least one variant: --with 'jax==0.10.2' (repeat --with for each)")
    from nbscope.api.profile import RunSpec, parse_env

    parsed = job.parse_variants(variants)
    profile_options = RunSpec(timeout=timeout, env=parse_env(env or []), jax_platform=jax_platform, repeat=repeat)
    profile_options.validate()
    options = job.versions_options(requirements, find_links, no_index, env_cache, max_slowdown, alpha)
    outcome = job.versions_command(
        path, parsed, profile_options, options, open_store(db), on_event=_events(as_json or markdown)
    )
    from nbscope.render import versions as view

    with output_may_close():  # a closed pipe ends the printing, not the verdict's exit status
        if as_json:
            print(view.versions_json(outcome.result))
        elif markdown:
            print(view.versions_markdown(outcome.result), end="")
        else:
            view.print_versions(outcome.result, store_path=outcome.store.path)
    if outcome.exit_status:
        raise typer.Exit(outcome.exit_status)


def _cache(env_cache: Path | None, *, clear: bool, as_json: bool) -> None:
    from nbscope.api import versions as job
    from nbscope.render.terminal import console, format_bytes, literal

    if clear:
        done = job.clear_cache(env_cache)
        if as_json:
            print(json.dumps(done, indent=1))
        else:
            console.print(
                f"removed {len(done['removed'])} environment(s) from {literal(done['root'])} "
                f"({format_bytes(done['bytes'])})"
            )
        return
    found = job.list_cache(env_cache)
    if as_json:
        print(json.dumps(found, indent=1))
        return
    for entry in found:
        state = "" if entry["complete"] else " [yellow](unfinished: removed on next use)[/yellow]"
        console.print(
            f"{literal(entry['path'])} · {format_bytes(entry['bytes'])} · "
            f"{literal(' '.join(entry['requirements'] or []))}{state}"
        )
    if not found:
        console.print("no environments")


@app.command()
def bisect(
    path: Annotated[Path, typer.Argument(help="Notebook: .ipynb or MyST .md")],
    package: Annotated[str, typer.Option("--package", help="The package whose releases to bisect, e.g. jax.")],
    good: Annotated[str, typer.Option("--good", help="A release under which the notebook is fast.")],
    bad: Annotated[str, typer.Option("--bad", help="A later release under which it is slow.")],
    cell: Annotated[
        int | None, typer.Option("--cell", help="Judge this code cell (numbered from 1, as the ledger shows).")
    ] = None,
    total: Annotated[bool, typer.Option("--total", help="Judge the notebook's total (the default).")] = False,
    # How a release is judged slower, where releases come from, how the notebook runs: grouped by role.
    max_slowdown: MaxSlowdownOption = "10%",
    alpha: AlphaOption = 0.05,
    repeat: Annotated[
        int, typer.Option(help="Runs per version, each in a fresh kernel; the significance test needs 3 or more.")
    ] = 3,
    requirements: RequirementsOption = None,
    find_links: FindLinksOption = None,
    no_index: NoIndexOption = False,
    env_cache: EnvCacheOption = None,
    timeout: TimeoutOption = None,
    env: EnvOption = None,
    jax_platform: PlatformOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Find the first release of a package, between --good and --bad, that made a cell (or the total)
    significantly slower: releases from the package index, bisected with the gate's significance test."""
    from nbscope.api import NbscopeError
    from nbscope.api import versions as job
    from nbscope.api.profile import RunSpec, parse_env

    if total and cell is not None:
        raise NbscopeError("--cell and --total exclude each other")
    profile_options = RunSpec(timeout=timeout, env=parse_env(env or []), jax_platform=jax_platform, repeat=repeat)
    profile_options.validate()
    options = job.versions_options(requirements, find_links, no_index, env_cache, max_slowdown, alpha)
    store = open_store(db)
    result = job.bisect(
        path,
        package,
        good,
        bad,
        cell=cell,
        profile_options=profile_options,
        options=options,
        store=store,
        on_event=_events(as_json or markdown),
    )
    from nbscope.render import versions as view

    if as_json:
        print(view.versions_json(result))
    elif markdown:
        print(view.bisect_markdown(result), end="")
    else:
        view.print_bisect(result)
