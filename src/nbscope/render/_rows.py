"""One row model per view: a view builds its table once, as :class:`Rows` of plain :class:`Item` values, and
the terminal and markdown are two formats of it (``terminal.terminal_table``, ``_markdown.markdown_table``).

Why plain items: a row holds what the reader is told (the text and whether it is code, a figure or a warning),
never rich markup or markdown syntax, so neither format can print what the other was given, and a record's text
is escaped in exactly one place per format.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Item:
    """One value of a row: its text as written, and how it is set off."""

    text: str = ""
    style: str = ""  # a rich style on a terminal ("red", "bold green"); markdown shows the text only
    code: bool = False  # `code` in markdown (a source line, a file name)
    strong: bool = False  # **bold** in markdown, bold on a terminal (a total)
    lead: str = ""  # plain words before a code text ("cell 3: "), never set as code
    tail: str = ""  # plain words after it (" (edited)")

    @classmethod
    def of(cls, value: object) -> Item:
        if isinstance(value, Item):
            return value
        return cls("" if value is None else str(value))


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a view. ``role`` says how it gives way on a narrow console: ``number`` never does
    (figures are never cut or wrapped), ``source`` gives way first (one line, cut with "…"), ``text`` wraps
    once the source columns are down to ``min_width``, ``path`` wraps after "/", ``parts`` after " · "."""

    header: str
    justify: str = "left"
    role: str = "text"
    min_width: int = 8
    optional: bool = False  # left out on a terminal when no row has anything in it (markdown keeps its shape)
    markdown: str | None = None  # its header in markdown (default: ``header`` capitalised)
    terminal: bool = True  # shown on a terminal
    in_markdown: bool = True  # shown in markdown

    @property
    def markdown_header(self) -> str:
        return self.markdown if self.markdown is not None else self.header[:1].upper() + self.header[1:]


@dataclass(frozen=True, slots=True)
class Rows:
    """A view's table: its columns and its rows of items (one per column), and a title."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Item, ...], ...] = field(default_factory=tuple)
    title: str | None = None

    @classmethod
    def of(cls, columns: Sequence[Column], rows: Iterable[Sequence[object]], title: str | None = None) -> Rows:
        built = tuple(tuple(Item.of(value) for value in row) for row in rows)
        for row in built:
            if len(row) != len(columns):
                raise ValueError(f"a row of {len(row)} items for {len(columns)} columns")
        return cls(tuple(columns), built, title)

    def shown(self, *, markdown: bool) -> tuple[list[Column], list[list[Item]]]:
        """The columns one format shows (on a terminal, an optional column with nothing in it is left out)
        and their items."""
        keep = [
            i
            for i, c in enumerate(self.columns)
            if (c.in_markdown if markdown else c.terminal)
            and (markdown or not c.optional or any(row[i].text for row in self.rows))
        ]
        return [self.columns[i] for i in keep], [[row[i] for i in keep] for row in self.rows]
