"""One camera's records of a camera-keyed topic (video, frames), read from a time.

A `framebus.kafka.reader.Reader` that assigns the camera's partition (`camera_partition`),
starts at the first record at or after a Kafka timestamp (`offsets_for_times`), and hands out the
camera's record values; when it has read all there is it says so (`IDLE`) at once and on every
empty poll after, so its caller can decide, by the clock, whether to wait for more.

One consumer serves every alert (assign, read, unassign). Its idle fetches are short
(`FETCH_WAIT_MS`): a broker answers one request per connection at a time, so a fetch waiting
at a partition's end holds up the next offset or metadata request, and the end itself is seen
only when the fetch returns. A transient broker error (a broker away, a leader moving) is asked
again with a bounded backoff (`framebus.kafka.retry`); only once the budget is spent does a read
fail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

import confluent_kafka

from framebus.errors import KafkaError
from framebus.kafka.client import librdkafka_error
from framebus.kafka.reader import Reader, TopicMissingError
from framebus.kafka.retry import RetryPolicy, retry_transient
from framebus.kafka.settings import KafkaSettings
from framebus.topology import camera_partition

log = logging.getLogger(__name__)

POLL_S = 0.2
REQUEST_TIMEOUT_S = 10.0
EARLIEST_READ_S = 5.0  # how long finding a partition's oldest record may take
FETCH_WAIT_MS = 20  # librdkafka's default is 500: see the module's docstring
MAX_POLL_RECORDS = 256
DEFAULT_RETRY = RetryPolicy(budget_s=30.0)  # the service passes `read_retry_s`


class Idle:
    """Everything written so far has been read."""


IDLE: Final = Idle()


class CameraRecords(Protocol):
    """What the clip maker reads through: a `CameraReader`, or a stub in unit tests."""

    def partition_of(self, topic: str, camera_id: str) -> int | None:
        """The camera's partition of `topic`; None when the topic does not exist."""
        ...

    def earliest_ms(self, topic: str, partition: int) -> int | None:
        """Kafka timestamp of the partition's oldest retained record; None when it is empty."""
        ...

    def values(
        self, topic: str, partition: int, key: str | None, from_ms: int, deadline: float
    ) -> Iterator[tuple[bytes, int] | Idle]:
        """(value, Kafka timestamp ms) of `key`'s records from `from_ms` on; IDLE at the end."""
        ...


def _reader_config(factory: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    # The end of a partition is an event: how a reader knows it has read all there is.
    return lambda config: factory(
        {**config, "enable.partition.eof": True, "fetch.wait.max.ms": FETCH_WAIT_MS}
    )


def _ignore(_exc: KafkaError) -> None:
    """The default `on_retry`: nothing to count."""


class CameraReader(Reader):
    """Reads one camera's records at a time, outside any group; reused for every alert.

    `retry` bounds how long a transient broker error is asked again; each is told to `on_retry`.
    `request_timeout_s` bounds each metadata or offset request.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        retry: RetryPolicy = DEFAULT_RETRY,
        on_retry: Callable[[KafkaError], None] = _ignore,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        factory: Callable[[dict[str, Any]], Any] = confluent_kafka.Consumer,
    ) -> None:
        super().__init__(kafka, read_committed=True, factory=_reader_config(factory))
        self._retry = retry
        self._on_retry = on_retry
        self._timeout_s = request_timeout_s

    def partition_of(self, topic: str, camera_id: str) -> int | None:
        """The camera's partition of `topic`; None when the topic does not exist."""
        try:
            count = len(self._retried(lambda: self.partitions(topic, self._timeout_s)))
        except TopicMissingError:
            return None
        return camera_partition(camera_id, count)

    def earliest_ms(self, topic: str, partition: int) -> int | None:
        """Kafka timestamp of the partition's oldest retained record; None when it is empty."""
        deadline = time.monotonic() + EARLIEST_READ_S
        for item in self.values(topic, partition, None, 0, deadline):
            return None if isinstance(item, Idle) else item[1]
        return None

    def values(
        self, topic: str, partition: int, key: str | None, from_ms: int, deadline: float
    ) -> Iterator[tuple[bytes, int] | Idle]:
        """(value, Kafka timestamp ms) of `key`'s records (None: every record) from `from_ms` on.

        Yields IDLE once the partition's end is reached and on every empty poll after, and stops
        at the monotonic `deadline`. The caller stops when it has what it needs.
        """
        start = self._start(topic, partition, from_ms)
        while start is None:  # nothing at or after from_ms yet: asked again while the caller waits
            yield IDLE
            if not _pause(deadline):
                return
            start = self._start(topic, partition, from_ms)
        self._raw.assign([confluent_kafka.TopicPartition(topic, partition, start)])
        try:
            yield from self._read(topic, key, deadline)
        finally:
            self._raw.unassign()

    def _read(
        self, topic: str, key: str | None, deadline: float
    ) -> Iterator[tuple[bytes, int] | Idle]:
        wanted = None if key is None else key.encode("utf-8")
        at_end = False
        while (left := deadline - time.monotonic()) > 0:
            for msg in self._poll(min(POLL_S, left)):
                if self._at_end(msg, topic):
                    at_end = True
                    continue
                at_end = False
                if wanted is None or msg.key() == wanted:
                    yield msg.value() or b"", msg.timestamp()[1]
            if at_end:
                yield IDLE

    def _poll(self, timeout_s: float) -> list[Any]:
        """What has arrived: waits up to `timeout_s` for one event, then takes what is there.

        consume(n, t) alone would wait out t whenever fewer than n records are there.
        """
        events: list[Any] = self._raw.consume(1, timeout_s)
        if events:
            events += self._raw.consume(MAX_POLL_RECORDS - 1, 0)
        return events

    def _start(self, topic: str, partition: int, from_ms: int) -> int | None:
        """Offset of the first record at or after `from_ms`; None when there is none yet."""
        asked = confluent_kafka.TopicPartition(topic, partition, from_ms)
        what = f"cannot find {topic}[{partition}]'s offset at {from_ms} ms"
        (found,) = self._retried(lambda: self.offsets_for_times([asked], what, self._timeout_s))
        return int(found.offset) if found.offset >= 0 else None

    def _retried(self, call: Callable[[], Any]) -> Any:
        return retry_transient(call, self._retry, self._on_retry)

    def _at_end(self, msg: Any, topic: str) -> bool:
        err = msg.error()
        if err is None:
            return False
        if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
            return True
        error = librdkafka_error(f"cannot read {topic}", err)
        if err.fatal():
            raise error
        # librdkafka fetches again by itself: counted and logged, as a retried call's error is.
        log.warning("%s (librdkafka fetches again)", error)
        self._on_retry(error)
        return False


def _pause(deadline: float) -> bool:
    """Sleep one poll's time, within `deadline`; False when the deadline has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    time.sleep(min(POLL_S, left))
    return True
