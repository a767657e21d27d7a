"""The GPU checks of bench/gpu_check.sh and the inferencer image: what loads, not what is listed.

`get_available_providers()` lists what the wheel was built with; the checks assert that the
provider asked for is the session's first and ran the graph, and (image build, no GPU) that each
provider's library and all it links resolve. On this CPU machine they must fail for TensorRT and
CUDA, which the old checks would have passed on an onnxruntime-gpu wheel without TensorRT's
libraries.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from framebus_inferencer import providerlibs
from framebus_inferencer.fallback import MismatchKind, ProviderMismatch
from framebus_inferencer.providercheck import engine_problems, main
from framebus_tools.synthetic import bright_square_model

REPO = Path(__file__).resolve().parents[3]
TRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
# `ldd` of a TensorRT provider library whose TensorRT is not on LD_LIBRARY_PATH, at build time.
LDD = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibnvinfer.so.10 => not found
\tlibcudart.so.12 => /usr/local/cuda/lib64/libcudart.so.12 (0x00007f01)
\tlibcuda.so.1 => not found
\tlibnvonnxparser.so.10 => not found
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "square.onnx"
    onnx.save(bright_square_model(32), str(path))
    return path


def test_engine_problems_when_tensorrt_registered_but_cuda_ran_then_named() -> None:
    assert engine_problems(TRT, TRT, TRT, []) == []
    assert engine_problems(TRT, TRT, CUDA, []) == [f"{CUDA} ran the graph, not {TRT}"]
    fell = ProviderMismatch(TRT, MismatchKind.NOT_LOADED, "libnvinfer.so.10: cannot open")
    assert engine_problems(TRT, CUDA, CUDA, [fell]) == [
        f"{TRT} not_loaded: libnvinfer.so.10: cannot open",
        f"the session's first provider is {CUDA}, not {TRT}",
        f"{CUDA} ran the graph, not {TRT}",
    ]


def test_unresolved_when_ldd_misses_tensorrt_then_named_the_driver_aside() -> None:
    assert providerlibs.unresolved(LDD) == ["libnvinfer.so.10", "libnvonnxparser.so.10"]


def test_missing_libraries_when_the_library_links_what_is_there_then_none(
    tmp_path: Path,
) -> None:
    # A real library of this install, with everything it links present.
    shared = providerlibs.capi_dir() / "libonnxruntime_providers_shared.so"
    (tmp_path / "libonnxruntime_providers_cuda.so").symlink_to(shared)
    assert providerlibs.missing_libraries(CUDA, tmp_path) == []
    assert providerlibs.missing_libraries(TRT, tmp_path) == ["libonnxruntime_providers_tensorrt.so"]


def test_load_error_when_the_provider_library_does_not_load_then_the_loaders_reason(
    tmp_path: Path,
) -> None:
    shared = providerlibs.capi_dir() / "libonnxruntime_providers_shared.so"
    (tmp_path / "libonnxruntime_providers_shared.so").symlink_to(shared)
    (tmp_path / "libonnxruntime_providers_tensorrt.so").write_bytes(b"not an ELF file")
    error = providerlibs.load_error(TRT, tmp_path)
    assert error is not None and "does not load" in error and "LD_LIBRARY_PATH=" in error
    assert providerlibs.load_error(CPU, tmp_path) is None


def test_providercheck_when_cpu_asked_on_cpu_then_ok(model: Path, tmp_path: Path) -> None:
    assert (
        main(["--model", str(model), "--providers", "cpu", "--trt-cache-dir", str(tmp_path)]) == 0
    )


def test_providercheck_when_gpu_asked_on_the_cpu_wheel_then_exit_1_naming_what_ran(
    model: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "framebus_inferencer.providercheck",
            "--libraries",
            "tensorrt,cuda",
            "--model",
            str(model),
            "--providers",
            "tensorrt,cuda,cpu",
            "--trt-cache-dir",
            str(tmp_path / "trt"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"the session's first provider is {CPU}, not {TRT}" in done.stderr
    assert f"{CPU} ran the graph, not {TRT}" in done.stderr
    assert "libonnxruntime_providers_tensorrt.so not found" in done.stderr
    assert "FAILED (LD_LIBRARY_PATH=" in done.stderr


def stage(dockerfile: str, name: str) -> str:
    """The text of one stage of a multi-stage Dockerfile (`builder`, or `runtime`: the last)."""
    stages = re.split(r"^FROM ", dockerfile, flags=re.MULTILINE)
    if name == "runtime":
        return stages[-1]
    return next(s for s in stages if s.split("\n", 1)[0].endswith(f"AS {name}"))


def test_gpu_image_when_built_then_it_checks_what_loads_with_the_wheels_library_path() -> None:
    dockerfile = (REPO / "services" / "inferencer" / "Dockerfile").read_text(encoding="utf-8")
    commands = dockerfile.replace("\\\n", " ")
    # The old check: passes wherever the wheel was built with TensorRT, loadable or not.
    assert not re.search(r"python -c [^\n]*get_available_providers", commands)
    (site,) = re.findall(r"^ARG SITE=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert site.endswith("/site-packages")
    runtime = stage(dockerfile, "runtime")
    (path,) = re.findall(r"LD_LIBRARY_PATH=(\S+)", runtime)
    folders = path.split(":")
    # TensorRT's wheel and every CUDA wheel ONNX Runtime's providers link, then the driver's.
    for folder in ("tensorrt_libs", "cudnn/lib", "cublas/lib", "cuda_runtime/lib", "cufft/lib"):
        assert any(f.startswith("${SITE}/") and f.endswith(folder) for f in folders), folder
    assert "/usr/local/nvidia/lib64" in folders
    checked = '--libraries "${TENSORRT_VERSION:+tensorrt,}cuda"'
    assert f"python -m framebus_inferencer.providercheck {checked}" in runtime


def test_gpu_check_when_run_then_providercheck_gates_each_chain_on_tensorrts_library_path() -> None:
    script = (REPO / "bench" / "gpu_check.sh").read_text(encoding="utf-8")
    assert "-m framebus_inferencer.providercheck" in script
    assert 'export LD_LIBRARY_PATH="$trt_libs' in script
    assert 'exit "$status"' in script
