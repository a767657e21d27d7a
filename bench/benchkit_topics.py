"""Fresh Kafka topics for a benchmark run, the frame records that fill them, and reading back.

Topics are created as `framebus topics` does under a fresh prefix and deleted after the run; the
frame records are byte for byte what the decoder sends, built from a few prepared tensors; the
detections records a run produced are read back whole. Kept apart from the header and ratio
helpers so that a benchmark needing only those does not read Kafka code.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence
from typing import Any

import confluent_kafka
import numpy as np
import numpy.typing as npt
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.letterbox import Letterbox
from framebus.messages import Compression, PixelFormat, TensorLayout
from framebus.pixels import rgb_to_i420
from framebus.topology import INFERENCE_TOPICS, Sizing, Topic, TopicSettings, pipeline_specs
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.wire import FrameEncoder
from framebus_tools.perf.loadtest import end_offsets

SIZE = 640  # the model input every benchmark letterboxes to
SOURCE = (1920, 1080)  # the camera frame the filled records say they came from
IMAGES = 4  # distinct prepared tensors, reused: content does not change any cost measured here
U8 = npt.NDArray[np.uint8]


def fresh_topics(
    kafka: KafkaSettings,
    partitions: int,
    prefix: str = "bench",
    topics: Sequence[Topic] = INFERENCE_TOPICS,
) -> TopicSettings:
    """Fresh names for every topic, and `topics` of them created as `framebus topics` does."""
    names = TopicSettings.with_prefix(f"{prefix}-{uuid.uuid4().hex[:10]}")
    sizing = Sizing(partitions, partitions, alerts_partitions=1, replication_factor=1)
    ensure_topics(kafka, pipeline_specs(names, sizing, topics))
    return names


def delete_topics(kafka: KafkaSettings, names: TopicSettings | Sequence[str]) -> None:
    """Drop a run's topics (960 frames are 1.2 GB of broker log); ones never created are fine."""
    admin = AdminClient(kafka.client_config())
    topics = [names.name(t) for t in Topic] if isinstance(names, TopicSettings) else list(names)
    for future in admin.delete_topics(topics, request_timeout=30).values():
        with contextlib.suppress(confluent_kafka.KafkaException):  # already gone: nothing to do
            future.result(30)


def prepared_tensors() -> list[U8]:
    """A few letterboxed-looking uint8 640x640x3 tensors (grey padding, noise inside)."""
    rng = np.random.default_rng(1)
    lb = Letterbox.fit(*SOURCE, SIZE, SIZE)
    out = []
    for _ in range(IMAGES):
        t = np.full((SIZE, SIZE, 3), 114, np.uint8)
        t[lb.pad_y : lb.pad_y + lb.resized_height] = rng.integers(
            0, 255, (lb.resized_height, SIZE, 3), dtype=np.uint8
        )
        out.append(t)
    return out


def encode_frame(
    enc: FrameEncoder,
    camera: str,
    seq: int,
    tensor: U8,
    capture_ts_us: int | None = None,
    pixel_format: PixelFormat = PixelFormat.RGB,
) -> bytes:
    """One frame record, byte for byte what the decoder sends; captured now unless given.

    `tensor` is an HWC RGB picture; an I420 record carries its planes, as the decoder's would.
    """
    lb = Letterbox.fit(*SOURCE, SIZE, SIZE)
    i420 = pixel_format is PixelFormat.I420
    return enc.encode(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000 if capture_ts_us is None else capture_ts_us,
        pts_s=seq / 5,
        orig_width=SOURCE[0],
        orig_height=SOURCE[1],
        shape=tensor.shape[:2] if i420 else tensor.shape,
        layout=TensorLayout.CHW if i420 else TensorLayout.HWC,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        compression=Compression.NONE,
        tensor=rgb_to_i420(tensor).data if i420 else tensor.data.cast("B"),
        pixel_format=pixel_format,
    )


def fill_frames(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    cameras: int,
    pixel_format: PixelFormat = PixelFormat.RGB,
) -> None:
    """Produce `frames` records round-robin over `cameras`, through the decoder's producer."""
    tensors, enc = prepared_tensors(), FrameEncoder()
    with Producer(kafka, overrides=producer_overrides(DecoderSettings(kafka=kafka))) as producer:
        for i in range(frames):
            cam = f"cam-{i % cameras:02d}"
            value = encode_frame(
                enc, cam, i // cameras, tensors[i % IMAGES], pixel_format=pixel_format
            )
            producer.produce(topic, value, key=cam, block_s=30.0)
        if producer.flush(60):
            raise RuntimeError(f"filling {topic}: records undelivered after 60 s")
    if end_offsets(kafka, topic) != frames:
        raise RuntimeError(f"filling {topic}: expected {frames} records on the topic")


def read_detections(kafka: KafkaSettings, topic: str, frames: int) -> list[Any]:
    """Every detections record on the topic (stops 5 s after the last, or 20 s short of `frames`)."""
    client = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    client.subscribe([topic])
    out: list[Any] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < (5.0 if len(out) >= frames else 20.0):
        got = [m for m in client.consume(500, 0.5) if m.error() is None]
        if got:
            out += got
            idle_since = time.monotonic()
    client.close()
    return out
