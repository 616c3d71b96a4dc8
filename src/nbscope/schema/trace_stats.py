"""An event's stats in a ``jax.profiler`` trace (an XSpace event's ``stats``, as ``ProfileData`` gives them),
as far as the cell timelines read them (``collect.timeline``), typed: decoded once per event where they are
read. A stat the event lacks reads as None (or, for a text, as "").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbscope.schema.codec import Name


@dataclass(frozen=True, slots=True)
class EventStats:
    hlo_op: Any  # the op an XLA:CPU thunk ran; None: the event is no thunk (its value is not read)
    hlo_module: Name  # the program an op belongs to, as a name
    memcpy_details: str  # a GPU copy's ``size:<bytes> ...``
