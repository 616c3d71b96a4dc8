"""jaxlib's HLO tools in the nbscope process: module text from a serialised proto, XLA's cost analysis.

These are jaxlib internals (``jax._src.lib``), imported only when program data is collected; where one
is missing the caller falls back to what the HLO text alone says, and records that it did. The cost
analysis runs on a CPU client of its own (``make_cpu_client``), so nbscope never starts the GPU
backends of its own process (which would claim GPU memory while a kernel uses it).
"""

from __future__ import annotations

import re
from typing import Any

from nbscope._redact import shorten
from nbscope.schema.programs import Work

_METADATA = re.compile(r", metadata=\{[^{}]*\}")


class XlaTools:
    """HLO text and costs through jaxlib; ``error`` says why a part is unavailable."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._hlo: Any = None
        self._cost: Any = None
        self._client: Any = None
        try:
            from jax._src.lib import xla_client  # type: ignore[attr-defined]

            self._hlo = xla_client.hlo  # type: ignore[attr-defined]
        except Exception as exc:  # jax not installed here, or a jaxlib that moved these
            self.error = shorten(f"jaxlib HLO tools unavailable: {type(exc).__name__}: {exc}", 300)
            return
        try:
            from jax._src.lib import _jax, xla_client  # type: ignore[attr-defined]

            self._cost = _jax.hlo_module_cost_analysis
            self._client = xla_client.make_cpu_client()
        except Exception as exc:
            self.error = shorten(f"XLA cost analysis unavailable: {type(exc).__name__}: {exc}", 300)
            self._cost = None

    @property
    def available(self) -> bool:
        return self._hlo is not None

    def module_text(self, module_proto: bytes) -> str:
        """The optimised module as XLA prints it, with metadata (source locations) and backend configs."""
        module = self._hlo.HloModule.from_serialized_hlo_module_proto(module_proto)
        return str(module.to_string())

    def cost(self, text: str) -> Work | None:
        """XLA's cost analysis of a module given as text (metadata stripped); None if it refuses it. It does not
        split out float64 work (``flops_f64``, ``transcendentals_f64``: 0, shared out from the HLO by the caller)."""
        if self._cost is None:
            return None
        try:
            module = self._hlo.hlo_module_from_text(_METADATA.sub("", text))
            raw = self._cost(self._client, module)
        except Exception:
            return None
        if isinstance(raw, list):  # older jaxlibs: one dict per device
            raw = raw[0] if raw else {}
        return Work(
            flops=_loose(raw, "flops"),
            transcendentals=_loose(raw, "transcendentals"),
            bytes=_loose(raw, "bytes accessed", "bytes_accessed"),
            flops_f64=0.0,
            transcendentals_f64=0.0,
        )


def _loose(costs: dict[str, Any], *names: str) -> float:
    """A cost figure whatever its key's spelling (XLA has changed them); 0 for an omitted zero."""
    for name in names:
        if name in costs:
            return float(costs[name])
    return 0.0
