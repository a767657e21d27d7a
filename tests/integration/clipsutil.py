"""What the `framebus clips` integration tests share: a recorded camera on the video topic, its
frames and alerts, the service as a process, its records and the packets of a written MP4.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import av
import confluent_kafka
import cv2
import numpy as np

from framebus.codec import ClipCodec, FrameCodec, VideoPacketCodec
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.letterbox import Letterbox
from framebus.messages import (
    Alert,
    Box,
    Clip,
    Frame,
    PixelFormat,
    RuleType,
    TensorLayout,
    VideoPacket,
    ZoneAnchor,
)
from framebus.topology import Sizing, Topic, TopicSettings, pipeline_specs
from framebus.videopackets import demux_file, kafka_timestamp_ms
from framebus_tools.synthetic import MovingSquare, write_square_video
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import Service, service_env

S = 1_000_000
FPS, GOP = 25, 25  # a keyframe every second
SCENE = MovingSquare(width=1280, height=720, side=120, frames=20 * FPS, fps=FPS)
PRE_S = POST_S = 5
STEP_US = S // FPS


def square_video(folder: Path) -> Path:
    """The scene as an H.264 file with a keyframe every second."""
    return write_square_video(folder / "720p.mp4", SCENE, gop=GOP)


def clip_topics(kafka: KafkaSettings, topics: TopicFactory) -> TopicSettings:
    names = topics()
    sizing = Sizing(alerts_partitions=1, video_partitions=3, replication_factor=1)
    wanted = (Topic.VIDEO, Topic.ALERTS, Topic.CLIPS)
    ensure_topics(kafka, pipeline_specs(names, sizing, wanted))
    return names


def producer_config(kafka: KafkaSettings) -> dict[str, object]:
    # A 640x640 RGB frame (1.2 MB) is over librdkafka's default 1 MB record limit.
    return {**kafka.client_config(), "message.max.bytes": MAX_RECORD_BYTES}


def publish_packets(kafka: KafkaSettings, topic: str, packets: Sequence[VideoPacket]) -> None:
    """As the decoder will: keyed by camera, default partitioner, Kafka timestamp = capture."""
    producer = confluent_kafka.Producer(producer_config(kafka))
    codec = VideoPacketCodec()
    for p in packets:
        value = codec.encode(p)
        producer.produce(topic, value, key=p.camera_id, timestamp=kafka_timestamp_ms(p))
        producer.poll(0)
    assert producer.flush(30) == 0


def produce(kafka: KafkaSettings, topic: str, records: Sequence[tuple[str, bytes]]) -> None:
    producer = confluent_kafka.Producer(producer_config(kafka))
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def frame_of(camera: str, index: int, start_us: int, still: bool = False) -> bytes:
    """The scene's frame `index`, letterboxed to 640x640 RGB as the decoder publishes it."""
    fit = Letterbox.fit(SCENE.width, SCENE.height, 640, 640)
    tensor = np.full((640, 640, 3), 114, np.uint8)
    picture = cv2.resize(SCENE.render(index), (fit.resized_width, fit.resized_height))
    tensor[
        fit.pad_y : fit.pad_y + fit.resized_height, fit.pad_x : fit.pad_x + fit.resized_width
    ] = picture
    frame = Frame(
        camera, index, start_us + index * STEP_US, SCENE.width, SCENE.height, (640, 640, 3),
        TensorLayout.HWC, fit.scale, fit.pad_x, fit.pad_y, b"" if still else tensor.tobytes(),
        pixel_format=PixelFormat.RGB, still=still,
    )  # fmt: skip
    return FrameCodec().encode(frame)


def alert_at(camera: str, index: int, start_us: int) -> Alert:
    x1, y1, x2, y2 = SCENE.box(index)
    box = Box(float(x1), float(y1), float(x2), float(y2), 0, "square", 0.9)
    return Alert(
        "square-dwell", camera, index, start_us + index * STEP_US, time.time_ns() // 1000, 3,
        ((0.0, 0.0), (1280.0, 0.0), (1280.0, 720.0)), ZoneAnchor.CENTER, (box,),
        rule_type=RuleType.DWELL, track_id=f"{camera}/1/{index}",
    )  # fmt: skip


def start_clips(
    kafka: KafkaSettings, names: TopicSettings, out: Path, group: str, **more: object
) -> Service:
    """`framebus clips` as a process, writing to the folder `out` unless `more` says otherwise."""
    env = service_env(
        kafka, names, clips_dir=out, clips_group=group, stop_after_idle_s=6, log_level="info",
        **more,
    )  # fmt: skip
    return Service("clips", env, out.parent / f"clips-{uuid.uuid4().hex[:6]}.log")


def clips_of(kafka: KafkaSettings, names: TopicSettings, expected: int) -> list[Clip]:
    messages = read_topic(kafka, names.clips_topic, expected, timeout_s=60, settle_s=1.0)
    return [ClipCodec().decode(m.value()) for m in messages]


def mp4_packets(uri: str) -> tuple[list[bytes], tuple[int, int, float]]:
    with av.open(uri.removeprefix("file://")) as container:
        stream = container.streams.video[0]
        shape = (stream.width, stream.height, float(stream.average_rate or 0))
        data = [bytes(p) for p in container.demux(stream) if p.size]
    with av.open(uri.removeprefix("file://")) as container:
        assert sum(1 for _ in container.decode(video=0)) == len(data)  # every packet decodes
    return data, shape


def expected_span(packets: Sequence[VideoPacket], alert: Alert) -> list[VideoPacket]:
    start = alert.capture_ts_us - PRE_S * S
    first = max(i for i, p in enumerate(packets) if p.keyframe and p.capture_ts_us <= start)
    end = alert.capture_ts_us + POST_S * S
    last = min(i for i, p in enumerate(packets) if p.capture_ts_us >= end)
    return list(packets[first : last + 1])


def recorded(video: Path, seconds_ago: float) -> tuple[int, list[VideoPacket]]:
    """cam-a's packets of `video` as if it began `seconds_ago`: (its start, the packets)."""
    start_us = time.time_ns() // 1000 - round(seconds_ago * S)
    return start_us, list(demux_file(video, "cam-a", start_us))
