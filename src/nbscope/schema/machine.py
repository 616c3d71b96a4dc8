"""Typed views of a run's fingerprint (the machine it ran on) and its settings (how it was asked to run).

Both are read-only dataclasses over the validated document, like ``schema.model`` (see its docstring for
why dataclasses). The fingerprint keeps fields nothing here reads, and fields ``collect.fingerprint`` may
add later, in the stored document; these views carry what analyses read. A field the fingerprint marks
absent (``{"absent": reason}``) or an earlier version lacks reads as ``None``, and where it matters the
reason is kept (``gpus_absent``), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema import _fields
from nbscope.schema.codec import Name, Read, Repeat

__all__ = [
    "Accelerator",
    "Blas",
    "BlasPool",
    "Cpu",
    "Float64Class",
    "Gpu",
    "JaxDevice",
    "JaxRuntime",
    "Machine",
    "Memory",
    "Settings",
]


def _absent(value: object) -> str | None:
    """The reason a fingerprint field was not collected (``{"absent": reason}``), else None."""
    return str(value["absent"]) if isinstance(value, Mapping) and "absent" in value else None


def _present_accelerator(value: object) -> Mapping[str, Any] | None:
    """The fingerprint's accelerator when it names one (its platform is text, not ``{"absent": why}``)."""
    return value if isinstance(value, Mapping) and isinstance(value.get("platform"), str) else None


def _loads(value: object) -> tuple[float, ...] | None:
    """The load averages when every one is a number, else None."""
    if not isinstance(value, list):
        return None
    loads = tuple(n for n in map(_fields.number, value) if n is not None)
    return loads if loads and len(loads) == len(value) else None


@dataclass(frozen=True, slots=True)
class Cpu:
    model: str | None
    logical_cores: int | None
    physical_cores: int | None
    load_average: Annotated[
        tuple[float, ...] | None, Read(_loads)
    ]  # 1, 5 and 15 minutes when the run started (volatile)

    @property
    def load_per_core(self) -> float | None:
        """The 1-minute load average per logical core, when both are known."""
        if not self.load_average or not self.logical_cores:
            return None
        return self.load_average[0] / self.logical_cores


@dataclass(frozen=True, slots=True)
class Memory:
    """The machine's memory when the fingerprint was taken (``/proc/meminfo``); None: not read."""

    total_bytes: float | None
    available_bytes: float | None


@dataclass(frozen=True, slots=True)
class BlasPool:
    """A thread pool of a numerical library the kernel's NumPy loaded (``threadpoolctl``)."""

    path: str | None  # the library's file


@dataclass(frozen=True, slots=True)
class Blas:
    # every pool, in the fingerprint's order; an entry that is not an object stays in its place, as None
    pools: tuple[BlasPool | None, ...]


@dataclass(frozen=True, slots=True)
class Float64Class:
    """A GPU's float64 throughput class from nbscope's table (``collect.fingerprint.fp64_class``)."""

    weak: bool | None
    ratio: Annotated[str | None, Read(_fields.name)]
    value: Any
    reason: str | None  # why the class is unknown


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int | None
    name: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None  # by every process, when the fingerprint was taken
    compute_capability: str | None
    fp64: Annotated[Float64Class, Read(key="fp64_class")]
    uuid: str | None = None  # NVML's; CUDA_VISIBLE_DEVICES may name the GPU by it


@dataclass(frozen=True, slots=True)
class JaxDevice:
    id: int | None
    platform: str | None
    kind: str | None


@dataclass(frozen=True, slots=True)
class JaxRuntime:
    """What JAX itself reported (``nbscope profile --jax``): its default backend, devices and x64 flag."""

    default_backend: str | None
    x64: Annotated[bool | None, Read(_fields.truth)]
    devices: tuple[JaxDevice, ...]

    @staticmethod
    def present(value: Mapping[str, Any]) -> bool:
        return _absent(value) is None


