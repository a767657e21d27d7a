"""The memory arenas registered with ONNX Runtime's environment: one per device and process.

ONNX Runtime lets a process register one shared allocator per device; every session created with
`session.use_env_allocators` then takes it instead of its providers' own. framebus registers the
capped CPU arena (`cpu_arena_limit_bytes`) and, with TensorRT first, a capped CUDA arena
(`gpu_mem_limit_bytes`, providers.cuda_env_arena says why). A second engine in the process must
ask for the same arena: ONNX Runtime cannot replace one.
"""

from __future__ import annotations

import threading

import onnxruntime as ort

from framebus.errors import ModelError

_lock = threading.Lock()
_registered: dict[tuple[str, int], object] = {}  # (device kind, id) -> what was registered


def _register_once(key: tuple[str, int], config: object, knob: str) -> bool:
    """True when `config` must be registered now, False when it already is; else ModelError."""
    held = _registered.get(key)
    if held is None:
        return True
    if held != config:
        raise ModelError(
            f"a {key[0]} arena with {held} is already registered in this process; ONNX Runtime "
            f"allows one per device: use the same {knob}"
        )
    return False


def register_cpu_arena(config: dict[str, int]) -> None:
    """Register the process-wide capped CPU arena (an `OrtArenaCfg` dict)."""
    with _lock:
        if not _register_once(("cpu", 0), config, "FRAMEBUS_CPU_ARENA_LIMIT_BYTES"):
            return
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(config))
        _registered[("cpu", 0)] = config


def register_cuda_arena(device_id: int, options: dict[str, str], config: dict[str, int]) -> None:
    """Register the capped CUDA arena of GPU `device_id`; raises ORT's error when it cannot."""
    with _lock:
        key = ("cuda", device_id)
        if not _register_once(key, config, "FRAMEBUS_GPU_MEM_LIMIT_BYTES"):
            return
        info = ort.OrtMemoryInfo(
            "Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, device_id, ort.OrtMemType.DEFAULT
        )
        ort.create_and_register_allocator_v2(
            "CUDAExecutionProvider", info, options, ort.OrtArenaCfg(config)
        )
        _registered[key] = config
