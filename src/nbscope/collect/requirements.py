"""What a notebook needs installed: the packages its code cells import, at the versions installed here.

Used when ``nbscope versions`` builds an environment and the user names no requirements file: the
environment then gets the same versions of everything the notebook imports as nbscope's own
environment has, except the packages the variant itself names.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from nbscope.collect.environments import canonical_name
from nbscope.collect.notebook import Notebook

# Packages every environment gets: the kernel itself (at nbscope's own version, so that every variant runs
# under the same kernel).
KERNEL_PACKAGES = ("ipykernel",)

_IMPORT_LINE = re.compile(r"^\s*(?:from\s+([A-Za-z_][\w]*)[\w.]*\s+import|import\s+(.+))")


@dataclass
class NotebookRequirements:
    """Requirement lines for pip, and what could not be pinned (imported but not installed here)."""

    lines: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)  # top-level module names
    modules: list[str] = field(default_factory=list)  # every third-party top-level module imported


def imported_modules(sources: Iterable[str]) -> list[str]:
    """Top-level module names the code imports, in order of first import (IPython magics and shell lines
    are skipped; a cell Python cannot parse is read line by line)."""
    found: list[str] = []
    for source in sources:
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        names: list[str] = []
        try:
            tree = ast.parse(code)
        except SyntaxError:
            for line in code.splitlines():
                match = _IMPORT_LINE.match(line)
                if match and match.group(1):
                    names.append(match.group(1))
                elif match and match.group(2):
                    names += [
                        part.strip().split()[0].split(".")[0] for part in match.group(2).split(",") if part.strip()
                    ]
        else:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names += [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.append(node.module.split(".")[0])
        for name in names:
            if name and name not in found:
                found.append(name)
    return found


def kernel_requirements(exclude: Sequence[str] = ()) -> list[str]:
    """Pins of the kernel packages at the versions installed here, less those named in ``exclude``."""
    skipped = {canonical_name(name) for name in exclude}
    return [_pin(name) for name in KERNEL_PACKAGES if canonical_name(name) not in skipped]


def _pin(name: str) -> str:
    try:
        return f"{canonical_name(name)}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return canonical_name(name)


def notebook_requirements(notebook: Notebook, *, exclude: Sequence[str] = ()) -> NotebookRequirements:
    """Pins (``name==version``) of the distributions that provide the notebook's imports in this
    environment, and of the kernel; distributions named in ``exclude`` (canonical names) are left to the
    caller."""
    skipped = {canonical_name(name) for name in exclude}
    providers = metadata.packages_distributions()
    result = NotebookRequirements()
    distributions: list[str] = []
    for module in imported_modules(cell.source for cell in notebook.code_cells):
        if module in sys.stdlib_module_names or module == "__future__":
            continue
        result.modules.append(module)
        names = providers.get(module)
        if not names:
            result.unresolved.append(module)
            continue
        for name in names:
            if name not in distributions:
                distributions.append(name)
    distributions += [name for name in KERNEL_PACKAGES if name not in distributions]
    result.lines = [_pin(name) for name in distributions if canonical_name(name) not in skipped]
    return result
