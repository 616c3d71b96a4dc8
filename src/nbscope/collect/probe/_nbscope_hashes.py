"""A hash of each program JAX compiles, per cell, in every run (no ``--forecast`` needed).

Copied beside the probe into every kernel: standard library only, and jax is never imported here. Once the
notebook has imported jax, :meth:`ProgramHashes.attach` wraps ``jax._src.compiler.compile_or_get_cached`` (the
one call every jit, pmap and eager op goes through, persistent-cache hits included) and hashes the module it is
given: its text without debug information (no file names or line numbers), so the hash changes with the
program and not with where its source sits. The same hash before and after a package change means the
program JAX handed to XLA did not change: a slowdown then came from the backend. Costs about 1 ms per
program (jax_intro: 79 programs, 76 ms, 0.25 % of its backend compile time); ``NBSCOPE_PROBE_HASHES=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

HASH_CHARS = 16
_sha256 = hashlib.sha256


class ProgramHashes:
    """``{"name", "hash"}`` of each program compiled since the last :meth:`take`, in compile order."""

    def __init__(self) -> None:
        self.current: list[dict[str, str]] = []

    def attach(self) -> bool:
        compiler = sys.modules.get("jax._src.compiler")
        original = getattr(compiler, "compile_or_get_cached", None)
        if original is None or getattr(original, "_nbscope_hashes", False):
            return False
        recorder = self

        def compile_or_get_cached(backend: object, computation: object, *args: object, **kwargs: object) -> Any:
            try:
                recorder.add(computation)
            except Exception:  # a module this JAX prints differently: no hash, the compile goes on
                pass
            return original(backend, computation, *args, **kwargs)

        compile_or_get_cached._nbscope_hashes = True  # type: ignore[attr-defined]
        compiler.compile_or_get_cached = compile_or_get_cached  # type: ignore[union-attr]
        return True

    def add(self, module: Any) -> None:  # an MLIR module of the jaxlib that runs (never imported here)
        text = module.operation.get_asm(enable_debug_info=False, binary=True)
        name = str(module.operation.attributes["sym_name"]).strip('"')
        self.current.append({"name": name, "hash": _sha256(text).hexdigest()[:HASH_CHARS]})

    def take(self) -> list[dict[str, str]] | None:
        taken, self.current = self.current, []
        return taken or None
