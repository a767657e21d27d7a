"""Stage 1, the receive thread: consume, decode, dead-letter bad records, close batches.

It waits for the first record of a batch and then takes, without waiting, whatever else the
client has already fetched: `consume(n, timeout)` alone would hold the first frame until `n`
arrived or the timeout passed. The tensor is not copied out of the record (a view): after
confluent-kafka's copy of each value out of librdkafka's buffer, the only copy of a frame is the
one into the engine's bound input buffer (docs/inferencer.md counts every copy and its cost).

It alone drives the consumer, so it also makes the commits the ledger decides
(`pipeline/ledger.py`), between consume() calls.

When the infer stage has had no room for a while it pauses the assigned partitions and keeps
calling consume(), which then returns nothing but keeps the group membership and serves
rebalances: a slow or stuck downstream stage never costs the group. The wait is a watched call
with a budget below `max.poll.interval.ms`; past it the watchdog ends the process.

The record values confluent-kafka makes live in this thread's malloc arena. Under a backlog it
holds the batcher's capacity of them plus the two batches past it (queued for and in the infer
thread); faulting that heap in mid-stream costs kernel time on every frame of the first backlog,
so the thread writes it once at start-up, while the engine warms up (`framebus.malloc.pre_touch`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from framebus.codec import FrameCodec
from framebus.compression import decompress
from framebus.errors import CodecError, KafkaError
from framebus.kafka.consumer import Consumer
from framebus.kafka.protocol import MessageProto
from framebus.malloc import pre_touch
from framebus.messages import PixelFormat
from framebus.pixels import frame_nbytes
from framebus_inferencer.batcher import DeadlineBatcher, Pending
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import wall_us
from framebus_inferencer.pipeline.handoff import BUSY_POLL_S, InFlight, StageQueue, Work
from framebus_inferencer.pipeline.ledger import CommitLedger, Offsets
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.records import Outgoing, Received, check_tensor, dead_letter
from framebus_inferencer.settings import DeliveryMode

log = logging.getLogger(__package__)  # one logger for the three stages

IDLE_POLL_S = 0.1  # longest consume() wait when no batch is open; bounds stop latency
LAG_EVERY_S = 5.0  # how often the receive thread reads watermarks and positions for the lag
REVOKE_DRAIN_S = 30.0  # longest wait for batches in flight before giving partitions up
REVOKE_POLL_S = 0.05  # how often that wait commits what the publisher delivered meanwhile
PAUSE_AFTER_S = 5.0  # a full pipeline for this long: pause fetching, keep serving the group
# librdkafka's max.poll.interval.ms (framebus keeps its 300 s default): a consumer that has not
# called consume() for this long leaves the group. A hand-off waiting longer than the budget is
# a stall.
MAX_POLL_INTERVAL_S = 300.0
PIPELINE_FULL_BUDGET_S = 0.8 * MAX_POLL_INTERVAL_S


def backlog_heap_bytes(capacity: int, max_batch: int, frame_bytes: int) -> int:
    """Record bytes the receive thread holds under a backlog: the batcher full, two batches on."""
    return (capacity + 2 * max_batch) * frame_bytes


class Receiver:
    """Consumes frame records into the batcher and hands closed batches to the infer thread."""

    def __init__(
        self,
        ctx: StageContext,
        ledger: CommitLedger,
        out: StageQueue[Work],
        in_flight: InFlight,
        consumer: Consumer,
        frame_shape: tuple[int, int, int],
        staging: StagingPool | None = None,
        input_format: PixelFormat = PixelFormat.RGB,
        full_budget_s: float = PIPELINE_FULL_BUDGET_S,
        pause_after_s: float = PAUSE_AFTER_S,
    ) -> None:
        settings = self.s = ctx.settings
        self.control, self.stats, self.state = ctx.control, ctx.stats, ctx.state
        self.tracing, self.clock_ms = ctx.tracing, ctx.clock_ms
        self.ledger, self.out, self.in_flight, self.consumer = ledger, out, in_flight, consumer
        self.frame_shape = frame_shape
        self.frame_bytes = math.prod(frame_shape)  # RGB's, the larger: what a tensor may hold
        self.staging = staging
        self.input_format = input_format  # what the engine's graph takes; others: converted
        self._converting: set[PixelFormat] = set()  # formats said to be converted on the host
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
        consumer.commit_listener = ledger.commit_returned
        self._last_frame = time.monotonic()
        self._next_lag = 0.0
        self.full_budget_s = full_budget_s
        self.pause_after_s = pause_after_s
        self._holding = 0  # batches this thread holds while the infer stage has no room
        self._paused = False
        # Dead letters of records consumed while the pipeline was full: in the next hand-off.
        self._held_rejects: list[Outgoing] = []
        self._held_reject_offsets: Offsets = []

    def run(self, outer_stop: threading.Event) -> None:
        """Receive until stopped, idle or failed; then flush the last batch and end the queue."""
        ctl = self.control
        # The records of the format the graph takes (half an RGB frame's bytes in I420).
        frame_bytes = frame_nbytes(self.input_format, *self.frame_shape[:2])
        touched = pre_touch(
            backlog_heap_bytes(self.batcher.capacity, self.s.max_batch, frame_bytes), frame_bytes
        )
        if touched:
            log.info("receive heap written ahead of the first frame", extra={"bytes": touched})
        ctl.warmed.wait()  # no partitions are taken (and no frame waits) before both are ready
        ctl.publisher_ready.wait()
        if ctl.failed:
            return
        self.consumer.subscribe(
            [self.s.topics.frames_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._last_frame = time.monotonic()
        lag_changed = False
        while not (outer_stop.is_set() or ctl.stop.is_set()):
            ctl.beat()
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
                and self.state.assigned.is_set()  # idle counts from the assignment, not joining
                and time.monotonic() - self._last_frame > self.s.stop_after_idle_s
                and not len(self.batcher)
            ):
                log.info("no frames for %.1f s: stopping", self.s.stop_after_idle_s)
                break
        final = self.batcher.flush(self.clock_ms(), wall_us())
        self.ledger.commit(self.consumer, wait=True)
        self.ledger.stop_receiving()  # the pipeline commits the last offsets after the stages
        if final is not None and not ctl.failed:
            self._submit(Work(final))
        self.out.put(None)
        ctl.retire()

    def _refresh_lag(self) -> None:
        """Read high watermarks (cached from fetches) and positions, on the receive thread."""
        now = time.monotonic()
        if now < self._next_lag:
            return
        self._next_lag = now + LAG_EVERY_S
        try:
            positions = self.consumer.positions()
        except KafkaError as exc:  # lag is reported late, not wrong
            log.warning("cannot read watermarks for the lag: %s", exc)
            self.stats.error("watermarks")
            return
        for tp, high, position in positions:
            self.stats.lag.watermarks(tp, high, position)

    def _receive_some(self) -> int:
        self.ledger.commit(self.consumer)
        rejects, self._held_rejects = self._held_rejects, []
        reject_offsets, self._held_reject_offsets = self._held_reject_offsets, []
        got = 0
        if not self.batcher.full:
            deadline = self.batcher.next_deadline_ms(wall_us())
            busy = bool(self.in_flight) or not self.ledger.idle
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
        self.ledger.received(tp, offset)
        decode_start = self.tracing.now_ns()
        try:
            frame = self.frames.decode_view(msg.value() or b"")
            if frame.still:  # no pixels to check: answered STILL without the model
                if len(frame.tensor):
                    raise CodecError(
                        f"still frame carries a {len(frame.tensor)} B tensor; a still frame has "
                        "none: the decoder that wrote it is broken"
                    )
                tensor: npt.NDArray[np.uint8] | bytes = b""
            else:
                # Bounded by the model's frame: a header claiming more is dead-lettered unread.
                raw = decompress(frame.compression, frame.tensor, self.frame_bytes)
                tensor = np.frombuffer(raw, np.uint8)
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
        if frame.pixel_format is not self.input_format and not frame.still:
            self._on_host(frame.pixel_format)
        self.tracing.decoded(tp[1], offset, decode_start)
        self.stats.lag.received(tp, offset, frame.capture_ts_us, timed=not frame.still)
        self.batcher.add(
            Pending(
                frame.camera_id,
                frame.capture_ts_us,
                self.clock_ms(),
                tp[1],
                offset,
                Received(msg, frame, tensor),
                still=frame.still,
            )
        )

    def _on_host(self, fmt: PixelFormat) -> None:
        """Count a frame the engine's input does not take as it is (`slot.py` converts it)."""
        self.stats.converted_on_host(fmt.value)
        if fmt not in self._converting:
            self._converting.add(fmt)
            log.warning(
                "%s frames reach a model graph that takes %s: converting them on the host; set "
                "FRAMEBUS_FRAME_FORMAT to one format for the decoders and the inferencers",
                fmt.value,
                self.input_format.value,
            )

    def _submit(self, work: Work) -> None:
        if self.eos:  # as of the consume() that brought these frames (it may have joined)
            work.group_metadata = self.consumer.group_metadata()
        if work.batch is not None and self.tracing.enabled:
            work.span = self.tracing.batch_span(work.batch)
        if work.batch is not None and work.batch.frames and self.staging is not None:
            frames = work.batch.frames
            work.staged = self.staging.stage(
                [p.payload.tensor for p in frames], [p.payload.frame for p in frames]
            )
        self.in_flight.add()
        if self.out.offer(work):
            return
        full_since = time.monotonic()
        self._holding = 1
        try:
            with self.control.call(
                "hand-off to the infer stage (pipeline full)", self.full_budget_s
            ):
                handed = self.out.put(work, while_full=lambda: self._while_full(full_since))
        finally:
            self._holding = 0
            if self._paused:
                self.consumer.resume_assigned()
                self._paused = False
        if not handed:
            self.in_flight.done()

    def _while_full(self, full_since: float) -> None:
        # Keep committing what the publish thread delivers meanwhile.
        self.ledger.commit_while_blocked(self.consumer)
        if time.monotonic() - full_since < self.pause_after_s:
            return
        if not self._paused:
            log.info(
                "pipeline full for %.0f s: pausing fetches, keeping the group", self.pause_after_s
            )
            self.consumer.pause_assigned()
            self._paused = True
        # Paused partitions return nothing; a partition assigned meanwhile may, and its records
        # are kept like any other (they are consumed, so they must be answered).
        for msg in self.consumer.consume(1, 0):
            self._accept(msg, self._held_rejects, self._held_reject_offsets)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.state.assigned.set()
        self._last_frame = time.monotonic()
        log.info("assigned %s", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        # Let batches in flight finish (and, exactly-once, commit) before giving partitions up.
        # We are the receive thread, inside consume(): keep committing what the publish thread
        # delivers meanwhile. A batch this thread holds (pipeline full) cannot move meanwhile.
        deadline = time.monotonic() + REVOKE_DRAIN_S
        while time.monotonic() < deadline:
            self.ledger.commit(self.consumer, wait=True)
            if self.in_flight.wait_empty(
                REVOKE_POLL_S, lambda: self.control.failed, held=self._holding
            ):
                break
        self.ledger.commit(self.consumer, wait=True)
        self._forget(partitions, "revoked")

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # The group already gave these to another member: nothing of theirs can be committed
        # any more, so waiting for batches in flight would only hold the new owner back.
        # Exactly-once, a transaction carrying their offsets fails and is rewound.
        self._forget(partitions, "lost")

    def _forget(self, partitions: list[Any], how: str) -> None:
        gone = [(p.topic, p.partition) for p in partitions]
        dropped = self.batcher.drop_partitions(p for _, p in gone)
        self.ledger.revoked(gone)
        self.stats.lag.forget(gone)
        self.tracing.forget(p for _, p in gone)
        log.info("%s %s; %d waiting frames left to the next owner", how, gone, len(dropped))
