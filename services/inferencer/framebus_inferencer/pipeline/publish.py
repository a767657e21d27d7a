"""Stage 3, the publish thread: deliver each batch's records, then report its offsets done.

At-least-once: produce, wait for every acknowledgement, and only then tell the commit ledger the
offsets are delivered; the receive thread commits them while this thread goes on delivering. It
waits for a commit only when the ledger's commit window is full. Exactly-once: produce inside a
transaction that also carries the consumed offsets. A failed publish raises, so its offsets are
never committed.

Exactly-once, a failed call is handled by its kind (`framebus.kafka.producer.TxnErrorKind`): the
producer retries a retriable error itself; an abortable one, or a produce() refused inside the
transaction, aborts it and rewinds the pipeline to the committed offsets; a fatal one ends the
service. Each transactional call times out at half the stall timeout, so the watchdog only ends
a call librdkafka itself never returns from.
"""

from __future__ import annotations

import logging
from typing import Any

from framebus.errors import DeliveryError, KafkaError
from framebus.kafka.producer import Producer
from framebus_inferencer.pipeline.control import Control, wall_us
from framebus_inferencer.pipeline.handoff import InFlight, Publication, StageQueue
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__package__)

COMMIT_WAIT_S = 2.0  # longest wait for room in the commit window before delivering anyway
PRODUCER_READY_S = 30.0  # the first detections record would wait this long anyway
# How long produce() waits for room in a full local queue, and flush() for acknowledgements
# before it says so and waits again: librdkafka itself gives up after message.timeout.ms.
QUEUE_ROOM_S = 30.0
ACK_WAIT_S = 30.0


class Publisher:
    """Delivers publications in order and reports their offsets to the ledger."""

    def __init__(
        self,
        control: Control,
        inbox: StageQueue[Publication],
        in_flight: InFlight,
        ledger: CommitLedger,
        producer: Producer,
        stats: InferencerStats,
        tracing: BatchTracing,
        exactly_once: bool,
    ) -> None:
        self.control = control
        self.inbox = inbox
        self.in_flight = in_flight
        self.ledger = ledger
        self.producer = producer
        self.stats = stats
        self.tracing = tracing
        self.eos = exactly_once
        self._txn_open = False
        self._group_metadata: Any = None
        # Within the broker's default transaction timeout (60 s) at the default stall timeout.
        self.txn_timeout_s = control.stall_timeout_s / 2

    def run(self) -> None:
        """Publish until the infer thread ends the queue (committing an open transaction)."""
        ctl = self.control
        if self.eos:
            self.producer.init_transactions(self.txn_timeout_s)
        elif not self.producer.wait_ready(PRODUCER_READY_S):
            log.warning("Kafka producer not ready after %.0f s; going on", PRODUCER_READY_S)
        ctl.publisher_ready.set()
        while True:
            pub = self.inbox.get()
            if pub is None:
                if self._txn_open and not ctl.failed:
                    try:
                        self._commit_transaction()
                    except KafkaError as exc:
                        self._abort(exc)
                ctl.retire()
                return
            with self.tracing.child(pub.span, "publish"):
                if self.eos:
                    self._publish_transactional(pub)
                else:
                    self._publish_at_least_once(pub)
            self.stats.delivered(pub.offsets, wall_us())
            if pub.span is not None:
                pub.span.end()
            self.in_flight.done()

    def _publish_at_least_once(self, pub: Publication) -> None:
        errors: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err.str())

        if self.ledger.wait_for_room(pub.offsets, COMMIT_WAIT_S, lambda: self.control.failed):
            self.stats.commit_window_wait()
        for r in pub.records:
            self.producer.produce(r.topic, r.value, r.key, r.headers, report, QUEUE_ROOM_S)
        pending = self.producer.flush(ACK_WAIT_S)
        while pending and not errors:
            # The broker is away: librdkafka retries until message.timeout.ms and then reports
            # each record as failed; until then, wait instead of dying mid-outage.
            log.warning("%d detections records not yet acknowledged; still waiting", pending)
            self.stats.error("delivery_wait")
            self.control.beat()
            pending = self.producer.flush(ACK_WAIT_S)
        if pending or errors:
            raise DeliveryError(f"{pending} records undelivered; errors: {errors[:3]}")
        self.ledger.delivered(pub.offsets)

    def _publish_transactional(self, pub: Publication) -> None:
        self._group_metadata = pub.group_metadata
        try:
            if not self._txn_open:
                self.producer.begin_transaction()
                self._txn_open = True
            for r in pub.records:
                self.producer.produce(r.topic, r.value, r.key, r.headers, None, QUEUE_ROOM_S)
            # Else a held-back frame sits below these offsets: keep the transaction open.
            if self.ledger.delivered_in_transaction(pub.offsets):
                self._commit_transaction()
        except KafkaError as exc:  # a transactional call's, or a produce() refused mid-transaction
            self._abort(exc)

    def _commit_transaction(self) -> None:
        marks = self.ledger.transaction_marks()
        if marks:
            self.producer.send_offsets_to_transaction(
                marks, self._group_metadata, self.txn_timeout_s
            )
        self.producer.commit_transaction(self.txn_timeout_s)
        self._txn_open = False
        self.ledger.transaction_committed()

    def _abort(self, exc: KafkaError) -> None:
        self._txn_open = False
        log.error("transaction failed: %s", exc)
        raise self.producer.abort_for(exc, self.txn_timeout_s) from exc
