"""The publishing thread: takes each camera's pending frames in turn, numbers, encodes, produces.

Camera workers never call the producer: they hand frames over through their `PendingQueue`, so a
full librdkafka queue turns into each camera's backpressure policy instead of an unbounded wait.
Sequence numbers are given here, so a frame dropped before publishing does not consume one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from framebus.errors import KafkaError
from framebus.kafka.producer import Producer, ProducerQueueFullError
from framebus.letterbox import Letterbox
from framebus.malloc import BacklogDrain, give_back_freed_heap
from framebus.messages import Compression, PixelFormat, TensorLayout
from framebus.pixels import DEFAULT_COLOUR, Colour
from framebus.telemetry.tracing import inject_headers, tracer
from framebus_decoder.pending import PendingQueue, PutResult
from framebus_decoder.settings import BackpressurePolicy
from framebus_decoder.stats import DecoderStats
from framebus_decoder.wire import FrameEncoder

log = logging.getLogger(__name__)
PRODUCE_BLOCK_S = 0.5  # one wait for room in librdkafka's queue; abort is checked between
BACKLOG_CHECK_S = 1.0  # how often the producer's queue is looked at for a drained backlog


def produce_with_room(
    producer: Producer, abort: threading.Event, topic: str, value: bytes, **kwargs: Any
) -> bool:
    """Produce, waiting for room in librdkafka's queue until `abort` is set; False if it was.

    While librdkafka's queue is full, the pending queues in front fill and their policies act.
    """
    while True:
        try:
            producer.produce(topic, value, block_s=PRODUCE_BLOCK_S, **kwargs)
            return True
        except ProducerQueueFullError:
            if abort.is_set():
                return False


@dataclass(frozen=True)
class PendingFrame:
    """A letterboxed frame waiting for the producer; `release` returns its buffer to the pool."""

    camera_id: str
    capture_ts_us: int
    pts_s: float | None
    orig_size: tuple[int, int]
    letterbox: Letterbox
    shape: tuple[int, ...]
    layout: TensorLayout
    compression: Compression
    tensor: bytes | memoryview
    release: Callable[[], None]
    pixel_format: PixelFormat = PixelFormat.RGB
    colour: Colour = DEFAULT_COLOUR
    still: bool = False  # the motion gate saw nothing change: `tensor` is empty


class FramePublisher:
    """Owns the per-camera queues and the thread that drains them into one Kafka producer."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        stats: DecoderStats,
        capacity: int,
        backlog: BacklogDrain | None = None,
    ) -> None:
        """Frames are published to `topic` through `producer`; `capacity` frames wait a camera.

        `backlog`: once the producer's queue has drained a backlog, glibc's freed heap is handed
        back to the kernel (the queue held copies of the records, which glibc would keep).
        """
        self._producer = producer
        self._backlog = backlog
        self._next_backlog_check = 0.0
        self._topic = topic
        self._stats = stats
        self._capacity = capacity
        self._encoder = FrameEncoder()
        self._tracer = tracer(__name__)
        self._cond = threading.Condition()
        self._queues: dict[str, PendingQueue[PendingFrame]] = {}
        self._next_seq: dict[str, int] = {}  # kept across camera restarts: seq never goes back
        self._closing = False
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="publisher", daemon=True)
        self.errors = 0

    def start(self) -> None:
        """Start the publishing thread."""
        self._thread.start()

    def queue_for(self, camera_id: str, policy: BackpressurePolicy) -> PendingQueue[PendingFrame]:
        """The camera's pending queue (created on first use, reused when a camera restarts)."""
        with self._cond:
            q = self._queues.get(camera_id)
            if q is None or q.closed:
                q = self._queues[camera_id] = PendingQueue(self._capacity, policy, self._cond)
            q.policy = policy
            return q

    def submit(
        self, frame: PendingFrame, policy: BackpressurePolicy, stop: threading.Event
    ) -> PutResult[PendingFrame]:
        """Queue a frame; apply the backpressure policy and count what it drops."""
        result = self.queue_for(frame.camera_id, policy).put(frame, stop)
        for dropped in result.dropped:
            dropped.release()
            reason = "shutdown" if result.waited else f"backpressure_{policy.value}"
            self._stats.drop(frame.camera_id, reason)
        return result

    def _next(self) -> PendingFrame | None:
        """The next frame, taking cameras in turn so a busy one cannot starve the others."""
        with self._cond:
            for _ in range(2):
                for cid in list(self._queues):
                    q = self._queues[cid]
                    item = q.pop()
                    if item is not None:
                        # Rotate: this camera goes to the back of the order.
                        self._queues[cid] = self._queues.pop(cid)
                        return item
                if self._closing:
                    return None
                self._cond.wait(0.05)
            return None

    def _loop(self) -> None:
        while not self._abort.is_set():
            self._check_backlog()
            frame = self._next()
            if frame is None:
                self._producer.poll(0)
                with self._cond:
                    if self._closing and not any(len(q) for q in self._queues.values()):
                        return
                continue
            self._publish(frame)

    def _check_backlog(self) -> None:
        now = time.monotonic()
        if self._backlog is None or now < self._next_backlog_check:
            return
        self._next_backlog_check = now + BACKLOG_CHECK_S
        peak = self._backlog.drained(len(self._producer))
        if peak:
            released = give_back_freed_heap()
            log.info(
                "producer backlog of %d frames drained: %s",
                peak,
                "freed heap handed back to the kernel"
                if released
                else "no freed heap to hand back",
                extra={"backlog_peak": peak},
            )

    def _publish(self, frame: PendingFrame) -> None:
        cid = frame.camera_id
        seq = self._next_seq.get(cid, 0)
        try:
            value = self._encoder.encode(
                camera_id=cid,
                seq=seq,
                capture_ts_us=frame.capture_ts_us,
                pts_s=frame.pts_s,
                orig_width=frame.orig_size[0],
                orig_height=frame.orig_size[1],
                shape=frame.shape,
                layout=frame.layout,
                pixel_format=frame.pixel_format,
                colour=frame.colour,
                scale=frame.letterbox.scale,
                pad_x=frame.letterbox.pad_x,
                pad_y=frame.letterbox.pad_y,
                compression=frame.compression,
                tensor=frame.tensor,
                still=frame.still,
            )
        finally:
            frame.release()
        # One span per published frame, from capture (decode) to send; its context rides in the
        # record's headers so the inferencer's batch span can link to it.
        span = self._tracer.start_span(
            "frame publish",
            kind=SpanKind.PRODUCER,
            start_time=frame.capture_ts_us * 1000,
            attributes={
                "framebus.camera_id": cid,
                "framebus.seq": seq,
                "messaging.system": "kafka",
                "messaging.destination.name": self._topic,
                "messaging.operation.type": "send",
                "messaging.kafka.message.key": cid,
            },
        )
        headers = inject_headers(trace.set_span_in_context(span)) if span.is_recording() else None
        try:
            self._produce(cid, value, headers)
        finally:
            span.end()

    def _produce(self, cid: str, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        seq = self._next_seq.get(cid, 0)
        try:
            sent = produce_with_room(
                self._producer,
                self._abort,
                self._topic,
                value,
                key=cid,
                headers=headers,
                on_delivery=self._on_delivery(cid),
            )
        except KafkaError as exc:
            self.errors += 1
            self._stats.error(cid, "produce_failed", str(exc))
            self._stats.drop(cid, "produce_failed")
            log.error("cannot produce frame: %s", exc, extra={"camera_id": cid})
            return
        if not sent:
            self._stats.drop(cid, "shutdown")
            return
        self._next_seq[cid] = seq + 1
        self._stats.incr(cid, "published")

    def _on_delivery(self, camera_id: str) -> Callable[[Any, Any], None]:
        def report(err: Any, _msg: Any) -> None:
            if err is None:
                self._stats.incr(camera_id, "delivered")
                return
            self._stats.incr(camera_id, "delivery_failed")
            self._stats.error(camera_id, "delivery_failed", err.str())
            log.error(
                "frame delivery failed: %s [%s]",
                err.str(),
                err.name(),
                extra={"camera_id": camera_id},
            )

        return report

    def close(self, timeout_s: float) -> int:
        """Publish what is queued (within `timeout_s`), close the producer; return the undelivered.

        Records still undelivered are purged, so their delivery callbacks count them as failed.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join(5.0)
        with self._cond:
            for cid, q in self._queues.items():
                rest = q.close()
                for frame in rest:
                    frame.release()
                if rest:
                    self._stats.drop(cid, "shutdown", len(rest))
        return self._producer.close(max(0.5, deadline - time.monotonic()))
