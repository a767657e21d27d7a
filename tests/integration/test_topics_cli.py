"""`framebus topics create` against the real broker."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from framebus.kafka.changelog import partition_count
from framebus.kafka.settings import KafkaSettings
from framebus_tools.cli import main

pytestmark = pytest.mark.integration


def test_topics_create_when_tracker_then_tracks_and_compacted_changelog_fit_detections(
    kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = uuid.uuid4().hex[:10]
    monkeypatch.setenv("FRAMEBUS_TRACKS_TOPIC", f"t-{run}.tracks")
    monkeypatch.setenv("FRAMEBUS_TRACKER_CHANGELOG_TOPIC", f"t-{run}.changelog")
    code = main(
        [
            "topics",
            "create",
            "--tracker",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--frames-partitions",
            "2",
            "--detections-partitions",
            "5",
            "--frames-topic",
            f"t-{run}.frames",
            "--detections-topic",
            f"t-{run}.detections",
            "--deadletter-topic",
            f"t-{run}.deadletter",
        ]
    )
    assert code == 0
    assert partition_count(kafka, f"t-{run}.tracks") == 5
    assert partition_count(kafka, f"t-{run}.changelog") == 5
    resource = ConfigResource("topic", f"t-{run}.changelog")
    admin = AdminClient(kafka.client_config())
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
