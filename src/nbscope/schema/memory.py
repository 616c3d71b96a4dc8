"""The typed view of a cell's memory readings: ``rss`` (the kernel's resident memory) and ``gpu_memory`` (the
kernel's GPU memory, from NVML), as the probe writes them at the cell's start and end.

The cell model reads both as this view once, at load (``Cell.rss``, ``Cell.gpu_memory``; a cell without one reads
as a reading of nothing). A reading the probe did not take, or holds as something other than a finite number, is
None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Check, Measured

Bytes = Annotated[Measured, Check(0, math.inf, "size")]


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """Bytes in use when the cell started and when it ended, and the most while it ran (resident memory only)."""

    before_bytes: Bytes
    after_bytes: Bytes
    peak_bytes: Bytes

    def refuse(self) -> tuple[str, str] | None:
        """A peak below what was in use as the cell started or ended (the probe's peak is a high-water mark)."""
        low = max((b for b in (self.before_bytes, self.after_bytes) if b is not None), default=None)
        if self.peak_bytes is not None and low is not None and self.peak_bytes < low:
            return ".peak_bytes", f"is {self.peak_bytes:g}, below the {low:g} bytes in use as the cell started or ended"
        return None
