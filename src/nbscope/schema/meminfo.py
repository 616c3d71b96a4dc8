"""Linux's ``/proc/meminfo``, as far as the fingerprint reads it (``collect.fingerprint``): the machine's memory
and how much of it is available, typed. The file's lines (``MemTotal:  16318480 kB``) are read as bytes by the
collector and decoded once here; a line the kernel does not write (an old or unusual one) reads as None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Read


@dataclass(frozen=True, slots=True)
class Meminfo:
    total_bytes: Annotated[int | None, Read(key="MemTotal")]
    available_bytes: Annotated[int | None, Read(key="MemAvailable")]  # what could be allocated without swapping
