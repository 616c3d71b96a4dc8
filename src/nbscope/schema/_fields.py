"""The few readers every typed view of a record uses for one field: a number, a count, a text, an object.

One place, so that "a figure" means the same in every view: a bool is never a number, NaN and infinities are
never figures, and what a field lacks reads as None (unknown), never as a guess. It imports only
``nbscope._units`` (whose ``number`` it shares), so each view module can use it without an import cycle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from nbscope._units import number as number  # a finite number, as a float, else None


def figure(value: object) -> int | float | None:
    """A finite number as recorded (an int stays an int, which JSON carried on keeps), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def time(value: object) -> float | None:
    """A time: finite and not negative, else None (never a measurement)."""
    found = number(value)
    return found if found is not None and found >= 0 else None


def integer(value: object) -> int | None:
    """An int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def whole(value: object) -> int | None:
    """A whole number (a count, a size, an index); a float that is whole is one too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return integer(value)


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def mapping(value: object) -> Mapping[str, Any]:
    """An object, or an empty one for anything else."""
    return value if isinstance(value, Mapping) else {}


def times(value: object) -> Mapping[str, float] | None:
    """An object of named times (a cell's ``collection``): its entries that are times; None when it is none."""
    if not isinstance(value, Mapping):
        return None
    return {str(key): seconds for key, item in value.items() if (seconds := time(item)) is not None}


def without_collection(wall: float | None, collection: float | None) -> float | None:
    """A cell's wall time less nbscope's own collection in it (``collection_s``; unknown counts as none): the
    time the notebook itself spent."""
    return None if wall is None else max(0.0, wall - (collection or 0.0))


def positive(value: object) -> int:
    """A count of at least one (repeats): a positive int as recorded, else 1."""
    found = integer(value)
    return found if found is not None and found > 0 else 1


def name(value: object) -> str | None:
    """Something a record names (a run id, a ratio), written as a string; None when absent."""
    return None if value is None else str(value)


def truth(value: object) -> bool | None:
    """A yes or no as recorded, any value read as one; None when absent."""
    return None if value is None else bool(value)


def line_range(value: object) -> tuple[int, int] | None:
    """A cell's first and last line (``[3, 9]``), else None."""
    if isinstance(value, list) and len(value) == 2 and all(integer(v) is not None for v in value):
        return (value[0], value[1])
    return None


def yes(value: object) -> bool:
    """True only for a JSON true."""
    return value is True


def without_surrogates(value: object) -> Any:
    """``value`` (parsed JSON, changed in place) with each lone surrogate (``"\\ud800"``: no character, it cannot be
    written as UTF-8) replaced by U+FFFD, in keys too: what a document from elsewhere may hold (a record, a store's
    summaries)."""
    if isinstance(value, str):
        return value if value.isascii() or not _SURROGATE.search(value) else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        for key in [k for k in value if isinstance(k, str) and without_surrogates(k) != k]:
            value[without_surrogates(key)] = value.pop(key)
        for key, item in list(value.items()):
            value[key] = without_surrogates(item)
    elif isinstance(value, list):
        value[:] = map(without_surrogates, value)
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")
