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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from framebus.codec import FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.messages import Detections, FrameStatus
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from framebus_tools.localkafka import LocalCluster
from tests.integration.kafkautil import read_topic
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import (
    Service,
    decoder_summary,
    detections_of,
    duplicates_by_partition,
    first_seqs_by_camera,
    service_env,
    unaccounted_decoder_frames,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.slow]

# Brokers on PORT..PORT+2, their controllers on PORT+3..PORT+5.
PORT = int(os.environ.get("FRAMEBUS_TEST_CLUSTER_PORT", "24092"))
OUTAGE_S = float(os.environ.get("FRAMEBUS_CLUSTER_OUTAGE_S", "10"))
# librdkafka's default (CRC32) partitioner puts all three keys on partition 0 of each topic, so
# the leader killed carries every camera; `_busiest_leader` picks it whatever the hash does.
CAMERAS = ("cam-a", "cam-b", "cam-c")
PARTITIONS = 2
MAX_BATCH = 4
UNCOMMITTED = 6  # max_uncommitted_frames: what a partition may repeat after a fault


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A fresh three-broker cluster for this module, wiped afterwards."""
    cluster = LocalCluster(base_port=PORT, size=3)
    cluster.stop()
    cluster.wipe()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.wipe()


@pytest.fixture
def cluster_kafka(cluster: LocalCluster) -> KafkaSettings:
    """Settings of the cluster, with every node up and every replica in sync."""
    cluster.start()  # a node an earlier test left down comes back
    kafka = KafkaSettings(bootstrap_servers=cluster.bootstrap)
    wait_for(lambda: not _under_replicated(kafka), 120, "every replica in sync")
    return kafka


@dataclass(frozen=True)
class Outcome:
    """What a run through a leader's death left behind."""

    counters: dict[str, dict[str, int]]  # decoder's per-camera exit summary
    frames: dict[tuple[str, int], int]  # (camera, seq) -> frames-topic partition
    frame_order: dict[str, list[int]]  # per camera, seqs in frames-topic order
    records: list[tuple[int, Detections]]  # read_committed detections, partition order
    victim: int  # broker id killed
    led: list[int]  # partitions of the victim topic it led
    failover_s: float  # kill -> every such partition led by another broker


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
    _assert_every_frame_recorded(out)
    # At-least-once repeats only frames delivered but not yet committed (docs/reliability.md).
    dups = duplicates_by_partition(out.records)
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
    _assert_every_frame_recorded(out)
    # A read_committed reader: exactly one record per frame.
    keys = Counter((d.camera_id, d.seq) for _, d in out.records)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
    print(_report("detections leader, exactly-once", out, {}))


def _topics(tag: str) -> TopicSettings:
    run = f"cl-{tag}-{time.time_ns() % 10**9}"
    return TopicSettings(f"{run}.frames", f"{run}.detections", f"{run}.deadletter")


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
    inferencer = Service(
        "inferencer",
        service_env(
            kafka,
            names,
            model_path=model,
            delivery=mode,
            transactional_id=f"tx-{names.frames_topic}",
            max_batch=MAX_BATCH,
            max_wait_ms=20,
            max_uncommitted_frames=UNCOMMITTED,
        ),
        tmp_path / "inferencer.log",
    )
    decoder = Service("decoder", _decoder_env(kafka, names, video, tmp_path), tmp_path / "dec.log")
    try:
        wait_for(lambda: _recorded(kafka, names, 30) >= 30, 120, "detections before the kill")
        victim, led = _busiest_leader(kafka, victim_topic)
        cluster.node(victim).kill()
        failover_s = wait_for(
            lambda: _leaders_moved(kafka, victim_topic, victim, led), 60, "leaders elected"
        )
        assert decoder.alive(), decoder.text()[-3000:]
        assert inferencer.alive(), inferencer.text()[-3000:]
        time.sleep(max(0.0, OUTAGE_S - failover_s))
        cluster.node(victim).start()
        after = _recorded(kafka, names, 10**6)
        wait_for(lambda: _recorded(kafka, names, after + 30) >= after + 30, 90, "detections after")
        assert decoder.stop(60) == 0, decoder.text()[-3000:]
        counters = decoder_summary(decoder)
        delivered = sum(c["delivered"] for c in counters.values())
        wait_for(lambda: _recorded(kafka, names, delivered) >= delivered, 120, "catch-up")
        assert inferencer.stop(60) == 0, inferencer.text()[-3000:]
    finally:
        decoder.stop()
        inferencer.stop()
    # The restarted broker caught up: every partition has its three replicas in sync again.
    wait_for(lambda: not _under_replicated(kafka), 120, "restarted broker back in sync")
    codec = FrameCodec()
    frames = [
        (m.partition(), codec.decode(m.value()))
        for m in read_topic(kafka, names.frames_topic, delivered, timeout_s=60, settle_s=1.0)
    ]
    order: dict[str, list[int]] = {}
    for _, f in frames:
        order.setdefault(f.camera_id, []).append(f.seq)
    return Outcome(
        counters=counters,
        frames={(f.camera_id, f.seq): part for part, f in frames},
        frame_order=order,
        records=detections_of(kafka, names.detections_topic, delivered, timeout_s=60),
        victim=victim,
        led=led,
        failover_s=failover_s,
    )


