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
from typing import Any

from nbscope.schema._fields import integer as _int
from nbscope.schema._fields import mapping as _object
from nbscope.schema._fields import number as _number
from nbscope.schema._fields import text as _text

__all__ = ["Cpu", "Float64Class", "Gpu", "JaxDevice", "JaxRuntime", "Machine", "Settings"]




def _absent(value: Any) -> str | None:
    """The reason a fingerprint field was not collected (``{"absent": reason}``), else None."""
    return str(value["absent"]) if isinstance(value, Mapping) and "absent" in value else None


def _strings(value: Any) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class Cpu:
    model: str | None
    logical_cores: int | None
    physical_cores: int | None
    load_average: tuple[float, ...] | None  # 1, 5 and 15 minutes when the run started (volatile)

    @property
    def load_per_core(self) -> float | None:
        """The 1-minute load average per logical core, when both are known."""
        if not self.load_average or not self.logical_cores:
            return None
        return self.load_average[0] / self.logical_cores

    @classmethod
    def parse(cls, value: Any) -> Cpu:
        value = _object(value)
        load = value.get("load_average")
        loads = tuple(float(x) for x in load if _number(x) is not None) if isinstance(load, list) else ()
        return cls(model=_text(value.get("model")), logical_cores=_int(value.get("logical_cores")),
                   physical_cores=_int(value.get("physical_cores")),
                   load_average=loads if isinstance(load, list) and len(loads) == len(load) and loads else None)


@dataclass(frozen=True, slots=True)
class Float64Class:
    """A GPU's float64 throughput class from nbscope's table (``collect.fingerprint.fp64_class``)."""

    weak: bool | None
    ratio: str | None
    value: Any
    reason: str | None  # why the class is unknown

    @classmethod
    def parse(cls, value: Any) -> Float64Class:
        value = _object(value)
        weak = value.get("weak")
        ratio = value.get("ratio")
        return cls(weak=weak if isinstance(weak, bool) else None, ratio=None if ratio is None else str(ratio),
                   value=value.get("value"), reason=_text(value.get("reason")))


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int | None
    name: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None  # by every process, when the fingerprint was taken
    compute_capability: str | None
    fp64: Float64Class

    @classmethod
    def parse(cls, value: Any) -> Gpu:
        value = _object(value)
        capability = value.get("compute_capability")
        return cls(index=_int(value.get("index")), name=_text(value.get("name")),
                   memory_total_bytes=_int(value.get("memory_total_bytes")),
                   memory_used_bytes=_int(value.get("memory_used_bytes")),
                   compute_capability=capability if isinstance(capability, str) else None,
                   fp64=Float64Class.parse(value.get("fp64_class")))


@dataclass(frozen=True, slots=True)
class JaxDevice:
    id: int | None
    platform: str | None
    kind: str | None


@dataclass(frozen=True, slots=True)
class JaxRuntime:
    """What JAX itself reported (``nbscope profile --jax``): its default backend, devices and x64 flag."""

    default_backend: str | None
    x64: bool | None
    devices: tuple[JaxDevice, ...]

    @classmethod
    def parse(cls, value: Any) -> JaxRuntime | None:
        if not isinstance(value, Mapping) or _absent(value) is not None:
            return None
        x64 = value.get("x64")
        devices = tuple(JaxDevice(id=_int(d.get("id")), platform=_text(d.get("platform")), kind=_text(d.get("kind")))
                        for d in value.get("devices") or () if isinstance(d, Mapping))
        return cls(default_backend=_text(value.get("default_backend")),
                   x64=None if x64 is None else bool(x64), devices=devices)


@dataclass(frozen=True, slots=True)
class Machine:
    """The fingerprint of the machine a run ran on, typed."""

    digest: str
    cpu: Cpu
    gpus: tuple[Gpu, ...]
    gpus_absent: str | None  # why no GPU was listed (no driver, NVML missing, …); None when listed
    environment: Mapping[str, str]  # the variables the fingerprint records (JAX_*, XLA_*, …)
    versions: Mapping[str, str]  # package versions (``jax_plugins`` is in ``jax_plugins``)
    jax_plugins: Mapping[str, str]
    jax_runtime: JaxRuntime | None  # None: not collected

    @property
    def summary(self) -> str:
        """One line naming the machine: CPU, cores and GPUs (``AMD EPYC ×2 + 1× Tesla T4``)."""
        text = f"{self.cpu.model or '?'} ×{self.cpu.logical_cores if self.cpu.logical_cores is not None else '?'}"
        names = sorted({str(gpu.name) for gpu in self.gpus})
        if names:
            text += " + " + ", ".join(f"{sum(str(g.name) == n for g in self.gpus)}× {n}" for n in names)
        return text

    @property
    def gpu(self) -> Gpu | None:
        """The first visible GPU: JAX's default device when JAX runs on a GPU."""
        return self.gpus[0] if self.gpus else None

    @classmethod
    def parse(cls, fingerprint: Any) -> Machine:
        fingerprint = _object(fingerprint)
        devices = _object(fingerprint.get("gpu")).get("devices")
        versions = _object(fingerprint.get("versions"))
        return cls(
            digest=str(fingerprint.get("digest") or ""),
            cpu=Cpu.parse(fingerprint.get("cpu")),
            gpus=tuple(Gpu.parse(d) for d in devices if isinstance(d, Mapping)) if isinstance(devices, list) else (),
            gpus_absent=_absent(devices) or (None if isinstance(devices, list) else "not recorded"),
            environment=_strings(fingerprint.get("environment")),
            versions={k: str(v) for k, v in versions.items() if not isinstance(v, (Mapping, list))},
            jax_plugins=_strings(versions.get("jax_plugins")),
            jax_runtime=JaxRuntime.parse(fingerprint.get("jax_runtime")),
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """How a run was asked to run (``profile``'s options as recorded); absent ones as a run without them had."""

    pathway: str | None
    jax_platform: str | None
    jax_cache: str  # off, cold, warm or a folder
    timeline: bool
    repeat: int
    programs: bool
    forecast: tuple[str, ...]  # the GPU keys ``--forecast`` named
    env: Mapping[str, str]  # the ``--env`` variables, as stored (a hash for any that may be a secret)
    on_error: str | None
    timeout: float | None

    @classmethod
    def parse(cls, settings: Any) -> Settings:
        settings = _object(settings)
        repeat = _int(settings.get("repeat"))
        forecast = settings.get("forecast")
        return cls(
            pathway=_text(settings.get("pathway")), jax_platform=_text(settings.get("jax_platform")) or None,
            jax_cache=str(settings.get("jax_cache") or "off"), timeline=bool(settings.get("timeline")),
            repeat=repeat if repeat and repeat > 0 else 1, programs=bool(settings.get("programs")),
            forecast=tuple(str(k) for k in forecast) if isinstance(forecast, list) else (),
            env=_strings(settings.get("env")), on_error=_text(settings.get("on_error")),
            timeout=_number(settings.get("timeout")),
        )

    def environment(self, machine: Machine) -> dict[str, str]:
        """The variables the kernel saw: the fingerprint's, overridden by ``--env``."""
        return {**machine.environment, **self.env}
