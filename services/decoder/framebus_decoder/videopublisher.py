"""The video thread: produces each camera's compressed packets to the video topic.

Camera workers hand every demuxed packet over through one bounded queue that drops its oldest
packet when full, so a slow broker costs video (counted), never decoding time. The packets go out
through a producer of their own: its queue and batching are apart from the frames', so a backlog
of video never holds up a frame.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from framebus.codec import VideoPacketCodec
from framebus.errors import KafkaError
from framebus.kafka.producer import Producer
from framebus.messages import VideoPacket
from framebus.videopackets import kafka_timestamp_ms
from framebus_decoder.pending import PendingQueue
from framebus_decoder.publisher import produce_with_room
from framebus_decoder.settings import BackpressurePolicy
from framebus_decoder.stats import (
    DELIVERED,
    DELIVERY_FAILED,
    DROPPED_BACKPRESSURE,
    DROPPED_SHUTDOWN,
    PUBLISHED,
    DecoderStats,
)

log = logging.getLogger(__name__)


class VideoPublisher:
    """Owns the pending video packets and the thread that drains them into the video producer."""

    def __init__(self, producer: Producer, topic: str, stats: DecoderStats, capacity: int) -> None:
        self._producer = producer
        self._topic = topic
        self._stats = stats
        self._codec = VideoPacketCodec()
        self._cond = threading.Condition()
        self._queue: PendingQueue[VideoPacket] = PendingQueue(
            capacity, BackpressurePolicy.DROP_OLDEST, self._cond
        )
        self._closing = False
        self._used = False
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="video-publisher", daemon=True)
        self._send = functools.partial(produce_with_room, producer, self._abort, topic)

    def start(self) -> None:
        """Start the publishing thread."""
        self._thread.start()

    def submit(self, packet: VideoPacket) -> None:
        """Queue a packet without waiting; a full queue drops (and counts) its oldest."""
        for dropped in self._queue.put(packet).dropped:
            self._stats.video(dropped.camera_id, DROPPED_BACKPRESSURE)

    def _next(self) -> VideoPacket | None:
        with self._cond:
            packet = self._queue.pop()
            if packet is None and not self._closing:
                self._cond.wait(0.05)
                packet = self._queue.pop()
            return packet

    def _loop(self) -> None:
        while not self._abort.is_set():
            packet = self._next()
            if packet is not None:
                self._publish(packet)
                continue
            if self._used:  # polling would create the client: none while no camera has video
                self._producer.poll(0)
            with self._cond:
                if self._closing and not len(self._queue):
                    return

    def _publish(self, packet: VideoPacket) -> None:
        cid = packet.camera_id
        value = self._codec.encode(packet)
        self._used = True
        try:
            sent = self._send(
                value,
                key=cid,
                on_delivery=self._on_delivery,
                timestamp_ms=kafka_timestamp_ms(packet),
            )
        except KafkaError as exc:
            self._stats.video(cid, DELIVERY_FAILED)
            log.error("cannot produce video packet: %s", exc, extra={"camera_id": cid})
            return
        if not sent:
            self._stats.video(cid, DROPPED_SHUTDOWN)
            return
        self._stats.video(cid, PUBLISHED, nbytes=len(value))

    def _on_delivery(self, err: Any, msg: Any) -> None:
        key = msg.key()
        cid = key.decode("utf-8", "replace") if key else "?"
        if err is None:
            self._stats.video(cid, DELIVERED)
            return
        self._stats.video(cid, DELIVERY_FAILED)
        log.error(
            "video packet delivery failed: %s [%s]",
            err.str(),
            err.name(),
            extra={"camera_id": cid},
        )

    def close(self, timeout_s: float) -> int:
        """Publish what is queued (within `timeout_s`), close the producer; return the undelivered."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join(5.0)
        for packet in self._queue.close():
            self._stats.video(packet.camera_id, DROPPED_SHUTDOWN)
        return self._producer.close(max(0.5, deadline - time.monotonic()))
