"""The README and docs/ as a newcomer reads them: one short line per command, a page per family, links that land."""

from __future__ import annotations

import re
from pathlib import Path

import click

from nbscope.cli import COMMAND_GROUPS, build_command

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_CELL = 200  # characters of one cell of the README's command table
CELL_SPLIT = re.compile(r"(?<!\\)\|")  # `\|` inside a cell is a literal bar
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def family_page(panel: str) -> str:
    """The docs page of a ``nbscope --help`` panel: its first word ("Look at stored runs" → look.md)."""
    return f"docs/commands/{panel.split(':')[0].split()[0].lower()}.md"


def command_table(text: str) -> list[list[str]]:
    """The rows (cells stripped) of the first table under ``## Commands``; the lines after its first blank line
    are checked to hold no stray row, which a blank line inside the table would leave as loose text."""
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    assert not lines[end].strip(), f"the command table runs into text: {lines[end]!r}"
    stray = [line for line in lines[end:] if line.startswith("| `nbscope ")]
    assert not stray, f"command rows after the table ended: {stray}"
    rows = [[cell.strip() for cell in CELL_SPLIT.split(line.strip())[1:-1]] for line in lines[start:end]]
    assert re.fullmatch(r"-+", rows[1][0]), "the table's second line is its separator"
    return rows[2:]


def test_readme_command_table_has_one_short_line_per_command() -> None:
    rows = command_table(README.read_text())
    group = build_command()
    assert isinstance(group, click.Group)
    named = [re.match(r"`nbscope ([a-z0-9-]+)", row[0]) for row in rows]
    assert all(named), [row[0] for row, name in zip(rows, named, strict=True) if not name]
    commands = [name.group(1) for name in named if name]
    # every command of `nbscope --help` once, in its order (the order of use)
    assert commands == list(group.commands)
    long = {cell: len(cell) for row in rows for cell in row if len(cell) > MAX_CELL}
    assert not long, long
    panels = {name: panel for panel, names in COMMAND_GROUPS.items() for name in names}
    for command, row in zip(commands, rows, strict=True):
        # the details column links the command's section on its family's page
        assert f"]({family_page(panels[command])}#{command})" in row[-1], (command, row[-1])


def test_the_quick_start_is_two_commands() -> None:
    """One installs and runs the main job on the bundled example; one runs the whole test suite, as CI does."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```bash\n(.*?)\n```", section, re.S) == [
        'python3 -m pip install -e ".[all]" && python3 -m nbscope profile examples/ledger_tour.md',
        "bash .ci/run",
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # a `# comment` in code is no heading
    return {slug(match) for match in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_family_page_has_a_section_per_command() -> None:
    for panel, names in COMMAND_GROUPS.items():
        page = ROOT / family_page(panel)
        assert page.is_file(), page
        assert set(names) <= anchors(page), (page.name, set(names) - anchors(page))


def test_every_link_of_the_readme_and_docs_lands() -> None:
    """Each relative link of README.md and docs/ names a file that exists and, with #anchor, a heading of it."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:: not this repository's
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
