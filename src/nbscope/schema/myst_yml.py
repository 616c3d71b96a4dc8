"""A mystmd (jupyter-book 2) ``myst.yml``, as far as an audit reads it: its ``project`` and the project's
``toc``. Read once, where the file is loaded; the toc's entries are walked as written (files, patterns,
children)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema.codec import Read

__all__ = ["MystProject", "MystYml"]


def _malformed(value: object) -> bool:
    """A ``project`` given as something other than a mapping (an empty one counts as none)."""
    return bool(value) and not isinstance(value, Mapping)


@dataclass(frozen=True, slots=True)
class MystProject:
    toc: Any  # as written; None: no toc (mystmd then takes every page of the folder)


@dataclass(frozen=True, slots=True)
class MystYml:
    project: MystProject | None  # None: no project mapping
    project_malformed: Annotated[bool, Read(_malformed, key="project")]
