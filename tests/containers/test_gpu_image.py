"""The GPU inferencer image, built here without a GPU: its provider libraries resolve inside it,
and with no GPU its CPU provider runs the scene's model.

An image built without TensorRT (its label io.framebus.tensorrt-version empty: NVIDIA's index,
where tensorrt-cu12-libs fetches its wheel from, cannot be reached) must lack TensorRT's own
libraries and nothing else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import demo_scene
from testkit.podman_compose import podman

pytestmark = [pytest.mark.containers]

IMAGE = "framebus/inferencer:dev"
CAPI = "/opt/venv/lib/python3.11/site-packages/onnxruntime/capi"
TENSORRT_LIBRARIES = {"libnvinfer.so.10", "libnvinfer_plugin.so.10", "libnvonnxparser.so.10"}


def tensorrt_version() -> str:
    """The TensorRT the image was built with, "" for none (its label)."""
    label = '{{ index .Labels "io.framebus.tensorrt-version" }}'
    return podman("image", "inspect", "--format", label, IMAGE).strip()


def run_in_image(*args: str, volume: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the GPU image, as its user, read-only, without network."""
    if not podman("images", "-q", IMAGE).strip():
        pytest.fail(f"image {IMAGE} is missing: run `make images` first")
    mounts = ["-v", volume] if volume else []
    return subprocess.run(  # noqa: S603 - podman with our own arguments
        ["podman", "run", "--rm", "--read-only", "--network", "none", *mounts,
         "--entrypoint", "python", IMAGE, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def ldd_in_image(library: str) -> str:
    """`ldd` of one of ONNX Runtime's provider libraries, run inside the image."""
    done = subprocess.run(  # noqa: S603 - podman with our own arguments
        ["podman", "run", "--rm", "--network", "none", "--entrypoint", "ldd", IMAGE,
         f"{CAPI}/{library}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.stdout


def check_model(folder: Path, providers: str) -> subprocess.CompletedProcess[str]:
    """providercheck of the model in `folder` on the chain `providers`, inside the image."""
    return run_in_image(
        "-m", "framebus_inferencer.providercheck", "--model", "/models/model.onnx",
        "--providers", providers, "--trt-cache-dir", "/tmp/trt",
        volume=f"{folder}:/models:ro",
    )  # fmt: skip


def unresolved(library: str) -> set[str]:
    """The libraries `library` links that the loader cannot find in the image."""
    linked = ldd_in_image(library)
    assert "libcudart.so.12 => /opt/venv/" in linked, f"{library}:\n{linked}"
    return {line.split()[0] for line in linked.splitlines() if "not found" in line}


def test_gpu_image_when_checked_then_every_provider_library_resolves() -> None:
    with_tensorrt = bool(tensorrt_version())
    providers = "tensorrt,cuda" if with_tensorrt else "cuda"
    done = run_in_image("-m", "framebus_inferencer.providercheck", "--libraries", providers)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "providercheck: ok" in done.stdout
    # Seen from outside the check: CUDA's provider finds cuDNN, cuBLAS, cuFFT, cuRAND and the
    # CUDA runtime in the wheels (the driver's libcuda is loaded at run time, from the host).
    assert unresolved("libonnxruntime_providers_cuda.so") == set()
    missing = unresolved("libonnxruntime_providers_tensorrt.so")
    assert missing == (set() if with_tensorrt else TENSORRT_LIBRARIES)


def test_gpu_image_when_no_gpu_then_the_cpu_provider_runs_the_scene_model(tmp_path: Path) -> None:
    model = write_color_blob_model(tmp_path / "model.onnx", demo_scene(), 320)
    tmp_path.chmod(0o755)
    model.chmod(0o644)
    done = check_model(tmp_path, "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran the graph: CPUExecutionProvider" in done.stdout, done.stdout
    # Asked for TensorRT first with no driver: the GPU providers are not tried (ONNX Runtime 1.22
    # crashed with SIGSEGV on a CUDA session here), the CPU runs, and the check says why.
    fallback = check_model(tmp_path, "tensorrt,cuda,cpu")
    assert fallback.returncode == 1, fallback.stdout + fallback.stderr
    assert "CPUExecutionProvider ran the graph, not TensorrtExecutionProvider" in fallback.stderr
    assert "the NVIDIA driver (libcuda.so.1) does not load" in fallback.stderr
