"""The hardware suite's workers: each group (Python, NumPy, Numba, JAX, ...) measured in a fresh process."""
