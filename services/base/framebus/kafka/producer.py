"""A thin producer wrapper: owns librdkafka settings, handles a full queue, raises typed errors."""

from __future__ import annotations

import enum
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import confluent_kafka

from framebus.errors import KafkaError
from framebus.kafka.client import LazyClient
from framebus.kafka.protocol import CallWatch, Marks, unwatched
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings

log = logging.getLogger(__name__)
READY_STATS_INTERVAL_MS = 100
REACHABLE_S = 2.0  # how long wait_ready() gives the first broker to answer
# A watched call may run this many times its own timeout before the watchdog calls it stuck.
STALL_FACTOR = 2.0
UNTIMED_CALL_BUDGET_S = 30.0  # calls librdkafka gives no timeout (begin_transaction, close)
TXN_ATTEMPTS = 3  # tries of a transactional call that keeps failing with a retriable error
TXN_RETRY_BACKOFF_S = 0.5

Headers = Sequence[tuple[str, bytes]]
DeliveryCallback = Callable[[Any, Any], None]


class ProducerQueueFullError(KafkaError):
    """The local producer queue stayed full for longer than the caller allowed."""


class TxnErrorKind(enum.Enum):
    """What a failed transactional call asks of the caller (librdkafka's transactional API)."""

    RETRIABLE = "retriable"  # call the same function again
    ABORTABLE = "abortable"  # abort the transaction and rewind to the committed offsets
    FATAL = "fatal"  # this producer can do no more (e.g. fenced): a fresh one must take over


def txn_error_kind(fatal: bool, requires_abort: bool, retriable: bool) -> TxnErrorKind:
    """Classify a librdkafka error flag set; an error with no flag is fatal (nothing says more)."""
    if fatal:
        return TxnErrorKind.FATAL
    if requires_abort:
        return TxnErrorKind.ABORTABLE
    if retriable:
        return TxnErrorKind.RETRIABLE
    return TxnErrorKind.FATAL


class TransactionError(KafkaError):
    """A transactional call failed; its `kind` says whether to abort and rewind, or to exit."""

    def __init__(self, message: str, code: str | None, kind: TxnErrorKind) -> None:
        super().__init__(message, code)
        self.kind = kind

    @property
    def requires_abort(self) -> bool:
        """True when aborting the transaction (and rewinding) recovers from it."""
        return self.kind is TxnErrorKind.ABORTABLE


