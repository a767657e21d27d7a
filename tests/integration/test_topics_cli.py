"""`framebus topics create` against the real broker."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from framebus.kafka.reader import Reader
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import TopicSpec, ensure_topics, partition_count
from framebus_tools.cli import main

pytestmark = pytest.mark.integration


def test_topics_create_when_every_name_given_then_whole_pipeline_created_under_those_names(
    kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = uuid.uuid4().hex[:10]
    monkeypatch.setenv("FRAMEBUS_ALERTS_TOPIC", f"t-{run}.alarms")  # a variable works too
    names = {
        "frames": f"t-{run}.frames",
        "detections": f"t-{run}.detections",
        "deadletter": f"t-{run}.dlq",
        "tracks": f"t-{run}.tracks",
        "tracker-changelog": f"t-{run}.trk-state",
        "alerts-changelog": f"t-{run}.rule-state",
    }
    flags = [x for kind, name in names.items() for x in (f"--{kind}-topic", name)]
    code = main(
        [
            "topics",
            "create",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--frames-partitions",
            "2",
            "--detections-partitions",
            "5",
            "--alerts-partitions",
            "1",
            *flags,
        ]
    )
    assert code == 0
    want = {
        names["frames"]: 2,
        names["detections"]: 5,
        names["deadletter"]: 1,
        names["tracks"]: 5,
        names["tracker-changelog"]: 5,
        names["alerts-changelog"]: 5,
        f"t-{run}.alarms": 1,
    }
    assert {t: partition_count(kafka, t) for t in want} == want
    admin = AdminClient(kafka.client_config())
    for changelog in (names["tracker-changelog"], names["alerts-changelog"]):
        resource = ConfigResource("topic", changelog)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["cleanup.policy"].value == "compact"


def test_ensure_topics_when_created_then_every_partition_led_for_a_fresh_client_at_once(
    kafka: KafkaSettings,
) -> None:
    # A client asking right after creation was told the topic does not exist (the demo's first
    # run on a just-started broker failed so): ensure_topics returns once brokers serve them.
    # On one broker they mostly do at once; the wait itself is tested in test_kafka_topics.py.
    run = uuid.uuid4().hex[:10]
    specs = [TopicSpec(f"t-{run}.{i}", partitions=8) for i in range(6)]
    assert ensure_topics(kafka, specs) == [s.name for s in specs]
    reader = Reader(kafka)
    try:
        for s in specs:
            assert reader.partitions(s.name, timeout_s=5) == list(range(8))
    finally:
        reader.close()