@dataclass(frozen=True, slots=True)
class Accelerator:
    """A non-NVIDIA accelerator the fingerprint found without starting it (``collect.fingerprint._accelerator``)."""

    platform: str  # tpu
    type: Annotated[str | None, Read(_fields.name)] = None  # TPU_ACCELERATOR_TYPE: v5litepod-4
    libtpu: Annotated[str | None, Read(_fields.name)] = None


@dataclass(frozen=True, slots=True)
class Machine:
    """The fingerprint of the machine a run ran on, typed."""

    digest: str
    cpu: Cpu
    memory: Memory
    blas: Blas
    gpus: tuple[Gpu, ...]
    gpus_absent: str | None  # why no GPU was listed (no driver, NVML missing, …); None when listed
    environment: Mapping[str, str]  # the variables the fingerprint records (JAX_*, XLA_*, …)
    versions: Mapping[str, str]  # package versions (``jax_plugins`` is in ``jax_plugins``)
    jax_plugins: Mapping[str, str]
    jax_runtime: JaxRuntime | None  # None: not collected
    recorded_versions: Mapping[str, Any] | None  # ``versions`` as recorded (an absent package as ``{"absent": why}``)
    accelerator: Accelerator | None = None  # None: none found, or not recorded

    @staticmethod
    def reshape(fingerprint: Mapping[str, Any]) -> Mapping[str, Any]:
        """The fingerprint as this class's fields: GPUs at ``gpu.devices`` (or why they are absent), plain
        versions apart from ``jax_plugins``."""
        devices = _fields.mapping(fingerprint.get("gpu")).get("devices")
        versions = _fields.mapping(fingerprint.get("versions"))
        return {
            **fingerprint,
            "gpus": devices,
            "recorded_versions": fingerprint.get("versions"),
            "gpus_absent": _absent(devices) or (None if isinstance(devices, list) else "not recorded"),
            "accelerator": _present_accelerator(fingerprint.get("accelerator")),
            "versions": {k: str(v) for k, v in versions.items() if not isinstance(v, (Mapping, list))},
            "jax_plugins": versions.get("jax_plugins"),
        }

    @property
    def summary(self) -> str:
        """One line naming the machine: CPU, cores and GPUs (``AMD EPYC ×2 + 1× Tesla T4``)."""
        text = f"{self.cpu.model or '?'} ×{self.cpu.logical_cores if self.cpu.logical_cores is not None else '?'}"
        names = sorted({str(gpu.name) for gpu in self.gpus})
        if names:
            text += " + " + ", ".join(f"{sum(str(g.name) == n for g in self.gpus)}× {n}" for n in names)
        elif self.accelerator is not None:
            text += f" + {self.accelerator.platform.upper()}" + (
                f" {self.accelerator.type}" if self.accelerator.type else ""
            )
        return text

    @property
    def gpu(self) -> Gpu | None:
        """The first visible GPU: JAX's default device when JAX runs on a GPU."""
        return self.gpus[0] if self.gpus else None


@dataclass(frozen=True, slots=True)
class Settings:
    """How a run was asked to run (``profile``'s options as recorded); absent ones as a run without them had."""

    pathway: str | None
    jax_platform: Annotated[str | None, Read(otherwise=None)]
    jax_cache: Annotated[str, Read(otherwise="off")]  # off, cold, warm or a folder
    timeline: bool
    repeat: Repeat
    programs: bool
    forecast: tuple[str, ...]  # the GPU keys ``--forecast`` named
    env: Mapping[str, str]  # the ``--env`` variables, as stored (a hash for any that may be a secret)
    on_error: str | None
    timeout: float | None
    kernel: str | None = None  # the kernel asked for (None: the notebook's own)
    env_values_stored: bool = False  # ``--env`` values kept as given (``--env-store-values``), not as hashes
    env_signed: Mapping[str, str] | None = None  # ``record.secrets.signed``: which values a rerun may give again
    backends: tuple[Name, ...] = ()  # an audit: the backends it ran the notebooks on
    hashkey: Name = None  # a jupyter-cache import: the cache's key of the executed notebook

    def environment(self, machine: Machine) -> dict[str, str]:
        """The variables the kernel saw: the fingerprint's, overridden by ``--env``."""
        return {**machine.environment, **self.env}
