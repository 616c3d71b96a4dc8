"""The machine fingerprint: hardware, libraries and settings that change numerical timings.

Everything here reads /proc, sysfs and package metadata directly; nothing imports jax or numba
(py-cpuinfo alone takes over a second; a JAX backend grabs GPU memory). A field that cannot be read is
given as ``{"absent": "<reason>"}``, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeGuard

from nbscope import _units as units
from nbscope.collect._gpu_classes import fp64_class
from nbscope.schema import process_environment
from nbscope.schema.codec import decode
from nbscope.schema.meminfo import Meminfo
from nbscope.schema.threadpools import ThreadPool

FINGERPRINT_VERSION = 1

VERSIONED_PACKAGES = (
    "numpy",
    "scipy",
    "numba",
    "jax",
    "jaxlib",
    "nbclient",
    "ipykernel",
    "jupytext",
    "myst-nb",
    "jupyter-book",
    "jupyter-cache",
    "matplotlib",
)

# Prefixes of environment variables that change what a notebook measures.
RESULT_ENV_PREFIXES = ("JAX_", "XLA_", "NUMBA_", "MKL_", "OPENBLAS_", "TF_CPP_")
RESULT_ENV_NAMES = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

# Fields (dotted paths) that move between two readings of the same environment; left out of the
# digest and, unless asked for, out of ``diff``.
VOLATILE_FIELDS = (
    "collected_at",
    "collection_s",
    "host.hostname",
    "cpu.mhz",
    "cpu.load_average",
    "memory.available_bytes",
    "ci",
    "jax_runtime",
)
VOLATILE_GPU_FIELDS = ("clocks", "memory_used_bytes", "memory_free_bytes", "temperature_c", "uuid")


def absent(reason: str) -> dict[str, object]:
    return {"absent": reason}


def is_absent(value: object) -> TypeGuard[dict[str, object]]:
    return isinstance(value, dict) and set(value) == {"absent"}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _host() -> dict[str, object]:
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "os": uname.system,
        "os_release": _os_release_name(),
        "kernel": uname.release,
        "architecture": uname.machine,
    }


def _os_release_name() -> str | dict[str, object]:
    text = _read("/etc/os-release")
    if text is None:
        return platform.platform()
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return absent("no PRETTY_NAME in /etc/os-release")


def _cpu() -> dict[str, object]:
    info: dict[str, object] = {"logical_cores": os.cpu_count()}
    text = _read("/proc/cpuinfo")
    if text is None:
        info.update(model=platform.processor() or absent("/proc/cpuinfo not readable"))
        info["physical_cores"] = absent("/proc/cpuinfo not readable")
        info["mhz"] = absent("/proc/cpuinfo not readable")
    else:
        model = None
        cores: set[tuple[str, str]] = set()
        physical_id = core_id = ""
        mhz: list[float] = []
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("model name", "Model", "cpu model") and model is None:
                model = value
            elif key == "physical id":
                physical_id = value
            elif key == "core id":
                core_id = value
                cores.add((physical_id, core_id))
            elif key == "cpu MHz":
                with contextlib.suppress(ValueError):
                    mhz.append(float(value))
        info["model"] = _model_name(model, text)
        info["physical_cores"] = len(cores) if cores else absent("no core ids in /proc/cpuinfo")
        info["mhz"] = round(sum(mhz) / len(mhz), 1) if mhz else absent("no cpu MHz in /proc/cpuinfo")
    max_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    info["max_mhz"] = round(int(max_khz) / 1000, 1) if max_khz else absent("no cpufreq in sysfs")
    try:
        info["affinity_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["affinity_cores"] = absent("sched_getaffinity unavailable")
    info["cgroup_cpu_limit"] = _cgroup_cpu_limit()
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        info["load_average"] = absent("getloadavg unavailable")
    return info


def _cgroup_cpu_limit() -> float | dict[str, object]:
    text = _read("/sys/fs/cgroup/cpu.max")
    if text is None:
        return absent("no cgroup v2 cpu.max")
    quota, _, period = text.strip().partition(" ")
    if quota == "max":
        return absent("no cgroup CPU quota")
    return round(int(quota) / int(period or 100000), 2)


def _memory() -> dict[str, object]:
    text = _read("/proc/meminfo")
    if text is None:
        return {"total_bytes": absent("/proc/meminfo not readable")}
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024
    meminfo = decode(Meminfo, values)
    return {
        "total_bytes": meminfo.total_bytes if meminfo.total_bytes is not None else absent("no MemTotal"),
        "available_bytes": meminfo.available_bytes
        if meminfo.available_bytes is not None
        else absent("no MemAvailable"),
    }


def installed_distributions(paths: Iterable[str] | None = None) -> dict[str, str]:
    """Normalised distribution name -> version, read from ``*.dist-info`` folder names on sys.path (or in
    the folders ``paths``, e.g. another environment's site-packages).

    Much faster than ``importlib.metadata.distributions()``, which opens every METADATA file.
    """
    found: dict[str, str] = {}
    for entry in sys.path if paths is None else paths:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                stem = name[: -len(".dist-info")]
                dist, _, version = stem.partition("-")
                found.setdefault(dist.lower().replace("_", "-").replace(".", "-"), version)
    return found


def _model_name(model: str | None, cpuinfo: str) -> object:
    """The CPU's model name; where the kernel hides it (gVisor writes ``model name: unknown``), its vendor, family
    and model numbers, which still tell one CPU generation from another."""
    if model and model.lower() != "unknown":
        return model
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()[:12])}
    if "vendor_id" in fields:
        family, number = (fields.get(k, "?") for k in ("cpu family", "model"))
        return f"{fields['vendor_id']} family {family} model {number} (no model name in /proc/cpuinfo)"
    return absent("no model name in /proc/cpuinfo")


def tpu_device_files() -> list[str]:
    """The TPU chips' device files: ``/dev/accel*`` (v4 and later), else ``/dev/vfio/N`` (sandboxes)."""
    return sorted(map(str, Path("/dev").glob("accel[0-9]*"))) or sorted(map(str, Path("/dev/vfio").glob("[0-9]*")))


def _accelerator(installed: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """A non-NVIDIA accelerator JAX can use, from what can be read without starting it (opening a TPU takes
    seconds and holds the chip): TPU VMs name their type in ``TPU_ACCELERATOR_TYPE``, expose their chips as
    ``/dev/accel*`` (v4 and later, or ``/dev/vfio/N`` in sandboxes), and JAX reaches them through ``libtpu``.
    What JAX itself saw (the chip's kind and memory) is in the run's kernel line (``jax_backend``)."""
    environ = os.environ if environ is None else environ
    device_files = tpu_device_files()
    libtpu = next((installed[name] for name in ("libtpu", "libtpu-nightly") if name in installed), None)
    tpu_type = environ.get("TPU_ACCELERATOR_TYPE")
    if not (tpu_type or (libtpu and device_files)):
        return {"platform": absent("no TPU: no TPU_ACCELERATOR_TYPE, no libtpu with a device file")}
    return {
        "platform": "tpu",
        "type": tpu_type or absent("TPU_ACCELERATOR_TYPE not set"),
        "device_files": len(device_files),
        "libtpu": libtpu or absent("libtpu not installed"),
        "jaxlib": installed.get("jaxlib", absent("jaxlib not installed")),
    }


def _versions(installed: Mapping[str, str]) -> dict[str, object]:
    return versions_from(installed, platform.python_version(), sys.implementation.name)


def versions_from(installed: Mapping[str, str], python: str, implementation: str) -> dict[str, object]:
    """The ``versions`` section for an environment: its Python and its installed distributions
    (normalised name -> version, as :func:`installed_distributions` reads them)."""
    versions: dict[str, object] = {"python": python, "implementation": implementation}
    for name in VERSIONED_PACKAGES:
        versions[name] = installed.get(name) or absent("not installed")
    versions["jax_plugins"] = {
        name: version
        for name, version in sorted(installed.items())
        if name.startswith(("jax-cuda", "jax-rocm", "libtpu", "jax-tpu"))
    }
    return versions


def _load_numpy_blas_alone() -> bool:
    """Load the BLAS that a NumPy wheel bundles (``numpy.libs/*openblas*``) without importing NumPy.

    Importing NumPy costs ~0.1 s; loading its OpenBLAS alone is enough for threadpoolctl to read the
    library, version and thread count that NumPy will use.
    """
    import ctypes

    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return False
    libs = Path(next(iter(spec.submodule_search_locations))).parent / "numpy.libs"
    candidates = sorted(libs.glob("*openblas*.so*")) if libs.is_dir() else []
    if not candidates:
        return False
    try:
        ctypes.CDLL(str(candidates[0]), mode=ctypes.RTLD_LOCAL)
    except OSError:
        return False
    return True


def _blas() -> dict[str, object]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError as exc:
        return absent(f"{exc.name} not installed")
    if not _load_numpy_blas_alone():
        try:
            import numpy  # noqa: F401  (threadpoolctl sees only libraries already loaded)
        except ImportError:
            return absent("numpy not installed")
    pools = [
        {
            "api": pool.user_api,
            "library": pool.internal_api,
            "version": pool.version,
            "threads": pool.num_threads,
            "architecture": pool.architecture,
            "threading_layer": pool.threading_layer,
            "path": pool.filepath,
        }
        for pool in (decode(ThreadPool, info) for info in threadpool_info())
    ]
    blas = [p for p in pools if p["api"] == "blas"]
    if not blas:
        return {"pools": pools, "library": absent("numpy loaded no BLAS")}
    first = blas[0]
    return {
        "library": first["library"],
        "version": first["version"],
        "threads": first["threads"],
        "architecture": first["architecture"],
        "pools": pools,
    }


def _numba_threading() -> dict[str, object]:
    # Importing numba costs ~0.5 s, so read its configuration and which layers it ships instead.
    spec = importlib.util.find_spec("numba")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return absent("numba not installed")
    ufunc_dir = Path(next(iter(spec.submodule_search_locations))) / "np" / "ufunc"
    available = set()
    for path in ufunc_dir.glob("*"):
        for layer, stem in (("tbb", "tbbpool"), ("omp", "omppool"), ("workqueue", "workqueue")):
            if path.name.startswith(stem) and path.suffix in (".so", ".pyd"):
                available.add(layer)
    settings = process_environment.read()
    threads_env = settings.numba_num_threads
    return {
        "layer": settings.numba_threading_layer if settings.numba_threading_layer is not None else "default",
        "available_layers": sorted(available),
        "threads": units.whole(threads_env or "") or os.cpu_count(),
        "threads_source": "NUMBA_NUM_THREADS" if threads_env else "cpu count",
    }


def _environment() -> dict[str, str]:
    """The variables that change what a notebook measures; the value of one whose name says secret is not kept."""
    from nbscope._redact import REDACTED, SECRET_NAME

    return {
        key: REDACTED if SECRET_NAME.search(key.upper()) else value
        for key, value in sorted(os.environ.items())
        if key.startswith(RESULT_ENV_PREFIXES) or key in RESULT_ENV_NAMES
    }


def _ci() -> dict[str, object]:
    ci = process_environment.read().ci
    if ci.github_actions == "true":
        info: dict[str, object] = {
            "provider": "github-actions",
            "runner_name": ci.runner_name,
            "runner_os": ci.runner_os,
            "runner_arch": ci.runner_arch,
            "workflow": ci.workflow,
            "run_id": ci.run_id,
            "repository": ci.repository,
            "sha": ci.sha,
        }
        if ci.runs_on:
            info["runs_on"] = dict(ci.runs_on)
        return info
    if ci.ci:
        return {"provider": "generic", "ci": ci.ci}
    return absent("not running under CI")


def _nvidia_driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidiactl")


def _gpus(fake_nvml: ModuleType | None = None) -> dict[str, object]:
    """GPUs through NVML; ``fake_nvml`` replaces the ``pynvml`` module (tests pass a fake one)."""
    nvml: ModuleType
    if fake_nvml is not None:
        nvml = fake_nvml
    else:
        mode = process_environment.read().nvml
        if mode == "off":
            return {"devices": absent("NVML disabled by NBSCOPE_NVML=off")}
        if mode != "force" and not _nvidia_driver_present():
            # Loading NVML just to hear "library not found" costs ~40 ms of `nbscope info`'s 0.5 s.
            return {"devices": absent("no NVIDIA driver (no /proc/driver/nvidia, no /dev/nvidiactl)")}
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return {"devices": absent("nvidia-ml-py (pynvml) not installed")}
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"devices": absent(f"NVML unavailable: {type(exc).__name__}: {exc}".strip())}
    try:
        result: dict[str, object] = {
            "driver_version": _text(_safe(nvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": _cuda_version(_safe(nvml.nvmlSystemGetCudaDriverVersion)),
        }
        devices = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                devices.append(_gpu_device(nvml, index, handle))
        except Exception as exc:  # a device lost or NVML failing mid-listing: no partial list
            result["devices"] = absent(f"NVML could not list devices: {type(exc).__name__}: {exc}".strip())
        else:
            result["devices"] = devices
        return result
    finally:
        _safe(nvml.nvmlShutdown)


def _gpu_device(nvml: ModuleType, index: int, handle: object) -> dict[str, object]:
    memory = _safe(nvml.nvmlDeviceGetMemoryInfo, handle)
    capability = _safe(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    cc = f"{capability[0]}.{capability[1]}" if isinstance(capability, tuple) else None
    mig = _safe(nvml.nvmlDeviceGetMigMode, handle)

    def clock(kind_name: str, max_clock: bool) -> Any:
        kind = getattr(nvml, kind_name, None)
        if kind is None:
            return absent(f"{kind_name} unknown to this NVML binding")
        getter = nvml.nvmlDeviceGetMaxClockInfo if max_clock else nvml.nvmlDeviceGetClockInfo
        return _safe(getter, handle, kind)

    return {
        "index": index,
        "name": _text(_safe(nvml.nvmlDeviceGetName, handle)),
        "uuid": _text(_safe(nvml.nvmlDeviceGetUUID, handle)),
        "memory_total_bytes": getattr(memory, "total", memory),
        "memory_used_bytes": getattr(memory, "used", memory),
        "memory_free_bytes": getattr(memory, "free", memory),
        "compute_capability": cc or absent("compute capability not reported"),
        "fp64_class": fp64_class(cc),
        "clocks": {
            "sm_mhz": clock("NVML_CLOCK_SM", False),
            "sm_max_mhz": clock("NVML_CLOCK_SM", True),
            "memory_mhz": clock("NVML_CLOCK_MEM", False),
            "memory_max_mhz": clock("NVML_CLOCK_MEM", True),
        },
        "persistence_mode": _enabled(_safe(nvml.nvmlDeviceGetPersistenceMode, handle)),
        "mig_mode": _enabled(mig[0]) if isinstance(mig, (tuple, list)) else mig,
    }


def _safe(function: Callable[..., Any], *args: object) -> Any:
    try:
        return function(*args)
    except Exception as exc:
        return absent(f"{getattr(function, '__name__', 'NVML call')}: {type(exc).__name__}")


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def _enabled(value: object) -> object:
    return bool(value) if isinstance(value, int) else value


def _cuda_version(value: object) -> object:
    if isinstance(value, int):
        return f"{value // 1000}.{(value % 1000) // 10}"
    return value


def jax_runtime() -> dict[str, object]:
    """JAX backend, devices and x64 flag. Imports jax and initialises a backend: opt-in only."""
    try:
        import jax
    except ImportError:
        return absent("jax not installed")
    try:
        devices = jax.devices()
    except RuntimeError as exc:
        return absent(f"no JAX backend: {exc}")
    return {
        "default_backend": jax.default_backend(),
        "x64": bool(jax.config.read("jax_enable_x64")),
        "devices": [
            {
                "id": d.id,
                "platform": d.platform,
                "kind": getattr(d, "device_kind", None),
                "compute_capability": getattr(d, "compute_capability", None),
            }
            for d in devices
        ],
    }


def collect(*, include_jax: bool = False, nvml: ModuleType | None = None) -> dict[str, object]:
    """Read the fingerprint of this machine and Python environment."""
    start = time.perf_counter()
    installed = installed_distributions()
    fingerprint: dict[str, object] = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": _host(),
        "cpu": _cpu(),
        "memory": _memory(),
        "blas": _blas(),
        "numba_threading": _numba_threading(),
        "gpu": _gpus(nvml),
        "accelerator": _accelerator(installed),
        "versions": _versions(installed),
        "environment": _environment(),
        "ci": _ci(),
        "jax_runtime": jax_runtime() if include_jax else absent("not collected: pass --jax"),
    }
    fingerprint["digest"] = digest(fingerprint)
    fingerprint["collection_s"] = round(time.perf_counter() - start, 4)
    return fingerprint


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """Dotted paths to leaves; lists of GPUs and pools are indexed (``gpu.devices.0.name``)."""
    if isinstance(value, Mapping) and not is_absent(value):
        items: Iterable[tuple[object, object]] = value.items()
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    flat: dict[str, object] = {}
    for key, child in items:
        flat.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
    if not flat and prefix:
        flat[prefix] = value
    return flat


def _is_volatile(path: str) -> bool:
    if path == "digest" or path.startswith("blas.pools."):
        return True
    if any(path == field or path.startswith(field + ".") for field in VOLATILE_FIELDS):
        return True
    parts = path.split(".")
    return path.startswith("gpu.devices.") and len(parts) > 3 and parts[3] in VOLATILE_GPU_FIELDS


def comparable_fields(fingerprint: Mapping[str, object]) -> dict[str, object]:
    """The fields that make two environments comparable: what the digest covers."""
    return {k: v for k, v in flatten(fingerprint).items() if not _is_volatile(k)}


def digest(fingerprint: Mapping[str, object]) -> str:
    """A short stable hash over the comparable fields (12 hex digits)."""
    canonical = json.dumps(comparable_fields(fingerprint), sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def diff(
    a: Mapping[str, object], b: Mapping[str, object], *, include_volatile: bool = False
) -> list[tuple[str, object, object]]:
    """Fields that differ between two fingerprints, as ``(path, a_value, b_value)``."""
    flat_a, flat_b = flatten(a), flatten(b)
    # an empty object on one side (``environment: {}``) is said by its children's rows
    parents = {path[:i] for path in [*flat_a, *flat_b] for i, c in enumerate(path) if c == "."}
    rows = []
    for path in sorted(set(flat_a) | set(flat_b)):
        if not include_volatile and _is_volatile(path):
            continue
        missing = absent("field not present")
        va, vb = flat_a.get(path, missing), flat_b.get(path, missing)
        if va != vb and not (path in parents and {} in (va, vb)):
            rows.append((path, va, vb))
    return rows
