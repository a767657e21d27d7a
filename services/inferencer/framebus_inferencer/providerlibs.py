"""Whether a GPU provider's shared library really loads here, and if not, why.

`onnxruntime.get_available_providers()` lists the providers the wheel was built with, not the
ones that load: onnxruntime-gpu lists TensorRT and CUDA on a machine without TensorRT's libraries
(tensorrt-cu12-libs puts them in site-packages/tensorrt_libs, where the loader does not look
unless LD_LIBRARY_PATH says so), without cuDNN, or without a driver. ORT then leaves the provider
out of the session with a warning on stderr. Loading the provider's library the way ORT does
gives the loader's own reason (e.g. "libnvinfer.so.10: cannot open shared object file").
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
from pathlib import Path

import onnxruntime as ort

# The shared library of each provider that ONNX Runtime loads at session creation.
LIBRARIES = {
    "TensorrtExecutionProvider": "libonnxruntime_providers_tensorrt.so",
    "CUDAExecutionProvider": "libonnxruntime_providers_cuda.so",
}
_SHARED = "libonnxruntime_providers_shared.so"  # loaded first, globally, as ORT does
# The driver comes from the host at run time (the NVIDIA container toolkit mounts it), so an
# image build cannot find it and need not.
DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")


DRIVER = "libcuda.so.1"


@functools.cache
def driver_error() -> str | None:
    """Why the NVIDIA driver does not load in this process, or None when it loads.

    Without it ONNX Runtime 1.22 can crash creating a CUDA or TensorRT session (a segmentation
    fault in a container with the CUDA wheels but no driver mounted) instead of falling back, so
    the GPU providers are not asked for at all then.
    """
    try:
        ctypes.CDLL(DRIVER)
    except OSError as exc:
        return (
            f"the NVIDIA driver ({DRIVER}) does not load: {exc} (no GPU here, or the container "
            "runs without the NVIDIA Container Toolkit's driver mount)"
        )
    return None


def capi_dir() -> Path:
    """Where this ONNX Runtime keeps its provider libraries."""
    return Path(ort.__file__).parent / "capi"


def load_error(provider: str, capi: Path | None = None) -> str | None:
    """Why `provider`'s library does not load in this process, or None when it loads."""
    library = LIBRARIES.get(provider)
    if library is None:
        return None
    capi = capi or capi_dir()
    path = capi / library
    if not path.is_file():
        return f"{library} is not in {capi}: this is not onnxruntime-gpu"
    try:
        ctypes.CDLL(str(capi / _SHARED), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(path))
    except OSError as exc:
        path_var = os.environ.get("LD_LIBRARY_PATH") or "(unset)"
        return f"{library} does not load: {exc} (LD_LIBRARY_PATH={path_var})"
    return None


def why_not_loaded(provider: str) -> str:
    """The reason to give for a provider ORT left out of a session."""
    error = load_error(provider)
    if error is not None:
        return error
    return (
        "its library loads, so ONNX Runtime refused it for another reason (no usable device, a "
        "driver older than its CUDA, a bad option): ONNX Runtime's warning on stderr names it"
    )


def unresolved(ldd_output: str, ignore: tuple[str, ...] = DRIVER_LIBRARIES) -> list[str]:
    """The libraries `ldd` reports "not found", less those starting with an `ignore` name."""
    missing = re.findall(r"^\s*(\S+) => not found", ldd_output, flags=re.MULTILINE)
    return [m for m in missing if not m.startswith(ignore)]


def missing_libraries(provider: str, capi: Path | None = None) -> list[str]:
    """Libraries `provider`'s library needs that the loader cannot find (the driver aside).

    Unlike `load_error` this needs no driver, so an image build (no GPU) can check it.
    """
    library = LIBRARIES[provider]
    path = (capi or capi_dir()) / library
    if not path.is_file():
        return [library]
    done = subprocess.run(  # noqa: S603 - ldd on a file of our own install
        ["ldd", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    return unresolved(done.stdout)
