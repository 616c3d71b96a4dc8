"""A profile's live progress on a terminal: the current cell and the elapsed time, shown once the notebook is read
(its cells counted) and gone when the run ends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbscope._redact import shorten
from nbscope.render.terminal import console, literal

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from nbscope.collect.notebook import CodeCell, Notebook


class ProfileProgress:
    """The bar over every cell of every repeat; nothing at all when not ``enabled`` (not a terminal, or an
    output format that stands alone)."""

    def __init__(self, repeat: int, enabled: bool) -> None:
        self.repeat, self.enabled = repeat, enabled
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def start(self, notebook: Notebook) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.bar.add_task("starting kernel", total=len(notebook.code_cells) * self.repeat)
        self.bar.start()

    def started(self, cell: CodeCell) -> None:
        if self.bar is not None and self.task is not None:
            where = f" line {cell.line}" if cell.line else ""
            self.bar.update(
                self.task, description=f"cell {cell.index + 1}{where}: {literal(shorten(cell.first_line, 40))}"
            )

    def done(self, _: object) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)

    def __enter__(self) -> ProfileProgress:
        return self

    def __exit__(self, *_: object) -> None:
        if self.bar is not None:
            self.bar.stop()
