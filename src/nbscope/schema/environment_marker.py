"""The marker a finished environment carries (``.nbscope-env.json``, written last by ``collect.environments``
when everything is installed): what the environment was built from. Decoded once where the cache is listed;
a marker that is torn, or lacks a field, reads it as None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EnvironmentMarker:
    requirements: Any  # as written (a list of requirement lines): ``env list`` shows it so
