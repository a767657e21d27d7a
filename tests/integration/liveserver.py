"""`framebus live` as a real process for tests, and a WebSocket client that records what it gets."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.topology import Sizing, Topic, TopicSettings, pipeline_specs
from framebus_live.protocol import parse_tile
from framebus_tools.process import free_port
from tests.integration.livefeed import LiveTopics
from tests.reliability.harness import Service, get_json, metric, scrape, service_env, wait_for


def live_topics(kafka: KafkaSettings, names: TopicSettings, partitions: int = 1) -> LiveTopics:
    """The test's frames, detections, tracks and alerts topics (tracks, alerts, clips created here)."""
    sizing = Sizing(detections_partitions=partitions, alerts_partitions=1, replication_factor=1)
    ensure_topics(kafka, pipeline_specs(names, sizing, (Topic.TRACKS, Topic.ALERTS, Topic.CLIPS)))
    return LiveTopics(
        names.frames_topic, names.detections_topic, names.tracks_topic, names.alerts_topic
    )


def http_status(url: str) -> int:
    """The HTTP status of a GET whose body is not JSON; raises when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test server
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


@dataclass
class LiveProcess:
    """A running `framebus live` and its base URL."""

    service: Service
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples in its /metrics; raises when the server does not answer."""
        return metric(scrape(self.port), name, **labels)


def start_live(
    kafka: KafkaSettings, names: TopicSettings, topics: LiveTopics, log: Path, **extra: object
) -> LiveProcess:
    """Start `framebus live` on the test's topics; return once its consumers joined.

    Without a login (auth=off, on 127.0.0.1) unless `extra` says otherwise.
    """
    port = free_port()
    env = service_env(
        kafka, names, http_port=port, http_host="127.0.0.1", **{"auth": "off", **extra}
    )
    live = LiveProcess(Service("live", env, log), port)

    def ready() -> bool:
        assert live.service.alive(), live.service.text()[-3000:]
        status, body = get_json(f"{live.url}/readyz")
        return (
            status == 200
            and body.get("alerts_consumer_assigned") is True
            and body.get("clips_consumer_assigned") is True
        )

    try:
        wait_for(ready, 60, "framebus live ready")
    except AssertionError:
        live.service.stop(5)
        raise
    return live


class LiveLauncher:
    """Starts `framebus live` processes for one test and stops whatever is left at its end."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self.started: list[LiveProcess] = []

    def __call__(
        self, names: TopicSettings, topics: LiveTopics, log: Path, **extra: object
    ) -> LiveProcess:
        live = start_live(self.kafka, names, topics, log, **extra)
        self.started.append(live)
        return live

    def stop_all(self) -> None:
        """SIGTERM (then SIGKILL) every process still running: a failed test leaves none."""
        for live in self.started:
            live.service.stop(5)


@dataclass
class Received:
    """What one page's socket received."""

    texts: list[dict[str, Any]] = field(default_factory=list)
    tiles: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    boxes_before_tile: list[bool] = field(default_factory=list)  # boxes message of same seq first

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [t for t in self.texts if t["type"] == kind]


async def watch(
    url: str, seconds: float, cameras: list[str], headers: dict[str, str] | None = None
) -> Received:
    """Connect to /ws (with `headers`: a session cookie), subscribe to `cameras`, and record
    everything for `seconds`."""
    got = Received()
    last_boxes: dict[str, dict[str, Any]] = {}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{url}/ws", headers=headers) as ws,
    ):
        await ws.send_str(json.dumps({"type": "subscribe", "cameras": cameras}))
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                msg = await ws.receive(timeout=left)
            except TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.TEXT:
                body = json.loads(msg.data)
                got.texts.append(body)
                if body["type"] == "boxes":
                    last_boxes[body["camera"]] = body
            elif msg.type == aiohttp.WSMsgType.BINARY:
                header, jpeg = parse_tile(msg.data)
                got.tiles.append((header, jpeg))
                before = last_boxes.get(header["camera"])
                got.boxes_before_tile.append(before is not None and before["seq"] == header["seq"])
            else:
                break
    return got
