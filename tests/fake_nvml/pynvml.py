"""A fake ``pynvml`` (nvidia-ml-py) with two GPUs, for tests on machines without one.

Put this folder first on ``PYTHONPATH`` (``import pynvml`` then finds it) or load the file and pass the
module to ``nbscope.collect.fingerprint.collect(nvml=...)``. It imitates the parts of nvidia-ml-py's API that
nbscope calls, with the same names, argument order, return types and error classes:

- device 0: Tesla T4, compute capability 7.5, 15360 MiB, no MIG support (``NVMLError_NotSupported``);
- device 1: NVIDIA H200, compute capability 9.0, 143771 MiB, MIG disabled.

Driver 550.54.15, CUDA driver version 12040 (12.4). Calls before ``nvmlInit`` or after the last
``nvmlShutdown`` raise ``NVMLError_Uninitialized`` as the real library does.

Switches (environment variables, read at import; or set the module attributes in a test):

- ``FAKE_NVML_BYTES=1`` (``RETURN_BYTES``): names, UUIDs and the driver version come back as ``bytes``,
  as pynvml < 11.5 returned them; otherwise ``str``, as nvidia-ml-py does now.
- ``FAKE_NVML_FAIL=<where>`` (``FAIL``): raise an NVML error at ``init`` (driver not loaded), ``count``
  (``nvmlDeviceGetCount``) or ``handle`` (``nvmlDeviceGetHandleByIndex`` of device 1).
"""

from __future__ import annotations

import os

RETURN_BYTES = os.environ.get("FAKE_NVML_BYTES") == "1"
FAIL = os.environ.get("FAKE_NVML_FAIL", "")

# Constants with nvidia-ml-py's values.
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_UNKNOWN = 999

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As in nvidia-ml-py: ``NVMLError(code)``; ``str()`` is the library's message for the code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


class NVMLError_Uninitialized(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_UNINITIALIZED)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_INVALID_ARGUMENT)


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_DriverNotLoaded(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_DRIVER_NOT_LOADED)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


class NVMLError_Unknown(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_UNKNOWN)


MIB = 1024 * 1024


class _Device:
    def __init__(
        self,
        *,
        name: str,
        uuid: str,
        capability: tuple[int, int],
        memory_total: int,
        memory_used: int,
        clocks: dict[int, int],
        max_clocks: dict[int, int],
        persistence: int,
        mig: list[int] | None,  # None: MIG not supported
        temperature: int,
        processes: list[tuple[int, int]] | None = None,  # (pid, used bytes)
    ) -> None:
        self.name, self.uuid, self.capability = name, uuid, capability
        self.memory_total, self.memory_used = memory_total, memory_used
        self.clocks, self.max_clocks = clocks, max_clocks
        self.persistence, self.mig, self.temperature = persistence, mig, temperature
        self.processes = processes or []


DEVICES = [
    _Device(
        name="Tesla T4",
        uuid="GPU-0f3a1c2e-5b7d-4e21-9a6c-1d2e3f4a5b6c",
        capability=(7, 5),
        memory_total=15360 * MIB,
        memory_used=257 * MIB,
        clocks={NVML_CLOCK_SM: 585, NVML_CLOCK_MEM: 5000, NVML_CLOCK_GRAPHICS: 585},
        max_clocks={NVML_CLOCK_SM: 1590, NVML_CLOCK_MEM: 5001, NVML_CLOCK_GRAPHICS: 1590},
        persistence=NVML_FEATURE_DISABLED,
        mig=None,
        temperature=41,
    ),
    _Device(
        name="NVIDIA H200",
        uuid="GPU-7c9e2b44-81d0-4a6f-b3e5-2f6a7b8c9d0e",
        capability=(9, 0),
        memory_total=143771 * MIB,
        memory_used=4 * MIB,
        clocks={NVML_CLOCK_SM: 345, NVML_CLOCK_MEM: 3201, NVML_CLOCK_GRAPHICS: 345},
        max_clocks={NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 3201, NVML_CLOCK_GRAPHICS: 1980},
        persistence=NVML_FEATURE_ENABLED,
        mig=[NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE],
        temperature=30,
    ),
]

DRIVER_VERSION = "550.54.15"
CUDA_DRIVER_VERSION = 12040

# How often nvmlInit / nvmlShutdown were called: tests check that every init is shut down.
calls = {"init": 0, "shutdown": 0}
_refcount = 0


class c_nvmlMemory_t:  # the ctypes structure nvmlDeviceGetMemoryInfo returns
    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


def _text(value: str) -> str | bytes:
    return value.encode() if RETURN_BYTES else value


def _check_init() -> None:
    if _refcount <= 0:
        raise NVMLError_Uninitialized()


def _device(handle: _Handle) -> _Device:
    _check_init()
    if not isinstance(handle, _Handle) or not 0 <= handle.index < len(DEVICES):
        raise NVMLError_InvalidArgument()
    return DEVICES[handle.index]


def nvmlInit() -> None:
    global _refcount
    if FAIL == "init":
        raise NVMLError_DriverNotLoaded()
    calls["init"] += 1
    _refcount += 1


nvmlInit_v2 = nvmlInit


def nvmlShutdown() -> None:
    global _refcount
    _check_init()
    calls["shutdown"] += 1
    _refcount -= 1


def nvmlSystemGetDriverVersion() -> str | bytes:
    _check_init()
    return _text(DRIVER_VERSION)


def nvmlSystemGetCudaDriverVersion() -> int:
    _check_init()
    return CUDA_DRIVER_VERSION


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlDeviceGetCount() -> int:
    _check_init()
    if FAIL == "count":
        raise NVMLError_Unknown()
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check_init()
    if FAIL == "handle" and index == 1:
        raise NVMLError_Unknown()
    if not 0 <= index < len(DEVICES):
        raise NVMLError_InvalidArgument()
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str | bytes:
    return _text(_device(handle).name)


def nvmlDeviceGetUUID(handle: _Handle) -> str | bytes:
    return _text(_device(handle).uuid)


def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> c_nvmlMemory_t:
    device = _device(handle)
    return c_nvmlMemory_t(device.memory_total, device.memory_total - device.memory_used, device.memory_used)


def nvmlDeviceGetCudaComputeCapability(handle: _Handle) -> tuple[int, int]:
    return _device(handle).capability


def nvmlDeviceGetClockInfo(handle: _Handle, clock_type: int) -> int:
    device = _device(handle)
    if clock_type not in device.clocks:
        raise NVMLError_InvalidArgument()
    return device.clocks[clock_type]


def nvmlDeviceGetMaxClockInfo(handle: _Handle, clock_type: int) -> int:
    device = _device(handle)
    if clock_type not in device.max_clocks:
        raise NVMLError_InvalidArgument()
    return device.max_clocks[clock_type]


def nvmlDeviceGetPersistenceMode(handle: _Handle) -> int:
    return _device(handle).persistence


def nvmlDeviceGetMigMode(handle: _Handle) -> list[int]:
    device = _device(handle)
    if device.mig is None:
        raise NVMLError_NotSupported()
    return list(device.mig)


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    return _device(handle).temperature


class _ProcessInfo:
    def __init__(self, pid: int, used: int) -> None:
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[_ProcessInfo]:
    return [_ProcessInfo(pid, used) for pid, used in _device(handle).processes]


nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses
