"""Reading topics outside any consumer group: from the beginning, a time or the end, to the end.

The tools (the demo, render, loadtest) and the tests read what the services wrote without joining
a group or committing: partitions are assigned by hand. Committed (`read_committed`) records only
by default, since the tracker's and the alerts' outputs are transactional.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import confluent_kafka

from framebus.errors import KafkaError
from framebus.kafka.client import LazyClient, librdkafka_error
from framebus.kafka.protocol import MessageProto, TopicPartition
from framebus.kafka.retry import RetryPolicy, retry_transient
from framebus.kafka.settings import KafkaSettings

BEGINNING = confluent_kafka.OFFSET_BEGINNING
END = confluent_kafka.OFFSET_END
# A just-created topic answers these while it elects its leaders: asked again.
_ELECTING = frozenset({"NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART"})
ELECTION_WAIT_S = 20.0
ELECTION_RETRY_S = 0.5


class TopicMissingError(KafkaError):
    """The topic does not exist."""


class Reader(LazyClient):
    """Reads topics by assigned partitions; works as a context manager."""

    def __init__(
        self,
        settings: KafkaSettings,
        read_committed: bool = True,
        factory: Callable[[dict[str, Any]], Any] = confluent_kafka.Consumer,
    ) -> None:
        self._settings_config = settings.client_config()
        config = {
            **self._settings_config,
            # Never joins: only its own assignments, and nothing is committed.
            "group.id": f"framebus-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
        super().__init__(config, factory)

    def partitions(self, topic: str, timeout_s: float = 10.0) -> list[int]:
        """The topic's partition numbers; TopicMissingError when it does not exist."""
        try:
            meta = self._raw.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except confluent_kafka.KafkaException as exc:
            raise librdkafka_error(f"cannot read the metadata of {topic}", exc.args[0]) from exc
        if meta is None or meta.error is not None or not meta.partitions:
            raise TopicMissingError(f"topic {topic} does not exist", "UNKNOWN_TOPIC_OR_PART")
        return sorted(meta.partitions)

    def end_offsets(self, topic: str, timeout_s: float = 10.0) -> dict[int, int]:
        """Each partition's high watermark (one past its last record) now."""
        out = {}
        for p in self.partitions(topic, timeout_s):
            tp = confluent_kafka.TopicPartition(topic, p)
            out[p] = self._raw.get_watermark_offsets(tp, timeout=timeout_s)[1]
        return out

    def offsets_for_times(self, wanted: list[Any], what: str, timeout_s: float = 10.0) -> list[Any]:
        """Each partition's first offset at or after its time (-1: none yet).

        KafkaError, `what` and librdkafka's reason, when the request or a partition's answer
        fails (a partition whose leader is moving answers with an error, not an offset).
        """
        try:
            found = list(self._raw.offsets_for_times(wanted, timeout=timeout_s))
        except confluent_kafka.KafkaException as exc:
            raise librdkafka_error(what, exc.args[0]) from exc
        failed = next((tp for tp in found if tp.error is not None), None)
        if failed is not None:
            raise librdkafka_error(f"{what} ({failed.topic}[{failed.partition}])", failed.error)
        return found

    def start(self, topics: Sequence[str], at: int = BEGINNING) -> None:
        """Read every partition of `topics` from `at`: BEGINNING, END, or a time in ms.

        From a time, a partition with nothing written since starts at its end.
        """
        positions: list[Any] = []
        for topic in topics:
            if at in (BEGINNING, END):
                positions += [
                    confluent_kafka.TopicPartition(topic, p, at) for p in self.partitions(topic)
                ]
            else:
                positions += self._offsets_for_time(topic, at)
        for tp in positions:
            if tp.offset < 0 and at not in (BEGINNING, END):
                tp.offset = END
        self._raw.assign(positions)

    def poll(self, max_messages: int = 256, timeout_s: float = 0.2) -> list[MessageProto]:
        """What has arrived: waits up to `timeout_s` for one record, then takes what is fetched.

        consume(n, t) alone would hold what arrived until n records or t.
        """
        messages = self._raw.consume(1, timeout_s)
        if messages:
            messages += self._raw.consume(max_messages - 1, 0)
        return [m for m in messages if m.error() is None]

    def read_to_end(self, topic: str, idle_s: float = 5.0) -> Iterator[MessageProto]:
        """Every record of `topic` from its beginning to its end as of this call.

        Gives up on a partition after `idle_s` without a record (a broker away).
        """
        ends = {p: high for p, high in self.end_offsets(topic).items() if high > 0}
        self._raw.assign([confluent_kafka.TopicPartition(topic, p, BEGINNING) for p in ends])
        last = time.monotonic()
        while ends and time.monotonic() - last < idle_s:
            for msg in self.poll(64, 0.5):
                last = time.monotonic()
                yield msg
            # The position, not the last record's offset: on a transactional topic the end is a
            # commit marker, which the consumer steps over but never hands out.
            wanted = [confluent_kafka.TopicPartition(topic, p) for p in ends]
            for tp in self._raw.position(wanted):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]

    def committed(
        self, group: str, partitions: Sequence[TopicPartition], timeout_s: float = 10.0
    ) -> Mapping[TopicPartition, int]:
        """`group`'s committed offsets of these partitions (-1001 where none), without joining."""
        probe = confluent_kafka.Consumer(
            {**self._client_config_of(group), "enable.auto.commit": False}
        )
        try:
            wanted = [confluent_kafka.TopicPartition(t, p) for t, p in partitions]
            got = probe.committed(wanted, timeout_s)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise KafkaError(f"cannot read {group}'s offsets: {err.str()}", err.name()) from exc
        finally:
            probe.close()
        return {(tp.topic, tp.partition): tp.offset for tp in got}

    def close(self) -> None:
        """Release the client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _client_config_of(self, group: str) -> dict[str, Any]:
        return {**self._settings_config, "group.id": group}

    def _offsets_for_time(self, topic: str, at_ms: int) -> list[Any]:
        wanted = [confluent_kafka.TopicPartition(topic, p, at_ms) for p in self.partitions(topic)]
        return retry_transient(
            lambda: self.offsets_for_times(wanted, f"cannot find {topic}'s offsets at {at_ms} ms"),
            RetryPolicy(ELECTION_WAIT_S, ELECTION_RETRY_S, ELECTION_RETRY_S),
            also=_ELECTING,
        )
