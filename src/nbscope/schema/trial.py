"""What a trial run (``nbscope try``) holds beyond a profile, with the values each field can hold: its link to the
run it tests (``settings.trial``) and, on the remedy's side, the judgement (``measurements.trial``, which
:mod:`nbscope.analyse.trial` reads whole). ``schema.validate`` checks them once, at load, with :func:`refuse`: a
link only on a trial run, and a judgement of the cell and run the link names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema.codec import MAX_CELLS, Check, Count, Invalid, Time, strict

SIDES = ("as-is", "remedy", "reference")  # reference: the notebook through the cell with JAX on the CPU
VERDICTS = ("equal", "close", "differs", "varies", "not compared")
RunId = Annotated[int | None, Check(1, 2**63 - 1, "run id")]
CellNumber = Annotated[int, Check(1, MAX_CELLS, "cell number", required="integer")]  # 1-based, as the ledger's
Difference = Annotated[float | None, Check(0, math.inf, "difference")]


def _side(side: str) -> str | None:
    return None if side in SIDES else f"is {side[:40]!r}, not one of {', '.join(SIDES)}"


def _verdict(verdict: str) -> str | None:
    return None if verdict in VERDICTS else f"is {verdict[:40]!r}, not one of {', '.join(VERDICTS)}"


@dataclass(frozen=True, slots=True)
class TrialLink:
    """``settings.trial``: the run tried, its cell, the remedy and this run's side."""

    of: RunId
    cell: CellNumber
    remedy: Annotated[str, Check(required="string")]
    side: Annotated[str, Check(rule=_side, required="string")]
    through_cell: bool = False


@dataclass(frozen=True, slots=True)
class ValueFigures:
    name: str
    verdict: Annotated[str, Check(rule=_verdict)]
    abs_diff: Difference
    rel_diff: Difference


@dataclass(frozen=True, slots=True)
class TrialFigures:
    """``measurements.trial``: the figures of the judgement that a reader prints."""

    of_run: RunId
    cell: CellNumber
    as_is_run: RunId
    remedy_run: RunId
    reference_run: RunId
    repeats: Count
    cell_as_is_s: Time
    cell_remedy_s: Time
    total_as_is_s: Time
    total_remedy_s: Time
    floor_s: Time
    p_value: Annotated[float | None, Check(0, 1, "probability")]
    values: tuple[ValueFigures, ...]


def refuse(kind: str, settings: Mapping[str, Any], judged: TrialFigures | None) -> None:
    """Refuse (``Invalid``) a trial run without its link, a link or judgement on another kind of run, and a judgement
    of another cell or run than its link names."""
    link = strict(TrialLink, settings["trial"], "settings.trial") if "trial" in settings else None
    if (kind == "trial") != (link is not None):
        wrong = "is missing: a trial run names the run it tests" if link is None else f"is on a {kind} run"
        raise Invalid("settings.trial", wrong)
    if judged is not None and link is None:
        raise Invalid("measurements.trial", f"is on a {kind} run")
    if judged is not None and link is not None and (judged.cell, judged.of_run) != (link.cell, link.of):
        named = f"cell {judged.cell} of run {judged.of_run}"
        raise Invalid("measurements.trial", f"judges {named}, not the cell {link.cell} of run {link.of} it links")
