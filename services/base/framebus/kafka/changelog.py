"""Per-key state kept in a compacted changelog topic, as Kafka Streams and quix-streams keep it.

A stateful service (the tracker, the alerts consumer) reads one source topic keyed by camera. After
each batch it writes the latest state of every camera the batch touched to the changelog, keyed by
camera, into the partition with the number of the source partition the camera's records came from,
in the same transaction as its output and its consumer offsets. Compaction keeps the newest state
per camera. When a source partition is assigned, the changelog partition of the same number is
read to its end (committed records only) before any source record is processed.

A changelog value is JSON: `{"v": 1, "source": [topic, partition, offset], "state": {...}}`, where
offset is that of the last source record the state includes. JSON rather than Avro: the state is
private to one service and versioned by the service itself (`state.v`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from framebus.errors import CodecError, KafkaError
from framebus.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

CHANGELOG_VERSION = 1
RESTORE_TIMEOUT_S = 60.0
RESTORE_POLL_S = 0.2


@dataclass(frozen=True)
class StoredState:
    """One key's state as the changelog holds it, with the source record it reflects."""

    key: str
    state: Mapping[str, Any]
    source_topic: str
    source_partition: int
    source_offset: int
    changelog_partition: int = -1  # where it was read


def encode_state(state: Mapping[str, Any], topic: str, partition: int, offset: int) -> bytes:
    """A changelog value; `state` must be JSON-able."""
    record = {"v": CHANGELOG_VERSION, "source": [topic, partition, offset], "state": state}
    return json.dumps(record, separators=(",", ":"), allow_nan=False).encode()


def decode_state(key: str, value: bytes, changelog_partition: int = -1) -> StoredState:
    """Parse a changelog value; CodecError when it is not one this version understands."""
    try:
        record = json.loads(value)
        topic, partition, offset = record["source"]
        if record["v"] != CHANGELOG_VERSION or not isinstance(record["state"], dict):
            raise CodecError(f"changelog value of {key!r} has version {record['v']!r}")
        return StoredState(
            key, record["state"], str(topic), int(partition), int(offset), changelog_partition
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CodecError(f"changelog value of {key!r} is not a state record: {exc}") from exc


class ChangelogReader:
    """Reads changelog partitions to their end; one instance per service, reused per assignment."""

    def __init__(
        self, settings: KafkaSettings, topic: str, timeout_s: float = RESTORE_TIMEOUT_S
    ) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self.undecodable = 0  # values dropped as unreadable, over the reader's life
        self._consumer = confluent_kafka.Consumer(
            {
                **settings.client_config(),
                "group.id": f"{topic}-restore",  # never joins or commits: partitions are assigned
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )

    def read(self, partitions: Iterable[int]) -> dict[str, StoredState]:
        """The newest committed state of every key in these partitions (a tombstone deletes).

        Raises KafkaError when the partitions cannot be read to their end within the timeout
        (processing on a partial state would give other track ids than an uninterrupted run).
        """
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        tps = [
            confluent_kafka.TopicPartition(self.topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in wanted
        ]
        states: dict[str, StoredState] = {}
        remaining = set(wanted)
        self._consumer.assign(tps)
        deadline = time.monotonic() + self.timeout_s
        try:
            while remaining:
                if time.monotonic() > deadline:
                    raise KafkaError(
                        f"restoring {self.topic} partitions {sorted(remaining)} took more than "
                        f"{self.timeout_s:.0f} s",
                        "RESTORE_TIMEOUT",
                    )
                for msg in self._consumer.consume(1000, RESTORE_POLL_S):
                    self._take(msg, states, remaining)
        finally:
            self._consumer.unassign()
        return states

    def _take(self, msg: Any, states: dict[str, StoredState], remaining: set[int]) -> None:
        err = msg.error()
        if err is not None:
            if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                remaining.discard(msg.partition())
                return
            if err.fatal():
                raise KafkaError(f"cannot read {self.topic}: {err.str()}", err.name())
            log.warning("changelog read error (will retry): %s", err.str())
            return
        key = (msg.key() or b"").decode("utf-8", "replace")
        value = msg.value()
        if value is None:
            states.pop(key, None)
            return
        try:
            states[key] = decode_state(key, value, msg.partition())
        except CodecError as exc:
            # An unreadable state is dropped, not fatal: the key starts afresh (and says so).
            self.undecodable += 1
            log.error("ignoring the changelog state of %s: %s", key, exc)
            states.pop(key, None)

    def close(self) -> None:
        """Release the client."""
        self._consumer.close()
