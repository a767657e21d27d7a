"""ONNX Runtime session creation: the chain as asked, ORT's own fallback off, the result checked.

Left to itself, `InferenceSession` retries a failed creation with its fallback list and that
list's default options (no memory limit, device 0), printing why to stdout, and leaves out a
provider whose library does not load. Here ORT's fallback is off (`enable_fallback=0`): a
provider whose session creation fails is dropped by the engine, with ORT's reason, and the
session that results is compared with what was asked (`fallback.session_mismatches`).

What depends on the provider (a Cast + Mul input conversion where TensorRT runs the graph, a
DequantizeLinear elsewhere; CPU threads spinning only when no GPU provider runs it; candidate
selection in the graph by default only when a GPU runs it) is decided
from the providers the session really has: when ORT left one out that changes either, the
session is made again without it. `get_available_providers()` only lists what the wheel was
built with, so it is used for nothing but skipping providers the build does not have.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from framebus.errors import ModelError
from framebus_inferencer import arenas, providerlibs
from framebus_inferencer.fallback import (
    MismatchKind,
    ProviderMismatch,
    gpu_shortfall,
    one_line,
    session_mismatches,
)
from framebus_inferencer.graph import InputSpec, prepend_uint8_input
from framebus_inferencer.orterrors import ORT_ERRORS
from framebus_inferencer.providers import (
    GPU_PROVIDERS,
    EngineOptions,
    MemoryLimit,
    cpu_arena_config,
    cpu_session_config,
    cuda_env_arena,
    engine_cache_key,
    memory_limit,
    provider_chain,
    wants_cuda_env_arena,
)
from framebus_inferencer.settings import Provider

log = logging.getLogger(__name__)

CPU = Provider.CPU.ort_name
TENSORRT = Provider.TENSORRT.ort_name
Chain = list[tuple[str, dict[str, Any]]]
Tail = Callable[[onnx.ModelProto, bool], onnx.ModelProto]


class ProviderFallbackError(ModelError):
    """`require_gpu` is set but no GPU provider loaded as asked."""


@dataclass(frozen=True)
class OpenedSession:
    """A session, its image input, the chain it was made with, and what differs from the ask."""

    session: ort.InferenceSession
    spec: InputSpec
    chain: Chain
    mismatches: tuple[ProviderMismatch, ...]
    memory: MemoryLimit


def decisions(providers: list[str]) -> tuple[bool, bool]:
    """What the graph and the session options depend on: (TensorRT runs it, a GPU runs it)."""
    return TENSORRT in providers, bool(GPU_PROVIDERS.intersection(providers))


def open_session(
    model: onnx.ModelProto, opts: EngineOptions, tail: Tail | None = None
) -> OpenedSession:
    """Create the session on the first provider of the chain that works, and say what differs.

    `tail(model, gpu)` rewrites the model's output end for the providers tried (`gpu`: a GPU
    provider is among them), e.g. candidate selection; its last call made the session's graph.
    Raises ProviderFallbackError under `require_gpu` once no GPU provider is left, with ORT's
    reason for each; any other ONNX Runtime error of the last provider (the CPU) propagates.
    """
    available = ort.get_available_providers()
    wanted = [p.ort_name for p in opts.providers]
    remaining = [name for name in wanted if name in available]
    if CPU not in remaining:
        remaining.append(CPU)  # ORT needs a provider for every node: the CPU takes the rest
    skipped = [name for name in wanted if name not in available]
    if skipped:
        log.info("providers not in this ONNX Runtime build, skipped", extra={"skipped": skipped})
    found = _without_driver(remaining)
    while True:
        _require_gpu(opts, remaining, found, skipped, available)
        tensorrt, gpu = decisions(remaining)
        tailed = model if tail is None else tail(model, gpu)
        spec_model, spec = prepend_uint8_input(
            tailed,
            dequantize=not tensorrt,
            size=opts.image_size,
            frame_format=opts.frame_format,
        )
        raw = spec_model.SerializeToString()
        chain = _chain(opts, spec, remaining, engine_cache_key(raw, opts.trt_fp16))
        shared = _shared_cuda_arena(opts, chain)
        try:
            session = _create(raw, opts, chain, shared)
        except ORT_ERRORS as exc:
            _forget_failed_profiles()
            if chain[0][0] == CPU:  # nothing left to fall back to: the engine reports it
                raise
            found.append(ProviderMismatch(chain[0][0], MismatchKind.FAILED, one_line(exc)))
            remaining.remove(chain[0][0])
            continue
        loaded = list(session.get_providers())
        mismatches = session_mismatches(
            chain, loaded, session.get_provider_options(), providerlibs.why_not_loaded
        )
        if decisions(loaded) != decisions(remaining):  # built for a provider that is not there
            take_profile(session)  # discarded: its profile too
            found += [m for m in mismatches if m.kind is MismatchKind.NOT_LOADED]
            remaining = [name for name in remaining if name in loaded]
            continue
        limit = memory_limit(opts, loaded, shared)
        opened = OpenedSession(session, spec, chain, tuple(found + mismatches), limit)
        _check(opts, opened, skipped, available)
        return opened


def _without_driver(remaining: list[str]) -> list[ProviderMismatch]:
    """Drop the GPU providers from `remaining` when no NVIDIA driver loads; say why, for each."""
    gpu = [name for name in remaining if name in GPU_PROVIDERS]
    reason = providerlibs.driver_error() if gpu else None
    if reason is None:
        return []
    log.warning("GPU providers not tried", extra={"providers": gpu, "reason": reason})
    for name in gpu:
        remaining.remove(name)
    return [ProviderMismatch(name, MismatchKind.NOT_LOADED, reason) for name in gpu]


def _chain(opts: EngineOptions, spec: InputSpec, remaining: list[str], cache_key: str) -> Chain:
    # A static batch is the only shape TensorRT may build its profile for.
    chain_opts = replace(opts, max_batch=spec.batch) if spec.batch else opts
    return provider_chain(chain_opts, spec.name, spec.bound_shape, remaining, cache_key)


def _shared_cuda_arena(opts: EngineOptions, chain: Chain) -> bool:
    """Register the capped CUDA arena when TensorRT comes first; False when it cannot be."""
    if not wants_cuda_env_arena([n for n, _ in chain]):
        return False
    options, config = cuda_env_arena(opts)
    try:
        arenas.register_cuda_arena(opts.device_id, options, config)
    except ORT_ERRORS as exc:
        log.error(
            "no GPU memory limit holds: the shared CUDA arena of FRAMEBUS_GPU_MEM_LIMIT_BYTES "
            "cannot be registered with TensorRT first (%s)",
            one_line(exc),
        )
        return False
    return True


def _create(
    model: bytes, opts: EngineOptions, chain: Chain, shared_cuda_arena: bool
) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if opts.intra_op_threads:
        so.intra_op_num_threads = opts.intra_op_threads
    arena = cpu_arena_config(opts)
    if arena is not None:
        arenas.register_cpu_arena(arena)
    config = cpu_session_config(opts, [n for n, _ in chain])
    if shared_cuda_arena:
        config["session.use_env_allocators"] = "1"
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    # The first run is profiled (the engine ends it at once): its node events name the provider
    # that ran each node (ranby.py). In the temp directory: never where the process started.
    so.enable_profiling = True
    so.profile_file_prefix = str(_profile_prefix())
    for name, provider_opts in chain:
        if name == TENSORRT:
            Path(str(provider_opts["trt_engine_cache_path"])).mkdir(parents=True, exist_ok=True)
    log.info("creating ONNX Runtime session", extra={"providers": [n for n, _ in chain]})
    return ort.InferenceSession(
        model,
        so,
        providers=[n for n, _ in chain],
        provider_options=[o for _, o in chain],
        enable_fallback=0,  # ORT's fallback drops our options and says so only on stdout
    )


def _profile_prefix() -> Path:
    return Path(tempfile.gettempdir()) / f"framebus-first-run-{os.getpid()}"


def _forget_failed_profiles() -> None:
    """Delete the profile a session that failed to initialise wrote as ORT destroyed it.

    Live sessions write theirs only when ended, and `take_profile` deletes it at once, so any
    file of this process's prefix is a failed session's.
    """
    prefix = _profile_prefix()
    for path in prefix.parent.glob(f"{prefix.name}_*.json"):
        path.unlink(missing_ok=True)


def take_profile(session: ort.InferenceSession) -> list[dict[str, Any]]:
    """End the session's profiling; return its events and delete its file ([] if already ended).

    A session still profiling writes its file when it is destroyed: the engine ends it at its
    first run, or when it is discarded.
    """
    path = session.end_profiling()
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as f:
            events: list[dict[str, Any]] = json.load(f)
    except (OSError, ValueError) as exc:
        log.warning("cannot read ONNX Runtime's profile %s: %s", path, exc)
        events = []
    Path(path).unlink(missing_ok=True)
    return events


def _require_gpu(
    opts: EngineOptions,
    remaining: list[str],
    found: list[ProviderMismatch],
    skipped: list[str],
    available: list[str],
) -> None:
    """Under `require_gpu`, refuse as soon as no GPU provider is left to try."""
    if opts.require_gpu and not GPU_PROVIDERS.intersection(remaining):
        raise ProviderFallbackError(_refusal(opts, [CPU], found, skipped, available))


def _check(
    opts: EngineOptions, opened: OpenedSession, skipped: list[str], available: list[str]
) -> None:
    loaded = list(opened.session.get_providers())
    shortfall = gpu_shortfall(loaded, opened.mismatches)
    if opts.require_gpu and shortfall is not None:
        take_profile(opened.session)  # discarded
        raise ProviderFallbackError(
            _refusal(opts, loaded, list(opened.mismatches), skipped, available)
        )
    for m in opened.mismatches:
        log.error("execution provider not as asked: %s", m)


def _refusal(
    opts: EngineOptions,
    loaded: list[str],
    found: list[ProviderMismatch],
    skipped: list[str],
    available: list[str],
) -> str:
    reasons = [str(m) for m in found]
    reasons += [
        f"{name}: not in this ONNX Runtime build (it offers {available})"
        for name in skipped
        if name in GPU_PROVIDERS
    ]
    wanted = [p.ort_name for p in opts.providers]
    return (
        f"FRAMEBUS_REQUIRE_GPU is set but no GPU provider loaded as asked: requested {wanted}, "
        f"loaded {loaded}. " + "; ".join(reasons or ["no GPU provider was requested"]) + ". "
        "Install onnxruntime-gpu with matching CUDA/cuDNN/TensorRT libraries (and "
        "LD_LIBRARY_PATH for tensorrt-cu12-libs), or unset FRAMEBUS_REQUIRE_GPU to run on the CPU."
    )
