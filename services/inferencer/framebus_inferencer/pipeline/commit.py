"""The receive thread's offset commits, at-least-once: asynchronous, tracked, never pacing batches.

The publish thread hands delivered offsets over in `Shared.offsets_to_store`; only the receive
thread may commit them (confluent-kafka serializes the calls on one client, so a commit from
another thread waits for the consume() running there). Each turn of the receive loop starts one
asynchronous commit of everything handed over since the last, unless one is still in flight; its
result comes back through the consumer's `on_commit` callback, which librdkafka serves inside
the next consume(). A returned commit empties the commit window, which is what lets the publisher
deliver ahead of the commits without a crash repeating more than the window.

While the receive thread waits for room in the infer queue it does not call consume(), so no
result could come back: if the publisher is waiting for the window then, the wait commits
synchronously (a synchronous commit reports on its own queue), or the three threads would wait
on each other. Before partitions are given up and at the end, commits are synchronous too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import confluent_kafka

from framebus.kafka.consumer import Consumer
from framebus_inferencer.pipeline.shared import Shared
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__package__)

RETRY_AFTER_FAILURE_S = 0.5  # a failed commit is retried, but not on every 10 ms turn
Marks = dict[tuple[str, int], int]


class Committer:
    """Commits delivered offsets from the receive thread and tracks what has been committed."""

    def __init__(self, shared: Shared, consumer: Consumer, stats: InferencerStats) -> None:
        self.shared = shared
        self.consumer = consumer
        self.stats = stats
        self._in_flight: tuple[Marks, int] | None = None  # marks, hand-offs they cover
        self._retry_at = 0.0
        consumer.commit_listener = self.on_result

    def commit(self, wait: bool = False) -> None:
        """Commit what the publisher has handed over; `wait`: synchronously, covering all."""
        sh = self.shared
        with sh.committed:
            if not wait and (self._in_flight is not None or time.monotonic() < self._retry_at):
                return  # the next turn's commit covers these too (marks only grow)
            marks, sh.offsets_to_store = sh.offsets_to_store, {}
            if wait and self._in_flight is not None:
                marks = _merged(self._in_flight[0], marks)
            generation = sh.handed_off
            if not marks:
                return
            if not wait:
                self._in_flight = (marks, generation)
        tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
        try:
            self.consumer.client.store_offsets(offsets=tps)
            self.consumer.client.commit(offsets=tps, asynchronous=not wait)
        except confluent_kafka.KafkaException as exc:  # e.g. a partition revoked meanwhile
            log.warning("cannot commit offsets %s: %s", marks, exc)
            self.stats.error("commit")
            with sh.committed:
                self._failed(marks)
            return
        if wait:
            with sh.committed:
                self._returned(marks, generation)

    def while_full(self) -> None:
        """Between tries to put a batch on the full infer queue (no consume() runs meanwhile)."""
        self.commit(wait=self.shared.window_waiting)

    def on_result(self, err: Any, partitions: list[Any]) -> None:
        """The result of a commit, ours (asynchronous) or the auto-commit's, told apart by marks."""
        sh = self.shared
        if err is not None and err.code() == confluent_kafka.KafkaError._NO_OFFSET:
            return  # an auto-commit with nothing stored
        with sh.committed:
            if err is not None:
                log.warning("offset commit failed: %s", err.str())
                self.stats.error("commit")
                if self._in_flight is not None:
                    self._failed(self._in_flight[0])
                return
            done = {
                (p.topic, p.partition): p.offset
                for p in partitions
                if p.error is None and p.offset >= 0
            }
            sh.window.confirmed(done)
            if self._in_flight is not None:
                marks, generation = self._in_flight
                if all(done.get(tp, -1) >= offset for tp, offset in marks.items()):
                    self._returned(marks, generation)
            sh.committed.notify_all()

    def idle(self) -> bool:
        """True when nothing waits to be committed and no commit is in flight."""
        return self._in_flight is None and not self.shared.offsets_to_store

    def _returned(self, marks: Marks, generation: int) -> None:
        sh = self.shared
        sh.window.confirmed(marks)
        sh.committed_upto = max(sh.committed_upto, generation)
        self._in_flight = None
        sh.committed.notify_all()

    def _failed(self, marks: Marks) -> None:
        # Hand the marks back, so that they are retried even if nothing more is delivered.
        sh = self.shared
        sh.offsets_to_store = _merged(marks, sh.offsets_to_store)
        self._in_flight = None
        self._retry_at = time.monotonic() + RETRY_AFTER_FAILURE_S
        sh.committed.notify_all()


def _merged(older: Marks, newer: Marks) -> Marks:
    out = dict(older)
    for tp, offset in newer.items():
        out[tp] = max(out.get(tp, -1), offset)
    return out
