"""The commit ledger: the one owner of what the inferencer may commit, and when.

Offsets pass through three threads. The receive thread registers each consumed offset
(`received`); the publish thread reports a batch's offsets once its records are delivered
(`delivered`, at-least-once, or `delivered_in_transaction`, exactly-once); and the receive
thread, which alone may drive the consumer (confluent-kafka serializes the calls on one client,
so a commit from another thread would wait for the consume() running there), commits what was
handed over (`commit`). An asynchronous commit's result comes back through `commit_returned`,
which librdkafka calls inside a later consume() on the receive thread.

At-least-once, the publisher may deliver ahead of the commits while no partition holds more than
`window` delivered records whose commit has not returned (what a crash would deliver twice), so
the commit round trip does not pace the batches; when a batch would overfill the window the
publisher waits in `wait_for_room`. Exactly-once, the offsets go in the transaction that carries
the records, and only when every delivery below them is in it (a frame held back for fairness
keeps the transaction open).

Every decision is made here, under one lock, with no Kafka client: the consumer is passed in as
an `OffsetCommitter`, so unit tests drive the ledger with a stub.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from framebus.errors import KafkaError
from framebus.kafka.protocol import CommitResult, Marks, OffsetCommitter, TopicPartition
from framebus_inferencer.offsets import CommitWindow, OffsetTracker

log = logging.getLogger(__package__)

RETRY_AFTER_FAILURE_S = 0.5  # a failed commit is retried, but not on every turn of the loop
Offsets = list[tuple[TopicPartition, int]]


@dataclass(frozen=True)
class _Commit:
    marks: Marks
    handoffs: int  # the hand-offs these marks cover


def merged(older: Marks, newer: Marks) -> Marks:
    """Per partition, the higher of the two marks (marks only grow)."""
    out = dict(older)
    for tp, offset in newer.items():
        out[tp] = max(out.get(tp, -1), offset)
    return out


class CommitLedger:
    """Received, delivered, handed-over and committed offsets, and the commit window."""

    def __init__(
        self,
        window: int,
        on_error: Callable[[str], None] = lambda _kind: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._offsets = OffsetTracker()
        self._window = CommitWindow(window)
        self._on_error = on_error
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when a commit returns
        self._handed: Marks = {}  # delivered and handed over, not yet sent in a commit
        self._sending: _Commit | None = None  # an asynchronous commit not yet returned
        self._retry_at = 0.0
        self._handoffs = 0  # hand-offs so far (publish thread)
        self._committed_handoffs = 0  # hand-offs whose commit has returned
        self._publisher_waiting = False
        self._receiving = True

    # ---- the receive thread ------------------------------------------------------------------

    def received(self, tp: TopicPartition, offset: int) -> None:
        """A message was consumed: nothing at or above it commits until it is delivered."""
        with self._lock:
            self._offsets.received(tp, offset)

    def commit(self, consumer: OffsetCommitter, wait: bool = False) -> None:
        """Commit what was handed over; `wait`: synchronously, covering a commit in flight too.

        Without `wait` at most one commit is in flight: while one is, or shortly after one
        failed, this does nothing and a later call covers these marks too.
        """
        with self._lock:
            planned = self._plan(wait)
        if planned is None:
            return
        try:
            consumer.commit(planned.marks, asynchronous=not wait)
        except KafkaError as exc:  # e.g. a partition revoked meanwhile: retried later
            log.warning("%s", exc)
            self._on_error("commit")
            with self._lock:
                self._failed(planned)
            return
        if wait:
            with self._lock:
                self._returned(planned)

    def commit_while_blocked(self, consumer: OffsetCommitter) -> None:
        """Commit while no consume() runs (so no asynchronous result could come back).

        Synchronously when the publisher waits for the window, or the three threads would
        wait on each other.
        """
        self.commit(consumer, wait=self.publisher_waiting)

    def commit_returned(self, result: CommitResult) -> None:
        """The result of a commit, ours or the auto-commit's (told apart by their marks)."""
        with self._lock:
            if result.error is not None:
                log.warning("offset commit failed: %s", result.error)
                self._on_error("commit")
                if self._sending is not None:
                    self._failed(self._sending)
                return
            self._window.confirmed(result.committed)
            sending = self._sending
            if sending is not None and all(
                result.committed.get(tp, -1) >= offset for tp, offset in sending.marks.items()
            ):
                self._returned(sending)
            self._changed.notify_all()

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions given up: forget them (their commits could only fail from now on)."""
        gone = set(partitions)
        with self._lock:
            self._offsets.forget(gone)
            self._window.forget(gone)
            for tp in gone:
                self._handed.pop(tp, None)
            sending = self._sending
            if sending is not None:  # should it fail, only what is still ours is retried
                kept = {tp: o for tp, o in sending.marks.items() if tp not in gone}
                self._sending = _Commit(kept, sending.handoffs)

    def stop_receiving(self) -> None:
        """The receive thread made its last commit: the publisher must no longer wait for one."""
        with self._lock:
            self._receiving = False
            self._changed.notify_all()

    @property
    def idle(self) -> bool:
        """True when nothing waits to be committed and no commit is in flight."""
        with self._lock:
            return self._sending is None and not self._handed

    @property
    def publisher_waiting(self) -> bool:
        """True while the publisher waits for a commit to make room in the window."""
        with self._lock:
            return self._publisher_waiting

    # ---- the publish thread, at-least-once ---------------------------------------------------

    def wait_for_room(
        self, offsets: Offsets, timeout_s: float, give_up: Callable[[], bool] = lambda: False
    ) -> bool:
        """Wait while delivering `offsets` would overfill a partition's window; True if it waited.

        Every hand-off so far being committed also ends the wait: then what holds the window is
        a frame held back below the delivered ones, which only a later batch delivers.
        """
        with self._lock:
            if self._window.allows(offsets):
                return False
            self._publisher_waiting = True
            self._changed.wait_for(
                lambda: (
                    self._window.allows(offsets)
                    or self._committed_handoffs >= self._handoffs
                    or not self._receiving
                    or give_up()
                ),
                timeout_s,
            )
            self._publisher_waiting = False
            return True

    def delivered(self, offsets: Offsets) -> None:
        """These offsets' records are delivered: hand what is now committable to the receiver."""
        with self._lock:
            self._offsets.delivered(offsets)
            self._handed.update(self._offsets.committable())
            self._window.delivered(offsets)
            self._handoffs += 1

    # ---- the publish thread, exactly-once ----------------------------------------------------

    def delivered_in_transaction(self, offsets: Offsets) -> bool:
        """These offsets' records are in the open transaction; True if it may commit now.

        It may when its offsets cover every delivery in it, i.e. no frame held back for
        fairness sits below a delivered one (a later batch brings it into the transaction).
        """
        with self._lock:
            self._offsets.delivered(offsets)
            return self._offsets.contiguous()

    def transaction_marks(self) -> Marks:
        """The offsets the transaction commits with its records."""
        with self._lock:
            return self._offsets.committable()

    def transaction_committed(self) -> None:
        """The transaction and its offsets were committed."""
        with self._lock:
            self._offsets.settled()

    # ---- decisions, under the lock -----------------------------------------------------------

    def _plan(self, wait: bool) -> _Commit | None:
        if not wait and (self._sending is not None or self._clock() < self._retry_at):
            return None
        marks, self._handed = self._handed, {}
        if wait and self._sending is not None:
            marks = merged(self._sending.marks, marks)
        if not marks:
            return None
        planned = _Commit(marks, self._handoffs)
        if not wait:
            self._sending = planned
        return planned

    def _returned(self, commit: _Commit) -> None:
        self._window.confirmed(commit.marks)
        self._committed_handoffs = max(self._committed_handoffs, commit.handoffs)
        self._sending = None
        self._changed.notify_all()

    def _failed(self, commit: _Commit) -> None:
        # Hand the marks back, so that they are retried even if nothing more is delivered.
        self._handed = merged(commit.marks, self._handed)
        self._sending = None
        self._retry_at = self._clock() + RETRY_AFTER_FAILURE_S
        self._changed.notify_all()
