"""Integration fixtures: one real Kafka broker per test session, fresh uuid-named topics per test.

The broker is the project's embedded local Kafka (`framebus kafka start`). `.ci/run` starts it
before the tests; when nothing answers, the first test that needs it starts it here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import broker_reachable, ensure_topics, framebus_topics
from framebus_tools.localkafka import LocalKafka
from tests.integration.liveserver import LiveLauncher
from tests.integration.rtsp import rtsp_available

TEST_KAFKA_PORT = int(os.environ.get("FRAMEBUS_TEST_KAFKA_PORT", "29092"))


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaSettings]:
    """Settings of the session's real broker (127.0.0.1:$FRAMEBUS_TEST_KAFKA_PORT)."""
    broker = LocalKafka(port=TEST_KAFKA_PORT)
    settings = KafkaSettings(bootstrap_servers=broker.bootstrap)
    if not broker_reachable(settings, 3.0):
        broker.start()
    yield settings


TopicFactory = Callable[..., TopicSettings]


@pytest.fixture
def topics(kafka: KafkaSettings) -> TopicFactory:
    """Create fresh frames/detections/dead-letter topics for one test and return their names."""

    def make(frames_partitions: int = 1, detections_partitions: int = 1) -> TopicSettings:
        run = uuid.uuid4().hex[:10]
        names = TopicSettings(
            frames_topic=f"test-{run}.frames",
            detections_topic=f"test-{run}.detections",
            deadletter_topic=f"test-{run}.deadletter",
        )
        ensure_topics(kafka, framebus_topics(names, frames_partitions, detections_partitions))
        return names

    return make


@pytest.fixture
def rtsp_server_available() -> None:
    """Fail (never skip) a test whose RTSP server cannot run: `make test` installs it."""
    if not rtsp_available():
        pytest.fail(
            "needs GStreamer's RTSP server for the system Python: run "
            "scripts/install-test-deps.sh as root (apt-get install $(cat scripts/system-packages.txt))"
        )


@pytest.fixture
def launch_live(kafka: KafkaSettings) -> Iterator[LiveLauncher]:
    """Starts `framebus live` on a test's topics; every one is stopped when the test ends."""
    launcher = LiveLauncher(kafka)
    yield launcher
    launcher.stop_all()
