"""Tracing across the Kafka hop, over real Kafka: decoder frame spans -> inferencer batch span.

The global tracer provider can be set once per process, so one in-memory exporter serves the
whole test session; each test picks its own spans by the uuid-named topic they mention.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.tracing import span_context_of
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_tools.synthetic import MovingSquare, write_square_video
from testkit.models import yolov8_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SIZE = 64
FRAMES = 24
CAMERAS = ("cam-t1", "cam-t2")
CHILDREN = {"preprocess", "inference", "postprocess", "publish"}


@pytest.fixture(scope="session")
def spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the process's (only) SDK tracer provider."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # later spans of the session are dropped, not kept in memory


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = np.zeros((4 + 1, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9]
    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing"]), str(path))
    return path


def _ids(ctx: trace.SpanContext) -> tuple[int, int]:
    return ctx.trace_id, ctx.span_id


def test_tracing_when_frames_cross_kafka_then_batch_span_links_every_frame_and_detections_continue_trace(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_model: Path,
    spans: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    names = topics()
    video = write_square_video(
        tmp_path / "v.mp4", MovingSquare(width=160, height=120, side=30, frames=FRAMES)
    )
    for cam in CAMERAS:
        decoded = DecoderSettings(
            kafka=kafka,
            topics=names,
            camera_id=cam,
            camera_url=str(video),
            target_fps=0,
            input_width=SIZE,
            input_height=SIZE,
        )
        assert decoder_service.run(decoded) == 0
    group = f"g-{names.frames_topic}"
    inferred = InferencerSettings(
        kafka=kafka,
        topics=names,
        model_path=small_model,
        consumer_group=group,
        max_batch=8,
        max_wait_ms=20,
        max_frame_age_ms=0,
        stop_after_idle_s=2,
    )
    assert inferencer_service.run(inferred, threading.Event()) == 0
    total = FRAMES * len(CAMERAS)
    messages = read_topic(kafka, names.detections_topic, total, timeout_s=30)
    finished: list[ReadableSpan] = list(spans.get_finished_spans())

    frame_spans = {
        (s.attributes["framebus.camera_id"], s.attributes["framebus.seq"]): s
        for s in finished
        if s.name == "frame publish"
        and s.attributes is not None
        and s.attributes.get("messaging.destination.name") == names.frames_topic
    }
    assert len(frame_spans) == total
    frame_ids = {_ids(s.get_span_context()) for s in frame_spans.values()}
    assert len({t for t, _ in frame_ids}) == total  # every frame starts its own trace

    batches = [s for s in finished if s.name == f"process {names.frames_topic}"]
    assert batches
    linked: list[tuple[int, int]] = []
    for b in batches:
        attrs = dict(b.attributes or {})
        assert b.kind is SpanKind.CONSUMER
        assert attrs["messaging.system"] == "kafka"
        assert attrs["messaging.operation.type"] == "process"
        assert attrs["messaging.destination.name"] == names.frames_topic
        assert attrs["messaging.destination.partition.id"] == "0"
        assert attrs["messaging.consumer.group.name"] == group
        assert attrs["messaging.batch.message_count"] == len(b.links) >= 1
        assert isinstance(attrs["messaging.kafka.offset"], int)
        linked += [_ids(link.context) for link in b.links]
        children = {
            s.name
            for s in finished
            if s.parent is not None and s.parent.span_id == b.get_span_context().span_id
        }
        assert children == CHILDREN
    assert sorted(linked) == sorted(frame_ids)  # each frame linked once, from exactly one batch

    codec = DetectionsCodec()
    assert len(messages) == total
    for msg in messages:
        det = codec.decode(msg.value())
        ctx = span_context_of(msg.headers())
        assert ctx is not None, f"detections of {det.camera_id} #{det.seq} carry no trace context"
        assert ctx.trace_id == frame_spans[(det.camera_id, det.seq)].get_span_context().trace_id
