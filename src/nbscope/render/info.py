"""What ``nbscope info`` prints as JSON: the fingerprint itself, or the fields two fingerprints differ in (the
tables are :func:`nbscope.render.terminal.print_fingerprint` and ``print_fingerprint_diff``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence


def info_json(
    fingerprint: Mapping[str, object] | None, differences: Sequence[tuple[str, object, object]] | None
) -> str:
    """The fields two fingerprints differ in (``field``, value in A, value in B), else the fingerprint."""
    if differences is not None:
        return json.dumps([{"field": f, "a": a, "b": b} for f, a, b in differences], indent=1, default=str)
    return json.dumps(fingerprint, indent=1, default=str)
