"""The detections records of a latency run (`bench.latency`), read and turned into timings.

Each record gives a sample of e2e, queue wait, inference and the fixed part that is left; after
the run, the frame records' CreateTimes split that fixed part at the decoder's produce().
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus_tools.pipeline import PipelineProcesses

METRICS = (
    "e2e",
    "queue_wait",
    "inference",
    "fixed",
    "to_produce",
    "after_produce",
    "publish_hop",
    "e2e_reader",
)


@dataclass(frozen=True)
class Sample:
    """One detections record, in milliseconds."""

    capture_ms: float
    e2e: float
    queue_wait: float
    inference: float
    fixed: float
    publish_hop: float
    e2e_reader: float
    frame: tuple[int, int]  # partition and offset of the frame record
    to_produce: float = 0.0  # capture -> the frame record's CreateTime (decoder's produce())
    after_produce: float = 0.0  # fixed - to_produce: linger, broker, fetch, record decode, ...


def reader(kafka: KafkaSettings, topic: str) -> Any:
    """A plain consumer of every partition of a fresh topic from its start (no group join)."""
    consumer = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"fb-latency-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in meta.partitions
        ]
    )
    return consumer


def read_for(
    consumer: Any, procs: PipelineProcesses, seconds: float
) -> tuple[list[Sample], list[float], dict[str, int]]:
    """Detections records for `seconds`: samples, receive times (monotonic s), statuses."""
    codec = DetectionsCodec()
    samples: list[Sample] = []
    received: list[float] = []
    statuses: dict[str, int] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end and not procs.exited():
        # consume(n, t) waits for n records or t: take the first, then what is fetched already.
        messages = consumer.consume(1, 0.05)
        if messages:
            messages += consumer.consume(255, 0)
        now_ms, mono = time.time() * 1000, time.monotonic()
        for msg in messages:
            if msg.error() is not None:
                continue
            det = codec.decode(msg.value() or b"")
            statuses[det.status.value] = statuses.get(det.status.value, 0) + 1
            received.append(mono)
            if det.status is not FrameStatus.INFERRED:
                continue
            capture_ms = det.capture_ts_us / 1000
            samples.append(
                Sample(
                    capture_ms,
                    det.e2e_latency_ms,
                    det.queue_wait_ms,
                    det.inference_ms,
                    det.e2e_latency_ms - det.queue_wait_ms - det.inference_ms,
                    now_ms
                    - msg.timestamp()[1],  # CreateTime, ms, set at the inferencer's produce()
                    now_ms - capture_ms,
                    (det.frame_partition, det.frame_offset),
                )
            )
    return samples, received, statuses


def frame_create_times(kafka: KafkaSettings, topic: str) -> dict[tuple[int, int], float]:
    """CreateTime (ms) of every frame record, read after a run so the read adds no load to it."""
    consumer = reader(kafka, topic)
    try:
        parts = consumer.assignment()
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        pending = {p for p, end in ends.items() if end > 0}
        times: dict[tuple[int, int], float] = {}
        deadline = time.monotonic() + 120.0
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(64, 0.5):
                if msg.error() is not None:
                    continue
                p, offset = msg.partition(), msg.offset()
                times[(p, offset)] = float(msg.timestamp()[1])
                if offset + 1 >= ends[p]:
                    pending.discard(p)
        return times
    finally:
        consumer.close()


def split_fixed(samples: list[Sample], create_ms: dict[tuple[int, int], float]) -> list[Sample]:
    """Each sample with its fixed part split at the decoder's produce() (the frame's CreateTime)."""
    split = []
    for s in samples:
        created = create_ms.get(s.frame)
        if created is None:
            continue
        to_produce = created - s.capture_ms
        split.append(
            dataclasses.replace(s, to_produce=to_produce, after_produce=s.fixed - to_produce)
        )
    return split
