"""Exactly-once: the one owner of how framebus begins, commits and aborts a Kafka transaction.

Both exactly-once loops go through here: the inferencer's publish thread (several publications
may share one transaction while a frame held back for fairness sits below delivered offsets) and
the stateful loop of the tracker and the alerts engine (one transaction per consumed batch: its
outputs, changelog states and dead letters). As with quix-streams' `Checkpoint`, a service never
calls the producer's transactional API itself: it sends records through `Transactions.send` and,
once its offsets may be committed, hands their marks and the group's metadata to `commit`.

A failed call is handled by its kind (`framebus.kafka.producer.TxnErrorKind`): the producer
retries a retriable error itself; an abortable one, or a produce() refused inside the
transaction, is aborted here and raised as RewindError; a fatal one is raised as KafkaError when
the producer was refused (not authorized), and otherwise as RewindError too: the rewind's fresh
producer takes the transactional id over. A fence is such a rewind once; a second one within
FENCE_WINDOW_S ends the service instead of fighting a rival instance for the id.
Each call times out at half the stall timeout: the watchdog allows a call twice its timeout, so
it ends only a call librdkafka itself never returns from.

`rewinding` is the loop around an exactly-once run: after an abort the consumer must restart at
the committed offsets, which a fresh pair of clients does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from framebus.errors import KafkaError
from framebus.kafka.producer import Headers, Producer, TransactionError, TxnErrorKind
from framebus.kafka.protocol import Marks

log = logging.getLogger(__name__)

MAX_REWINDS = 5  # aborted transactions in a row before giving up
# How long a send waits for room in a full local queue; librdkafka itself gives up on a record
# after message.timeout.ms, and a refused send aborts the transaction.
QUEUE_ROOM_S = 30.0
REWIND_BACKOFF_S = 0.1  # doubled per rewind in a row, up to MAX_REWIND_BACKOFF_S
MAX_REWIND_BACKOFF_S = 5.0
# Fenced: the coordinator bumped this producer's epoch. Another live instance registering the
# same id does that, and so does the coordinator itself when it aborts a transaction that timed
# out (a broker's death mid-commit), so a fence alone is no proof of a rival.
_FENCED_CODES = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
# Refused: no fresh producer is allowed either.
_REFUSED_CODES = frozenset(
    {"TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"}
)
# A second fence this soon after one: a rival instance takes the id back each time.
FENCE_WINDOW_S = 60.0


class RewindError(KafkaError):
    """A transaction was aborted: its records are discarded and consumption must restart.

    `committed` counts the transactions the same engine committed before the abort, so the
    rewind loop can tell aborts in a row from an abort after progress.
    """

    def __init__(
        self, message: str, code: str | None = None, committed: int = 0, fenced: bool = False
    ) -> None:
        super().__init__(message, code)
        self.committed = committed
        self.fenced = fenced


def call_timeout_s(stage_timeout_s: float) -> float:
    """Each transactional call's timeout: half the stall timeout (the watchdog allows twice)."""
    return stage_timeout_s / 2


