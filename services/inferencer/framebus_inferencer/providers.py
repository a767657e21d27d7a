"""ONNX Runtime provider chains and their exact option dicts, built from settings (pure logic)."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framebus.pixels import FrameFormat
from framebus_inferencer.settings import (
    CandidateSelection,
    CudnnConvAlgoSearch,
    Provider,
    Spinning,
)

GPU_PROVIDERS = frozenset({Provider.TENSORRT.ort_name, Provider.CUDA.ort_name})


@dataclass(frozen=True)
class EngineOptions:
    """What the engine needs from the settings, without Kafka or batching knobs."""

    providers: tuple[Provider, ...] = (Provider.TENSORRT, Provider.CUDA, Provider.CPU)
    max_batch: int = 8
    input_width: int = 0  # the frames' letterbox size (0 = the model's)
    input_height: int = 0
    device_id: int = 0
    trt_fp16: bool = True
    # The service's default: a relative path would put engines wherever the process started.
    trt_cache_dir: Path = Path("~/.cache/framebus/trt").expanduser()
    trt_workspace_bytes: int = 2 * 1024**3
    gpu_mem_limit_bytes: int = 4 * 1024**3
    cudnn_conv_algo_search: CudnnConvAlgoSearch = CudnnConvAlgoSearch.HEURISTIC
    cpu_arena_limit_bytes: int = 0
    intra_op_threads: int = 0
    intra_op_spinning: Spinning = Spinning.AUTO
    require_gpu: bool = False
    # The frames the graph's input takes (an I420 input converts colour inside the graph).
    frame_format: FrameFormat = FrameFormat.RGB
    # Candidate selection appended to a raw YOLO head (candidates.py): the graph's threshold,
    # its top-K and, with topk_nms, its NMS IoU threshold.
    candidate_selection: CandidateSelection = CandidateSelection.AUTO
    max_candidates: int = 300
    confidence_threshold: float = 0.25
    iou_threshold: float = 0.45

    @property
    def image_size(self) -> tuple[int, int] | None:
        """The frames' (height, width) when configured: what a dynamic H and W are pinned to."""
        if self.input_width and self.input_height:
            return self.input_height, self.input_width
        return None


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """Batch sizes that get their own preallocated buffers: powers of two, and `max_batch`."""
    sizes = {1 << i for i in range(max_batch.bit_length()) if (1 << i) <= max_batch}
    sizes.add(max_batch)
    return tuple(sorted(sizes))


