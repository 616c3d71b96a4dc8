"""Plain-text units (seconds, bytes) shared by analyses and renderers; no rich, no markup."""

from __future__ import annotations

import math
import re

_WHOLE = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"[+-]?([0-9]{1,18}(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")


def whole(text: str, low: int = 0, high: int = 10**18 - 1) -> int | None:
    """The whole number ``text`` is in ASCII digits (18 at most), within ``low``..``high``; None otherwise. The one
    parser of a count a user or the environment writes: ``int()`` takes ``١٢`` as 12, fails on ``²`` (which
    ``str.isdigit`` passes) and on more than 4,300 digits."""
    found = int(text) if _WHOLE.fullmatch(text.strip()) else None
    return found if found is not None and low <= found <= high else None


def decimal(text: str) -> float | None:
    """The number ``text`` is in ASCII (``0.5``, ``1e-3``; ``inf``: no limit); None otherwise (``nan``, ``١٢``)."""
    if text.strip().lower() in ("inf", "+inf"):
        return math.inf
    return number(float(text)) if _DECIMAL.fullmatch(text.strip()) else None


def number(value: object) -> float | None:
    """A finite real number, or None (bools, strings, NaN and infinities are not figures)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def seconds(given: object) -> str:
    """``1 h 5 min``, ``25 min 8 s``, ``1.23 s``, ``45.6 ms``, ``8 µs``; ``–`` when not a number."""
    value = number(given)
    if value is None:
        return "–"
    if value < 0:
        return "-" + seconds(-value)
    if value >= 59.995:  # what would print as 60.00 s
        whole = round(value)
        if whole >= 3600:
            hours, rest = divmod(whole, 3600)
            return f"{hours} h {round(rest / 60)} min" if round(rest / 60) < 60 else f"{hours + 1} h 0 min"
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.1:
        return f"{value * 1e3:.0f} ms"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def size(given: object) -> str | None:
    """``1.5 GiB``; None when not a number."""
    value = number(given)
    if value is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return str(value)


def seconds_range(low_given: object, high_given: object) -> str:
    """``80.5–82.5 s``, ``1 min 20 s–1 min 22 s``, ``41.00 s–2 min 44 s``, ``≥ 12 ms`` (no upper bound), ``1.2 s`` (one figure); ``–`` without a low figure."""
    low, high = number(low_given), number(high_given)
    if low is None:
        return "–"
    if high is None:
        return f"≥ {seconds(low)}"
    if abs(high - low) <= 0.005 * max(high, 1e-12):
        return seconds(low)
    low_text, high_text = seconds(low), seconds(high)
    if len(high_text.split()) > 2 and 10 <= low < 59.5:  # "41 s–2 min 44 s": the same precision at both ends
        low_text = f"{round(low)} s"
    low_parts, high_parts = low_text.split(), high_text.split()
    # Only a single figure with the same unit shares it ("80.5–82.5 s"); "1 min 20 s" is printed whole.
    if len(low_parts) == len(high_parts) == 2 and low_parts[1] == high_parts[1]:
        return f"{low_parts[0]}–{high_text}"
    return f"{low_text}–{high_text}"


def count(n: object, noun: str, plural: str | None = None) -> str:
    """``1 cell``, ``3 cells``, ``0 cells``: a count with its noun agreeing (``plural`` where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
