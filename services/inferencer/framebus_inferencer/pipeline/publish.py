"""Stage 3, the publish thread: deliver each batch's records, then report its offsets done.

At-least-once: produce, wait for every acknowledgement, and only then tell the commit ledger the
offsets are delivered; the receive thread commits them while this thread goes on delivering. It
waits for a commit only when the ledger's commit window is full. Exactly-once: send through the
exactly-once engine (`framebus.kafka.transactions`), in a transaction that also carries the
consumed offsets once the ledger says they may commit. A failed publish raises, so its offsets
are never committed; exactly-once, the engine has then aborted the transaction (RewindError,
and the service rewinds the pipeline to the committed offsets) or found it fatal (KafkaError).
"""

from __future__ import annotations

import logging
from typing import Any

from framebus.errors import DeliveryError
from framebus.kafka.producer import Producer
from framebus.kafka.transactions import Transactions
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import wall_us
from framebus_inferencer.pipeline.handoff import InFlight, Publication, StageQueue
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.settings import DeliveryMode

log = logging.getLogger(__package__)

COMMIT_WAIT_S = 2.0  # longest wait for room in the commit window before delivering anyway
PRODUCER_READY_S = 30.0  # the first detections record would wait this long anyway
# At-least-once: how long produce() waits for room in a full local queue, and flush() for
# acknowledgements before it says so and waits again: librdkafka itself gives up after
# message.timeout.ms.
QUEUE_ROOM_S = 30.0
ACK_WAIT_S = 30.0


class Publisher:
    """Delivers publications in order and reports their offsets to the ledger."""

    def __init__(
        self,
        ctx: StageContext,
        inbox: StageQueue[Publication],
        in_flight: InFlight,
        ledger: CommitLedger,
        producer: Producer,
    ) -> None:
        self.control, self.stats, self.tracing = ctx.control, ctx.stats, ctx.tracing
        self.inbox, self.in_flight, self.ledger, self.producer = inbox, in_flight, ledger, producer
        # Its calls time out at half the stall timeout: within the broker's default transaction
        # timeout (60 s) at the default stall timeout.
        eos = ctx.settings.delivery is DeliveryMode.EXACTLY_ONCE
        self.txn = Transactions(producer, ctx.control.stage_timeout_s) if eos else None
        self._group_metadata: Any = None

    def run(self) -> None:
        """Publish until the infer thread ends the queue (committing an open transaction)."""
        ctl = self.control
        if self.txn is not None:
            self.txn.init()
        elif not self.producer.wait_ready(PRODUCER_READY_S):
            log.warning("Kafka producer not ready after %.0f s; going on", PRODUCER_READY_S)
        ctl.publisher_ready.set()
        while True:
            pub = self.inbox.get()
            if pub is None:
                if self.txn is not None and self.txn.is_open and not ctl.failed:
                    self._commit_transaction(self.txn)
                ctl.retire()
                return
            with self.tracing.child(pub.span, "publish"):
                if self.txn is not None:
                    self._publish_transactional(self.txn, pub)
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

    def _publish_transactional(self, txn: Transactions, pub: Publication) -> None:
        self._group_metadata = pub.group_metadata
        for r in pub.records:
            txn.send(r.topic, r.value, r.key, r.headers)
        # Else a held-back frame sits below these offsets: keep the transaction open.
        if self.ledger.delivered_in_transaction(pub.offsets):
            self._commit_transaction(txn)

    def _commit_transaction(self, txn: Transactions) -> None:
        txn.commit(self.ledger.transaction_marks(), self._group_metadata)
        self.ledger.transaction_committed()
