"""The statuses of a cell, and the sets every reader sorts them by: whether a cell finished, failed or ran at all.

One place, so that "the cell ran" means the same in the totals (``cells_run``), the typed cell (``Cell.ran``) and
the diagnosis: a cell ran when it came to an end, cleanly or not; an interrupted cell was cut short before it
did, and a cell that was not run or was skipped never started.
"""

from __future__ import annotations

CELL_STATUSES = ("ok", "error", "expected-error", "timeout", "kernel-died", "interrupted", "not-run", "skipped")
# Statuses of a cell that ran to its end (an expected error is the notebook's own intent).
FINISHED = ("ok", "expected-error")
FAILED = ("error", "timeout", "kernel-died")
RAN = (*FINISHED, *FAILED)  # a cell that ran, whatever its end
# Statuses of a cell stopped before its end (by its timeout, its kernel's death, a stop signal): its time is a
# lower bound of the whole cell's.
CUT_SHORT = ("timeout", "kernel-died", "interrupted")
