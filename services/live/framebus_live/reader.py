"""Consumer threads: frames, boxes (tracks and/or detections), alerts and clips, into the inbox.

Each reads in a consumer group of its own (`<live_group>-<instance>-<kind>`), from the latest end,
with no offset ever committed: another instance, the tracker or any other reader is unaffected,
and a restarted viewer starts at the live edge instead of replaying the past.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from framebus.codec import AlertCodec, ClipCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.errors import CodecError, KafkaError
from framebus.kafka.consumer import Consumer
from framebus.kafka.protocol import MessageProto, TopicPartition
from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.health import Health
from framebus_live.records import from_detections, from_tracks
from framebus_live.telemetry import LiveMetrics

log = logging.getLogger(__name__)

CONSUMER_OVERRIDES = {
    "enable.auto.commit": False,  # a viewer never moves anybody's offsets
    # Live: each assigned partition starts at its end (Consumer.subscribe_at_end), not at the
    # retained past; `latest` also covers a partition whose end could not be read.
    "auto.offset.reset": "latest",
}
POLL_S = 0.5
BATCH = 256
HEARTBEAT_ALLOWANCE_S = 30.0

Decode = Callable[[MessageProto], Any]  # the decoded record; CodecError when it is none


def instance_suffix() -> str:
    """Unique per process: host, pid and a random part (pods restart with the same pid)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def decoders(tracks_topic: str) -> dict[str, Decode]:
    """Decoders by kind; the boxes decoder picks by the message's topic."""
    frames, detections, tracks, alerts, clips = (
        FrameCodec(),
        DetectionsCodec(),
        TracksCodec(),
        AlertCodec(),
        ClipCodec(),
    )

    def boxes(msg: MessageProto) -> Any:
        value = msg.value() or b""
        if msg.topic() == tracks_topic:
            return from_tracks(tracks.decode(value))
        return from_detections(detections.decode(value))

    return {
        "frames": lambda msg: frames.decode_view(msg.value() or b""),
        "boxes": boxes,
        "alerts": lambda msg: alerts.decode(msg.value() or b""),
        "clips": lambda msg: clips.decode(msg.value() or b""),
    }


class TopicReader:
    """One consumer on its own thread: decode each message and hand it on; count the bad ones."""

    def __init__(
        self,
        kind: str,
        kafka: KafkaSettings,
        group_id: str,
        topics: list[str],
        decode: Decode,
        deliver: Callable[[Any], None],
        metrics: LiveMetrics,
        health: Health,
        on_failure: Callable[[str], None],
    ) -> None:
        self.kind = kind
        self.group_id = group_id
        self.topics = topics
        self.assigned = threading.Event()  # partitions assigned, each at its end
        self._kafka = kafka
        self._decode = decode
        self._deliver = deliver
        self._metrics = metrics
        self._health = health
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"live-{kind}", daemon=True)

    def start(self) -> TopicReader:
        """Start consuming."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop consuming and leave the group."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _on_assigned(self, partitions: list[TopicPartition]) -> None:
        first = not self.assigned.is_set()
        self.assigned.set()
        if first:
            self._metrics.consumers_assigned.inc()
        log.info(
            "consumer assigned",
            extra={"kind": self.kind, "group": self.group_id, "partitions": len(partitions)},
        )

    def _run(self) -> None:
        consumer = Consumer(self._kafka, self.group_id, CONSUMER_OVERRIDES)
        try:
            consumer.subscribe_at_end(self.topics, self._on_assigned)
            while not self._stop.is_set():
                self._health.heartbeat(f"consume-{self.kind}", HEARTBEAT_ALLOWANCE_S)
                # consume(n, t) holds what arrived until n records or t: wait for one record
                # only, then take what is already fetched, so nothing waits for the timeout.
                messages = consumer.consume(1, POLL_S)
                if messages:
                    messages += consumer.consume(BATCH - 1, 0)
                for msg in messages:
                    self._handle(msg)
        except KafkaError as exc:
            log.error("consumer failed", extra={"kind": self.kind, "error": str(exc)})
            self._on_failure(f"{self.kind} consumer: {exc}")
        finally:
            self._health.retire(f"consume-{self.kind}")
            consumer.close()

    def _handle(self, msg: MessageProto) -> None:
        try:
            record = self._decode(msg)
        except (CodecError, ValueError, TypeError, KeyError) as exc:
            # A read-only viewer owns no dead-letter topic: count, log, and go on.
            self._metrics.bad_records.labels(self.kind).inc()
            log.warning(
                "undecodable record skipped",
                extra={
                    "kind": self.kind,
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            return
        self._deliver(record)
