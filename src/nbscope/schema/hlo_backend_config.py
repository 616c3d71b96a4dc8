"""An HLO instruction's ``backend_config`` (the JSON XLA prints after ``backend_config=`` in an optimised module's
text), as far as ``collect.hlo`` reads it: the trip count XLA's ``WhileLoopTripCountAnnotator`` writes into a
``while`` (``{"known_trip_count":{"n":"10"}}``). Decoded once where it is read; a config without one, or with
one that is no count, reads as None: the loop's count is then only known at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from nbscope.schema.codec import Read


def _count(value: object) -> int | None:
    """A count as the proto's JSON writes an int64 (a string, ``"10"``), or as a number; else None."""
    try:
        count: int = int(value)  # type: ignore[call-overload]
        return count
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True, slots=True)
class KnownTripCount:
    n: Annotated[int | None, Read(_count)]


@dataclass(frozen=True, slots=True)
class BackendConfig:
    known_trip_count: KnownTripCount | None  # None: XLA knows no count for this while