class Transactions:
    """One transactional producer's transactions: begun on the first send, then committed."""

    def __init__(self, producer: Producer, stage_timeout_s: float) -> None:
        self.producer = producer
        self.timeout_s = call_timeout_s(stage_timeout_s)
        self.committed = 0  # transactions committed by this engine
        self._open = False

    @property
    def is_open(self) -> bool:
        """True while a transaction holds records (or offsets) not yet committed."""
        return self._open

    def init(self) -> None:
        """Register the transactional id: fences an earlier instance and aborts its transaction.

        Call it before joining the consumer group. A failure here is fatal (TransactionError).
        """
        self.producer.init_transactions(self.timeout_s)

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce one record in the open transaction, beginning one first if none is open.

        `partition` overrides the key's partition (a changelog follows its source partition).
        RewindError when the transaction had to be aborted; KafkaError when the failure is fatal.
        """
        try:
            self._begin()
            self.producer.produce(
                topic, value, key, headers, block_s=QUEUE_ROOM_S, partition=partition
            )
        except KafkaError as exc:  # a transactional call's, or a produce() refused inside it
            raise self._abort(exc) from exc

    def commit(self, marks: Marks, group_metadata: Any) -> None:
        """Commit the open transaction with these consumer offsets (exactly-once).

        Offsets alone make a transaction of their own (a batch that produced nothing still
        moves on); with neither records nor marks there is nothing to commit. RewindError when
        the transaction had to be aborted; KafkaError when the failure is fatal.
        """
        if not self._open and not marks:
            return
        try:
            self._begin()
            if marks:
                self.producer.send_offsets_to_transaction(marks, group_metadata, self.timeout_s)
            self.producer.commit_transaction(self.timeout_s)
        except KafkaError as exc:
            raise self._abort(exc) from exc
        self._open = False
        self.committed += 1

    def _begin(self) -> None:
        if not self._open:
            self.producer.begin_transaction()
            self._open = True

    def _abort(self, exc: KafkaError) -> KafkaError:
        """Abort after a failed call and return the RewindError to raise (KafkaError if refused).

        A fatal failure is not aborted: the producer can do no more. Refused (not authorized),
        the service ends. Any other fatal failure rewinds too, and the fresh producer's `init`
        aborts the open transaction, as a restart's would: librdkafka has been seen to give up
        with INVALID_TXN_STATE, or to report this instance fenced, when the coordinator's broker
        died mid-commit. `rewinding` ends the service at a second fence soon after the first.
        """
        self._open = False
        log.error("transaction failed: %s", exc)
        if not _is_fatal(exc):
            try:  # the records (and states) sent so far go with the aborted transaction
                self.producer.abort_transaction(self.timeout_s)
            except TransactionError as failed:
                log.error("abort failed: %s", failed)
                exc = failed
        fatal = _is_fatal(exc)
        if fatal and exc.code in _REFUSED_CODES:
            return KafkaError(f"transaction failed: {exc}", exc.code)
        what = "producer failed, a fresh one takes over" if fatal else "transaction aborted"
        fenced = fatal and exc.code in _FENCED_CODES
        return RewindError(f"{what}: {exc}", exc.code, self.committed, fenced)


def _is_fatal(exc: KafkaError) -> bool:
    return isinstance(exc, TransactionError) and exc.kind is TxnErrorKind.FATAL


def rewind_backoff_s(in_a_row: int) -> float:
    """How long to wait before the `in_a_row`-th rewind in a row: doubling, bounded."""
    return min(REWIND_BACKOFF_S * 2.0**in_a_row, MAX_REWIND_BACKOFF_S)


def rewinding(
    attempt: Callable[[], None],
    stop: threading.Event,
    on_rewind: Callable[[RewindError], None] = lambda _exc: None,
    max_rewinds: int = MAX_REWINDS,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run `attempt` until it returns; after an aborted transaction, run it again.

    `attempt` makes fresh clients: the group's committed offsets (and a changelog's committed
    states) are where it resumes, so nothing is lost or doubled. `on_rewind` is told each abort
    (to count it, or to drop state the aborted transaction held). Raises the RewindError once
    more than `max_rewinds` attempts in a row ended in one; an attempt that committed a
    transaction first starts the count again.
    """
    in_a_row = 0
    last_fence: float | None = None
    while True:
        try:
            attempt()
            return
        except RewindError as exc:
            in_a_row = 1 if exc.committed else in_a_row + 1
            on_rewind(exc)
            if in_a_row > max_rewinds:
                raise
            if exc.fenced:
                now = clock()
                if last_fence is not None and now - last_fence < FENCE_WINDOW_S:
                    raise KafkaError(
                        f"fenced twice within {FENCE_WINDOW_S:.0f} s: another live instance "
                        "uses the same transactional id; give each instance its own "
                        f"(its transactional_id setting): {exc}",
                        exc.code,
                    ) from exc
                last_fence = now
            log.warning("rewinding to the committed offsets (%d in a row): %s", in_a_row, exc)
            if stop.wait(rewind_backoff_s(in_a_row)):
                return  # stopped meanwhile: the aborted work is left for the next start