def bucket_for(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket that holds `n` frames."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"batch of {n} frames exceeds the largest bucket {buckets[-1]}")


def profile_shapes(input_name: str, batch: int, frame_dims: Sequence[int]) -> str:
    """A TensorRT optimisation-profile shape string, e.g. `images:8x3x640x640` (the bound input)."""
    return f"{input_name}:" + "x".join(str(d) for d in (batch, *frame_dims))


def engine_cache_key(model: bytes, fp16: bool) -> str:
    """The TensorRT engine cache entry of a model: a hash of the bytes ORT gets, and the precision.

    ONNX Runtime names a cached engine after the model's file name (none here: it gets bytes),
    its input and node names and the ORT, CUDA and TensorRT versions, not after its weights: a
    retrained model of the same graph would load the old model's engine from a kept cache.
    """
    return f"{hashlib.sha256(model).hexdigest()[:16]}-{'fp16' if fp16 else 'fp32'}"


def tensorrt_options(
    opts: EngineOptions, input_name: str, frame_dims: Sequence[int], cache_key: str = ""
) -> dict[str, Any]:
    """TensorRT provider options: one explicit profile from batch 1 to `max_batch`.

    With the profile fixed up front, a batch size the engine has not seen yet is still inside the
    profile, so TensorRT never rebuilds the engine mid-stream (a rebuild takes seconds to minutes).
    Engines go to the subdirectory `cache_key` (`engine_cache_key`) of the cache directory; the
    timing cache, per layer and GPU rather than per model, is shared at its top.
    """
    cache = opts.trt_cache_dir
    return {
        "device_id": opts.device_id,
        "trt_fp16_enable": opts.trt_fp16,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(cache / cache_key) if cache_key else str(cache),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(cache),
        "trt_max_workspace_size": opts.trt_workspace_bytes,
        "trt_profile_min_shapes": profile_shapes(input_name, 1, frame_dims),
        "trt_profile_opt_shapes": profile_shapes(input_name, opts.max_batch, frame_dims),
        "trt_profile_max_shapes": profile_shapes(input_name, opts.max_batch, frame_dims),
    }


def cuda_options(opts: EngineOptions) -> dict[str, Any]:
    """CUDA provider options: a capped arena that grows only by what is requested."""
    return {
        "device_id": opts.device_id,
        "gpu_mem_limit": opts.gpu_mem_limit_bytes,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": opts.cudnn_conv_algo_search.name,
    }


def cpu_options(opts: EngineOptions) -> dict[str, Any]:
    """CPU provider options: none; its arena is the shared one of `cpu_arena_config`."""
    return {}


K_SAME_AS_REQUESTED = (
    1  # OrtArenaCfg's arena_extend_strategy: 0 kNextPowerOfTwo, 1 kSameAsRequested
)


def cpu_arena_config(opts: EngineOptions) -> dict[str, int] | None:
    """The `OrtArenaCfg` of the shared CPU arena, or None when no limit is set.

    The arena grows only by what is requested, so the limit is a real cap rather than the next
    power of two above it.
    """
    if not opts.cpu_arena_limit_bytes:
        return None
    return {
        "max_mem": opts.cpu_arena_limit_bytes,
        "arena_extend_strategy": K_SAME_AS_REQUESTED,
        "initial_chunk_size_bytes": -1,
        "max_dead_bytes_per_chunk": -1,
    }


def cuda_env_arena(opts: EngineOptions) -> tuple[dict[str, str], dict[str, int]]:
    """Provider options and `OrtArenaCfg` of the shared CUDA arena registered with ORT's environment.

    ONNX Runtime keeps one allocator per device in a session, the first registered provider's:
    with TensorRT first that is TensorRT's, which has no limit, so the CUDA provider's
    `gpu_mem_limit` never applies. An allocator registered with the environment replaces it in
    every session created with `session.use_env_allocators` (its `max_mem` is the limit).
    """
    options = {
        "device_id": str(opts.device_id),
        "gpu_mem_limit": str(opts.gpu_mem_limit_bytes),
        "arena_extend_strategy": "kSameAsRequested",
    }
    arena = {
        "max_mem": opts.gpu_mem_limit_bytes,
        "arena_extend_strategy": K_SAME_AS_REQUESTED,
        "initial_chunk_size_bytes": -1,
        "max_dead_bytes_per_chunk": -1,
    }
    return options, arena


def wants_cuda_env_arena(session_providers: Sequence[str]) -> bool:
    """True when a GPU provider other than CUDA comes first, so only a shared arena caps memory."""
    return bool(session_providers) and session_providers[0] == Provider.TENSORRT.ort_name


class LimitedBy(enum.StrEnum):
    """Which allocator enforces the memory limit in use (the values are metric labels)."""

    CPU_ARENA = "cpu_arena"  # the process-wide CPU arena (cpu_arena_limit_bytes)
    CUDA_ARENA = "cuda_arena"  # the CUDA provider's own arena (gpu_mem_limit_bytes)
    SHARED_CUDA_ARENA = "shared_cuda_arena"  # the environment's CUDA arena, TensorRT first
    NONE = "none"  # no limit holds


@dataclass(frozen=True)
class MemoryLimit:
    """The memory limit that holds for a session's first provider, and what it leaves out.

    `excludes` is `tensorrt_engines` with TensorRT first: its engines' weights and execution
    context memory are TensorRT's own allocations, outside every ONNX Runtime allocator.
    """

    limit_bytes: int
    enforced_by: LimitedBy
    excludes: str = "none"


def memory_limit(
    opts: EngineOptions, session_providers: Sequence[str], shared_cuda_arena: bool
) -> MemoryLimit:
    """What is enforced for this provider chain (docs/inferencer.md, "Memory limits")."""
    first = session_providers[0] if session_providers else Provider.CPU.ort_name
    if first == Provider.TENSORRT.ort_name:
        if shared_cuda_arena:
            return MemoryLimit(
                opts.gpu_mem_limit_bytes, LimitedBy.SHARED_CUDA_ARENA, "tensorrt_engines"
            )
        return MemoryLimit(0, LimitedBy.NONE, "tensorrt_engines")
    if first == Provider.CUDA.ort_name:
        return MemoryLimit(opts.gpu_mem_limit_bytes, LimitedBy.CUDA_ARENA)
    if opts.cpu_arena_limit_bytes:
        return MemoryLimit(opts.cpu_arena_limit_bytes, LimitedBy.CPU_ARENA)
    return MemoryLimit(0, LimitedBy.NONE)


def cpu_session_config(
    opts: EngineOptions, session_providers: Sequence[str] = ()
) -> dict[str, str]:
    """Session config entries: spinning, and the process-wide (capped) CPU arena if set.

    ONNX Runtime's intra-op threads spin after each run by default, waiting for the next one.
    When a GPU does the work the spinning threads only starve the receive and publish threads,
    librdkafka and often the broker of the cores they share (docs/benchmarks.md); a CPU-only
    session keeps the default. `session_providers` are those the session is created with (what
    the wheel was built with says nothing of what loads: session.py).
    """
    spinning = opts.intra_op_spinning
    if spinning is Spinning.AUTO:
        gpu = any(p in GPU_PROVIDERS for p in session_providers)
        spinning = Spinning.OFF if gpu else Spinning.ON
    config = {"session.intra_op.allow_spinning": "1" if spinning is Spinning.ON else "0"}
    if opts.cpu_arena_limit_bytes:
        config["session.use_env_allocators"] = "1"
    return config


def provider_chain(
    opts: EngineOptions,
    input_name: str,
    frame_dims: Sequence[int],
    available: Sequence[str],
    cache_key: str = "",
) -> list[tuple[str, dict[str, Any]]]:
    """The configured providers among `available`, in order, with their options.

    `cache_key` names the model's TensorRT engine cache entry (`engine_cache_key`).
    """
    chain: list[tuple[str, dict[str, Any]]] = []
    for p in opts.providers:
        if p.ort_name not in available:
            continue
        if p is Provider.TENSORRT:
            options = tensorrt_options(opts, input_name, frame_dims, cache_key)
            chain.append((p.ort_name, options))
        elif p is Provider.CUDA:
            chain.append((p.ort_name, cuda_options(opts)))
        else:
            chain.append((p.ort_name, cpu_options(opts)))
    if not any(name == Provider.CPU.ort_name for name, _ in chain):
        chain.append((Provider.CPU.ort_name, cpu_options(opts)))  # ORT always needs a fallback
    return chain