def _decoder_env(
    kafka: KafkaSettings, names: TopicSettings, video: Path, tmp_path: Path
) -> dict[str, str]:
    cams = tmp_path / "cameras.yaml"
    cams.write_text(
        "cameras:\n"
        + "".join(
            f"  - {{id: {c}, url: '{video}', loop: true, realtime: true}}\n" for c in CAMERAS
        ),
        encoding="utf-8",
    )
    return service_env(
        kafka,
        names,
        cameras_file=cams,
        target_fps=5,
        input_width=MODEL_INPUT,
        input_height=MODEL_INPUT,
        drain_timeout_s=30,
    )


def _assert_every_frame_recorded(out: Outcome) -> None:
    """Decoder counters balance, the frames topic is gap- and duplicate-free, each frame recorded."""
    for cam in CAMERAS:
        c = out.counters[cam]
        assert unaccounted_decoder_frames(c) == 0, (cam, c)
        assert c["published"] == c["delivered"] > 0, (cam, c)
        assert not any(v for k, v in c.items() if k.startswith("dropped_")), (cam, c)
        # Idempotent producer through a leader change: each seq once, in order, none missing.
        assert out.frame_order[cam] == list(range(c["delivered"])), cam
    keys = {(d.camera_id, d.seq) for _, d in out.records}
    missing = set(out.frames) - keys
    assert not missing, f"{len(missing)} frames without a record, e.g. {sorted(missing)[:5]}"
    assert keys <= set(out.frames)
    assert all(d.status is FrameStatus.INFERRED or d.reason for _, d in out.records)
    assert all(s == sorted(s) for s in first_seqs_by_camera(out.records).values())


def _report(what: str, out: Outcome, dups: dict[int, int]) -> str:
    statuses = Counter(d.status.name for _, d in out.records)
    return (
        f"{what}: killed broker {out.victim} (leader of partitions {out.led}), new leaders in "
        f"{out.failover_s:.1f} s; frames={len(out.frames)} records={len(out.records)} "
        f"duplicates={dups} statuses={dict(statuses)}"
    )


def _recorded(kafka: KafkaSettings, names: TopicSettings, expected: int) -> int:
    """Distinct frames with a committed detections record (reads until `expected` or 5 s)."""
    records = detections_of(kafka, names.detections_topic, expected, timeout_s=5, settle_s=0)
    return len({(d.camera_id, d.seq) for _, d in records})


def _metadata(kafka: KafkaSettings, topic: str | None = None) -> Any:
    """Cluster metadata (brokers, and per partition its leader, replicas and in-sync replicas)."""
    admin = AdminClient({**kafka.client_config(), "log_level": 0})
    return admin.list_topics(topic, timeout=10)


def _busiest_leader(kafka: KafkaSettings, topic: str) -> tuple[int, list[int]]:
    """The broker leading most of `topic`'s partitions that hold records, and those partitions."""
    parts = _metadata(kafka, topic).topics[topic].partitions
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
    parts = _metadata(kafka, topic).topics[topic].partitions
    return all(parts[p].leader not in (victim, -1) for p in led)


def _under_replicated(kafka: KafkaSettings) -> list[tuple[str, int]]:
    """Partitions whose in-sync replicas are fewer than their replicas (or have no leader)."""
    try:
        topics = _metadata(kafka).topics
    except confluent_kafka.KafkaException:
        return [("?", -1)]
    return [
        (name, p.id)
        for name, t in topics.items()
        for p in t.partitions.values()
        if p.leader < 0 or set(p.isrs) != set(p.replicas)
    ]
