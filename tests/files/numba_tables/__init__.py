"""A tiny stand-in for an installed library (as quantecon is) for diag_library_numba.ipynb: its public function
calls a Numba kernel that compiles on the first call, inside a package the notebook's reader cannot edit."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit
def _fill_decay(table: np.ndarray, rate: float) -> np.ndarray:
    n = table.shape[0]
    for i in range(n):
        for j in range(n):
            table[i, j] = np.exp(-rate * abs(i - j))
    return table


def decay_matrix(n: int, rate: float = 0.5) -> np.ndarray:
    """A row-stochastic (n, n) matrix whose weights decay with the distance between states."""
    table = _fill_decay(np.empty((n, n)), rate)
    return table / table.sum(axis=1)[:, None]
