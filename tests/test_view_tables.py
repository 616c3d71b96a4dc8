"""The views' tables keyed by a closed set of words (a verdict, a severity, how cells were paired) are whole:
a view indexes them, so a word without an entry would be a KeyError in front of the reader, not a blank."""

from __future__ import annotations

from typing import Any, Literal, get_args

import pytest

from nbscope.analyse import recommend, run_summary
from nbscope.analyse.attribution import FailureKind
from nbscope.analyse.compare import WinnerSide
from nbscope.analyse.diagnose._base import Severity
from nbscope.analyse.forecast import NotebookVerdict
from nbscope.analyse.gate import GateVerdict
from nbscope.analyse.versions import BisectVerdict
from nbscope.record.cells import CellMatch
from nbscope.render import compare, findings, forecast, gate, versions


def _words(closed: Any) -> set[Any]:
    """Every value of a Literal, through unions of them (and None where the union allows it)."""
    found: set[Any] = set()
    for arg in get_args(closed):
        found |= _words(arg) if get_args(arg) else {None if arg is type(None) else arg}
    return found


@pytest.mark.parametrize(
    ("table", "closed"),
    [
        (gate.VERDICT_MARK, GateVerdict),
        (gate.VERDICT_STYLE, GateVerdict),
        (versions.BISECT_MARK, BisectVerdict),
        (versions.BISECT_STYLE, BisectVerdict),
        (forecast.VERDICT_STYLE, NotebookVerdict | Literal["not forecast"]),
        (recommend._CHOICE, NotebookVerdict),
        (findings.SEVERITY_STYLE, Severity),
        (run_summary.STATUS_OF_FAILURE, FailureKind),
        (compare.MATCH_NOTE, CellMatch),
        (compare.WINNER_STYLE, WinnerSide | None),
    ],
)
def test_a_table_of_a_closed_set_has_every_word(table: dict[Any, str], closed: Any) -> None:
    assert set(table) == _words(closed)
