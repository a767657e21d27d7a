"""A three-broker cluster loses a partition leader mid-stream (SIGKILL) and loses no frame.

The cluster is the embedded one (`framebus kafka start --brokers 3`): three combined
broker + controller nodes, topics with 3 replicas and `min.insync.replicas` 2. Both services run
as real processes against all three brokers; the broker leading the busiest partitions of one
topic is killed without a controlled shutdown and started again after OUTAGE_S.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.telemetry.watchdog import EXIT_STALLED
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from framebus_tools.localcluster import LocalCluster
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import (
    Service,
    StreamOutcome,
    assert_every_frame_recorded,
    camera_decoder_env,
    cluster_metadata,
    decoder_summary,
    detections_of,
    duplicates_by_partition,
    service_env,
    stream_outcome,
    under_replicated,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.slow]

OUTAGE_S = float(os.environ.get("FRAMEBUS_CLUSTER_OUTAGE_S", "10"))
# librdkafka's default (CRC32) partitioner puts all three keys on partition 0 of each topic, so
# the leader killed carries every camera; `_busiest_leader` picks it whatever the hash does.
CAMERAS = ("cam-a", "cam-b", "cam-c")
PARTITIONS = 2
MAX_BATCH = 4
UNCOMMITTED = 6  # max_uncommitted_frames: what a partition may repeat after a fault


@dataclass(frozen=True)
class Outcome:
    """What a run through a leader's death left behind."""

    stream: StreamOutcome
    victim: int  # broker id killed
    led: list[int]  # partitions of the victim topic it led
    failover_s: float  # kill -> every such partition led by another broker
    watchdog_restarts: int  # inferencer processes the watchdog ended (exit 70), each restarted


@dataclass
class Restarting:
    """The inferencer under a stand-in orchestrator: restarted once if its watchdog ends it.

    librdkafka can hang for good in a transactional call sent to the broker that died (issue
    #5511); the watchdog then exits EXIT_STALLED and the orchestrator starts a new process, whose
    transactional id fences the old one's transaction. Any other exit fails the test.
    """

    start: Callable[[int], Service]
    services: list[Service] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.services.append(self.start(1))

    @property
    def current(self) -> Service:
        """The latest process."""
        return self.services[-1]

    @property
    def restarts(self) -> int:
        """Processes started after the first."""
        return len(self.services) - 1

    def watch(self) -> None:
        """Restart an inferencer its watchdog ended (once); fail on any other exit."""
        code = self.current.proc.poll()
        if code is None:
            return
        assert code == EXIT_STALLED and self.restarts == 0, (
            f"inferencer exited with {code}: {self.current.text()[-3000:]}"
        )
        self.services.append(self.start(len(self.services) + 1))

    def text(self) -> str:
        """Every process's log, oldest first."""
        return "\n".join(s.text() for s in self.services)

    def stop(self, timeout_s: float = 15) -> int | None:
        """Stop the latest process; its exit code."""
        return self.current.stop(timeout_s)


def test_pipeline_when_frames_leader_sigkilled_mid_stream_then_no_frame_lost_and_dups_bounded(
    cluster_kafka: KafkaSettings,
    cluster: LocalCluster,
    small_video: Path,
    square_model_160: Path,
    tmp_path: Path,
) -> None:
    names = _topics("frames-leader")
    run = (small_video, square_model_160, tmp_path)
    out = _stream_through_leader_kill(
        cluster, cluster_kafka, names, names.frames_topic, "at_least_once", *run
    )
    assert_every_frame_recorded(out.stream, CAMERAS)
    # At-least-once repeats only frames delivered but not yet committed (docs/reliability.md).
    dups = duplicates_by_partition(out.stream.records)
    assert all(n <= UNCOMMITTED for n in dups.values()), dups
    print(_report("frames leader, at-least-once", out, dups))


def test_inferencer_exactly_once_when_detections_leader_sigkilled_then_one_record_per_frame(
    cluster_kafka: KafkaSettings,
    cluster: LocalCluster,
    small_video: Path,
    square_model_160: Path,
    tmp_path: Path,
) -> None:
    names = _topics("detections-leader")
    run = (small_video, square_model_160, tmp_path)
    out = _stream_through_leader_kill(
        cluster, cluster_kafka, names, names.detections_topic, "exactly_once", *run
    )
    assert_every_frame_recorded(out.stream, CAMERAS)
    # A read_committed reader: exactly one record per frame.
    keys = Counter((d.camera_id, d.seq) for _, d in out.stream.records)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
    print(_report("detections leader, exactly-once", out, {}))


def _topics(tag: str) -> TopicSettings:
    run = f"cl-{tag}-{time.time_ns() % 10**9}"
    return TopicSettings.with_prefix(run)


