"""What ``nbscope info`` prints as JSON: the fingerprint itself, or the fields two fingerprints differ in (the
tables are :func:`nbscope.render.terminal.print_fingerprint` and ``print_fingerprint_diff``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbscope.api.info import InfoOutcome


def info_json(outcome: InfoOutcome) -> str:
    if outcome.differences is not None:
        return json.dumps([{"field": f, "a": a, "b": b} for f, a, b in outcome.differences], indent=1, default=str)
    return json.dumps(outcome.fingerprint, indent=1, default=str)
