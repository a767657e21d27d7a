"""A `bench.track` run's Kafka side: its fresh topics and the tracker process on them.

`RunTopics` names and creates one run's topics (and gives the tracker its settings or FRAMEBUS_*
variables), `fill` produces the detections as the inferencer does, `tracks_reader` reads tracks
read_committed, and `tracker_process`, `wait_assigned` and `stop_process` start, await and stop
`python -m framebus_tracker`.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.benchkit import delete_topics
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.topology import Sizing, Topic, TopicSettings, pipeline_specs
from framebus_tools.process import ServiceProcess
from framebus_tracker.settings import TrackerSettings


@dataclass(frozen=True)
class RunTopics:
    """One run's fresh topics (named by `framebus.topology`), group and transactional id."""

    names: TopicSettings
    group: str

    @property
    def detections(self) -> str:
        """The detections topic the run fills."""
        return self.names.detections_topic

    @property
    def tracks(self) -> str:
        """The tracks topic the run reads."""
        return self.names.tracks_topic

    @classmethod
    def fresh(cls, kafka: KafkaSettings, partitions: int) -> RunTopics:
        """New uuid names; the detections, tracks, changelog and dead-letter topics created."""
        run = f"bench-track-{uuid.uuid4().hex[:10]}"
        names = TopicSettings.with_prefix(run)
        # The tracks topic too, so that its reader is subscribed before the tracker starts.
        sizing = Sizing(detections_partitions=partitions, replication_factor=1)
        ensure_topics(kafka, pipeline_specs(names, sizing, TRACKER_TOPICS))
        return cls(names, run)

    def delete(self, kafka: KafkaSettings) -> None:
        """Drop the run's topics."""
        delete_topics(kafka, self.names)

    def settings(self, kafka: KafkaSettings, stop_after_idle_s: float) -> TrackerSettings:
        """The tracker's settings for these topics."""
        return TrackerSettings(
            kafka=kafka,
            topics=self.names,
            tracker_group=self.group,
            transactional_id=self.group,
            stop_after_idle_s=stop_after_idle_s,
        )

    def env(self, kafka: KafkaSettings, stop_after_idle_s: float) -> dict[str, str]:
        """The same settings as FRAMEBUS_* variables for `python -m framebus_tracker`."""
        return {
            "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            **self.names.env(),
            "FRAMEBUS_TRACKER_GROUP": self.group,
            "FRAMEBUS_TRANSACTIONAL_ID": self.group,
            "FRAMEBUS_STOP_AFTER_IDLE_S": str(stop_after_idle_s),
            "FRAMEBUS_LOG_LEVEL": "info",
        }


# What the tracker reads and writes, created before it starts.
TRACKER_TOPICS = (Topic.DETECTIONS, Topic.TRACKS, Topic.TRACKER_CHANGELOG, Topic.DEADLETTER)


def fill(kafka: KafkaSettings, topic: str, values: list[tuple[str, bytes]]) -> None:
    """Produce the encoded detections, keyed by camera, as the inferencer does."""
    with Producer(kafka) as producer:
        for camera, value in values:
            producer.produce(topic, value, key=camera, block_s=30.0)
        if producer.flush(60):
            raise RuntimeError(f"filling {topic}: records undelivered after 60 s")


def tracks_reader(kafka: KafkaSettings, topic: str) -> Any:
    """A read_committed consumer of `topic` from the beginning, in a group of its own."""
    client = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.min.bytes": 1,
        }
    )
    client.subscribe([topic])
    return client


def tracker_process(
    topics: RunTopics, kafka: KafkaSettings, log: Path, stop_after_idle_s: float
) -> ServiceProcess:
    """`framebus track` on the run's topics, its output in `log`.

    The idle time counts from its start, and restoring the states on assignment counts: give
    it seconds (0: until SIGTERM).
    """
    log.unlink(missing_ok=True)
    return ServiceProcess("track", topics.env(kafka, stop_after_idle_s), log)


def stop_process(proc: ServiceProcess, log: Path, wait_s: float = 20) -> None:
    """Wait `wait_s` for the tracker to idle out, then SIGTERM it; raise on a failed exit."""
    try:
        code = proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        code = proc.stop(30)
    if code:
        raise RuntimeError(f"tracker exited with {code}; log {log}:\n{log.read_text()[-3000:]}")


def wait_assigned(proc: ServiceProcess, log: Path, timeout_s: float = 60) -> None:
    """Until the tracker logs its partitions assigned (so no record waits for its start-up)."""
    deadline = time.monotonic() + timeout_s
    while "assigned" not in log.read_text():
        if proc.exit_code() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"tracker not assigned; log {log}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
