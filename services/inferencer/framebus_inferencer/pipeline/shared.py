"""What the three pipeline threads share, named in one place, and the hand-off plumbing.

The receive thread owns the consumer, the infer thread the engine, the publish thread the
producer. Everything else they touch is in `Shared`: the two queues between them, the offset
bookkeeping (under one lock), the count of batches in flight, and the stop/failure signals.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from framebus.telemetry.health import Health
from framebus_inferencer.batcher import Batch, Pending
from framebus_inferencer.engine import InputSlot
from framebus_inferencer.offsets import CommitWindow, OffsetTracker
from framebus_inferencer.records import Outgoing, Received

# Longest consume() wait while batches are in flight or offsets wait to be committed (the
# receive thread commits between consume() calls); consume() returns at the first record anyway.
BUSY_POLL_S = 0.01
QUEUE_POLL_S = 0.05
LOOP_ALLOWANCE_S = 60.0  # a stage that has not come round its loop for this long is stuck
Offsets = list[tuple[tuple[str, int], int]]


@dataclass
class Work:
    """A closed batch on its way from the receiver to the engine."""

    batch: Batch[Received] | None
    rejects: list[Outgoing] = field(default_factory=list)
    reject_offsets: Offsets = field(default_factory=list)
    span: trace.Span | None = None  # the batch's process span, ended by the publisher
    staged: InputSlot | None = None  # the batch's frames, already in a bound input


@dataclass
class Publication:
    """What the publisher must deliver, and the offsets that delivery completes."""

    records: list[Outgoing]
    offsets: Offsets
    span: trace.Span | None = None


def offsets_of(items: list[Pending[Received]]) -> Offsets:
    """The (topic, partition), offset pairs of these frames."""
    return [((i.payload.msg.topic() or "", i.partition), i.offset) for i in items]


def wall_us() -> int:
    """Wall-clock time in microseconds (capture timestamps are wall-clock)."""
    return time.time_ns() // 1000


class Shared:
    """The state the receive, infer and publish threads share."""

    def __init__(self, health: Health, commit_window: int) -> None:
        self.health = health
        self.stop = threading.Event()
        self.warmed = threading.Event()  # set by the infer thread once the engine is warm
        self.publisher_ready = threading.Event()  # set once the producer can send
        self.failures: list[BaseException] = []
        self.infer_q: queue.Queue[Work | None] = queue.Queue(maxsize=1)
        self.publish_q: queue.Queue[Publication | None] = queue.Queue(maxsize=2)

        # Offsets: the tracker, the hand-off of delivered offsets and the commit window, under
        # `tracker_lock`. The consumer is driven from the receive thread only: confluent-kafka
        # serializes the calls on one client, so a commit() or store_offsets() from another
        # thread, even an asynchronous one, waits until the consume() running there returns.
        # The publish thread leaves delivered offsets in `offsets_to_store` instead, and may
        # deliver ahead of their commit while `window` allows (`commit_window` records per
        # partition delivered and not yet committed: what a crash would repeat).
        self.tracker = OffsetTracker()
        self.tracker_lock = threading.Lock()
        self.offsets_to_store: dict[tuple[str, int], int] = {}
        self.window = CommitWindow(commit_window)
        self.committed = threading.Condition(self.tracker_lock)  # notified after each commit
        self.window_waiting = False  # the publisher waits for a commit to empty the window
        self.handed_off = 0  # hand-offs of delivered offsets so far (publish thread)
        self.committed_upto = 0  # hand-offs whose commit has returned (receive thread)
        self.receiving = True  # False once the receive thread has stopped committing
        self.group_metadata: Any = None  # exactly-once: the consumer's, for the transaction

        # Batches submitted to the engine and not yet delivered.
        self.in_flight = 0
        self.idle = threading.Condition()

    def fail(self, exc: BaseException) -> None:
        """A stage failed: stop the others (and release anyone waiting for the warm-up)."""
        self.failures.append(exc)
        self.stop.set()
        self.warmed.set()
        self.publisher_ready.set()

    def batch_done(self) -> None:
        """One batch submitted to the engine is delivered (or was never submitted)."""
        with self.idle:
            self.in_flight -= 1
            self.idle.notify_all()

    def beat(self) -> None:
        """A stage waiting on a queue is alive (backpressure is not a stall): it beats."""
        name = threading.current_thread().name
        if name.startswith("fb-"):
            self.health.heartbeat(name.removeprefix("fb-"), LOOP_ALLOWANCE_S)

    def put(
        self, q: queue.Queue[Any], item: Any, while_full: Callable[[], None] | None = None
    ) -> bool:
        """Put `item` on `q`, running `while_full` between tries; False if the pipeline failed."""
        while True:
            self.beat()
            try:
                q.put(item, timeout=QUEUE_POLL_S if while_full is None else BUSY_POLL_S / 2)
                return True
            except queue.Full:
                if self.stop.is_set() and self.failures:
                    return False
                if while_full is not None:
                    while_full()

    def get(self, q: queue.Queue[Any]) -> Any:
        """The next item of `q`, or None once the pipeline failed."""
        while True:
            self.beat()
            try:
                return q.get(timeout=QUEUE_POLL_S)
            except queue.Empty:
                if self.failures:
                    return None
