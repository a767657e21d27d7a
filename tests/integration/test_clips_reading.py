"""`framebus clips`' reader against the real broker: one consumer reused for every read, the end
of a partition seen at once, and transient errors (real librdkafka ones) tried again in a budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka
import pytest

from framebus.errors import KafkaError
from framebus.kafka.reader import Reader
from framebus.kafka.retry import RetryPolicy, retry_transient
from framebus.kafka.settings import KafkaSettings
from framebus_clips.reading import IDLE, CameraReader, Idle
from tests.integration.clipsutil import clip_topics
from tests.integration.conftest import TopicFactory

pytestmark = [pytest.mark.integration]

T0_MS = 1_700_000_000_000
# Errors librdkafka gives a request that cannot be answered in time (0 s): before it has a
# connection, and after.
NO_ANSWER = {"_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"}


def produce_stamped(kafka: KafkaSettings, topic: str, records: list[tuple[str, int]]) -> None:
    """(camera, Kafka timestamp ms) records, each valued `<camera>@<timestamp>`."""
    producer = confluent_kafka.Producer(kafka.client_config())
    for camera, stamp in records:
        producer.produce(topic, f"{camera}@{stamp}".encode(), key=camera, timestamp=stamp)
    assert producer.flush(30) == 0


def until_idle(items: Iterator[tuple[bytes, int] | Idle]) -> list[str]:
    """The values read up to the first IDLE."""
    out = []
    for item in items:
        if isinstance(item, Idle):
            return out
        out.append(item[0].decode())
    raise AssertionError(f"the read ended without IDLE after {out}")


def test_camera_reader_when_reused_for_several_reads_then_each_from_its_time_to_an_idle_end(
    kafka: KafkaSettings, topics: TopicFactory
) -> None:
    names = clip_topics(kafka, topics)  # the video topic exists and is empty
    frames = names.frames_topic
    produce_stamped(kafka, frames, [(c, T0_MS + i * 200) for i in range(10) for c in ("a", "b")])
    with CameraReader(kafka) as reader:
        assert reader.partition_of(frames, "a") == 0  # one partition
        assert reader.partition_of("no-such-topic-" + names.frames_topic, "a") is None
        deadline = time.monotonic() + 20
        started = time.monotonic()
        got = until_idle(reader.values(frames, 0, "a", T0_MS + 1000, deadline))
        assert got == [f"a@{T0_MS + i * 200}" for i in range(5, 10)]
        assert until_idle(reader.values(frames, 0, "b", T0_MS, deadline)) == [
            f"b@{T0_MS + i * 200}" for i in range(10)
        ]
        assert reader.earliest_ms(frames, 0) == T0_MS
        video = reader.partition_of(names.video_topic, "a")
        assert video is not None
        assert reader.earliest_ms(names.video_topic, video) is None
        later = reader.values(frames, 0, "a", T0_MS + 10_000, deadline)
        assert next(later) is IDLE  # nothing at or after the time: said at once, unassigned
        later.close()
        # Five reads and three lookups: each end is seen when the broker says so, no wait for it.
        assert time.monotonic() - started < 5.0


def test_camera_reader_when_every_request_times_out_then_retried_for_its_budget_then_fails(
    kafka: KafkaSettings, topics: TopicFactory
) -> None:
    names = topics()
    retried: list[KafkaError] = []
    reader = CameraReader(
        kafka, RetryPolicy(1.0, first_wait_s=0.1), retried.append, request_timeout_s=0.0
    )
    started = time.monotonic()
    with reader, pytest.raises(KafkaError, match="still failing after .* tries in") as raised:
        reader.partition_of(names.frames_topic, "a")
    assert 1.0 <= time.monotonic() - started < 5.0
    assert len(retried) >= 3
    assert {e.code for e in retried} <= NO_ANSWER and raised.value.code in NO_ANSWER


def test_retry_transient_when_a_real_request_times_out_twice_then_the_third_answers(
    kafka: KafkaSettings, topics: TopicFactory
) -> None:
    names = topics()
    produce_stamped(kafka, names.frames_topic, [("a", T0_MS)])
    timeouts, retried = [0.0, 0.0, 10.0], []
    wanted = [confluent_kafka.TopicPartition(names.frames_topic, 0, T0_MS)]
    with Reader(kafka) as reader:
        (found,) = retry_transient(
            lambda: reader.offsets_for_times(wanted, "offsets", timeouts.pop(0)),
            RetryPolicy(10.0, first_wait_s=0.05),
            retried.append,
        )
    assert found.offset == 0
    assert len(retried) == 2 and {e.code for e in retried} <= NO_ANSWER
