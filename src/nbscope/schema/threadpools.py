"""What ``threadpoolctl.threadpool_info()`` says of each thread pool a process has loaded (BLAS, OpenMP),
typed: decoded once where the fingerprint reads it (``collect.fingerprint``). A field threadpoolctl leaves out
(``architecture`` is OpenBLAS's only) reads as None.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThreadPool:
    """One of ``threadpool_info()``'s entries, under threadpoolctl's own names."""

    user_api: str | None  # blas, openmp
    internal_api: str | None  # openblas, mkl, blis, openmp
    version: str | None
    num_threads: int | None
    architecture: str | None
    threading_layer: str | None
    filepath: str | None
