"""NVML, started once per process: GPU memory for /metrics and `framebus tune`.

The bindings (`pynvml`) come from nvidia-ml-py, the `gpu` extra that the GPU image installs.
Without them, or without a driver, callers get None and the reason, and say so rather than
report host memory as GPU memory.

NVML numbers devices its own way, which need not be CUDA's (CUDA orders them fastest first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID, and CUDA_VISIBLE_DEVICES renumbers them; NVML's documentation
recommends looking devices up by PCI bus id or UUID). So CUDA device N is found in NVML by the
PCI bus id the CUDA runtime gives for N, else by the UUID CUDA_VISIBLE_DEVICES names for N, else
it is the only device NVML sees; failing all three, there is no figure rather than another
device's.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_started: tuple[Any, str] | None = None  # (pynvml or None, why not), once NVML was asked
_handles: dict[int, tuple[Any, str]] = {}  # CUDA device -> (NVML handle or None, why not)
CUDART = ("libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0", "libcudart.so")


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory: in total, in use by every process, and by this one when NVML lists it."""

    total: int
    device_used: int
    process_used: int | None  # None: NVML does not list this process (see `process_note`)
    process_note: str = ""


def nvml() -> tuple[Any, str]:
    """The started `pynvml` module and "", or None and why not; NVML is asked once per process."""
    global _started  # noqa: PLW0603 - NVML is started once per process
    if _started is None:
        _started = _start()
    return _started


def _start() -> tuple[Any, str]:
    try:
        module = importlib.import_module("pynvml")
    except ImportError:
        return None, "nvidia-ml-py is not installed: pip install 'framebus[gpu]'"
    try:
        module.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml raises its own NVMLError family, or OSError
        return None, f"NVML cannot start ({type(exc).__name__}: {exc}): no NVIDIA driver or GPU"
    return module, ""


def normal_bus_id(bus_id: str | bytes) -> tuple[int, int, int, int] | None:
    """A PCI bus id as (domain, bus, device, function), whatever its domain's width or case.

    The CUDA runtime writes `0000:65:00.0`, NVML `00000000:65:00.0`.
    """
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    try:
        domain, bus, rest = text.strip().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def nvml_key(
    device_id: int, pci_bus_id: str | None, env: Mapping[str, str], nvml_count: int
) -> tuple[str, str] | str:
    """How to find CUDA device `device_id` in NVML: ("pci", id), ("uuid", id), ("index", "0").

    Returns the reason, a string, when nothing says which NVML device it is.
    """
    if pci_bus_id:
        return ("pci", pci_bus_id)
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if device_id < len(visible) and visible[device_id].startswith(("GPU-", "MIG-")):
        return ("uuid", visible[device_id])
    if nvml_count == 1 and device_id == 0:
        return ("index", "0")
    return (
        f"cannot tell which of NVML's {nvml_count} devices is CUDA device {device_id}: the CUDA "
        "runtime gave no PCI bus id and CUDA_VISIBLE_DEVICES names no UUID for it"
    )


def cuda_pci_bus_id(device_id: int) -> str | None:
    """The PCI bus id the CUDA runtime gives for device `device_id`, or None without one.

    ONNX Runtime's CUDA and TensorRT providers have already loaded the runtime in this process.
    """
    for name in CUDART:
        try:
            runtime = ctypes.CDLL(name)
        except OSError:
            continue
        buffer = ctypes.create_string_buffer(64)
        if runtime.cudaDeviceGetPCIBusId(buffer, len(buffer), device_id) != 0:
            return None
        return buffer.value.decode() or None
    return None


def _find(module: Any, key: tuple[str, str]) -> Any:
    kind, value = key
    if kind == "uuid":
        return module.nvmlDeviceGetHandleByUUID(value)
    if kind == "index":
        return module.nvmlDeviceGetHandleByIndex(int(value))
    wanted = normal_bus_id(value)
    for i in range(module.nvmlDeviceGetCount()):
        handle = module.nvmlDeviceGetHandleByIndex(i)
        if normal_bus_id(module.nvmlDeviceGetPciInfo(handle).busId) == wanted:
            return handle
    return None


def device_handle(device_id: int) -> tuple[Any, str]:
    """NVML's handle of CUDA device `device_id` and "", or None and why; looked up once."""
    if device_id not in _handles:
        _handles[device_id] = _lookup(device_id)
    return _handles[device_id]


def _lookup(device_id: int) -> tuple[Any, str]:
    module, why = nvml()
    if module is None:
        return None, why
    try:
        key = nvml_key(
            device_id, cuda_pci_bus_id(device_id), os.environ, module.nvmlDeviceGetCount()
        )
        if isinstance(key, str):
            return None, key
        handle = _find(module, key)
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotFound and kin
        if type(exc).__name__.startswith("NVMLError"):
            return None, f"NVML has no such device ({exc})"
        raise
    if handle is None:
        return None, f"NVML has no device at PCI bus id {key[1]}"
    return handle, ""


def process_used(module: Any, handle: Any, pid: int) -> tuple[int | None, str]:
    """The memory process `pid` uses on the device, from NVML's compute process list, or why not."""
    try:
        processes = module.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and kin
        if type(exc).__name__.startswith("NVMLError") or isinstance(exc, AttributeError):
            return None, f"NVML lists no processes here ({exc})"
        raise
    for p in processes:
        if p.pid == pid:
            used = p.usedGpuMemory
            if used is None:
                return None, "NVML lists this process without its memory (e.g. under MIG or WDDM)"
            return int(used), ""
    return None, (
        f"NVML does not list this process (pid {pid}) on the device: in a container NVML lists "
        "the host's process ids"
    )


def gpu_memory(device_id: int) -> GpuMemory | None:
    """The memory of CUDA device `device_id`, or None when NVML or that device is missing."""
    handle, _why = device_handle(device_id)
    if handle is None:
        return None
    module = nvml()[0]
    try:
        info = module.nvmlDeviceGetMemoryInfo(handle)
    except Exception as exc:  # noqa: BLE001 - e.g. NVMLError_GpuIsLost
        if type(exc).__name__.startswith("NVMLError"):
            return None
        raise
    used, note = process_used(module, handle, os.getpid())
    return GpuMemory(int(info.total), int(info.used), used, note)


def why_no_memory(device_id: int) -> str:
    """Why `gpu_memory(device_id)` is None (call after it)."""
    return device_handle(device_id)[1] or nvml()[1] or f"NVML cannot read CUDA device {device_id}"
