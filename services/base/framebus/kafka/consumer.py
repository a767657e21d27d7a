"""A thin consumer wrapper and the small message protocol the services depend on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import confluent_kafka

from framebus.errors import KafkaError
from framebus.kafka.client import LazyClient
from framebus.kafka.protocol import (
    CallWatch,
    CommitResult,
    Marks,
    MessageProto,
    TopicPartition,
    unwatched,
)
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 16 * 1024 * 1024
FETCH_QUEUE_BACKOFF_MS = 20
# librdkafka gives a synchronous commit and close() no timeout: the watchdog gives them this.
BLOCKING_CALL_BUDGET_S = 60.0


class Consumer(LazyClient):
    """Consumes with manual offset storage: nothing is committed before the caller says so."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        overrides: Mapping[str, Any] | None = None,
        factory: Callable[[dict[str, Any]], Any] = confluent_kafka.Consumer,
        watch: CallWatch = unwatched,
    ) -> None:
        self._watch = watch
        config: dict[str, Any] = {
            **settings.client_config(),
            "group.id": group_id,
            "enable.auto.commit": True,
            # Offsets are stored by the service only after the results are delivered.
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            # Each fetch response lands in one buffer of up to fetch.max.bytes. Above glibc's
            # 32 MiB mmap ceiling every response is freshly mapped memory for the kernel to
            # zero; below it the buffers are reused from the heap, at a fraction of the page
            # faults and CPU (docs/benchmarks.md). A record larger than the limits still comes
            # whole.
            "max.partition.fetch.bytes": MAX_RECORD_BYTES,
            "fetch.max.bytes": FETCH_MAX_BYTES,
            # A full prefetch queue (queued.max.messages.kbytes, some 50 frames) postpones
            # the partition's next fetch by this long; librdkafka's 1 s default left the
            # pipeline idle for up to a second after each burst of large frames.
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            # Latency first: the broker answers a fetch as soon as one byte is there. Raising
            # fetch.min.bytes trades latency for fewer requests; fetch.wait.max.ms (500) only
            # bounds an idle fetch, so lowering it buys nothing but idle requests.
            "fetch.min.bytes": 1,
            "isolation.level": "read_committed",
            # Served inside consume() on the consuming thread, like every consumer callback.
            "on_commit": self._on_commit,
            **(overrides or {}),
        }
        super().__init__(config, factory)
        # Told each commit's result; asynchronous commits (and the auto-commit) report only here.
        self.commit_listener: Callable[[CommitResult], None] | None = None

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        if self.commit_listener is None:
            return
        if err is not None and err.code() == confluent_kafka.KafkaError._NO_OFFSET:
            return  # an auto-commit with nothing stored
        committed = {
            (p.topic, p.partition): p.offset
            for p in partitions
            if p.error is None and p.offset >= 0
        }
        self.commit_listener(CommitResult(committed, None if err is None else err.str()))

    def subscribe(self, topics: Sequence[str], **callbacks: Any) -> None:
        """Subscribe to topics (callbacks: on_assign, on_revoke, on_lost)."""
        self._raw.subscribe(list(topics), **callbacks)

    def subscribe_at_end(
        self, topics: Sequence[str], on_assigned: Callable[[list[TopicPartition]], None]
    ) -> None:
        """Subscribe so that every assigned partition starts at its end as of the assignment.

        For live viewers. `auto.offset.reset=latest` resolves the end only once fetching starts,
        a moment after the assignment, so a record produced in between would be skipped; here
        the end is read in the assignment callback (inside `consume()`), and a record produced
        after `on_assigned` returns is always read. Needs the cooperative assignor (the default).
        """

        def assign(consumer: Any, partitions: list[Any]) -> None:
            for tp in partitions:
                try:
                    _low, tp.offset = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                except confluent_kafka.KafkaException as exc:
                    log.warning("cannot read the end of %s: %s", tp, exc.args[0].str())
                    tp.offset = confluent_kafka.OFFSET_END
            consumer.incremental_assign(partitions)
            on_assigned([(tp.topic, tp.partition) for tp in partitions])

        self._raw.subscribe(list(topics), on_assign=assign)

    def consume(self, max_messages: int, timeout_s: float) -> list[MessageProto]:
        """Up to `max_messages` messages; consumer-level errors are raised, not returned."""
        messages: list[MessageProto] = self._raw.consume(max_messages, timeout_s)
        good: list[MessageProto] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            elif err.fatal():
                raise KafkaError(f"fatal consumer error: {err.str()}", err.name())
            else:
                log.warning("consumer error (will retry): %s", err.str())
        return good

    def store_offsets(self, messages: Sequence[MessageProto]) -> None:
        """Mark messages done; the auto-commit then commits them."""
        for msg in messages:
            self._raw.store_offsets(message=msg)

    def commit(self, marks: Marks, asynchronous: bool) -> None:
        """Store `marks` (so `close()` commits them too) and commit them.

        Synchronous: returns once the broker answered and reports to the commit listener too.
        Asynchronous: returns at once; the result reaches the commit listener inside a later
        `consume()`. Raises KafkaError when the commit cannot be made (e.g. a revoked partition).
        """
        tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
        try:
            self._raw.store_offsets(offsets=tps)
            if asynchronous:
                self._raw.commit(offsets=tps, asynchronous=True)
            else:
                with self._watch("consumer.commit", BLOCKING_CALL_BUDGET_S):
                    self._raw.commit(offsets=tps, asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise KafkaError(f"cannot commit offsets {marks}: {err.str()}", err.name()) from exc

    def pause_assigned(self) -> None:
        """Stop fetching from every assigned partition; consume() still serves the group.

        librdkafka discards what it prefetched for them and, on `resume_assigned`, fetches again
        from the position after the last record consume() returned, so nothing is skipped.
        """
        self._pause(pause=True)

    def resume_assigned(self) -> None:
        """Fetch again from every assigned partition."""
        self._pause(pause=False)

    def _pause(self, pause: bool) -> None:
        try:
            assigned = self._raw.assignment()
            if assigned:
                (self._raw.pause if pause else self._raw.resume)(assigned)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            what = "pause" if pause else "resume"
            raise KafkaError(
                f"cannot {what} the assigned partitions: {err.str()}", err.name()
            ) from exc

    def group_metadata(self) -> Any:
        """The group's metadata, which a transaction needs to commit this consumer's offsets."""
        return self._raw.consumer_group_metadata()

    def positions(self) -> list[tuple[TopicPartition, int, int]]:
        """(partition, high watermark, position) of each assigned partition that has both.

        The high watermarks are the ones the last fetches brought, so this asks the broker
        nothing. Raises KafkaError when they cannot be read.
        """
        try:
            assigned = self._raw.assignment()
            out = []
            for tp in self._raw.position(assigned) if assigned else []:
                _low, high = self._raw.get_watermark_offsets(tp, cached=True)
                if high >= 0 and tp.offset >= 0:
                    out.append(((tp.topic, tp.partition), high, tp.offset))
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise KafkaError(f"cannot read positions: {err.str()}", err.name()) from exc
        return out

    def close(self) -> None:
        """Commit stored offsets and leave the group."""
        if self._client is not None:
            with self._watch("consumer.close", BLOCKING_CALL_BUDGET_S):
                self._client.close()
            self._client = None
