"""Float64:float32 throughput of NVIDIA GPUs, which NVML does not report.

Keyed by compute capability; the ratio is the vendor's peak FP64 rate divided by its peak FP32 rate.
A "weak" class (1/32 or less) makes float64 JAX code an order of magnitude slower than float32.
"""

from __future__ import annotations

# compute capability -> (fp64:fp32 ratio as text, ratio as number, example parts)
FP64_CLASSES: dict[str, tuple[str, float, str]] = {
    "6.0": ("1/2", 1 / 2, "P100"),
    "6.1": ("1/32", 1 / 32, "P4, P40, GTX 10xx"),
    "7.0": ("1/2", 1 / 2, "V100"),
    "7.5": ("1/32", 1 / 32, "T4, RTX 20xx"),
    "8.0": ("1/2", 1 / 2, "A100, A30"),
    "8.6": ("1/64", 1 / 64, "A10, A40, A2, RTX 30xx"),
    "8.7": ("1/64", 1 / 64, "Jetson Orin"),
    "8.9": ("1/64", 1 / 64, "L4, L40, RTX 40xx"),
    "9.0": ("1/2", 1 / 2, "H100, H200, GH200"),
    "10.0": ("1/2", 1 / 2, "B200, GB200"),
    "12.0": ("1/64", 1 / 64, "RTX 50xx, RTX PRO 6000"),
}

WEAK_FP64_RATIO = 1 / 32


def fp64_class(compute_capability: str | None) -> dict[str, object]:
    """The float64 class of a device, or the reason it is unknown."""
    if not compute_capability:
        return {"ratio": None, "reason": "compute capability unknown"}
    entry = FP64_CLASSES.get(compute_capability)
    if entry is None:
        return {"ratio": None, "reason": f"compute capability {compute_capability} not in nbscope's table"}
    text, value, parts = entry
    return {"ratio": text, "value": value, "weak": value <= WEAK_FP64_RATIO, "examples": parts}
