"""`framebus inferencer --workers 2`: one worker SIGKILLed mid-stream, restarted by its supervisor.

Real processes: the supervisor and its two workers (`python -m framebus_inferencer`), members of
one consumer group over four frames partitions. While live-paced frames flow, worker 1 is
SIGKILLed; the supervisor's /readyz drops (naming the worker) and returns once the restarted
worker holds partitions again; then SIGTERM drains both workers and the supervisor exits 0.

The stream is short (5 s) and ends soon after the kill: what is checked is the kill's effect, not
throughput. Exactly-once, the restarted worker is the same static member and takes its
partitions back at once (some 5-10 s after the kill, mostly its start-up); at-least-once it is a
new member, and the rebalance it starts ends only once the coordinator drops the dead one, after
the consumer's session timeout (10 s for workers, librdkafka's default 45 s; worker 0 delivers
nothing meanwhile either, its commits held).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections, FrameStatus
from framebus_tools.process import free_port
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import (
    Feeder,
    Service,
    detections_of,
    duplicates_by_partition,
    first_seqs_by_camera,
    get_json,
    metric,
    scrape,
    service_env,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERAS = [f"cam-{i}" for i in range(8)]
ROUNDS, ROUNDS_PER_S = 100, 20  # 800 frames in 5 s, 160 frames/s
KILL_AFTER = 40  # frames through worker 1 before it is killed: about 1 s into the stream
UNCOMMITTED = 6  # at-least-once: what a kill may deliver again per partition
SIGTERM_DEADLINE_S = 20.0


def readyz(service: Service) -> tuple[int, dict[str, Any]]:
    return get_json(f"http://127.0.0.1:{service.http_port}/readyz")


def workers_of(service: Service) -> list[dict[str, Any]]:
    """Each worker's phase, readiness, pid and restarts, from the supervisor's /readyz."""
    workers = readyz(service)[1]["workers"]
    assert isinstance(workers, list)
    return workers


def names_worker_1(service: Service) -> bool:
    """/readyz is 503 and says why worker 1 is not ready (`worker 1: exited (SIGKILL), ...`)."""
    status, body = readyz(service)
    return status == 503 and "worker 1: " in str(body.get("reasons", {}).get("workers"))


def holding(kafka: KafkaSettings, group: str) -> list[int]:
    """How many partitions each member of `group` holds."""
    admin = AdminClient(kafka.client_config())
    try:
        members = admin.describe_consumer_groups([group])[group].result(10).members
    except KafkaException:  # the coordinator not there yet: ask again
        return []
    return [len(m.assignment.topic_partitions) for m in members]


def frames_through(service: Service, worker: str) -> float:
    """Frames worker `worker` has counted (its /metrics, through the supervisor's)."""
    text = scrape(service.http_port or 0)
    return metric(text, "framebus_inferencer_frames_total", worker=worker)


def every_frame(records: list[tuple[int, Detections]], feeder: Feeder) -> bool:
    keys = {(d.camera_id, d.seq) for _, d in records}
    return keys == {(c, s) for c in feeder.cameras for s in range(feeder.rounds)}


@pytest.mark.parametrize("mode", ["exactly_once", "at_least_once"])
def test_inferencer_workers_when_one_sigkilled_mid_stream_then_restarted_and_nothing_lost(
    mode: str, kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=4, detections_partitions=2)
    env = service_env(
        kafka,
        names,
        model_path=box_model,
        delivery=mode,
        transactional_id=f"tx-{names.frames_topic}",
        max_batch=4,
        max_wait_ms=10,
        max_uncommitted_frames=UNCOMMITTED,
        workers=2,
        http_port=free_port(),
    )
    supervisor = Service("inferencer", env, tmp_path / "inferencer.log")
    records: list[tuple[int, Detections]] = []
    try:
        assert supervisor.wait_ready(180) is not None, supervisor.text()[-3000:]
        assert [w["phase"] for w in workers_of(supervisor)] == ["running", "running"]
        # A worker is ready once it has joined; the partitions it takes from worker 0 come one
        # (cooperative) rebalance later.
        group = env["FRAMEBUS_CONSUMER_GROUP"]
        wait_for(lambda: holding(kafka, group) == [2, 2], 30, "two members, 2 partitions each")
        feeder = Feeder(kafka, names.frames_topic, CAMERAS, ROUNDS, ROUNDS_PER_S).start()
        wait_for(
            lambda: not supervisor.alive() or frames_through(supervisor, "1") >= KILL_AFTER,
            60,
            f"{KILL_AFTER} frames through worker 1",
        )
        assert supervisor.alive(), supervisor.text()[-3000:]
        killed_pid = int(workers_of(supervisor)[1]["pid"])
        os.kill(killed_pid, signal.SIGKILL)
        assert feeder.thread.is_alive(), "the stream ended before the kill: make it longer"
        wait_for(lambda: names_worker_1(supervisor), 10, "/readyz 503 naming worker 1")
        back_s = wait_for(lambda: readyz(supervisor)[0] == 200, 120, "/readyz 200 again")
        restarted = workers_of(supervisor)[1]
        assert restarted["pid"] != killed_pid and restarted["restarts"] == 1, restarted
        feeder.join()

        def complete() -> bool:
            records[:] = detections_of(kafka, names.detections_topic, feeder.total, 2, 0.5)
            return every_frame(records, feeder)

        wait_for(complete, 60, "a record of every frame")
        # Exactly-once: what the dead worker had written in its aborted transaction (or none).
        written = read_topic(kafka, names.detections_topic, 10**6, 2, "read_uncommitted")
        metrics = scrape(supervisor.http_port or 0)
        started = time.monotonic()
        supervisor.signal(signal.SIGTERM)
        assert supervisor.wait(SIGTERM_DEADLINE_S) == 0, supervisor.text()[-3000:]
        drained_s = time.monotonic() - started
    finally:
        supervisor.stop()

    assert all(d.status is FrameStatus.INFERRED for _, d in records)
    dups = duplicates_by_partition(records)
    if mode == "exactly_once":
        assert dups == {}, dups  # read_committed: the dead worker's open transaction was aborted
    else:
        assert all(n <= UNCOMMITTED for n in dups.values()), dups
    assert all(seqs == sorted(seqs) for seqs in first_seqs_by_camera(records).values())
    assert "worker 1 exited (SIGKILL): starting it again in 1.0 s" in supervisor.text()
    assert metric(metrics, "framebus_inferencer_worker_restarts_total", worker="1") == 1
    assert metric(metrics, "framebus_inferencer_worker_restarts_total", reason="SIGKILL") == 1
    for worker in ("0", "1"):  # both workers' own counters, each under its label
        assert metric(metrics, "framebus_inferencer_frames_total", worker=worker) > 0
    # The supervisor forwarded SIGTERM to both workers; its exit 0 says each drained and exited 0.
    stopping = [r for r in supervisor.json_lines() if r["msg"] == "received SIGTERM: stopping"]
    assert sorted(str(r.get("worker", "supervisor")) for r in stopping) == ["0", "1", "supervisor"]
    print(
        f"{mode}: {len(records)} records for {feeder.total} frames, duplicates {dups}; "
        f"{len(written) - len(records)} more records to a read_uncommitted reader; "
        f"ready again {back_s:.1f} s after the kill; SIGTERM drained in {drained_s:.1f} s"
    )
