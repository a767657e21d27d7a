"""Stage 1, the receive thread: consume, decode, dead-letter bad records, close batches.

It waits for the first record of a batch and then takes, without waiting, whatever else the
client has already fetched: `consume(n, timeout)` alone would hold the first frame until `n`
arrived or the timeout passed. The tensor is not copied out of the record (a view), so the only
copy of a frame after the fetch is the engine's into its bound input buffer.

The record values confluent-kafka makes live in this thread's malloc arena. Under a backlog it
holds the batcher's capacity of them plus the two batches past it (queued for and in the infer
thread): about 118 MB at max_batch 16. Faulting that heap in mid-stream cost a 960-frame drain
some 28k page faults, about 0.06 ms of kernel time a frame (docs/benchmarks.md), so the thread
writes it once at start-up, while the engine warms up (`framebus.malloc.pre_touch`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import numpy as np

from framebus.codec import FrameCodec
from framebus.compression import decompress
from framebus.errors import CodecError
from framebus.kafka.consumer import Consumer, MessageProto
from framebus.malloc import pre_touch
from framebus_inferencer.batcher import DeadlineBatcher, Pending
from framebus_inferencer.pipeline.commit import Committer
from framebus_inferencer.pipeline.shared import (
    BUSY_POLL_S,
    LOOP_ALLOWANCE_S,
    Offsets,
    Shared,
    Work,
    wall_us,
)
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.records import Outgoing, Received, check_tensor, dead_letter
from framebus_inferencer.settings import DeliveryMode, InferencerSettings
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__package__)  # one logger for the three stages

IDLE_POLL_S = 0.1  # longest consume() wait when no batch is open; bounds stop latency
LAG_EVERY_S = 5.0  # how often the receive thread reads watermarks and positions for the lag
REVOKE_DRAIN_S = 30.0  # longest wait for batches in flight before giving partitions up


def backlog_heap_bytes(capacity: int, max_batch: int, frame_bytes: int) -> int:
    """Record bytes the receive thread holds under a backlog: the batcher full, two batches on."""
    return (capacity + 2 * max_batch) * frame_bytes


class Receiver:
    """Consumes frame records into the batcher and hands closed batches to the infer thread."""

    def __init__(
        self,
        settings: InferencerSettings,
        shared: Shared,
        consumer: Consumer,
        stats: InferencerStats,
        tracing: BatchTracing,
        frame_shape: tuple[int, int, int],
        clock_ms: Callable[[], float],
        staging: StagingPool | None = None,
    ) -> None:
        self.s = settings
        self.shared = shared
        self.consumer = consumer
        self.stats = stats
        self.tracing = tracing
        self.frame_shape = frame_shape
        self.clock_ms = clock_ms
        self.staging = staging
        self.eos = settings.delivery is DeliveryMode.EXACTLY_ONCE
        self.batcher: DeadlineBatcher[Received] = DeadlineBatcher(
            settings.max_batch,
            settings.max_wait_ms,
            settings.camera_quota,
            settings.max_frame_age_ms,
            settings.pending_limit,
            skip_ahead=not self.eos,
        )
        self.frames = FrameCodec()
        self.committer = Committer(shared, consumer, stats)
        self._last_frame = time.monotonic()
        self._next_lag = 0.0

    def run(self, outer_stop: threading.Event) -> None:
        """Receive until stopped, idle or failed; then flush the last batch and end the queue."""
        sh = self.shared
        frame_bytes = math.prod(self.frame_shape)
        touched = pre_touch(
            backlog_heap_bytes(self.batcher.capacity, self.s.max_batch, frame_bytes), frame_bytes
        )
        if touched:
            log.info("receive heap written ahead of the first frame", extra={"bytes": touched})
        sh.warmed.wait()  # no partitions are taken (and no frame waits) before both are ready
        sh.publisher_ready.wait()
        if sh.failures:
            return
        self.consumer.subscribe(
            [self.s.topics.frames_topic], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        self._last_frame = time.monotonic()
        lag_changed = False
        while not (outer_stop.is_set() or sh.stop.is_set()):
            sh.health.heartbeat("receive", LOOP_ALLOWANCE_S)
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
        final = self.batcher.flush(self.clock_ms(), wall_us())
        self.committer.commit(wait=True)
        with sh.committed:
            sh.receiving = False  # from now on run() stores the last offsets after the stages
            sh.committed.notify_all()
        if final is not None and not sh.failures:
            self._submit(Work(final))
        sh.put(sh.infer_q, None)
        sh.health.retire("receive")

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
        self.committer.commit()
        if self.eos:
            self.shared.group_metadata = self.consumer.client.consumer_group_metadata()
        rejects: list[Outgoing] = []
        reject_offsets: Offsets = []
        got = 0
        if not self.batcher.full:
            deadline = self.batcher.next_deadline_ms(wall_us())
            busy = self.shared.in_flight or not self.committer.idle()
            timeout = BUSY_POLL_S if busy else IDLE_POLL_S
            if deadline is not None:
                timeout = min(timeout, max(0.0, (deadline - self.clock_ms()) / 1000))
            room = self.batcher.capacity - len(self.batcher)
            messages = self.consumer.consume(1, timeout)  # returns on the first record
            if messages and room > 1:
                messages += self.consumer.consume(room - 1, 0)  # what is fetched already
            got = len(messages)
            self.stats.received(got)
            for msg in messages:
                self._accept(msg, rejects, reject_offsets)
        batch = self.batcher.poll(self.clock_ms(), wall_us())
        if batch is not None or rejects:
            self._submit(Work(batch, rejects, reject_offsets))
        return got

    def _accept(self, msg: MessageProto, rejects: list[Outgoing], offsets: Offsets) -> None:
        tp = (msg.topic() or "", msg.partition() or 0)
        offset = msg.offset() or 0
        with self.shared.tracker_lock:
            self.shared.tracker.received(tp, offset)
        decode_start = self.tracing.now_ns()
        try:
            frame = self.frames.decode_view(msg.value() or b"")
            tensor = np.frombuffer(decompress(frame.compression, frame.tensor), np.uint8)
            problem = check_tensor(frame, tensor, self.frame_shape)
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
        self.tracing.decoded(tp[1], offset, decode_start)
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
        sh = self.shared
        if work.batch is not None and self.tracing.enabled:
            work.span = self.tracing.batch_span(work.batch)
        if work.batch is not None and work.batch.frames and self.staging is not None:
            work.staged = self.staging.stage([p.payload.tensor for p in work.batch.frames])
        with sh.idle:
            sh.in_flight += 1
        # While the pipeline is full, keep committing what the publish thread delivers.
        if not sh.put(sh.infer_q, work, while_full=self.committer.while_full):
            sh.batch_done()

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.stats.connected = True
        self._last_frame = time.monotonic()
        log.info("assigned %s", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        # Let batches in flight finish (and, exactly-once, commit) before giving partitions up.
        # We are the receive thread, inside consume(): keep committing what the publish thread
        # delivers meanwhile.
        sh = self.shared
        deadline = time.monotonic() + REVOKE_DRAIN_S
        while time.monotonic() < deadline:
            self.committer.commit(wait=True)
            with sh.idle:
                if sh.idle.wait_for(lambda: sh.in_flight == 0 or bool(sh.failures), 0.05):
                    break
        self.committer.commit(wait=True)
        gone = [(p.topic, p.partition) for p in partitions]
        dropped = self.batcher.drop_partitions(p for _, p in gone)
        with sh.tracker_lock:
            sh.tracker.forget(gone)
            sh.window.forget(gone)
            for tp in gone:  # their commits could only fail from now on
                sh.offsets_to_store.pop(tp, None)
        self.stats.lag.forget(gone)
        self.tracing.forget(p for _, p in gone)
        log.info("revoked %s; %d waiting frames left to the next owner", gone, len(dropped))
