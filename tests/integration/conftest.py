"""Integration fixtures: one real Kafka broker per test session, fresh uuid-named topics per test.

The broker is the project's embedded local Kafka (`framebus kafka start`). `.ci/run` starts it
before the tests; when nothing answers, the first test that needs it starts it here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import broker_reachable, ensure_topics
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from framebus_tools.localkafka import LocalKafka
from tests.integration.browser import launch
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
    """Fresh names for every topic of one test; the frames, detections and dead-letter created."""

    def make(frames_partitions: int = 1, detections_partitions: int = 1) -> TopicSettings:
        names = TopicSettings.with_prefix(f"test-{uuid.uuid4().hex[:10]}")
        sizing = Sizing(frames_partitions, detections_partitions, replication_factor=1)
        ensure_topics(kafka, pipeline_specs(names, sizing, INFERENCE_TOPICS))
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


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium context (Debian's chromium, driven by Playwright), closed after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = launch(p, tmp_path / "chromium-profile")
        try:
            yield context
        finally:
            context.close()
