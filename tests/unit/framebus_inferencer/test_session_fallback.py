"""Session creation as onnxruntime-gpu does it where a provider fails: nothing silent.

There is no GPU here. Two real situations of a GPU machine are made on the CPU wheel:
- a wheel that lists TensorRT and CUDA but whose libraries do not load: `get_available_providers`
  is made to list them (as onnxruntime-gpu does) and the real ONNX Runtime then creates the
  session without them, as it does when their libraries do not load;
- a provider whose session creation raises (a TensorRT engine that does not build, no CUDA
  device): `InferenceSession` raises EPFail, as ORT's binding does, when that provider is first.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus_inferencer import providerlibs
from framebus_inferencer.engine import Engine
from framebus_inferencer.fallback import (
    MismatchKind,
    ProviderMismatch,
    gpu_shortfall,
    option_differences,
    session_mismatches,
)
from framebus_inferencer.providerlibs import driver_error as real_driver_error
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.service import describe_engine
from framebus_inferencer.session import ProviderFallbackError
from framebus_inferencer.settings import Provider
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector
from framebus_tools.synthetic import bright_square_model

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider")

TRT, CUDA, CPU = (p.ort_name for p in (Provider.TENSORRT, Provider.CUDA, Provider.CPU))
RealSession = ort.InferenceSession
NO_DRIVER = "the NVIDIA driver (libcuda.so.1) does not load: no such file"
NO_DEVICE = "CUDA failure 100: no CUDA-capable device is detected ; GPU=0 ; expr=cudaSetDevice"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "square.onnx"
    onnx.save(bright_square_model(32), str(path))
    return path


@pytest.fixture
def wheel_lists_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`get_available_providers` as onnxruntime-gpu answers it: what the wheel was built with."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, CUDA, CPU])


class Sessions:
    """Stands in for `ort.InferenceSession`: raises `error` when `failing` is the first provider."""

    def __init__(self, failing: str, error: BaseException) -> None:
        self.failing = failing
        self.error = error
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, model: bytes, so: Any, **kw: Any) -> ort.InferenceSession:
        providers = list(kw["providers"])
        self.calls.append((providers, kw))
        if providers[0] == self.failing:
            raise self.error
        return RealSession(model, so, **kw)


def spinning(engine: Engine) -> str:
    options = engine.session.get_session_options()
    return str(options.get_session_config_entry("session.intra_op.allow_spinning"))


def test_engine_when_the_wheel_lists_gpu_providers_that_do_not_load_then_each_reported_with_why(
    model: Path, wheel_lists_gpu: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="framebus_inferencer.session"):
        engine = Engine(model, EngineOptions(max_batch=2, trt_cache_dir=model.parent / "trt"))
    assert engine.session.get_providers() == [CPU]
    assert [(m.provider, m.kind) for m in engine.fallbacks] == [
        (TRT, MismatchKind.NOT_LOADED),
        (CUDA, MismatchKind.NOT_LOADED),
    ]
    # The loader's reason: here, the provider libraries are not installed at all.
    assert "libonnxruntime_providers_tensorrt.so is not in" in engine.fallbacks[0].reason
    said = [r.getMessage() for r in caplog.records if "not as asked" in r.getMessage()]
    assert len(said) == 2 and "TensorrtExecutionProvider not_loaded" in said[0]
    # Decided from the session's providers (the CPU), not from the wheel's list (TensorRT, CUDA).
    assert engine.info.input.to_float == "DequantizeLinear"
    assert spinning(engine) == "1"
    frame = np.full((32, 32, 3), 24, np.uint8)
    frame[4:12, 8:20] = 235
    (det,) = engine.decoder().decode(engine.infer([frame]), 1)
    assert det.boxes.tolist() == [[8.0, 4.0, 20.0, 12.0]]


def test_engine_when_session_creation_raises_for_a_gpu_provider_then_dropped_with_orts_reason(
    model: Path, wheel_lists_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = Sessions(CUDA, ort.capi.onnxruntime_pybind11_state.EPFail(NO_DEVICE))
    monkeypatch.setattr(ort, "InferenceSession", sessions)
    opts = EngineOptions(providers=(Provider.CUDA, Provider.CPU), device_id=1)
    engine = Engine(model, opts)
    assert engine.provider == CPU
    assert engine.fallbacks == (
        ProviderMismatch(CUDA, MismatchKind.FAILED, f"EPFail: {NO_DEVICE}"),
    )
    # ORT's own fallback (its default options: device 0, no memory limit) never runs.
    assert [providers for providers, _ in sessions.calls] == [[CUDA, CPU], [CPU]]
    assert all(kw["enable_fallback"] == 0 for _, kw in sessions.calls)
    assert sessions.calls[0][1]["provider_options"][0]["device_id"] == 1


def test_engine_when_require_gpu_and_the_gpu_provider_fails_then_refused_with_orts_reason(
    model: Path, wheel_lists_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        ort, "InferenceSession", Sessions(TRT, ort.capi.onnxruntime_pybind11_state.EPFail("x"))
    )
    opts = EngineOptions(require_gpu=True, trt_cache_dir=model.parent / "trt")
    with pytest.raises(ProviderFallbackError) as err:
        Engine(model, opts)
    text = str(err.value)
    assert "no GPU provider loaded as asked" in text
    assert "TensorrtExecutionProvider failed: EPFail: x" in text
    assert "CUDAExecutionProvider not_loaded: libonnxruntime_providers_cuda.so is not in" in text


def test_engine_when_require_gpu_on_the_cpu_wheel_then_refused_naming_what_the_build_offers(
    model: Path,
) -> None:
    opts = EngineOptions(providers=(Provider.CUDA, Provider.CPU), require_gpu=True)
    with pytest.raises(ProviderFallbackError, match="CUDAExecutionProvider: not in this ONNX"):
        Engine(model, opts)


def test_option_differences_when_ort_reports_its_defaults_then_each_named() -> None:
    asked = {"device_id": 1, "gpu_mem_limit": 2 << 30, "arena_extend_strategy": "kSameAsRequested"}
    # What ORT's fallback gives: device 0 and SIZE_MAX, i.e. no limit.
    got = {"device_id": "0", "gpu_mem_limit": "18446744073709551615", "arena_extend_strategy": "1"}
    assert option_differences(asked, got) == {
        "device_id": ("1", "0"),
        "gpu_mem_limit": (str(2 << 30), "18446744073709551615"),
    }
    same = {"device_id": "1", "gpu_mem_limit": str(2 << 30), "trt_fp16_enable": "1"}
    assert option_differences({**asked, "trt_fp16_enable": True}, same) == {}


def test_session_mismatches_when_gpu_loaded_with_other_options_then_require_gpu_refuses() -> None:
    asked = [(CUDA, {"device_id": 1}), (CPU, {})]
    loaded = [CUDA, CPU]
    wrong = session_mismatches(asked, loaded, {CUDA: {"device_id": "0"}}, lambda _: "")
    assert wrong == [ProviderMismatch(CUDA, MismatchKind.OPTIONS, "device_id asked 1, got 0")]
    assert gpu_shortfall(loaded, wrong) is not None
    right = session_mismatches(asked, loaded, {CUDA: {"device_id": "1"}}, lambda _: "")
    assert right == [] and gpu_shortfall(loaded, right) is None
    assert gpu_shortfall([CPU], []) is not None


def test_metrics_when_a_provider_fell_back_then_exported_by_provider_and_kind(
    model: Path, wheel_lists_gpu: None
) -> None:
    stats = InferencerStats()
    describe_engine(stats, Engine(model, EngineOptions(trt_cache_dir=model.parent / "trt")))
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    for name in (TRT, CUDA):
        line = f'framebus_inferencer_provider_fallbacks{{kind="not_loaded",provider="{name}"}} 1.0'
        assert line in text


def test_engine_when_no_nvidia_driver_loads_then_gpu_providers_are_not_asked_for(
    model: Path, wheel_lists_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ONNX Runtime 1.22 crashed (SIGSEGV) creating a CUDA session in the GPU image run without a
    # driver (tests/containers): the GPU providers must never reach it then.
    monkeypatch.setattr(providerlibs, "driver_error", lambda: NO_DRIVER)
    sessions = Sessions(CUDA, AssertionError("a GPU provider was asked for"))
    monkeypatch.setattr(ort, "InferenceSession", sessions)
    engine = Engine(
        model, EngineOptions(providers=(Provider.TENSORRT, Provider.CUDA, Provider.CPU))
    )
    assert engine.provider == CPU
    assert engine.fallbacks == (
        ProviderMismatch(TRT, MismatchKind.NOT_LOADED, NO_DRIVER),
        ProviderMismatch(CUDA, MismatchKind.NOT_LOADED, NO_DRIVER),
    )
    assert [providers for providers, _ in sessions.calls] == [[CPU]]


def test_engine_when_require_gpu_and_no_nvidia_driver_then_refused_naming_the_driver(
    model: Path, wheel_lists_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(providerlibs, "driver_error", lambda: NO_DRIVER)
    opts = EngineOptions(providers=(Provider.CUDA, Provider.CPU), require_gpu=True)
    with pytest.raises(ProviderFallbackError, match="libcuda.so.1"):
        Engine(model, opts)


def test_driver_error_when_libcuda_is_missing_then_it_names_it_and_the_toolkit() -> None:
    reason = real_driver_error.__wrapped__()  # uncached; the autouse stub replaced the name
    if reason is None:
        pytest.skip("an NVIDIA driver loads on this machine")
    assert "libcuda.so.1" in reason and "NVIDIA Container Toolkit" in reason
