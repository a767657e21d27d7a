"""One camera's records of a camera-keyed topic (video, frames), read from a time.

A `framebus.kafka.reader.Reader` that assigns the camera's partition (`camera_partition`),
starts at the first record at or after a Kafka timestamp (`offsets_for_times`), and hands out the
camera's record values; when it has read all there is it says so (`IDLE`) on every empty poll, so
its caller can decide, by the clock, whether to wait for more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

import confluent_kafka

from framebus.errors import KafkaError
from framebus.kafka.reader import Reader, TopicMissingError
from framebus.kafka.settings import KafkaSettings
from framebus.topology import camera_partition

log = logging.getLogger(__name__)

POLL_S = 0.2
METADATA_TIMEOUT_S = 10.0


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


def _with_eof(factory: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    # The end of a partition is an event: how a reader knows it has read all there is.
    return lambda config: factory({**config, "enable.partition.eof": True})


class CameraReader(Reader):
    """Reads one camera's records at a time, outside any group; reused for every alert."""

    def __init__(
        self,
        kafka: KafkaSettings,
        factory: Callable[[dict[str, Any]], Any] = confluent_kafka.Consumer,
    ) -> None:
        super().__init__(kafka, read_committed=True, factory=_with_eof(factory))

    def partition_of(self, topic: str, camera_id: str) -> int | None:
        """The camera's partition of `topic`; None when the topic does not exist."""
        try:
            count = len(self.partitions(topic, METADATA_TIMEOUT_S))
        except TopicMissingError:
            return None
        return camera_partition(camera_id, count)

    def earliest_ms(self, topic: str, partition: int) -> int | None:
        """Kafka timestamp of the partition's oldest retained record; None when it is empty."""
        for item in self.values(topic, partition, None, 0, time.monotonic() + POLL_S * 25):
            return None if isinstance(item, Idle) else item[1]
        return None

    def values(
        self, topic: str, partition: int, key: str | None, from_ms: int, deadline: float
    ) -> Iterator[tuple[bytes, int] | Idle]:
        """(value, Kafka timestamp ms) of `key`'s records (None: every record) from `from_ms` on.

        Yields IDLE on every empty poll once the partition's end is reached, and stops at the
        monotonic `deadline`. The caller stops when it has what it needs.
        """
        wanted = None if key is None else key.encode("utf-8")
        self._raw.assign([self._start(topic, partition, from_ms)])
        at_end = False
        try:
            while time.monotonic() < deadline:
                messages = self._raw.consume(256, POLL_S)
                for msg in messages:
                    if self._at_end(msg, topic):
                        at_end = True
                        continue
                    at_end = False
                    if wanted is None or msg.key() == wanted:
                        yield msg.value() or b"", msg.timestamp()[1]
                if at_end and not messages:
                    yield IDLE
        finally:
            self._raw.unassign()

    def _start(self, topic: str, partition: int, from_ms: int) -> Any:
        asked = confluent_kafka.TopicPartition(topic, partition, from_ms)
        try:
            (found,) = self._raw.offsets_for_times([asked], timeout=METADATA_TIMEOUT_S)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise KafkaError(
                f"cannot find {topic}[{partition}]'s offset at {from_ms} ms: {err.str()}",
                err.name(),
            ) from exc
        # No record at or after the time yet: from the end, for records still to come.
        offset = found.offset if found.offset >= 0 else confluent_kafka.OFFSET_END
        return confluent_kafka.TopicPartition(topic, partition, offset)

    @staticmethod
    def _at_end(msg: Any, topic: str) -> bool:
        err = msg.error()
        if err is None:
            return False
        if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
            return True
        if err.fatal():
            raise KafkaError(f"cannot read {topic}: {err.str()}", err.name())
        log.warning("read error on %s (retried): %s", topic, err.str())
        return False
