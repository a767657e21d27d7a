"""The loop of a stateful, exactly-once stream processor: consume, process, commit atomically.

A processor (the tracker, the alerts engine) turns each record of one source topic into output
records and keeps state per key (a camera). Per batch, in one Kafka transaction: the outputs, the
newest state of every key the batch touched (to the changelog, `framebus.kafka.changelog`), any dead
letters, and the batch's consumer offsets. A crash aborts the open transaction; the restarted
instance restores the states from the changelog before it processes a record and resumes at the
committed offsets, and since processing is deterministic its outputs equal those of a run without
the crash. Readers of the output topics use `isolation.level=read_committed`.

How a transaction is begun, committed, aborted and rewound is `framebus.kafka.transactions`'s
(the same engine as the inferencer's): failed calls are retried, aborted and rewound, or fatal,
by kind. Every call that may block is watched (`watch`, the service's `Health.call`), so a call
librdkafka never returns from ends the process through the service's watchdog instead of
stalling it.

Keys are owned per source partition: when a partition is revoked its keys' states are dropped; when
one is assigned its keys' states are restored first. A processor without state (no changelog topic,
`framebus clips`) gets the same loop: its outputs, dead letters and offsets commit together.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from framebus.errors import CodecError, StateError
from framebus.kafka.changelog import ChangelogReader, encode_state
from framebus.kafka.consumer import Consumer
from framebus.kafka.deadletter import dead_letter_headers
from framebus.kafka.producer import Producer
from framebus.kafka.protocol import CallWatch, Marks, MessageProto, unwatched
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.transactions import Transactions, rewinding

log = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
STAGE_TIMEOUT_S = 60.0  # the services' `stage_timeout_s` default
# A crashed instance's open transaction holds back read_committed readers until the broker aborts
# it; a restarted instance with the same transactional.id aborts it at once.
TRANSACTION_TIMEOUT_MS = 10_000
# A member that vanished (SIGKILL) keeps its partitions this long before the group moves them.
SESSION_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class Output:
    """A record to publish in the batch's transaction."""

    topic: str
    key: str
    value: bytes
    headers: Headers = field(default_factory=list)
    made_from: object = None  # handed back to on_committed, so it need not decode `value`


OnCommitted = Callable[[Sequence[Output]], None]


@dataclass(frozen=True)
class Processed:
    """What one source record did: the state key it changed (None: none) and its outputs."""

    key: str | None
    outputs: Sequence[Output] = ()


class KeyedProcessor(Protocol):
    """Deterministic per-record logic with a JSON-able state per key."""

    def process(self, msg: MessageProto) -> Processed:
        """Handle one record; raise CodecError for one that cannot be decoded."""
        ...

    def snapshot(self, key: str) -> Mapping[str, Any]:
        """The key's whole state, JSON-able."""
        ...

    def restore(self, key: str, state: Mapping[str, Any]) -> None:
        """Take a state `snapshot` returned (possibly by another instance); StateError if not."""
        ...

    def forget(self, key: str) -> None:
        """Drop the key's state (its partition went to another instance)."""
        ...


@dataclass(frozen=True)
class StatefulConfig:
    """Where a stateful processor reads, writes its state and dead letters, and as whom."""

    service: str  # named in dead-letter headers and logs
    group: str
    source_topic: str
    changelog_topic: str | None  # None: a processor without state (`framebus clips`)
    deadletter_topic: str
    transactional_id: str
    max_batch: int = 500
    poll_s: float = 0.05  # a batch closes after this long, so an idle camera waits no longer
    stop_after_idle_s: float = 0.0
    stage_timeout_s: float = STAGE_TIMEOUT_S  # transactional calls time out at half


@dataclass
class StatefulStats:
    """What the loop did; read by the services' metrics."""

    records: int = 0
    outputs: int = 0
    dead_letters: int = 0
    transactions: int = 0
    restored_keys: int = 0
    restore_failures: int = 0
    restore_s: float = 0.0
    assigned: set[int] = field(default_factory=set)
    ready: bool = False


