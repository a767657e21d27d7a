"""What the stages hand each other: closed batches, publications, and the bounded queues.

Each queue has one writer: the receive thread puts work for the infer thread, the infer thread
publications for the publish thread. A full queue is the pipeline's backpressure.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from opentelemetry import trace

from framebus_inferencer.batcher import Batch, Pending
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.ledger import Offsets
from framebus_inferencer.records import Outgoing, Received
from framebus_inferencer.slot import InputSlot

# Longest consume() wait while batches are in flight or offsets wait to be committed (the
# receive thread commits between consume() calls); consume() returns at the first record anyway.
BUSY_POLL_S = 0.01
QUEUE_POLL_S = 0.25  # how often a stage waiting on a queue beats and looks for a failure

T = TypeVar("T")


@dataclass
class Work:
    """A closed batch on its way from the receiver to the engine."""

    batch: Batch[Received] | None
    rejects: list[Outgoing] = field(default_factory=list)
    reject_offsets: Offsets = field(default_factory=list)
    span: trace.Span | None = None  # the batch's process span, ended by the publisher
    staged: InputSlot | None = None  # the batch's frames, already in a bound input
    group_metadata: Any = None  # exactly-once: the consumer's, for the transaction


@dataclass
class Publication:
    """What the publisher must deliver, and the offsets that delivery completes."""

    records: list[Outgoing]
    offsets: Offsets
    span: trace.Span | None = None
    group_metadata: Any = None


def offsets_of(items: list[Pending[Received]]) -> Offsets:
    """The (topic, partition), offset pairs of these frames."""
    return [((i.payload.msg.topic() or "", i.partition), i.offset) for i in items]


class StageQueue(Generic[T]):
    """A bounded queue between two stages that gives up once the pipeline failed."""

    def __init__(self, control: Control, maxsize: int) -> None:
        self._control = control
        self._q: queue.Queue[T | None] = queue.Queue(maxsize=maxsize)

    def offer(self, item: T | None) -> bool:
        """Put `item` if there is room now; False when the queue is full."""
        try:
            self._q.put_nowait(item)
        except queue.Full:
            return False
        return True

    def put(self, item: T | None, while_full: Callable[[], None] | None = None) -> bool:
        """Put `item` (None ends the stream), running `while_full` between tries; False if failed."""
        while True:
            self._control.beat()
            try:
                self._q.put(item, timeout=QUEUE_POLL_S if while_full is None else BUSY_POLL_S / 2)
                return True
            except queue.Full:
                if self._control.failed:
                    return False
                if while_full is not None:
                    while_full()

    def get(self) -> T | None:
        """The next item, or None at the end of the stream or once the pipeline failed."""
        while True:
            self._control.beat()
            try:
                return self._q.get(timeout=QUEUE_POLL_S)
            except queue.Empty:
                if self._control.failed:
                    return None


class InFlight:
    """Batches submitted to the engine and not yet delivered (receive adds, publish removes)."""

    def __init__(self) -> None:
        self._n = 0
        self._changed = threading.Condition()

    def __bool__(self) -> bool:
        return self._n > 0

    def add(self) -> None:
        """A batch was submitted."""
        with self._changed:
            self._n += 1

    def done(self) -> None:
        """A submitted batch is delivered (or was never submitted after all)."""
        with self._changed:
            self._n -= 1
            self._changed.notify_all()

    def wait_empty(self, timeout_s: float, give_up: Callable[[], bool], held: int = 0) -> bool:
        """Wait up to `timeout_s` until only `held` batches are undelivered; True if so.

        `held`: batches the caller itself holds back (not yet handed on), which cannot move
        while it waits.
        """
        with self._changed:
            return self._changed.wait_for(lambda: self._n <= held or give_up(), timeout_s)
