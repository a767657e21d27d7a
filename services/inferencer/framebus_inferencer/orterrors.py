"""ONNX Runtime's errors: every class its binding raises, and which of them mean memory ran out."""

from __future__ import annotations

import onnxruntime as ort


def binding_errors() -> tuple[type[Exception], ...]:
    """Every exception class ONNX Runtime's Python binding defines.

    None of them is a RuntimeError: EPFail (a TensorRT engine that fails to build when the session
    is created), NotImplemented (no kernel for a node), EngineError... each escapes an
    `except RuntimeError`. Listed from the binding itself, so a class a later ONNX Runtime adds
    is caught too.
    """
    state = ort.capi.onnxruntime_pybind11_state
    return tuple(
        v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception)
    )


# MemoryError: pybind11's translation of std::bad_alloc.
ORT_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, MemoryError, *binding_errors())
# How memory exhaustion reads, lowercased: ORT's arena ("Available memory of ... is smaller than
# requested bytes", "Failed to allocate memory"), CUDA and cuDNN/cuBLAS ("out of memory",
# "CUDNN_STATUS_ALLOC_FAILED"), and TensorRT's error code name ("OutOfMemory").
_OOM_MARKERS = (
    "available memory of",
    "failed to allocate",
    "out of memory",
    "outofmemory",
    "bfc_arena",
    "alloc_failed",
    "cudaerrormemoryallocation",
)


def is_memory_failure(exc: BaseException) -> bool:
    """True when ONNX Runtime's error says that memory ran out (in its arena, CUDA or TensorRT)."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or any(marker in text for marker in _OOM_MARKERS)
