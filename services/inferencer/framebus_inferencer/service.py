"""The inferencer service: wires settings, engine, Kafka clients and the pipeline together."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import threading

from framebus.errors import ModelError
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.settings import instance_transactional_id
from framebus.kafka.transactions import rewinding
from framebus.malloc import keep_freed_heap
from framebus.telemetry.health import Health
from framebus.telemetry.tracing import setup_tracing
from framebus_inferencer.engine import Engine
from framebus_inferencer.model import check_input_size
from framebus_inferencer.pipeline import Pipeline
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import DeliveryMode, InferencerSettings
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import inferencer_telemetry

WORKER_SESSION_TIMEOUT_MS = 10_000  # librdkafka's default is 45 s

log = logging.getLogger(__name__)


def engine_options(settings: InferencerSettings) -> EngineOptions:
    """The engine's part of the settings."""
    return EngineOptions(
        providers=settings.providers,
        max_batch=settings.max_batch,
        input_width=settings.input_width,
        input_height=settings.input_height,
        device_id=settings.device_id,
        trt_fp16=settings.trt_fp16,
        trt_cache_dir=settings.trt_cache_dir,
        trt_workspace_bytes=settings.trt_workspace_bytes,
        gpu_mem_limit_bytes=settings.gpu_mem_limit_bytes,
        cudnn_conv_algo_search=settings.cudnn_conv_algo_search,
        cpu_arena_limit_bytes=settings.cpu_arena_limit_bytes,
        intra_op_threads=settings.intra_op_threads,
        intra_op_spinning=settings.intra_op_spinning,
        require_gpu=settings.require_gpu,
        frame_format=settings.frame_format,
        candidate_selection=settings.candidate_selection,
        max_candidates=settings.max_candidates,
        confidence_threshold=settings.confidence_threshold,
        iou_threshold=settings.iou_threshold,
    )


def build_engine(settings: InferencerSettings) -> Engine:
    """Load the model on the first provider of the chain that really loads."""
    if settings.model_path is None:
        raise ModelError("no model: set FRAMEBUS_MODEL_PATH (--model-path)")
    engine = Engine(
        settings.model_path, engine_options(settings), settings.labels_path, settings.head_format
    )
    log.info(
        "model loaded",
        extra={
            "model": engine.info.name,
            "registered_provider": engine.provider,
            "head": engine.info.head.value,
            "input": engine.info.input.exported_shape,
            "input_conversion": engine.info.input.to_float,
            "frame_format": engine.info.input.pixel_format.value,
            "batch_mode": engine.info.batch_mode.value,
            "candidate_selection": engine.info.candidate_selection,
            "buckets": engine.buckets,
        },
    )
    return engine


def describe_engine(stats: InferencerStats, engine: Engine) -> None:
    """Put what /metrics says of the loaded engine into `stats`."""
    stats.engine_described(
        engine.info.batch_mode.value,
        engine.info.static_batch or 0,
        tuple((m.provider, m.kind.value) for m in engine.fallbacks),
        engine.info.candidate_selection,
        engine.candidate_fallback,
    )


def run(
    settings: InferencerSettings,
    stop: threading.Event | None = None,
    stats: InferencerStats | None = None,
    engine: Engine | None = None,
) -> int:
    """Consume until `stop` is set (or idle for `stop_after_idle_s`); return an exit code."""
    stop = stop or threading.Event()
    stats = stats or InferencerStats(device_id=settings.device_id)
    setup_tracing("framebus-inferencer", os.environ)
    keep_freed_heap(settings.malloc_trim_threshold_bytes)  # before any client's first buffer
    engine = engine or build_engine(settings)
    # Before consuming: frames of another size would each be dead-lettered, mid-stream.
    check_input_size(engine.info, settings.input_width, settings.input_height)
    describe_engine(stats, engine)
    state = RunState()
    telemetry = inferencer_telemetry(
        settings.http_port or None,
        stats,
        state,
        settings.kafka,
        engine.cpu.seconds,
        worker=settings.worker_index is not None,
    )
    try:
        with telemetry.running():
            return _run_pipeline(settings, stop, stats, state, engine, telemetry.health)
    finally:
        log_cpu(engine)


def log_cpu(engine: Engine) -> None:
    """The process's CPU and its engine's at exit: what `bench.marginal` subtracts."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    log.info(
        "CPU seconds at exit",
        extra={
            "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
            "engine_cpu_s": round(engine.cpu.seconds(), 4),
            "engine_threads": engine.cpu.pool_threads,
        },
    )


def _run_pipeline(
    settings: InferencerSettings,
    stop: threading.Event,
    stats: InferencerStats,
    state: RunState,
    engine: Engine,
    health: Health,
) -> int:
    eos = settings.delivery is DeliveryMode.EXACTLY_ONCE
    txid = instance_transactional_id(settings.transactional_id, settings.consumer_group)
    producer_overrides = {"transactional.id": txid} if eos else {}
    # Exactly-once: offsets go only through transactions; static membership lets a restarted
    # instance take its partitions back at once instead of after the session timeout.
    consumer_overrides: dict[str, object] = (
        {"enable.auto.commit": False, "group.instance.id": txid} if eos else {}
    )
    if settings.worker_index is not None:
        # At-least-once, a restarted worker is a new member: the group (the pod's other workers
        # too) waits for the dead one's session to expire, so keep it as short as the tracker's.
        consumer_overrides["session.timeout.ms"] = WORKER_SESSION_TIMEOUT_MS

    def attempt() -> None:
        # Fresh clients each time: after an aborted transaction the consumer starts again at
        # the group's committed offsets.
        with (
            Producer(settings.kafka, producer_overrides, watch=health.call) as producer,
            Consumer(
                settings.kafka, settings.consumer_group, consumer_overrides, watch=health.call
            ) as consumer,
        ):
            Pipeline(settings, engine, consumer, producer, stats, health=health, state=state).run(
                stop
            )

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C in a terminal: a clean stop
        rewinding(attempt, stop, on_rewind=lambda _exc: stats.error("rewind"))
    return 0
