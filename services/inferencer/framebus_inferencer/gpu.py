"""NVML, started once per process: GPU memory for /metrics and `framebus tune`.

The bindings (`pynvml`) come from nvidia-ml-py, the `gpu` extra that the GPU image installs.
Without them, or without a driver, callers get None and the reason, and say so rather than
report host memory as GPU memory.
"""

from __future__ import annotations

import importlib
from typing import Any

_started: tuple[Any, str] | None = None  # (pynvml or None, why not), once NVML was asked


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


def gpu_memory_bytes(device_id: int) -> tuple[int, int] | None:
    """(used, total) bytes of GPU `device_id`, or None when NVML or that device is missing."""
    module, _why = nvml()
    if module is None:
        return None
    try:
        info = module.nvmlDeviceGetMemoryInfo(module.nvmlDeviceGetHandleByIndex(device_id))
    except Exception as exc:  # noqa: BLE001 - e.g. NVMLError_InvalidArgument: no such device
        if type(exc).__name__.startswith("NVMLError"):
            return None
        raise
    return int(info.used), int(info.total)