class Producer(LazyClient):
    """Produces records; created lazily, flushed on exit."""

    def __init__(
        self,
        settings: KafkaSettings,
        overrides: Mapping[str, Any] | None = None,
        factory: Callable[[dict[str, Any]], Any] = confluent_kafka.Producer,
        watch: CallWatch = unwatched,
    ) -> None:
        self._watch = watch
        config: dict[str, Any] = {
            **settings.client_config(),
            # Records up to 8 MiB; the broker and the frames topic are raised to match.
            "message.max.bytes": MAX_RECORD_BYTES + 65536,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Batches of ~1.2 MB frames: let one request carry several frames.
            "batch.size": 4 * 1024 * 1024,
            "queue.buffering.max.kbytes": 256 * 1024,
            **(overrides or {}),
        }
        # An idempotent producer sends nothing until the broker gave it a producer id (~0.5 s,
        # longer on a fresh broker). librdkafka tells that only in its statistics.
        self._ready = threading.Event()
        if config.get("enable.idempotence") and "stats_cb" not in config:
            config["statistics.interval.ms"] = READY_STATS_INTERVAL_MS
            config["stats_cb"] = self._on_stats
        else:
            self._ready.set()
        super().__init__(config, factory)

    def _on_stats(self, raw: str) -> None:
        if self._ready.is_set():
            return
        eos = json.loads(raw).get("eos") or {}
        if eos.get("idemp_state") == "Assigned" or eos.get("producer_id", -1) >= 0:
            self._ready.set()

    def wait_ready(self, timeout_s: float) -> bool:
        """Connect and, when idempotent, wait for the producer id; True when ready in time.

        Services call this before they capture their first frame or take their first batch, so
        no record waits behind the client's start-up.
        """
        deadline = time.monotonic() + timeout_s
        if not self._ready.is_set():
            try:  # no broker answers: do not wait for an id that cannot come
                self._raw.list_topics(timeout=min(timeout_s, REACHABLE_S))
            except confluent_kafka.KafkaException as exc:
                log.warning("no Kafka broker answers: %s", exc.args[0].str())
                return False
        while not self._ready.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._raw.poll(min(remaining, 0.02))  # serves the statistics callback
        return True

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        on_delivery: DeliveryCallback | None = None,
        block_s: float = 0.0,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record; wait up to `block_s` for room when the local queue is full.

        `partition` overrides the key's partition (a changelog follows its source partition).
        `timestamp_ms` is the record's Kafka timestamp (default: now); a video packet's is its
        capture time.
        """
        where: dict[str, int] = {} if partition is None else {"partition": partition}
        if timestamp_ms is not None:
            where["timestamp"] = timestamp_ms
        deadline = time.monotonic() + block_s
        while True:
            try:
                self._raw.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=list(headers or ()),
                    on_delivery=on_delivery,
                    **where,
                )
                break
            except BufferError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ProducerQueueFullError(
                        f"producer queue full while producing to {topic}", "QUEUE_FULL"
                    ) from None
                self._raw.poll(min(remaining, 0.05))
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0]
                raise KafkaError(f"cannot produce to {topic}: {err.str()}", err.name()) from exc
        self._raw.poll(0)

    # The transactional calls: only `framebus.kafka.transactions` makes them, so how a
    # transaction is begun, committed and aborted is decided in that one place.

    def init_transactions(self, timeout_s: float) -> None:
        """Register the transactional id, fencing an earlier instance that used it."""
        self._transactional(
            "init_transactions", timeout_s, TxnErrorKind.FATAL, self._raw.init_transactions
        )

    def begin_transaction(self) -> None:
        """Start a transaction: what is produced from now on is committed or aborted together."""
        self._transactional(
            "begin_transaction", None, TxnErrorKind.FATAL, self._raw.begin_transaction
        )

    def send_offsets_to_transaction(
        self, marks: Marks, group_metadata: Any, timeout_s: float
    ) -> None:
        """Commit these consumer offsets with the open transaction (exactly-once)."""
        tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in marks.items()]
        self._transactional(
            "send_offsets_to_transaction",
            timeout_s,
            TxnErrorKind.ABORTABLE,
            self._raw.send_offsets_to_transaction,
            tps,
            group_metadata,
        )

    def commit_transaction(self, timeout_s: float) -> None:
        """Commit the open transaction (flushing what it produced first)."""
        self._transactional(
            "commit_transaction", timeout_s, TxnErrorKind.ABORTABLE, self._raw.commit_transaction
        )

    def abort_transaction(self, timeout_s: float) -> None:
        """Abort the open transaction: readers never see what it produced."""
        self._transactional(
            "abort_transaction", timeout_s, TxnErrorKind.FATAL, self._raw.abort_transaction
        )

    def _transactional(
        self,
        name: str,
        timeout_s: float | None,
        exhausted: TxnErrorKind,
        call: Callable[..., Any],
        *args: Any,
    ) -> None:
        """Call, retrying a retriable error; `exhausted` is the kind once the tries run out.

        Each try is watched on its own: librdkafka has been seen to block past the timeout.
        """
        timed = () if timeout_s is None else (timeout_s,)
        budget = UNTIMED_CALL_BUDGET_S if timeout_s is None else STALL_FACTOR * timeout_s
        for attempt in range(1, TXN_ATTEMPTS + 1):
            try:
                with self._watch(name, budget):
                    call(*args, *timed)
                return
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0]
                kind = txn_error_kind(
                    bool(err.fatal()), bool(err.txn_requires_abort()), bool(err.retriable())
                )
                if kind is TxnErrorKind.RETRIABLE and attempt < TXN_ATTEMPTS:
                    log.warning("%s failed (try %d, retrying): %s", name, attempt, err.str())
                    time.sleep(TXN_RETRY_BACKOFF_S)
                    continue
                if kind is TxnErrorKind.RETRIABLE:
                    kind = exhausted
                raise TransactionError(f"{name} failed: {err.str()}", err.name(), kind) from exc

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve delivery callbacks."""
        return int(self._raw.poll(timeout_s))

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every queued record's delivery report; return how many are still pending."""
        if self._client is None:
            return 0
        with self._watch("producer.flush", STALL_FACTOR * timeout_s):
            return int(self._client.flush(timeout_s))

    def close(self, timeout_s: float = 30.0) -> int:
        """Flush within `timeout_s`, drop what is left, release the client; return records dropped.

        Without it the client (its broker threads, reconnecting for ever to a broker that went
        away) lives on until the garbage collector finds it: the statistics callback ties it to
        this wrapper in a cycle.
        """
        if self._client is None:
            return 0
        pending = self._flush_to_close(timeout_s)
        if pending:
            log.error("producer closed with %d undelivered records", pending)
            self._client.purge()  # each gets a failed delivery report, served by this flush
            self._flush_to_close(1.0)
        with self._watch("producer.close", UNTIMED_CALL_BUDGET_S):
            self._client = None  # the last reference: librdkafka's handle is destroyed here
        return pending

    def _flush_to_close(self, timeout_s: float) -> int:
        try:
            return self.flush(timeout_s)
        except confluent_kafka.KafkaException as exc:
            # A transactional producer that failed for good refuses to flush: what it holds
            # belongs to a transaction that its successor's init_transactions aborts.
            log.error("closing a producer that failed for good: %s", exc.args[0].str())
            return len(self)

    def __len__(self) -> int:
        return 0 if self._client is None else len(self._client)
