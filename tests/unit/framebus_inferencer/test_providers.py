from pathlib import Path

import pytest

from framebus.errors import ConfigError
from framebus.messages import FrameStatus
from framebus_inferencer.providers import (
    EngineOptions,
    batch_buckets,
    bucket_for,
    cpu_arena_config,
    cpu_session_config,
    cuda_options,
    provider_chain,
    tensorrt_options,
)
from framebus_inferencer.service import engine_options
from framebus_inferencer.settings import (
    CudnnConvAlgoSearch,
    InferencerSettings,
    Provider,
    Spinning,
)

ALL = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_tensorrt_options_when_configured_then_exact_dict_with_profile_batch_1_to_max() -> None:
    opts = EngineOptions(
        max_batch=8, trt_fp16=True, trt_cache_dir=Path("/cache/trt"), trt_workspace_bytes=1 << 30
    )
    assert tensorrt_options(opts, "images", (640, 640, 3)) == {
        "device_id": 0,
        "trt_fp16_enable": True,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": "/cache/trt",
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": "/cache/trt",
        "trt_max_workspace_size": 1 << 30,
        "trt_profile_min_shapes": "images:1x640x640x3",
        "trt_profile_opt_shapes": "images:8x640x640x3",
        "trt_profile_max_shapes": "images:8x640x640x3",
    }


def test_cuda_options_when_configured_then_capped_arena_same_as_requested() -> None:
    opts = EngineOptions(
        device_id=1,
        gpu_mem_limit_bytes=2 << 30,
        cudnn_conv_algo_search=CudnnConvAlgoSearch.EXHAUSTIVE,
    )
    assert cuda_options(opts) == {
        "device_id": 1,
        "gpu_mem_limit": 2 << 30,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": "EXHAUSTIVE",
    }


def test_cpu_arena_when_limit_set_then_arena_cfg_and_env_allocators() -> None:
    opts = EngineOptions(cpu_arena_limit_bytes=256 << 20)
    assert cpu_arena_config(opts) == {
        "max_mem": 256 << 20,
        "arena_extend_strategy": 1,
        "initial_chunk_size_bytes": -1,
        "max_dead_bytes_per_chunk": -1,
    }
    assert cpu_session_config(opts) == {
        "session.intra_op.allow_spinning": "1",
        "session.use_env_allocators": "1",
    }
    assert cpu_arena_config(EngineOptions()) is None
    assert cpu_session_config(EngineOptions()) == {"session.intra_op.allow_spinning": "1"}


def test_cpu_session_config_when_session_has_a_gpu_provider_or_spinning_off_then_no_spinning() -> (
    None
):
    gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert cpu_session_config(EngineOptions(), gpu)["session.intra_op.allow_spinning"] == "0"
    # Decided by the providers the session has, not by those asked for or built in the wheel.
    cpu_only = ["CPUExecutionProvider"]
    assert cpu_session_config(EngineOptions(), cpu_only)["session.intra_op.allow_spinning"] == "1"
    off = EngineOptions(intra_op_spinning=Spinning.OFF)
    assert cpu_session_config(off)["session.intra_op.allow_spinning"] == "0"


def test_provider_chain_when_gpu_missing_then_only_cpu_remains() -> None:
    chain = provider_chain(EngineOptions(), "images", (640, 640, 3), ["CPUExecutionProvider"])
    assert chain == [("CPUExecutionProvider", {})]


def test_provider_chain_when_all_available_then_tensorrt_cuda_cpu_in_order() -> None:
    chain = provider_chain(EngineOptions(), "images", (640, 640, 3), ALL)
    assert [name for name, _ in chain] == ALL


def test_provider_chain_when_cpu_not_configured_then_still_appended_as_fallback() -> None:
    chain = provider_chain(EngineOptions(providers=(Provider.CUDA,)), "images", (64, 64, 3), ALL)
    assert [name for name, _ in chain] == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_batch_buckets_when_max_not_power_of_two_then_included() -> None:
    assert batch_buckets(8) == (1, 2, 4, 8)
    assert batch_buckets(12) == (1, 2, 4, 8, 12)
    assert bucket_for(3, (1, 2, 4, 8)) == 4
    assert bucket_for(8, (1, 2, 4, 8)) == 8


def test_settings_when_loaded_from_env_then_engine_options_follow() -> None:
    from framebus import settings as cfg

    s = cfg.load(
        InferencerSettings,
        {
            "FRAMEBUS_PROVIDERS": "cuda,cpu",
            "FRAMEBUS_GPU_MEM_LIMIT_BYTES": "1_000_000",
            "FRAMEBUS_REQUIRE_GPU": "true",
            "FRAMEBUS_MAX_FRAMES_PER_CAMERA": "2",
        },
    )
    opts = engine_options(s)
    assert opts.providers == (Provider.CUDA, Provider.CPU)
    assert opts.gpu_mem_limit_bytes == 1_000_000 and opts.require_gpu
    assert s.camera_quota == 2


def test_settings_when_quota_above_max_batch_then_rejected_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_MAX_FRAMES_PER_CAMERA"):
        InferencerSettings(max_batch=4, max_frames_per_camera=5)


def test_settings_when_trim_threshold_outside_a_c_int_then_rejected_naming_the_setting() -> None:
    # mallopt takes a C int: a larger value would wrap rather than keep more heap.
    for bad in (-1, 2**31):
        with pytest.raises(ConfigError, match="FRAMEBUS_MALLOC_TRIM_THRESHOLD_BYTES"):
            InferencerSettings(malloc_trim_threshold_bytes=bad)


def test_health_server_when_not_warmed_up_then_not_ready_and_stats_exported() -> None:
    import json
    import urllib.error
    import urllib.request

    from framebus_inferencer.state import RunState
    from framebus_inferencer.stats import InferencerStats
    from framebus_inferencer.telemetry import inferencer_telemetry

    stats = InferencerStats(provider="CPUExecutionProvider")
    stats.batch(4, "full", 12.0, [1.0, 2.0])
    stats.outcome("cam", FrameStatus.INFERRED, 30.0)
    state = RunState()
    telemetry = inferencer_telemetry(0, stats, state)
    with telemetry.running(watchdog=False):
        base = f"http://127.0.0.1:{telemetry.port}"
        try:
            urllib.request.urlopen(base + "/readyz")  # noqa: S310
            raise AssertionError("expected 503")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            assert "not warmed up" in json.loads(exc.read())["reasons"]["inferencer"]
        state.warmed_up.set()
        state.assigned.set()
        assert urllib.request.urlopen(base + "/readyz").status == 200  # noqa: S310
        text = urllib.request.urlopen(base + "/metrics").read().decode()  # noqa: S310
        assert 'framebus_inferencer_batches_total{size="4"} 1.0' in text
        assert 'framebus_inferencer_provider{provider="CPUExecutionProvider"} 1.0' in text
