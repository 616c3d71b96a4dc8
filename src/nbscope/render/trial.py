"""Views of a trial (``nbscope try``, and the trials ``show``, ``diagnose --try`` and the report list): the cell's
time and the notebook's total both ways with the gate's verdict, the values checked, and the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbscope._units import count, seconds

if TYPE_CHECKING:
    from nbscope.analyse.trial import TrialResult


def trial_lines(result: TrialResult) -> list[str]:
    """The trial in a few plain lines, the same for the terminal and markdown."""
    if result.not_tested:
        return [f"{result.label}, {result.remedy}: not tested here", f"  {result.not_tested}"]
    runs = (
        f"runs {result.as_is_run} (as it is) and {result.remedy_run} (remedy), {count(result.repeats, 'repeat')} each"
    )
    floor = f", noise floor {seconds(result.floor_s)}" if result.floor_s is not None else ""
    test = f", p={result.p_value:.2g}" if result.p_value is not None else ", too few repeats for a test"
    if result.cell_verdict.startswith(("fixed", "failed", "not ")):  # no change in time to test: it ran or it did not
        floor = test = ""
    if result.reference_run is not None:
        runs += f"; run {result.reference_run} with JAX on the CPU"
    lines = [
        f"{result.label} — {result.remedy} (of run {result.of_run}; {runs})",
        f"  cell:     {seconds(result.cell_as_is_s)} → {seconds(result.cell_remedy_s)}  {result.cell_verdict}{test}{floor}",
        f"  notebook: {seconds(result.total_as_is_s)} → {seconds(result.total_remedy_s)}  {result.total_verdict}",
        f"  {result.results_phrase()}",
    ]
    shown = "differs" if result.results == "differ" else "close"  # those the results line gives
    others = [v.phrase() for v in result.values if v.verdict != shown]
    lines += [f"    {'; '.join(others)}"] if others else []
    return lines + [f"  note: {note}" for note in result.notes]


def print_trial(result: TrialResult) -> None:
    print("\n".join(trial_lines(result)))


def trials_summary(results: list[TrialResult]) -> list[str]:
    """One line a trial, for ``show`` and the report: ``trial: cell 3 unroll:8: cell 3 1.2 s → 0.4 s (faster ...)``."""
    return [f"trial {r.remedy}: {r.sentence()}" for r in results]


def trials_html(results: list[TrialResult]) -> str:
    """The report's and a lecture page's table of remedies tried (empty without any)."""
    from nbscope.render.html._base import e

    if not results:
        return ""
    head = "<tr><th>run</th><th>remedy</th><th>cell</th><th>notebook</th><th>results</th><th>runs</th></tr>"
    rows = [
        f"<tr><td>{r.of_run}</td><td>{e(r.remedy)}</td>"
        + (
            f'<td colspan="3">not tested here: {e(r.not_tested)}</td><td></td>'
            if r.not_tested
            else f"<td>{e(r.label)} — {e(seconds(r.cell_as_is_s))} → {e(seconds(r.cell_remedy_s))} ({e(r.cell_verdict)}"
            + (f", p={r.p_value:.2g}" if r.p_value is not None else "")
            + f")</td><td>{e(seconds(r.total_as_is_s))} → {e(seconds(r.total_remedy_s))} ({e(r.total_verdict)})</td>"
            f"<td>{e(r.results_phrase())}</td><td>{r.as_is_run}, {r.remedy_run}</td>"
        )
        + "</tr>"
        for r in results
    ]
    return f"<h2>Remedies tried (nbscope try)</h2><table>{head}{''.join(rows)}</table>"
