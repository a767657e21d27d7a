"""The GPU inferencer image, built here without a GPU: its provider libraries resolve inside it,
and with no GPU its CPU provider runs the scene's model."""

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


def test_gpu_image_when_checked_then_every_provider_library_resolves() -> None:
    done = run_in_image("-m", "framebus_inferencer.providercheck", "--libraries", "tensorrt,cuda")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "providercheck: ok" in done.stdout
    # What each provider library links, seen from outside the check: all found but the driver's
    # libcuda, which the host mounts at run time (the NVIDIA container toolkit).
    for library in ("libonnxruntime_providers_tensorrt.so", "libonnxruntime_providers_cuda.so"):
        linked = ldd_in_image(library)
        missing = [line for line in linked.splitlines() if "not found" in line]
        assert all("libcuda.so" in line for line in missing), f"{library}:\n{linked}"
    tensorrt = ldd_in_image("libonnxruntime_providers_tensorrt.so")
    for needed in ("libnvinfer.so.10", "libcudart.so.12", "libcublas.so.12"):
        assert f"{needed} => /opt/venv/" in tensorrt, f"{needed} not from the wheels:\n{tensorrt}"


def test_gpu_image_when_no_gpu_then_the_cpu_provider_runs_the_scene_model(tmp_path: Path) -> None:
    model = write_color_blob_model(tmp_path / "model.onnx", demo_scene(), 320)
    tmp_path.chmod(0o755)
    model.chmod(0o644)
    done = check_model(tmp_path, "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran the graph: CPUExecutionProvider" in done.stdout, done.stdout
    # Asked for TensorRT first with no GPU: the chain falls back, and the check says so.
    fallback = check_model(tmp_path, "tensorrt,cuda,cpu")
    assert fallback.returncode == 1, fallback.stdout + fallback.stderr
    assert "CPUExecutionProvider ran the graph, not TensorrtExecutionProvider" in fallback.stderr
