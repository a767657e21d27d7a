"""Waiting for new topics' leaders, on a stub admin client, and for a broker (no broker)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from framebus.errors import KafkaError
from framebus.kafka import topics
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import wait_for_leaders


@dataclass
class Partition:
    leader: int


@dataclass
class TopicMeta:
    partitions: dict[int, Partition]
    error: Any = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta] = field(default_factory=dict)


class StubAdmin:
    """Answers list_topics with the next of its metadata snapshots (the last one repeats)."""

    def __init__(self, *snapshots: dict[str, TopicMeta]) -> None:
        self.snapshots = list(snapshots)
        self.calls = 0

    def list_topics(self, timeout: float) -> Metadata:
        self.calls += 1
        return Metadata(self.snapshots[min(self.calls, len(self.snapshots)) - 1])


def _topic(*leaders: int) -> TopicMeta:
    return TopicMeta({p: Partition(leader) for p, leader in enumerate(leaders)})


def test_wait_for_leaders_when_brokers_learn_of_topics_late_then_returns_once_all_led() -> None:
    admin = StubAdmin(
        {},  # not in the brokers' metadata yet
        {"a": _topic(1, -1), "b": _topic(2, 2)},  # a partition without its leader
        {"a": _topic(1, 3), "b": _topic(2, 2)},
    )
    wait_for_leaders(admin, {"a": 2, "b": 2}, time.monotonic() + 10)
    assert admin.calls == 3


def test_wait_for_leaders_when_partitions_short_then_waits_for_all_of_them() -> None:
    admin = StubAdmin({"a": _topic(1)}, {"a": _topic(1, 1, 1)})
    wait_for_leaders(admin, {"a": 3}, time.monotonic() + 10)
    assert admin.calls == 2


def test_wait_for_leaders_when_never_led_then_returns_at_the_deadline_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = StubAdmin({"a": _topic(-1)})
    with caplog.at_level(logging.WARNING):
        wait_for_leaders(admin, {"a": 1}, time.monotonic() + 0.3)
    assert "new topics without a leader yet: a" in caplog.text
    assert 2 <= admin.calls <= 5


def test_wait_for_broker_when_it_answers_on_the_third_probe_then_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([False, False, True])
    probes: list[float] = []

    def reachable(_kafka: KafkaSettings, timeout_s: float = 5.0) -> bool:
        probes.append(timeout_s)
        return next(answers)

    monkeypatch.setattr(topics, "broker_reachable", reachable)
    topics.wait_for_broker(KafkaSettings(), wait_s=10.0, probe_s=0.5, pause_s=0.01)
    assert probes == [0.5, 0.5, 0.5]


def test_wait_for_broker_when_none_answers_then_it_names_the_servers_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "broker_reachable", lambda _kafka, timeout_s=5.0: False)
    started = time.monotonic()
    with pytest.raises(KafkaError, match=r"no Kafka broker answered at k1:9092 within 0\.2 s"):
        topics.wait_for_broker(
            KafkaSettings(bootstrap_servers="k1:9092"), wait_s=0.2, probe_s=0.01, pause_s=0.05
        )
    assert 0.1 <= time.monotonic() - started < 2.0
