"""The producer wrapper's close: flush within a time limit, report what is left, free the client."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from tests.integration.conftest import TopicFactory
from tests.integration.rtsp import free_port

pytestmark = pytest.mark.integration


def threads_now() -> int:
    """Threads of this process, librdkafka's included (Python's threading does not see those)."""
    return len(os.listdir("/proc/self/task"))


def settle_to(count: int, timeout_s: float = 5.0) -> int:
    """The thread count once it falls to `count` or below, or as it is after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while threads_now() > count and time.monotonic() < deadline:
        time.sleep(0.05)
    return threads_now()


def test_producer_close_when_delivered_then_nothing_lost_and_client_threads_end(
    kafka: KafkaSettings, topics: TopicFactory
) -> None:
    names = topics()
    before = threads_now()
    reports: list[Any] = []
    producer = Producer(kafka)
    producer.produce(names.frames_topic, b"x", "cam", on_delivery=lambda e, _m: reports.append(e))
    assert threads_now() > before  # librdkafka's own threads run while the client lives
    assert producer.close(30.0) == 0
    assert reports == [None]
    assert settle_to(before) <= before  # other tests' clients may end meanwhile, never add


def test_producer_close_when_no_broker_answers_then_undelivered_reported_failed_and_freed() -> None:
    nowhere = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    before = threads_now()
    reports: list[Any] = []
    producer = Producer(nowhere)
    for _ in range(3):
        producer.produce("t", b"x", "cam", on_delivery=lambda e, _m: reports.append(e))
    started = time.monotonic()
    assert producer.close(0.5) == 3
    assert time.monotonic() - started < 5.0  # the 5-minute message timeout is not waited out
    assert len(reports) == 3 and all(e is not None for e in reports)
    # A client left alive would try to reconnect to that port every second, for ever.
    assert settle_to(before) <= before  # other tests' clients may end meanwhile, never add
