"""``nbscope runs --live``: one line per running kernel (its notebook, cell and how long that cell has run)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nbscope import _units as units
from nbscope._redact import shorten
from nbscope.render._clean import for_terminal

if TYPE_CHECKING:
    from nbscope.api.live import RunningKernel


NOTHING_RUNS = "Nothing runs: no profile, audit or traced build of this user has a kernel running now."


def live_lines(kernels: Sequence[RunningKernel]) -> list[str]:
    """Lines for :func:`nbscope.api.live.running_kernels`' answer (plain text: names are cleaned of escapes)."""
    if not kernels:
        return [NOTHING_RUNS]
    lines = []
    for kernel in kernels:
        if kernel.kernel_pid is None:
            lines.append(
                f"{kernel.kind} (nbscope {kernel.nbscope_pid}): no kernel runs at this moment (one starting, "
                f"or between notebooks); {kernel.cells_done} cell(s) done so far"
            )
            continue
        notebook = for_terminal(kernel.notebook) if kernel.notebook else "a notebook nbscope does not know"
        where = f"{kernel.kind} (nbscope {kernel.nbscope_pid}), kernel {kernel.kernel_pid}: {notebook}"
        if kernel.elapsed_s is None:
            lines.append(f"{where}: between cells, {kernel.cells_done} done")
        elif kernel.cell is None:
            lines.append(f"{where}: a cell not in that notebook, running for {units.seconds(kernel.elapsed_s)}")
        else:
            line = f" (line {kernel.line})" if kernel.line else ""
            lines.append(
                f"{where}: cell {kernel.cell}{line} `{for_terminal(shorten(kernel.first_line or '', 60))}`, "
                f"running for {units.seconds(kernel.elapsed_s)}"
            )
    return lines
