"""Stage 3, the publish thread: deliver each batch's records, then release its offsets.

At-least-once: produce, wait for every acknowledgement, and only then hand the offsets to the
receive thread, which commits them (`pipeline/commit.py`: asynchronously, one commit covering
every hand-off since the last) while this thread goes on delivering. It waits for a commit only
when the commit window is full: no partition may hold more than `max_uncommitted_frames`
delivered records whose commit has not returned, which is what a crash repeats. So the commit
round trip does not pace the batches. Exactly-once: produce inside a transaction that also
carries the consumed offsets. A failed publish raises, so its offsets are never committed.
"""

from __future__ import annotations

import logging
from typing import Any

import confluent_kafka

from framebus.errors import DeliveryError, KafkaError
from framebus.kafka.producer import Producer
from framebus_inferencer.pipeline.shared import Publication, Shared, wall_us
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__package__)

TXN_TIMEOUT_S = 30.0
COMMIT_HANDOFF_S = 2.0
PRODUCER_READY_S = 30.0  # the first detections record would wait this long anyway


class RewindError(KafkaError):
    """A transaction was aborted: results were discarded and consumption must restart."""


class Publisher:
    """Delivers publications in order and hands their offsets on."""

    def __init__(
        self,
        shared: Shared,
        producer: Producer,
        stats: InferencerStats,
        tracing: BatchTracing,
        exactly_once: bool,
    ) -> None:
        self.shared = shared
        self.producer = producer
        self.stats = stats
        self.tracing = tracing
        self.eos = exactly_once
        self._txn_open = False

    def run(self) -> None:
        """Publish until the infer thread ends the queue (committing an open transaction)."""
        sh = self.shared
        if self.eos:
            self.producer.client.init_transactions(TXN_TIMEOUT_S)
        elif not self.producer.wait_ready(PRODUCER_READY_S):
            log.warning("Kafka producer not ready after %.0f s; going on", PRODUCER_READY_S)
        sh.publisher_ready.set()
        while True:
            pub = sh.get(sh.publish_q)
            if pub is None:
                if self._txn_open and not sh.failures:
                    self._commit_transaction()
                sh.health.retire("publish")
                return
            with self.tracing.child(pub.span, "publish"):
                if self.eos:
                    self._publish_transactional(pub)
                else:
                    self._publish_at_least_once(pub)
            self.stats.delivered(pub.offsets, wall_us())
            if pub.span is not None:
                pub.span.end()
            sh.batch_done()

    def _publish_at_least_once(self, pub: Publication) -> None:
        sh = self.shared
        errors: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err.str())

        self._wait_for_window(pub)
        for r in pub.records:
            self.producer.produce(r.topic, r.value, r.key, r.headers, report, block_s=30.0)
        pending = self.producer.flush(30.0)
        while pending and not errors:
            # The broker is away: librdkafka retries until message.timeout.ms (5 min) and then
            # reports each record as failed; until then, wait instead of dying mid-outage.
            log.warning("%d detections records not yet acknowledged; still waiting", pending)
            self.stats.error("delivery_wait")
            sh.beat()
            pending = self.producer.flush(30.0)
        if pending or errors:
            raise DeliveryError(f"{pending} records undelivered; errors: {errors[:3]}")
        with sh.committed:
            sh.tracker.delivered(pub.offsets)
            sh.offsets_to_store.update(sh.tracker.committable())
            sh.tracker.committed()
            sh.window.delivered(pub.offsets)
            sh.handed_off += 1

    def _wait_for_window(self, pub: Publication) -> None:
        """Before producing: wait while this batch would overfill a partition's commit window.

        Every hand-off so far being committed also ends the wait: then what holds the window
        is a frame held back below the delivered ones, which only a later batch delivers.
        """
        sh = self.shared
        with sh.committed:
            if sh.window.allows(pub.offsets):
                return
            self.stats.commit_window_wait()
            sh.window_waiting = True
            sh.committed.wait_for(
                lambda: (
                    sh.window.allows(pub.offsets)
                    or sh.committed_upto >= sh.handed_off
                    or not sh.receiving
                    or bool(sh.failures)
                ),
                COMMIT_HANDOFF_S,
            )
            sh.window_waiting = False

    def _publish_transactional(self, pub: Publication) -> None:
        sh = self.shared
        client = self.producer.client
        try:
            if not self._txn_open:
                client.begin_transaction()
                self._txn_open = True
            for r in pub.records:
                self.producer.produce(r.topic, r.value, r.key, r.headers, None, block_s=30.0)
            with sh.tracker_lock:
                sh.tracker.delivered(pub.offsets)
                ready = sh.tracker.contiguous()
            if ready:  # else a held-back frame sits below these offsets: keep the txn open
                self._commit_transaction()
        except confluent_kafka.KafkaException as exc:
            self._abort(exc)

    def _commit_transaction(self) -> None:
        sh = self.shared
        client = self.producer.client
        try:
            with sh.tracker_lock:
                marks = sh.tracker.committable()
            tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
            if tps:
                client.send_offsets_to_transaction(tps, sh.group_metadata, TXN_TIMEOUT_S)
            client.commit_transaction(TXN_TIMEOUT_S)
            self._txn_open = False
            with sh.tracker_lock:
                sh.tracker.committed()
        except confluent_kafka.KafkaException as exc:
            self._abort(exc)

    def _abort(self, exc: confluent_kafka.KafkaException) -> None:
        err = exc.args[0]
        self._txn_open = False
        if err.txn_requires_abort():
            self.producer.client.abort_transaction(TXN_TIMEOUT_S)
            raise RewindError(f"transaction aborted: {err.str()}", err.name()) from exc
        raise KafkaError(f"transaction failed: {err.str()}", err.name()) from exc
