"""The JAX backends nbscope can run a notebook on, and whether this machine has a device for each: checked
before anything runs, so a backend the machine lacks is refused, never recorded or recommended."""

from __future__ import annotations

import os

from nbscope._errors import NbscopeError
from nbscope.collect import fingerprint as fp
from nbscope.schema.codec import decode
from nbscope.schema.machine import Machine

# Backend names as JAX_PLATFORMS takes them; "gpu" is another name for "cuda".
BACKENDS = {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda", "rocm": "rocm", "tpu": "tpu"}


def parse_backends(text: str | None, *, at_least: int = 1) -> list[str]:
    """``"cpu, CUDA"`` to ``["cpu", "cuda"]``: known names, none twice (gpu means cuda), at least ``at_least``."""
    backends = [b.strip().lower() for b in (text or "").split(",") if b.strip()]
    if not backends:
        raise NbscopeError("--backends needs at least one backend (for example cpu or cpu,cuda)")
    for backend in backends:
        if backend not in BACKENDS:
            raise NbscopeError(f"unknown backend {backend!r}: use {', '.join(BACKENDS)}")
    if len({BACKENDS[b] for b in backends}) != len(backends):
        raise NbscopeError(f"--backends lists a backend twice: {','.join(backends)} (gpu means cuda)")
    if len(backends) < at_least:
        raise NbscopeError(
            f"--backends needs at least {'two' if at_least == 2 else at_least} JAX platforms separated by commas "
            f"(e.g. cpu,cuda), got {text!r}"
        )
    return backends


def machine_lacks(backend: str, fingerprint: dict[str, object] | None = None) -> str | None:
    """Why this machine has no device for a JAX backend (None when it has one, or for the CPU); GPUs are
    found through NVML (the machine's fingerprint), ROCm and TPU devices by their device files."""

    platform = BACKENDS.get(backend.strip().lower())
    if platform == "cuda":
        machine = decode(Machine, fingerprint if fingerprint is not None else fp.collect())
        if machine.gpus:
            return None
        return f"this machine has no NVIDIA GPU: {machine.gpus_absent or 'NVML lists no GPU'}"
    if platform == "rocm" and not os.path.exists("/dev/kfd"):
        return "this machine has no AMD GPU (no /dev/kfd)"
    if platform == "tpu" and not fp.tpu_device_files():
        return "this machine has no TPU (no /dev/accel*, no /dev/vfio/*)"
    return None


def _plugin_names() -> set[str]:
    """Names of the installed JAX plugins (entry points ``jax_plugins``, e.g. ``xla_cuda12``, ``metal``), read from
    package metadata: JAX itself is not imported."""
    from importlib.metadata import entry_points

    try:
        return {entry.name.lower() for entry in entry_points(group="jax_plugins")}
    except Exception:  # broken metadata of some package: no plugin known
        return set()


def check_platforms(text: str, fingerprint: dict[str, object] | None = None, *, option: str = "--backends") -> None:
    """Refuse (one line, before anything runs) a JAX platform this machine has no device for, or a name that is
    neither a platform JAX ships nor one an installed JAX plugin may register (``--jax-platform bogus``)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise NbscopeError(f"{option} {text!r}: a platform name is empty")
    plugins = None
    for name in names:
        if name.lower() not in BACKENDS and name.lower() != "interpreter":
            plugins = _plugin_names() if plugins is None else plugins
            if not any(name.lower() in plugin for plugin in plugins):
                known = ", ".join([*BACKENDS, *sorted(plugins)])
                raise NbscopeError(f"{option} {name}: not a JAX platform nor an installed JAX plugin's ({known})")
        lacks = machine_lacks(name, fingerprint)
        if lacks:
            raise NbscopeError(f"{option} {name}: {lacks}; profile on a machine that has one, or leave {name} out")
