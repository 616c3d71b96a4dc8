"""Benchmark input data (imported in workers only: it needs numpy)."""

from __future__ import annotations

import numpy as np


def host_array(shape: int | tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Random values in [0.5, 1.5): no denormals, no overflow in x**2, the same data for every backend."""
    rng = np.random.default_rng(seed)
    values: np.ndarray = rng.random(shape, dtype=np.dtype(dtype)) + np.asarray(0.5, dtype=dtype)
    return values
