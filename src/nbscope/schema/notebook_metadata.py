"""A notebook's own metadata (nbformat 4 ``metadata``), typed: what nbscope reads of it, the kernel it names.
Decoded where it is read (``collect.notebook``); a notebook that names none reads as None.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KernelSpec:
    name: str | None  # the Jupyter kernel to run the notebook in (python3)
    display_name: str | None


@dataclass(frozen=True, slots=True)
class NotebookMetadata:
    kernelspec: KernelSpec
