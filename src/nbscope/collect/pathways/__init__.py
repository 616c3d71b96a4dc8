"""Executors that run one notebook as a plain script, in a kernel, or in a jupyter-book build."""
