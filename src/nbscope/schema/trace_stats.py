"""An event's stats in a ``jax.profiler`` trace (an XSpace event's ``stats``, as ``ProfileData`` gives them),
as far as the cell timelines (``collect.timeline``) and the attribution of ops to programs
(``collect.program``) read them, typed: decoded once per event where they are read. A stat the event lacks
reads as None (or, for a text, as "").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema import _fields
from nbscope.schema.codec import Name, Read


@dataclass(frozen=True, slots=True)
class EventStats:
    hlo_op: Any  # the op an XLA:CPU thunk ran; None: the event is no thunk (its value is not read)
    hlo_module: Name  # the program an op belongs to, as a name
    memcpy_details: str  # a GPU copy's ``size:<bytes> ...``


def _module_or_unknown(value: object) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class OpStats:
    """An XLA op event's stats as the attribution of ops to programs reads them."""

    program_id: Annotated[int | None, Read(_fields.integer)]  # None: the op names no program (it is skipped)
    run_id: Annotated[int | None, Read(_fields.integer)]  # which execution of it; None: the event counts alone
    hlo_module: Annotated[str, Read(_module_or_unknown)]  # its program's module, "?" when the event lacks one