class StatefulRunner:
    """Runs a KeyedProcessor over its source topic until stopped."""

    def __init__(
        self,
        kafka: KafkaSettings,
        config: StatefulConfig,
        processor: KeyedProcessor,
        stats: StatefulStats | None = None,
        on_committed: OnCommitted | None = None,
        heartbeat: Callable[[], None] | None = None,
        watch: CallWatch = unwatched,
    ) -> None:
        self.kafka = kafka
        self._watch = watch
        self.config = config
        self.processor = processor
        self.stats = stats or StatefulStats()
        self._on_committed = on_committed
        self._heartbeat = heartbeat
        self._owned: dict[int, set[str]] = {}  # source partition -> keys whose state is held

    def run(self, stop: threading.Event) -> None:
        """Consume, process and commit until `stop` is set or the source stays idle.

        A failed transaction is aborted and the loop starts over with fresh clients
        (`framebus.kafka.transactions.rewinding`): the group's committed offsets and the
        changelog's committed states are where it resumes, so nothing is lost or doubled.
        RewindError once MAX_REWINDS attempts in a row failed; KafkaError when no fresh producer
        can help (refused, or fenced twice within a minute: another instance holds the id).
        """
        rewinding(lambda: self._run_once(stop), stop, on_rewind=lambda _exc: self._forget_all())

    def _forget_all(self) -> None:
        # The states the aborted transaction changed are not the committed ones: restored anew.
        for keys in self._owned.values():
            for key in keys:
                self.processor.forget(key)
        self._owned.clear()
        self.stats.assigned.clear()
        self.stats.ready = False

    def _run_once(self, stop: threading.Event) -> None:
        c = self.config
        reader = ChangelogReader(self.kafka, c.changelog_topic) if c.changelog_topic else None
        producer = Producer(
            self.kafka,
            {
                "transactional.id": c.transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            },
            watch=self._watch,
        )
        consumer = Consumer(
            self.kafka,
            c.group,
            {"enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS},
            watch=self._watch,
        )
        txn = Transactions(producer, c.stage_timeout_s)
        try:
            # Before joining the group: fences an earlier incarnation and aborts its transaction.
            txn.init()
            consumer.subscribe(
                [c.source_topic],
                on_assign=lambda _c, tps: self._assigned(reader, tps),
                on_revoke=lambda _c, tps: self._revoked(tps),
                on_lost=lambda _c, tps: self._revoked(tps, "lost"),
            )
            self._loop(consumer, txn, stop)
        finally:
            consumer.close()
            producer.close()
            if reader is not None:
                reader.close()

    def _loop(self, consumer: Consumer, txn: Transactions, stop: threading.Event) -> None:
        last_record = time.monotonic()
        while not stop.is_set():
            if self._heartbeat is not None:
                self._heartbeat()
            batch = consumer.consume(self.config.max_batch, self.config.poll_s)
            if not self.stats.ready:
                last_record = time.monotonic()  # idle counts from the first assignment
            if batch:
                self._commit_batch(batch, consumer, txn)
                last_record = time.monotonic()
            elif self.config.stop_after_idle_s and (
                time.monotonic() - last_record > self.config.stop_after_idle_s
            ):
                log.info("no records for %.1f s: exiting", self.config.stop_after_idle_s)
                return

    def _commit_batch(
        self, batch: Sequence[MessageProto], consumer: Consumer, txn: Transactions
    ) -> None:
        """One transaction: the batch's outputs, dead letters, touched states and offsets."""
        c = self.config
        touched: dict[str, tuple[int, int]] = {}  # key -> (source partition, offset)
        published: list[Output] = []
        marks: Marks = {}
        for msg in batch:
            partition, offset = msg.partition() or 0, msg.offset() or 0
            marks[(c.source_topic, partition)] = offset + 1
            self.stats.records += 1
            try:
                done = self.processor.process(msg)
            except CodecError as exc:
                self._dead_letter(txn, msg, str(exc), type(exc).__name__)
                continue
            if done.key is not None:
                touched[done.key] = (partition, offset)
                self._owned.setdefault(partition, set()).add(done.key)
            for out in done.outputs:
                txn.send(out.topic, out.value, out.key, out.headers)
                published.append(out)
        if c.changelog_topic is not None:
            for key, (partition, offset) in touched.items():
                state = encode_state(
                    self.processor.snapshot(key), c.source_topic, partition, offset
                )
                txn.send(c.changelog_topic, state, key, partition=partition)
        txn.commit(marks, consumer.group_metadata())
        self.stats.transactions += 1
        self.stats.outputs += len(published)
        if self._on_committed is not None and published:
            self._on_committed(published)

    def _dead_letter(
        self, txn: Transactions, msg: MessageProto, reason: str, error_type: str
    ) -> None:
        log.error("dead-lettering a %s record: %s", self.config.source_topic, reason)
        self.stats.dead_letters += 1
        txn.send(
            self.config.deadletter_topic,
            msg.value() or b"",
            key=msg.key(),
            headers=dead_letter_headers(msg, reason, error_type, self.config.service),
        )

    def _assigned(self, reader: ChangelogReader | None, tps: Sequence[Any]) -> None:
        partitions = [tp.partition for tp in tps]
        started = time.monotonic()
        undecodable = reader.undecodable if reader else 0
        restored = 0
        stored_states = reader.read(partitions) if reader else {}
        for key, stored in stored_states.items():
            try:
                self.processor.restore(key, stored.state)
            except StateError as exc:
                # Not fatal: the key starts afresh, and the log and a counter say so.
                self.stats.restore_failures += 1
                log.error("cannot restore the state of %s, starting it afresh: %s", key, exc)
                continue
            # Owned by the partition it was read from: the one a revocation names.
            self._owned.setdefault(stored.changelog_partition, set()).add(key)
            restored += 1
        elapsed = time.monotonic() - started
        self.stats.restore_failures += (reader.undecodable if reader else 0) - undecodable
        self.stats.restored_keys += restored
        self.stats.restore_s += elapsed
        self.stats.assigned.update(partitions)
        self.stats.ready = True
        log.info(
            "assigned %s partitions %s; restored %d states in %.2f s",
            self.config.source_topic,
            partitions,
            restored,
            elapsed,
        )

    def _revoked(self, tps: Sequence[Any], how: str = "revoked") -> None:
        for tp in tps:
            for key in self._owned.pop(tp.partition, set()):
                self.processor.forget(key)
            self.stats.assigned.discard(tp.partition)
        log.info("%s %s partitions %s", how, self.config.source_topic, [tp.partition for tp in tps])
