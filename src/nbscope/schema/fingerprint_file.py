"""A file ``nbscope info --diff`` compares: a fingerprint (``nbscope info --json``) or a whole run record, which
holds one under ``fingerprint``. The fingerprint is kept as stored: the diff walks every field it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbscope.schema.codec import decode


@dataclass(frozen=True, slots=True)
class RecordFingerprint:
    fingerprint: Mapping[str, Any] | None  # a run record's fingerprint; None: the document is no run record


def fingerprint_in(document: object) -> dict[str, object] | None:
    """The fingerprint ``document`` is, or the one it holds (a run record's); None: neither."""
    if isinstance(document, dict) and (held := decode(RecordFingerprint, document).fingerprint) is not None:
        document = held
    return document if isinstance(document, dict) and "fingerprint_version" in document else None
