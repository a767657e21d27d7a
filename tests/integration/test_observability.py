"""Observability over real Kafka: readiness follows the broker, metrics follow the frames."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_tools.localkafka import LocalKafka
from framebus_tools.synthetic import MovingSquare, write_square_video

pytestmark = pytest.mark.integration

# Below the ephemeral range (32768+), so no client connection can hold the port.
OWN_BROKER_PORT = 21092


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test server
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except urllib.error.URLError:  # the service's HTTP server is not listening yet
        return 0, {}


def wait_for(predicate: Any, timeout_s: float) -> float:
    """Seconds until predicate() is true; fails the test at the timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"condition not met within {timeout_s} s")


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of this test's own, since the test stops and starts it."""
    broker = LocalKafka(port=OWN_BROKER_PORT, heap="512m")
    broker.stop()
    broker.wipe()
    broker.start()
    yield broker
    broker.stop()
    broker.wipe()


@pytest.mark.slow
def test_decoder_readyz_when_broker_stops_then_not_ready_naming_kafka_and_ready_again(
    own_broker: LocalKafka, tmp_path: Path
) -> None:
    kafka = KafkaSettings(bootstrap_servers=own_broker.bootstrap)
    names = TopicSettings("obs.frames", "obs.detections", "obs.deadletter")
    ensure_topics(
        kafka, pipeline_specs(names, Sizing(1, 1, replication_factor=1), INFERENCE_TOPICS)
    )
    video = write_square_video(
        tmp_path / "small.mp4", MovingSquare(width=320, height=240, side=40, frames=50)
    )
    port = free_port()
    stop = threading.Event()
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        camera_id="cam-obs",
        camera_url=str(video),
        target_fps=2,
        loop=True,
        realtime=True,
        input_width=160,
        input_height=160,
        http_port=port,
    )
    thread = threading.Thread(target=decoder_service.run, args=(settings, stop))
    thread.start()
    readyz = f"http://127.0.0.1:{port}/readyz"
    try:
        wait_for(lambda: get_json(readyz)[0] == 200, 30)
        own_broker.stop()
        took = wait_for(lambda: "kafka" in get_json(readyz)[1].get("reasons", {}), 10)
        code, body = get_json(readyz)
        assert code == 503
        assert own_broker.bootstrap in body["reasons"]["kafka"]
        assert took <= 10
        own_broker.start()
        wait_for(lambda: get_json(readyz)[0] == 200, 30)
        status, health = get_json(f"http://127.0.0.1:{port}/healthz")
        assert status == 200, health
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