def _stream_through_leader_kill(
    cluster: LocalCluster,
    kafka: KafkaSettings,
    names: TopicSettings,
    victim_topic: str,
    mode: str,
    video: Path,
    model: Path,
    tmp_path: Path,
) -> Outcome:
    """Cameras -> decoder -> inferencer; SIGKILL `victim_topic`'s leader, restart it; drain."""
    ensure_topics(
        kafka,
        pipeline_specs(
            names, Sizing(PARTITIONS, PARTITIONS, replication_factor=3), INFERENCE_TOPICS
        ),
    )
    env = service_env(
        kafka,
        names,
        model_path=model,
        delivery=mode,
        transactional_id=f"tx-{names.frames_topic}",
        max_batch=MAX_BATCH,
        max_wait_ms=20,
        max_uncommitted_frames=UNCOMMITTED,
    )
    inferencer = Restarting(lambda n: Service("inferencer", env, tmp_path / f"inferencer-{n}.log"))
    decoder = Service(
        "decoder",
        camera_decoder_env(kafka, names, video, tmp_path, CAMERAS, MODEL_INPUT),
        tmp_path / "dec.log",
    )
    try:
        wait_for(lambda: _recorded(kafka, names, 30) >= 30, 120, "detections before the kill")
        victim, led = _busiest_leader(kafka, victim_topic)
        cluster.node(victim).kill()
        failover_s = wait_for(
            lambda: _leaders_moved(kafka, victim_topic, victim, led), 60, "leaders elected"
        )
        assert decoder.alive(), decoder.text()[-3000:]
        inferencer.watch()
        time.sleep(max(0.0, OUTAGE_S - failover_s))
        cluster.node(victim).start()
        after = _recorded(kafka, names, 10**6)

        def recorded(n: int) -> bool:
            inferencer.watch()
            return _recorded(kafka, names, n) >= n

        wait_for(lambda: recorded(after + 30), 90, "detections after")
        assert decoder.stop(60) == 0, decoder.text()[-3000:]
        counters = decoder_summary(decoder)
        delivered = sum(c["delivered"] for c in counters.values())
        wait_for(lambda: recorded(delivered), 120, "catch-up")
        assert inferencer.stop(60) == 0, inferencer.text()[-3000:]
    except AssertionError as failed:
        logs = f"--- inferencer ---\n{inferencer.text()[-4000:]}\n--- decoder ---\n{decoder.text()[-2000:]}"
        raise AssertionError(f"{failed}\n{logs}") from failed
    finally:
        decoder.stop()
        inferencer.stop()
    # The restarted broker caught up: every partition has its three replicas in sync again.
    wait_for(lambda: not under_replicated(kafka), 120, "restarted broker back in sync")
    return Outcome(
        stream=stream_outcome(kafka, names, counters),
        victim=victim,
        led=led,
        failover_s=failover_s,
        watchdog_restarts=inferencer.restarts,
    )


def _report(what: str, out: Outcome, dups: dict[int, int]) -> str:
    statuses = Counter(d.status.name for _, d in out.stream.records)
    return (
        f"{what}: killed broker {out.victim} (leader of partitions {out.led}), new leaders in "
        f"{out.failover_s:.1f} s; frames={len(out.stream.frames)} records={len(out.stream.records)} "
        f"duplicates={dups} statuses={dict(statuses)} watchdog restarts={out.watchdog_restarts}"
    )


def _recorded(kafka: KafkaSettings, names: TopicSettings, expected: int) -> int:
    """Distinct frames with a committed detections record (reads until `expected` or 5 s)."""
    records = detections_of(kafka, names.detections_topic, expected, timeout_s=5, settle_s=0)
    return len({(d.camera_id, d.seq) for _, d in records})


def _busiest_leader(kafka: KafkaSettings, topic: str) -> tuple[int, list[int]]:
    """The broker leading most of `topic`'s partitions that hold records, and those partitions."""
    parts = cluster_metadata(kafka, topic).topics[topic].partitions
    consumer = confluent_kafka.Consumer({**kafka.client_config(), "group.id": "watermarks"})
    try:
        busy = [
            p
            for p in sorted(parts)
            if consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10)[1] > 0
        ]
    finally:
        consumer.close()
    assert busy, f"no records in {topic}"
    leader = Counter(parts[p].leader for p in busy).most_common(1)[0][0]
    return leader, [p for p in busy if parts[p].leader == leader]


def _leaders_moved(kafka: KafkaSettings, topic: str, victim: int, led: list[int]) -> bool:
    parts = cluster_metadata(kafka, topic).topics[topic].partitions
    return all(parts[p].leader not in (victim, -1) for p in led)
