"""The three-stage inferencer pipeline: receive -> infer -> publish, on three threads.

Receiving and deserialising the next batch overlaps inference of the current one, and publishing
(waiting for the broker's acknowledgements) of the previous one overlaps both, so the engine does
not wait on Kafka while frames are queued. Bounded queues between the stages give backpressure.
Offsets are stored (at-least-once) or sent in the transaction (exactly-once) only after the batch's
records are delivered, at the lowest offset still in flight per partition.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.compression import decompress
from framebus.errors import CodecError, DeliveryError, FramebusError, KafkaError, ModelError
from framebus.kafka.consumer import Consumer, MessageProto
from framebus.kafka.producer import Producer
from framebus.messages import FrameStatus
from framebus.telemetry.health import Health
from framebus.telemetry.tracing import span_context_of, tracer
from framebus_inferencer.batcher import Batch, DeadlineBatcher, Pending, drop_stale
from framebus_inferencer.engine import Engine
from framebus_inferencer.offsets import OffsetTracker
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.records import (
    Outgoing,
    Received,
    boxes_of,
    check_tensor,
    dead_letter,
    detections,
)
from framebus_inferencer.settings import DeliveryMode, InferencerSettings
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1  # longest consume() wait when no batch is open; bounds stop latency
# Longest consume() wait while batches are in flight: the publish thread waits for the receive
# thread (the only one allowed to touch the consumer) to commit each batch before the next.
BUSY_POLL_S = 0.01
COMMIT_HANDOFF_S = 2.0
QUEUE_POLL_S = 0.05
TXN_TIMEOUT_S = 30.0
LAG_EVERY_S = 5.0  # how often the receive thread reads watermarks and positions for the lag
LOOP_ALLOWANCE_S = 60.0  # a stage that has not come round its loop for this long is stuck
WARM_UP_ALLOWANCE_S = 900.0  # building TensorRT engines can take many minutes
Offsets = list[tuple[tuple[str, int], int]]


class RewindError(KafkaError):
    """A transaction was aborted: results were discarded and consumption must restart."""


@dataclass
class Work:
    """A closed batch on its way from the receiver to the engine."""

    batch: Batch[Received] | None
    rejects: list[Outgoing] = field(default_factory=list)
    reject_offsets: Offsets = field(default_factory=list)
    span: trace.Span | None = None  # the batch's process span, ended by the publisher


@dataclass
class Publication:
    """What the publisher must deliver, and the offsets that delivery completes."""

    records: list[Outgoing]
    offsets: Offsets
    span: trace.Span | None = None


def _offsets_of(items: list[Pending[Received]]) -> Offsets:
    return [((i.payload.msg.topic() or "", i.partition), i.offset) for i in items]


class Pipeline:
    """Runs the three stages until stopped, idle, or failed."""

    def __init__(
        self,
        settings: InferencerSettings,
        engine: Engine,
        consumer: Consumer,
        producer: Producer,
        stats: InferencerStats,
        clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000,
        health: Health | None = None,
    ) -> None:
        self.s = settings
        self.engine = engine
        self.consumer = consumer
        self.producer = producer
        self.stats = stats
        self.clock_ms = clock_ms
        self.eos = settings.delivery is DeliveryMode.EXACTLY_ONCE
        self.batcher: DeadlineBatcher[Received] = DeadlineBatcher(
            settings.max_batch,
            settings.max_wait_ms,
            settings.camera_quota,
            settings.max_frame_age_ms,
            settings.pending_limit,
            skip_ahead=not self.eos,
        )
        self.decoder = Decoder(
            engine.info.head,
            settings.confidence_threshold,
            settings.iou_threshold,
            settings.max_detections,
        )
        self.model = (engine.info.name, engine.info.version)
        self.frames = FrameCodec()
        self.codec = DetectionsCodec()
        self.tracker = OffsetTracker()
        self._tracker_lock = threading.Lock()
        # librdkafka's consumer is driven from the receive thread only: a store_offsets() from
        # another thread waits on the handle while consume() runs, and with back-to-back consume
        # calls it can wait indefinitely. The publish thread leaves offsets here instead.
        self._offsets_to_store: dict[tuple[str, int], int] = {}
        self._committed = threading.Condition(self._tracker_lock)
        self._receiving = True
        self._group_metadata: Any = None
        self.infer_q: queue.Queue[Work | None] = queue.Queue(maxsize=1)
        self.publish_q: queue.Queue[Publication | None] = queue.Queue(maxsize=2)
        self.stop = threading.Event()
        self.warmed = threading.Event()
        self.failures: list[BaseException] = []
        self._in_flight = 0
        self._idle = threading.Condition()
        self._txn_open = False
        self._last_frame = time.monotonic()
        self.health = health or Health()
        self._tracer = tracer(__name__)
        # Off (no SDK provider installed), no decode timing is kept and no span links are built.
        self._tracing = not isinstance(
            trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
        )
        self._decode_ns: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset)
        self._next_lag = 0.0

    # ---- lifecycle ----------------------------------------------------------------------------

    def run(self, outer_stop: threading.Event) -> None:
        """Run all stages until `outer_stop`, idleness or a failure; raise the first failure."""
        threads = [
            threading.Thread(target=self._guard(self._receive, outer_stop), name="fb-receive"),
            threading.Thread(target=self._guard(self._infer), name="fb-infer"),
            threading.Thread(target=self._guard(self._publish), name="fb-publish"),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._store_offsets()  # the last batches' offsets, now that no thread uses the consumer
        if self.failures:
            raise self.failures[0]

    def _store_offsets(self) -> None:
        """Hand delivered offsets to the consumer (receive thread, or after all stages ended)."""
        with self._tracker_lock:
            marks, self._offsets_to_store = self._offsets_to_store, {}
        if not marks:
            return
        tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
        try:
            self.consumer.client.store_offsets(offsets=tps)
            # Commit now, and wait for the broker, rather than at the next auto-commit (5 s later):
            # after a crash only the one batch delivered since this commit is delivered again.
            self.consumer.client.commit(offsets=tps, asynchronous=False)
        except confluent_kafka.KafkaException as exc:  # e.g. a partition revoked meanwhile
            log.warning("cannot store offsets %s: %s", marks, exc)
            self.stats.error("store_offsets")
        finally:
            with self._committed:
                self._committed.notify_all()

    def _guard(self, target: Callable[..., None], *args: Any) -> Callable[[], None]:
        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:  # reported: re-raised by run() on the caller's thread
                log.exception("pipeline stage %s failed", threading.current_thread().name)
                self.stats.error(type(exc).__name__)
                self.failures.append(exc)
                self.stop.set()
                self.warmed.set()

        return run

    def _beat(self) -> None:
        """A stage waiting on a queue is alive (backpressure is not a stall): it beats."""
        name = threading.current_thread().name
        if name.startswith("fb-"):
            self.health.heartbeat(name.removeprefix("fb-"), LOOP_ALLOWANCE_S)

    def _put(
        self, q: queue.Queue[Any], item: Any, while_full: Callable[[], None] | None = None
    ) -> bool:
        while True:
            self._beat()
            try:
                q.put(item, timeout=QUEUE_POLL_S if while_full is None else BUSY_POLL_S / 2)
                return True
            except queue.Full:
                if self.stop.is_set() and self.failures:
                    return False
                if while_full is not None:
                    while_full()

    def _get(self, q: queue.Queue[Any]) -> Any:
        while True:
            self._beat()
            try:
                return q.get(timeout=QUEUE_POLL_S)
            except queue.Empty:
                if self.failures:
                    return None

    # ---- stage 1: receive ---------------------------------------------------------------------

    def _receive(self, outer_stop: threading.Event) -> None:
        self.warmed.wait()
        if self.failures:
            return
        self.consumer.subscribe(
            [self.s.topics.frames_topic], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        self._last_frame = time.monotonic()
        lag_changed = False
        while not (outer_stop.is_set() or self.stop.is_set()):
            self.health.heartbeat("receive", LOOP_ALLOWANCE_S)
            self._refresh_lag()
            got = self._receive_some()
            if got:
                self._last_frame = time.monotonic()
                lag_changed = True
            elif lag_changed:  # just caught up: show the lag falling to zero now, not in 5 s
                self._next_lag = 0.0
                lag_changed = False
            elif (
                self.s.stop_after_idle_s
                and self.stats.connected  # idle counts from the assignment, not from joining
                and time.monotonic() - self._last_frame > self.s.stop_after_idle_s
                and not len(self.batcher)
            ):
                log.info("no frames for %.1f s: stopping", self.s.stop_after_idle_s)
                break
        final = self.batcher.flush(self.clock_ms(), _wall_us())
        self._store_offsets()
        with self._committed:
            self._receiving = False  # from now on run() stores the last offsets after the stages
            self._committed.notify_all()
        if final is not None and not self.failures:
            self._submit(Work(final))
        self._put(self.infer_q, None)
        self.health.retire("receive")

    def _refresh_lag(self) -> None:
        """Read high watermarks (cached from fetches) and positions, on the receive thread."""
        now = time.monotonic()
        if now < self._next_lag:
            return
        self._next_lag = now + LAG_EVERY_S
        client = self.consumer.client
        try:
            assigned = client.assignment()
            for tp in client.position(assigned) if assigned else []:
                _low, high = client.get_watermark_offsets(tp, cached=True)
                if high >= 0 and tp.offset >= 0:
                    self.stats.lag.watermarks((tp.topic, tp.partition), high, tp.offset)
        except confluent_kafka.KafkaException as exc:  # lag is reported late, not wrong
            log.warning("cannot read watermarks for the lag: %s", exc)
            self.stats.error("watermarks")

    def _receive_some(self) -> int:
        self._store_offsets()
        if self.eos:
            self._group_metadata = self.consumer.client.consumer_group_metadata()
        rejects: list[Outgoing] = []
        reject_offsets: Offsets = []
        got = 0
        if not self.batcher.full:
            deadline = self.batcher.next_deadline_ms(_wall_us())
            timeout = BUSY_POLL_S if self._in_flight else IDLE_POLL_S
            if deadline is not None:
                timeout = min(timeout, max(0.0, (deadline - self.clock_ms()) / 1000))
            room = self.batcher.capacity - len(self.batcher)
            messages = self.consumer.consume(room, timeout)
            got = len(messages)
            self.stats.received(got)
            for msg in messages:
                self._accept(msg, rejects, reject_offsets)
        batch = self.batcher.poll(self.clock_ms(), _wall_us())
        if batch is not None or rejects:
            self._submit(Work(batch, rejects, reject_offsets))
        return got

    def _accept(self, msg: MessageProto, rejects: list[Outgoing], offsets: Offsets) -> None:
        tp = (msg.topic() or "", msg.partition() or 0)
        offset = msg.offset() or 0
        with self._tracker_lock:
            self.tracker.received(tp, offset)
        decode_start = time.time_ns() if self._tracing else 0
        try:
            frame = self.frames.decode(msg.value() or b"")
            tensor = decompress(frame.compression, frame.tensor)
            problem = check_tensor(frame, tensor, self.engine.info.frame_shape)
            if problem is not None:
                raise CodecError(problem)
        except CodecError as exc:
            log.error("dead-lettering message at %s/%d: %s", tp, offset, exc)
            self.stats.dead_letter()
            rejects.append(
                dead_letter(msg, self.s.topics.deadletter_topic, str(exc), type(exc).__name__)
            )
            offsets.append((tp, offset))
            return
        if self._tracing:
            self._decode_ns[(tp[1], offset)] = (decode_start, time.time_ns())
        self.stats.lag.received(tp, offset, frame.capture_ts_us)
        self.batcher.add(
            Pending(
                frame.camera_id,
                frame.capture_ts_us,
                self.clock_ms(),
                tp[1],
                offset,
                Received(msg, frame, tensor),
            )
        )

    def _submit(self, work: Work) -> None:
        if work.batch is not None and self._tracing:
            work.span = self._batch_span(work.batch)
        with self._idle:
            self._in_flight += 1
        # While the pipeline is full, keep committing: the publish thread waits for each commit.
        if not self._put(self.infer_q, work, while_full=self._store_offsets):
            with self._idle:
                self._in_flight -= 1

    def _batch_span(self, batch: Batch[Received]) -> trace.Span:
        """The batch's process span (messaging conventions), linked to every frame's span.

        It starts when the batch's first frame was decoded and ends when its records are
        delivered; a `preprocess` child covers the frames' decoding and decompression.
        """
        items = list(batch.frames) + list(batch.stale)
        windows = [self._decode_ns.pop((p.partition, p.offset), None) for p in items]
        known = [w for w in windows if w is not None]
        start = min((w[0] for w in known), default=time.time_ns())
        topic = self.s.topics.frames_topic
        partitions = sorted({p.partition for p in items})
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": topic,
            "messaging.consumer.group.name": self.s.consumer_group,
            "messaging.batch.message_count": len(items),
            "messaging.kafka.offset": min(p.offset for p in items),
            "framebus.batch.close_reason": batch.reason,
            "framebus.batch.stale_count": len(batch.stale),
        }
        if len(partitions) == 1:
            attributes["messaging.destination.partition.id"] = str(partitions[0])
        else:  # a batch can gather frames of several partitions: name them all
            attributes["framebus.partitions"] = [str(p) for p in partitions]
        links = []
        for p in items:
            ctx = span_context_of(p.payload.msg.headers())
            if ctx is not None:
                links.append(
                    Link(ctx, {"framebus.camera_id": p.camera, "framebus.seq": p.payload.frame.seq})
                )
        span = self._tracer.start_span(
            f"process {topic}",
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start,
        )
        if known:
            child = self._tracer.start_span(
                "preprocess",
                context=trace.set_span_in_context(span),
                start_time=start,
                attributes={"framebus.frames": len(known)},
            )
            child.end(end_time=max(w[1] for w in known))
        return span

    def _child(self, parent: trace.Span | None, name: str) -> Any:
        """A child span of the batch span (a no-op context when tracing is off)."""
        if parent is None:
            return contextlib.nullcontext()
        return self._tracer.start_as_current_span(name, context=trace.set_span_in_context(parent))

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.stats.connected = True
        self._last_frame = time.monotonic()
        log.info("assigned %s", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        # Let batches in flight finish (and, exactly-once, commit) before giving partitions up.
        # We are the receive thread, inside consume(): keep committing what the publish thread
        # delivers meanwhile, since it waits for each commit before its next batch.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            self._store_offsets()
            with self._idle:
                if self._idle.wait_for(lambda: self._in_flight == 0 or bool(self.failures), 0.05):
                    break
        self._store_offsets()
        gone = [(p.topic, p.partition) for p in partitions]
        dropped = self.batcher.drop_partitions(p for _, p in gone)
        with self._tracker_lock:
            self.tracker.forget(gone)
        self.stats.lag.forget(gone)
        revoked = {p for _, p in gone}
        for key in [k for k in self._decode_ns if k[0] in revoked]:
            del self._decode_ns[key]
        log.info("revoked %s; %d waiting frames left to the next owner", gone, len(dropped))

    # ---- stage 2: infer -----------------------------------------------------------------------

    def _infer(self) -> None:
        self.stats.provider = self.engine.provider
        self.stats.arena_limit_bytes = self.engine.arena_limit_bytes
        self.health.heartbeat("infer", WARM_UP_ALLOWANCE_S)
        self.engine.warm_up()
        self.stats.warmed_up = True
        self.warmed.set()
        while True:
            work = self._get(self.infer_q)
            if work is None:
                self._put(self.publish_q, None)
                self.health.retire("infer")
                return
            self._put(self.publish_q, self._process(work))

    def _process(self, work: Work) -> Publication:
        records = list(work.rejects)
        offsets = list(work.reject_offsets)
        batch = work.batch
        if batch is not None:
            batch = drop_stale(batch, self.s.max_frame_age_ms, _wall_us())
            records += self._stale_records(batch)
            records += self._inferred_records(batch, work.span)
            offsets += _offsets_of(list(batch.frames) + list(batch.stale))
        return Publication(records, offsets, work.span)

    def _stale_records(self, batch: Batch[Received]) -> list[Outgoing]:
        out = []
        for p in batch.stale:
            reason = f"older than max_frame_age_ms={self.s.max_frame_age_ms:g}"
            det = detections(p.payload, FrameStatus.DROPPED_STALE, self.model, reason=reason)
            self.stats.outcome(p.camera, "DROPPED_STALE", det.e2e_latency_ms, "stale")
            out.append(self._record(p, det))
        return out

    def _inferred_records(
        self, batch: Batch[Received], span: trace.Span | None = None
    ) -> list[Outgoing]:
        if not batch.frames:
            return []
        started = self.clock_ms()
        try:
            with self._child(span, "inference"):
                outputs = self.engine.infer([p.payload.tensor for p in batch.frames])
            with self._child(span, "postprocess"):
                raw = self.decoder.decode(outputs, len(batch.frames))
        except ModelError as exc:
            log.error("batch of %d frames failed: %s", len(batch.frames), exc)
            self.stats.error(type(exc).__name__)
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            return self._failed_records(batch, str(exc))
        inference_ms = self.clock_ms() - started
        waits = [started - p.received_ms for p in batch.frames]
        self.stats.batch(len(batch.frames), batch.reason, inference_ms, waits)
        out = []
        names = self.engine.info.class_names
        for p, det, wait in zip(batch.frames, raw, waits, strict=True):
            boxes = boxes_of(det, p.payload.frame, names)
            rec = detections(
                p.payload,
                FrameStatus.INFERRED,
                self.model,
                boxes,
                None,
                wait,
                inference_ms,
                len(batch.frames),
            )
            self.stats.outcome(p.camera, "INFERRED", rec.e2e_latency_ms)
            out.append(self._record(p, rec))
        return out

    def _failed_records(self, batch: Batch[Received], reason: str) -> list[Outgoing]:
        out = []
        for p in batch.frames:
            det = detections(p.payload, FrameStatus.FAILED, self.model, reason=reason)
            self.stats.outcome(p.camera, "FAILED", det.e2e_latency_ms, "failed")
            out.append(self._record(p, det))
        return out

    def _record(self, p: Pending[Received], det: Any) -> Outgoing:
        msg = p.payload.msg
        return Outgoing(
            self.s.topics.detections_topic,
            self.codec.encode(det),
            p.camera,
            list(msg.headers() or []),
        )

    # ---- stage 3: publish ---------------------------------------------------------------------

    def _publish(self) -> None:
        if self.eos:
            self.producer.client.init_transactions(TXN_TIMEOUT_S)
        while True:
            pub = self._get(self.publish_q)
            if pub is None:
                if self._txn_open and not self.failures:
                    self._commit_transaction()
                self.health.retire("publish")
                return
            with self._child(pub.span, "publish"):
                if self.eos:
                    self._publish_transactional(pub)
                else:
                    self._publish_at_least_once(pub)
            self.stats.delivered(pub.offsets, _wall_us())
            if pub.span is not None:
                pub.span.end()
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _publish_at_least_once(self, pub: Publication) -> None:
        errors: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err.str())

        for r in pub.records:
            self.producer.produce(r.topic, r.value, r.key, r.headers, report, block_s=30.0)
        pending = self.producer.flush(30.0)
        while pending and not errors:
            # The broker is away: librdkafka retries until message.timeout.ms (5 min) and then
            # reports each record as failed; until then, wait instead of dying mid-outage.
            log.warning("%d detections records not yet acknowledged; still waiting", pending)
            self.stats.error("delivery_wait")
            self._beat()
            pending = self.producer.flush(30.0)
        if pending or errors:
            raise DeliveryError(f"{pending} records undelivered; errors: {errors[:3]}")
        with self._committed:
            self.tracker.delivered(pub.offsets)
            self._offsets_to_store.update(self.tracker.committable())
            self.tracker.committed()
            # Hold the next batch until the receive thread has committed this one, so a crash
            # repeats at most one batch per partition.
            self._committed.wait_for(
                lambda: not self._offsets_to_store or not self._receiving or bool(self.failures),
                COMMIT_HANDOFF_S,
            )

    def _publish_transactional(self, pub: Publication) -> None:
        client = self.producer.client
        try:
            if not self._txn_open:
                client.begin_transaction()
                self._txn_open = True
            for r in pub.records:
                self.producer.produce(r.topic, r.value, r.key, r.headers, None, block_s=30.0)
            with self._tracker_lock:
                self.tracker.delivered(pub.offsets)
                ready = self.tracker.contiguous()
            if ready:  # else a held-back frame sits below these offsets: keep the txn open
                self._commit_transaction()
        except confluent_kafka.KafkaException as exc:
            self._abort(exc)

    def _commit_transaction(self) -> None:
        client = self.producer.client
        try:
            with self._tracker_lock:
                marks = self.tracker.committable()
            tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
            if tps:
                client.send_offsets_to_transaction(tps, self._group_metadata, TXN_TIMEOUT_S)
            client.commit_transaction(TXN_TIMEOUT_S)
            self._txn_open = False
            with self._tracker_lock:
                self.tracker.committed()
        except confluent_kafka.KafkaException as exc:
            self._abort(exc)

    def _abort(self, exc: confluent_kafka.KafkaException) -> None:
        err = exc.args[0]
        self._txn_open = False
        if err.txn_requires_abort():
            self.producer.client.abort_transaction(TXN_TIMEOUT_S)
            raise RewindError(f"transaction aborted: {err.str()}", err.name()) from exc
        raise KafkaError(f"transaction failed: {err.str()}", err.name()) from exc


def _wall_us() -> int:
    return time.time_ns() // 1000


__all__ = ["FramebusError", "Pipeline", "RewindError"]
