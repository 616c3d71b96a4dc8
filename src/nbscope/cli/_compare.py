"""``nbscope compare``, ``nbscope diagnose`` and ``nbscope profile --backends``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from nbscope._errors import NbscopeError
from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, MarkdownOption, open_store

# Errors that say a JAX backend cannot start (jax 0.10 on a machine without CUDA raises a bare
# AssertionError instead, which the "no JAX work ran" test below catches).
UNAVAILABLE_MARKERS = ("Unable to initialize backend", "not in the list of known backends", "No visible GPU",
                       "no supported devices", "CUDA_ERROR_NO_DEVICE", "Unknown backend")


def _sources(*records: Any) -> dict[str, str]:
    from nbscope.analyse.diagnose._base import load_sources

    merged: dict[str, str] = {}
    for record in records:
        found, _ = load_sources(record)
        merged.update(found)
    return merged


@app.command("compare")
def compare_command(
    a: Annotated[str, typer.Argument(help="Run A: a run id in the store or an exported run JSON file.")],
    b: Annotated[str, typer.Argument(help="Run B: a run id in the store or an exported run JSON file.")],
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    top: Annotated[int | None, typer.Option(help="Show only the N cells that differ most.")] = None,
) -> None:
    """Two profile runs side by side: cells paired by source, wall/compile/run per side, winner, totals, and the
    settings and machine differences that could explain them."""
    from nbscope.analyse import compare as compare_module
    from nbscope.analyse.diagnose import recommend
    from nbscope.record.store import resolve_run
    from nbscope.render import compare as view

    store = open_store(db)
    run_a, run_b = resolve_run(a, store), resolve_run(b, store)
    sources = _sources(run_a, run_b)
    comparison = compare_module.compare(run_a, run_b, sources=sources)
    platforms = {compare_module.platform_of(r)["platform"] for r in (run_a, run_b)}
    recommendation = recommend(run_a, run_b, sources=sources) if len(platforms) > 1 else None
    if as_json:
        document = comparison.to_dict()
        document["recommendation"] = recommendation
        print(json.dumps(document, indent=1, default=str))
    elif markdown:
        text = view.comparison_markdown(comparison)
        if recommendation is not None:
            text += "\n" + view.recommendation_markdown(recommendation)
        print(text, end="")
    else:
        view.print_comparison(comparison, top=top)
        if recommendation is not None:
            view.print_recommendation(recommendation)


@app.command("diagnose")
def diagnose_command(
    run: Annotated[str, typer.Argument(help="A profile run: run id in the store or an exported run JSON file.")],
    other: Annotated[
        str | None,
        typer.Option("--other", help="A second run of the same notebook (CPU run for a GPU run, warm-cache run) used as evidence."),
    ] = None,
    notebook: Annotated[
        Path | None, typer.Option("--notebook", help="The notebook's source, when it is not where the run recorded it.")
    ] = None,
    rule: Annotated[list[str] | None, typer.Option("--rule", help="Only this rule (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option(help="Show at most N findings.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
) -> None:
    """Named causes of slow or wrongly timed cells, each with its evidence and a concrete fix."""
    from nbscope.analyse.diagnose import diagnose
    from nbscope.record.store import resolve_run
    from nbscope.render import compare as view
    from nbscope.render.terminal import print_record_header

    store = open_store(db)
    record = resolve_run(run, store)
    other_record = resolve_run(other, store) if other else None
    sources = None
    if notebook is not None:
        from nbscope.collect import notebook as notebook_module

        sources = {c.source_hash: c.source for c in notebook_module.read(notebook).code_cells}
    findings = diagnose(record, other=other_record, sources=sources, rules=rule)
    if as_json:
        document = {"run_id": record.run_id, "target": record.target, **findings.to_dict()}  # type: ignore[attr-defined]
        print(json.dumps(document, indent=1, default=str))
    elif markdown:
        print(view.findings_markdown(findings, record), end="")
    else:
        print_record_header(record)
        view.print_findings(findings, record, limit=limit)


def parse_backends(text: str) -> list[str]:
    backends = list(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    if len(backends) < 2:
        raise NbscopeError(f"--backends needs at least two JAX platforms separated by commas (e.g. cpu,cuda), got {text!r}")
    return backends


def backend_unavailable(record: Any) -> str | None:
    """Why a run shows its JAX backend could not start, or None when JAX work ran."""
    cells = record.measurements.get("cells") or []
    for cell in cells:
        message = f"{(cell.get('error') or {}).get('name', '')}: {(cell.get('error') or {}).get('message', '')}"
        if any(marker in message for marker in UNAVAILABLE_MARKERS):
            return f"cell {cell['index'] + 1}: {message.strip()[:200]}"
    jax_cells = [c for c in cells if c.get("jax") is not None and c.get("status") not in ("skipped", "not-run")]
    failed = [c for c in jax_cells if c.get("status") in ("error", "kernel-died")]
    compiles = (record.measurements.get("totals") or {}).get("compiles") or 0
    if failed and not compiles:
        # JAX was imported but not one operation compiled, and cells failed: the backend never came up.
        first = failed[0].get("error") or {}
        return (f"no JAX operation ran: {len(failed)} of {len(jax_cells)} cells after `import jax` failed "
                f"(first: cell {failed[0]['index'] + 1} {first.get('name', '')} {first.get('message', '')})").strip()
    return None


def profile_backends(
    path: Path, options: Any, backends: str, *, store: Any, as_json: bool, markdown: bool
) -> None:
    """Profile a notebook once per JAX backend, then compare the runs and recommend a backend.

    A backend that cannot start (no CUDA on this machine, an unknown platform) is reported, not fatal.
    """
    from nbscope.analyse import compare as compare_module
    from nbscope.analyse.diagnose import diagnose, recommend
    from nbscope.api.profile import profile as run_profile
    from nbscope.render import compare as view
    from nbscope.render.terminal import console

    names = parse_backends(backends)
    runs: list[dict[str, Any]] = []
    for backend in names:
        if not (as_json or markdown):
            console.print(f"[dim]profiling with JAX_PLATFORMS={backend} …[/dim]")
        try:
            record = run_profile(path, dataclasses.replace(options, jax_platform=backend), store=store)
        except NbscopeError as exc:  # the kernel would not start under this backend's settings
            runs.append({"backend": backend, "run_id": None, "available": False, "reason": str(exc), "record": None})
            continue
        reason = backend_unavailable(record)
        runs.append({"backend": backend, "run_id": record.run_id, "available": reason is None, "reason": reason,
                     "record": record, "status": record.status})
    available = [r for r in runs if r["available"]]
    unavailable = [r for r in runs if not r["available"]]
    comparison = recommendation = None
    findings: dict[str, Any] = {}
    if len(available) >= 2:
        first, second = available[0]["record"], available[1]["record"]
        sources = _sources(first)
        comparison = compare_module.compare(first, second, sources=sources)
        recommendation = recommend(first, second, sources=sources)
        for entry, other in ((available[0], second), (available[1], first)):
            findings[entry["backend"]] = diagnose(entry["record"], other=other, sources=sources)
    elif len(available) == 1:
        findings[available[0]["backend"]] = diagnose(available[0]["record"])
    if as_json:
        document = {
            "backends": [{k: v for k, v in r.items() if k != "record"} for r in runs],
            "comparison": comparison.to_dict() if comparison else None,
            "recommendation": recommendation,
            "diagnosis": {k: v.to_dict() for k, v in findings.items()},
        }
        print(json.dumps(document, indent=1, default=str))
        return
    if markdown:
        text = ""
        for item in unavailable:
            text += f"- backend **{item['backend']}** unavailable: {item['reason']}\n"
        if comparison is not None:
            text += ("\n" if text else "") + view.comparison_markdown(comparison)
        if recommendation is not None:
            text += "\n" + view.recommendation_markdown(recommendation)
        print(text, end="")
        return
    view.print_unavailable(unavailable)
    if comparison is not None:
        view.print_comparison(comparison)
        if recommendation is not None:
            view.print_recommendation(recommendation)
    elif available:
        console.print(f"only the {available[0]['backend']} backend ran: nothing to compare")
    for backend, result in findings.items():
        console.print(f"\n[bold]diagnosis of the {backend} run[/bold]")
        view.print_findings(result, next(r["record"] for r in runs if r["backend"] == backend), limit=5)
    saved = ", ".join(f"{r['backend']}: run {r['run_id']}" for r in runs if r["run_id"])
    if saved:
        console.print(f"[dim]saved {saved} in {store.path}[/dim]")
