"""Terminal and markdown views of a backend recommendation and of ``profile --backends``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbscope.render._clean import markdown_with_code as prose
from nbscope.render._markdown import markdown_table
from nbscope.render._rows import Column, Rows
from nbscope.render.compare import comparison_markdown, print_comparison
from nbscope.render.findings import print_top_findings
from nbscope.render.terminal import console, format_seconds, literal

if TYPE_CHECKING:
    from pathlib import Path

    from nbscope.analyse.recommend import Estimate, ForecastPin, MeasuredPin, Recommendation


# ---- recommendation -----------------------------------------------------------------------------


def estimates_rows(estimates: Sequence[Estimate] | None, accelerator: str = "gpu") -> Rows:
    """A recommendation's estimated total per backend (``cpu``, ``gpu``, ``mixed``, or forecast ranges
    such as ``gpu_low``), those it could estimate; ``gpu`` in a name reads as the accelerator (``tpu_low``)."""
    columns = (Column("backend", "left", "number"), Column("estimated total", "right", "number"))
    rows = [
        (e.name.replace("gpu", accelerator, 1), format_seconds(e.seconds))
        for e in estimates or ()
        if e.seconds is not None
    ]
    return Rows.of(columns, rows)


def _start_moves(pin: MeasuredPin | ForecastPin) -> str:
    """What a measured pin leaves out of its saving: the accelerator's runtime start, which only moves."""
    start = getattr(pin, "runtime_start_s", None)
    if start is None:
        return ""
    kind = getattr(pin, "accelerator", "gpu").upper()
    return f"; not its {format_seconds(start)} beyond compile: the {kind} runtime's start, which moves to the next cell"


def print_recommendation(recommendation: Recommendation) -> None:
    choice = recommendation.recommendation
    if choice is None:
        console.print(f"[dim]no backend recommendation: {literal(recommendation.reason)}[/dim]")
        return
    # On a terminal the estimates are one line, "cpu 4.29 s · gpu 20.98 s", under the choice they explain.
    estimates = estimates_rows(recommendation.estimates, recommendation.accelerator or "gpu")
    shown = " · ".join(" ".join(item.text for item in row) for row in estimates.rows)
    console.print(f"[bold]recommended backend: {literal(choice)}[/bold] — {literal(recommendation.reason)}")
    console.print(f"estimated totals: {literal(shown)}")
    for pin in recommendation.pinned:
        names = ", ".join(pin.functions) or "(cell)"
        where = f"cell {pin.cell + 1}" if pin.cell is not None else "cell ?"
        console.print(
            literal(
                f"  pin to CPU: {where}{' line ' + str(pin.line) if pin.line else ''} "
                f"{names}: saves {format_seconds(pin.saving_s)}{_start_moves(pin)}"
            )
        )
    for caveat in recommendation.caveats:
        console.print(f"[dim]caveat: {literal(caveat)}[/dim]")


def recommendation_markdown(recommendation: Recommendation) -> str:
    choice = recommendation.recommendation
    if choice is None:
        return f"No backend recommendation: {prose(recommendation.reason)}\n"
    lines = [
        f"**Recommended backend: {choice}** — {prose(recommendation.reason)}",
        "",
        *markdown_table(estimates_rows(recommendation.estimates, recommendation.accelerator or "gpu")),
    ]
    pins = recommendation.pinned
    if pins:
        lines += ["", "Pinned to the CPU in the mixed estimate:"]
        for pin in pins:
            where = f"cell {pin.cell + 1}" if pin.cell is not None else "cell ?"
            lines.append(
                f"- {where}: {', '.join(pin.functions) or '(cell)'} (saves {format_seconds(pin.saving_s)}"
                f"{_start_moves(pin)})"
            )
    return "\n".join(lines) + "\n"


def print_unavailable(unavailable: Iterable[Mapping[str, Any]]) -> None:
    for item in unavailable:
        run = f" (run {item['run_id']})" if item["run_id"] else ""  # every entry of BackendsResult.runs has one
        console.print(
            f"[yellow]backend {literal(item['backend'])} unavailable{literal(run)}[/yellow]: {literal(item['reason'])}"
        )


def backends_markdown(result: Any) -> str:
    """``profile --backends`` as markdown: unavailable backends, the comparison, the recommendation."""
    text = ""
    for item in result.unavailable:
        text += f"- backend **{item['backend']}** unavailable: {item['reason']}\n"
    if result.comparison is not None:
        text += ("\n" if text else "") + comparison_markdown(result.comparison)
    if result.recommendation is not None:
        text += "\n" + recommendation_markdown(result.recommendation)
    return text


def print_backends(
    result: Any, *, store_path: Path | None = None, commands: Mapping[str, str] | None = None, diagnosis: bool = True
) -> None:
    """``profile --backends`` on the terminal: comparison, recommendation and each run's top findings (``commands``:
    the command that shows a backend's findings in full)."""
    print_unavailable(result.unavailable)
    if result.comparison is not None:
        print_comparison(result.comparison)
        if result.recommendation is not None:
            print_recommendation(result.recommendation)
    elif result.available:
        console.print(f"only the {literal(result.available[0]['backend'])} backend ran: nothing to compare")
    saved = ", ".join(f"{r['backend']}: run {r['run_id']}" for r in result.runs if r["run_id"])
    if saved:
        console.print(literal(f"saved {saved} in {store_path}"), style="dim")
    for backend, findings in result.findings.items() if diagnosis else ():
        record = result.record_of(backend)
        command = (commands or {}).get(backend) or f"nbscope diagnose {getattr(record, 'run_id', None) or 'RUN'}"
        console.print(f"\n[bold]diagnosis of the {literal(backend)} run[/bold]")
        print_top_findings(findings, record, command)
