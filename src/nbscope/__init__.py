"""nbscope: per-cell profiles of numerical notebooks on CPU and GPU, and why one run is slower.

Public names load on first use, so ``nbscope --version`` and the in-kernel probe stay cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from nbscope._version import __version__

_LAZY = {
    "NbscopeError": "nbscope._errors",
    "RunRecord": "nbscope.record.run",
    "Store": "nbscope.record.store",
    "bench": "nbscope.api.public",
    "collect_fingerprint": "nbscope.api.info",
    "compare": "nbscope.api.public",
    "diagnose": "nbscope.api.public",
    "diff_fingerprints": "nbscope.api.info",
    "load_fingerprint": "nbscope.api.info",
    "open_store": "nbscope.api.public",
    "profile": "nbscope.api.public",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbscope' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
