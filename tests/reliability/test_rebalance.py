"""Inferencers join and leave one consumer group mid-stream (cooperative-sticky assignment)."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from framebus.kafka.settings import KafkaSettings
from tests.integration.conftest import TopicFactory
from tests.reliability.harness import (
    Feeder,
    Service,
    detections_of,
    duplicates_by_partition,
    first_seqs_by_camera,
    service_env,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERAS = [f"cam-{i}" for i in range(6)]
MAX_BATCH = 4


def test_inferencers_when_one_leaves_and_one_joins_then_no_frame_lost_and_camera_order_kept(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=4, detections_partitions=2)
    env = service_env(
        kafka, names, model_path=box_model, max_batch=MAX_BATCH, max_wait_ms=10, log_level="info"
    )

    def start(name: str) -> Service:
        return Service("inferencer", env, tmp_path / f"{name}.log")

    def assigned(s: Service) -> bool:
        return "assigned [(" in s.text()  # a non-empty assignment

    def produced() -> int:
        return len(detections_of(kafka, names.detections_topic, 10**6, 1, 0))

    a = start("a")
    feeder = Feeder(kafka, names.frames_topic, CAMERAS, rounds=600, rounds_per_s=20).start()
    wait_for(lambda: produced() >= 30, 60, "A's first detections")
    b = start("b")  # joins: A gives up some partitions, keeps the others (sticky)
    wait_for(lambda: assigned(b), 60, "B assigned")
    mark = produced()
    wait_for(lambda: produced() >= mark + 30, 30, "progress with A and B")
    a.signal(signal.SIGTERM)  # leaves: finishes its batch, commits, hands its partitions over
    assert a.wait(15) == 0, a.text()[-3000:]
    c = start("c")
    wait_for(lambda: assigned(c), 60, "C assigned")
    assert feeder.thread.is_alive(), "C must join while frames still arrive"
    feeder.join()
    try:
        wait_for(lambda: produced() >= feeder.total, 90, "every frame recorded")
    finally:
        codes = [b.stop(), c.stop()]
    assert codes == [0, 0], b.text()[-2000:] + c.text()[-2000:]

    records = detections_of(kafka, names.detections_topic, feeder.total, timeout_s=30)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    assert set(keys) == {(cam, s) for cam in CAMERAS for s in range(feeder.rounds)}, "lost"
    for cam, seqs in first_seqs_by_camera(records).items():
        assert seqs == list(range(feeder.rounds)), f"{cam} out of order"
    dups = duplicates_by_partition(records)
    assert all(n <= MAX_BATCH for n in dups.values()), dups  # at-least-once: bounded
    print(f"rebalance: frames={feeder.total} records={len(records)} duplicates={dups}")
