"""Which memory limit holds for each provider chain, and the shared CUDA arena with TensorRT first.

ONNX Runtime keeps one allocator per device, the first registered provider's: with TensorRT first
that is TensorRT's, which has no limit, so `gpu_mem_limit` (a CUDA provider option) did not
hold in the default chain. A CUDA arena registered with the environment replaces it; TensorRT's
engines (weights, execution context) stay outside every ORT allocator. No GPU here: what is
registered and asked of ONNX Runtime is checked; tests/gpu checks that the limit holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus_inferencer import arenas
from framebus_inferencer.engine import Engine
from framebus_inferencer.providers import (
    EngineOptions,
    LimitedBy,
    MemoryLimit,
    cuda_env_arena,
    memory_limit,
)
from framebus_inferencer.settings import Provider
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector
from framebus_tools.synthetic import bright_square_model

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider")

TRT, CUDA, CPU = (p.ort_name for p in (Provider.TENSORRT, Provider.CUDA, Provider.CPU))
RealSession = ort.InferenceSession
GIB = 1 << 30


@pytest.mark.parametrize(
    ("providers", "shared", "expected"),
    [
        (
            [TRT, CUDA, CPU],
            True,
            MemoryLimit(4 * GIB, LimitedBy.SHARED_CUDA_ARENA, "tensorrt_engines"),
        ),
        ([TRT, CUDA, CPU], False, MemoryLimit(0, LimitedBy.NONE, "tensorrt_engines")),
        ([CUDA, CPU], False, MemoryLimit(4 * GIB, LimitedBy.CUDA_ARENA)),
        ([CPU], False, MemoryLimit(0, LimitedBy.NONE)),
    ],
)
def test_memory_limit_when_provider_chain_then_what_holds_and_what_it_misses(
    providers: list[str], shared: bool, expected: MemoryLimit
) -> None:
    assert memory_limit(EngineOptions(gpu_mem_limit_bytes=4 * GIB), providers, shared) == expected


def test_memory_limit_when_cpu_arena_capped_then_cpu_arena() -> None:
    opts = EngineOptions(cpu_arena_limit_bytes=256 << 20)
    assert memory_limit(opts, [CPU], False) == MemoryLimit(256 << 20, LimitedBy.CPU_ARENA)


def test_cuda_env_arena_when_configured_then_capped_at_gpu_mem_limit_on_the_device() -> None:
    options, config = cuda_env_arena(EngineOptions(device_id=1, gpu_mem_limit_bytes=2 * GIB))
    assert options == {
        "device_id": "1",
        "gpu_mem_limit": str(2 * GIB),
        "arena_extend_strategy": "kSameAsRequested",
    }
    # max_mem is the limit ORT's CreateAndRegisterAllocatorV2 gives the CUDA arena.
    assert config == {
        "max_mem": 2 * GIB,
        "arena_extend_strategy": 1,
        "initial_chunk_size_bytes": -1,
        "max_dead_bytes_per_chunk": -1,
    }


def test_engine_when_tensorrt_first_then_shared_cuda_arena_registered_and_used_by_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[tuple[int, dict[str, str], dict[str, int]]] = []
    env_allocators: dict[str, str] = {}

    def sessions(model: bytes, so: Any, **kw: Any) -> ort.InferenceSession:
        try:
            used = so.get_session_config_entry("session.use_env_allocators")
        except RuntimeError:  # not set
            used = "0"
        env_allocators[kw["providers"][0]] = used
        return RealSession(model, so, **kw)

    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(ort, "InferenceSession", sessions)
    monkeypatch.setattr(arenas, "register_cuda_arena", lambda *args: registered.append(args))
    path = tmp_path / "m.onnx"
    onnx.save(bright_square_model(32), str(path))
    opts = EngineOptions(device_id=1, gpu_mem_limit_bytes=GIB, trt_cache_dir=tmp_path / "trt")
    engine = Engine(path, opts)
    assert registered == [(1, *cuda_env_arena(opts))]
    # The session TensorRT heads uses the shared arena; the CPU one needs none.
    assert env_allocators == {TRT: "1", CPU: "0"}
    # The CPU wheel then ran it on the CPU: no limit holds there, and it says so.
    assert engine.memory_limit == MemoryLimit(0, LimitedBy.NONE)


def test_engine_when_the_shared_arena_cannot_be_registered_then_logged_and_no_limit_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The CPU wheel's own answer: CreateAndRegisterAllocatorV2 has no CUDA here.
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, CPU])
    path = tmp_path / "m.onnx"
    onnx.save(bright_square_model(32), str(path))
    Engine(path, EngineOptions(providers=(Provider.TENSORRT,), trt_cache_dir=tmp_path / "trt"))
    assert "no GPU memory limit holds" in caplog.text
    assert "CUDAExecutionProvider is not implemented in CreateAndRegisterAllocatorV2" in caplog.text


def test_arenas_when_a_second_engine_asks_another_cuda_limit_then_refused_naming_the_knob(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arenas, "_registered", {("cuda", 0): {"max_mem": GIB}})
    with pytest.raises(Exception, match="FRAMEBUS_GPU_MEM_LIMIT_BYTES"):
        arenas.register_cuda_arena(0, {}, {"max_mem": 2 * GIB})
    arenas.register_cuda_arena(0, {}, {"max_mem": GIB})  # the same: already there, no call


def test_metrics_when_tensorrt_first_then_limit_says_who_enforces_it_and_what_it_misses() -> None:
    stats = InferencerStats(
        arena_limit_bytes=GIB,
        arena_limit_enforced_by="shared_cuda_arena",
        arena_limit_excludes="tensorrt_engines",
    )
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert (
        'framebus_inferencer_arena_limit_bytes{enforced_by="shared_cuda_arena",'
        'excludes="tensorrt_engines"} 1.073741824e+09'
    ) in text
