"""SIGKILL mid-batch and SIGTERM of real service processes: nothing lost, duplicates bounded."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from tests.integration.conftest import TopicFactory
from tests.reliability.harness import (
    Feeder,
    Service,
    decoder_summary,
    detections_of,
    duplicates_by_partition,
    first_seqs_by_camera,
    frames_of,
    service_env,
    unaccounted_decoder_frames,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERAS = [f"cam-{i}" for i in range(4)]
MAX_BATCH = 4
UNCOMMITTED = 6  # max_uncommitted_frames: delivered frames per partition awaiting commit
SIGTERM_DEADLINE_S = 10.0


def _inferencer_env(kafka: KafkaSettings, names, model: Path, mode: str, **kw: object):  # type: ignore[no-untyped-def]
    return service_env(
        kafka,
        names,
        model_path=model,
        delivery=mode,
        transactional_id=f"tx-{names.frames_topic}",
        max_batch=MAX_BATCH,
        max_wait_ms=10,
        max_uncommitted_frames=UNCOMMITTED,
        **kw,
    )


@pytest.mark.parametrize("mode", ["at_least_once", "exactly_once"])
def test_inferencer_when_sigkilled_mid_batch_then_every_frame_recorded_and_duplicates_bounded(
    mode: str, kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=2, detections_partitions=2)
    env = _inferencer_env(kafka, names, box_model, mode)
    log = tmp_path / "inferencer.log"
    first = Service("inferencer", env, log)
    feeder = Feeder(kafka, names.frames_topic, CAMERAS, rounds=150, rounds_per_s=25).start()
    # Kill once results flow, while frames keep arriving: the kill lands inside a batch's work.
    wait_for(
        lambda: (
            len(detections_of(kafka, names.detections_topic, 80, 1, 0)) >= 80 or not first.alive()
        ),
        60,
        "first detections",
    )
    assert first.alive(), first.text()
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    feeder.join()
    second = Service("inferencer", {**env, "FRAMEBUS_STOP_AFTER_IDLE_S": "4"}, log)
    assert second.wait(120) == 0, second.text()[-3000:]

    records = detections_of(kafka, names.detections_topic, feeder.total, timeout_s=30)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    assert set(keys) == {(c, s) for c in CAMERAS for s in range(feeder.rounds)}, "frames lost"
    assert all(d.status is FrameStatus.INFERRED for _, d in records)
    dups = duplicates_by_partition(records)
    if mode == "exactly_once":
        assert dups == {}, dups
    else:
        # Offsets are committed right after delivery, off the produce path; no partition holds
        # more than max_uncommitted_frames delivered frames whose commit has not returned.
        assert all(n <= UNCOMMITTED for n in dups.values()), dups
    assert all(seqs == sorted(seqs) for seqs in first_seqs_by_camera(records).values())


def test_inferencer_when_sigterm_mid_stream_then_finishes_batch_commits_exits_and_no_duplicates(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=2, detections_partitions=2)
    env = _inferencer_env(kafka, names, box_model, "at_least_once")
    log = tmp_path / "inferencer.log"
    first = Service("inferencer", env, log)
    feeder = Feeder(kafka, names.frames_topic, CAMERAS, rounds=300, rounds_per_s=25).start()
    wait_for(
        lambda: (
            len(detections_of(kafka, names.detections_topic, 60, 1, 0)) >= 60 or not first.alive()
        ),
        60,
        "first detections",
    )
    started = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(SIGTERM_DEADLINE_S) == 0, first.text()[-3000:]
    took = time.monotonic() - started
    delivered_by_first = len(detections_of(kafka, names.detections_topic, 10**6, 3, 0))
    feeder.join()
    second = Service("inferencer", {**env, "FRAMEBUS_STOP_AFTER_IDLE_S": "4"}, log)
    assert second.wait(120) == 0, second.text()[-3000:]

    records = detections_of(kafka, names.detections_topic, feeder.total, timeout_s=30)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    assert set(keys) == {(c, s) for c in CAMERAS for s in range(feeder.rounds)}, "frames lost"
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]  # no duplicates
    assert took < SIGTERM_DEADLINE_S
    assert 0 < delivered_by_first < feeder.total
    assert "received SIGTERM: stopping" in first.text()


def test_decoder_when_sigterm_then_flushes_producer_and_exits_with_every_frame_accounted(
    kafka: KafkaSettings, topics: TopicFactory, small_video: Path, tmp_path: Path
) -> None:
    names = topics()
    env = service_env(
        kafka,
        names,
        camera_id="cam-term",
        camera_url=small_video,
        target_fps=10,
        loop="true",
        realtime="true",
        input_width=160,
        input_height=160,
        # A long linger keeps frames in librdkafka's queue at the signal: exit must flush them.
        producer_linger_ms=500,
    )
    decoder = Service("decoder", env, tmp_path / "decoder.log")
    time.sleep(4)
    started = time.monotonic()
    decoder.signal(signal.SIGTERM)
    assert decoder.wait(SIGTERM_DEADLINE_S) == 0, decoder.text()[-3000:]
    assert time.monotonic() - started < SIGTERM_DEADLINE_S
    counters = decoder_summary(decoder)["cam-term"]
    assert counters["published"] == counters["delivered"] > 10
    assert unaccounted_decoder_frames(counters) == 0, counters
    frames = frames_of(kafka, names.frames_topic, counters["delivered"], timeout_s=15)
    assert [f.seq for f in frames] == list(range(counters["delivered"]))
