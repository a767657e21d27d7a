"""The walking skeleton end to end: video file -> decoder -> real Kafka -> inferencer -> detections."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import confluent_kafka
import pytest

from framebus.codec import DetectionsCodec
from framebus.kafka import deadletter
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_tools.synthetic import MovingSquare
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration


def start_inferencer(settings: InferencerSettings) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(inferencer_service.run(settings, stop)))
    thread.start()
    return thread, stop


def test_pipeline_when_1080p_video_flows_through_then_one_accurate_record_per_frame_in_order(
    kafka: KafkaSettings,
    topics: TopicFactory,
    square_video: Path,
    square_model: Path,
    square_scene: MovingSquare,
) -> None:
    names = topics(frames_partitions=2, detections_partitions=2)
    inferencer, stop = start_inferencer(
        InferencerSettings(
            kafka=kafka,
            topics=names,
            model_path=square_model,
            max_batch=8,
            max_wait_ms=20,
            consumer_group=f"g-{names.frames_topic}",
        )
    )
    try:
        for cam in ("cam-a", "cam-b"):
            code = decoder_service.run(
                DecoderSettings(
                    kafka=kafka,
                    topics=names,
                    camera_id=cam,
                    camera_url=str(square_video),
                    target_fps=0,
                )
            )
            assert code == 0
        messages = read_topic(kafka, names.detections_topic, 2 * square_scene.frames, settle_s=2.0)
    finally:
        stop.set()
        inferencer.join(30)

    codec = DetectionsCodec()
    by_camera: dict[str, list[int]] = defaultdict(list)
    for msg in messages:
        det = codec.decode(msg.value())
        assert msg.key().decode() == det.camera_id
        by_camera[det.camera_id].append(det.seq)
        assert det.status is FrameStatus.INFERRED
        assert len(det.boxes) == 1, f"{det.camera_id} #{det.seq}: {det.boxes}"
        box = det.boxes[0]
        expected = square_scene.box(det.seq)
        got = (box.x1, box.y1, box.x2, box.y2)
        assert all(abs(g - e) <= 4 for g, e in zip(got, expected, strict=True)), (
            det.seq,
            got,
            expected,
        )
        assert box.class_name == "square"
    # Exactly one record per frame, in per-camera order.
    for cam in ("cam-a", "cam-b"):
        assert by_camera[cam] == list(range(square_scene.frames))


def test_inferencer_when_frames_topic_has_garbage_then_dead_letters_it_and_keeps_running(
    kafka: KafkaSettings,
    topics: TopicFactory,
    square_video: Path,
    square_model: Path,
) -> None:
    names = topics()
    garbage = b"\x00not an avro frame\xff" * 10
    producer = confluent_kafka.Producer(kafka.client_config())
    producer.produce(names.frames_topic, garbage, key=b"cam-x")
    producer.flush(10)
    inferencer, stop = start_inferencer(
        InferencerSettings(
            kafka=kafka,
            topics=names,
            model_path=square_model,
            consumer_group=f"g-{names.frames_topic}",
        )
    )
    try:
        dead = read_topic(kafka, names.deadletter_topic, 1, timeout_s=30)
        # Still alive: a good frame published after the garbage gets its detections record.
        assert (
            decoder_service.run(
                DecoderSettings(
                    kafka=kafka,
                    topics=names,
                    camera_id="cam-y",
                    camera_url=str(square_video),
                    target_fps=0,
                    max_frames=3,
                )
            )
            == 0
        )
        results = read_topic(kafka, names.detections_topic, 3, timeout_s=60)
    finally:
        stop.set()
        inferencer.join(30)
    assert inferencer.is_alive() is False
    assert len(dead) == 1
    assert dead[0].value() == garbage
    headers = dict(dead[0].headers())
    assert b"C3 01" in headers[deadletter.REASON] or b"marker" in headers[deadletter.REASON]
    assert headers[deadletter.SOURCE_TOPIC] == names.frames_topic.encode()
    assert headers[deadletter.SOURCE_OFFSET] == b"0"
    assert [DetectionsCodec().decode(m.value()).seq for m in results] == [0, 1, 2]
