"""Still frames through the real `framebus track` process on the real broker.

Detections records (INFERRED with boxes, then STILL, then INFERRED again) go straight to the
tracker's input topic. The tracks topic must hold one record per detections record, the still
ones STILL with the objects seen last carried under the same ids, and a SIGKILL in the middle
of the still period must change nothing (the carried state comes back from the changelog).
"""

from __future__ import annotations

import re
from pathlib import Path

import confluent_kafka
import pytest

from framebus.codec import DetectionsCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Box, Detections, FrameStatus, Tracks
from framebus.topology import TopicSettings
from framebus_tracker.tracker import CameraTracker, TrackerConfig
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import Service, service_env, wait_for

pytestmark = pytest.mark.integration

CAMERA = "cam-still"
T0 = 1_700_000_000_000_000


def _det(seq: int, status: FrameStatus = FrameStatus.INFERRED) -> Detections:
    boxes: tuple[Box, ...] = ()
    if status is FrameStatus.INFERRED:  # one walker (it waits while still), one person standing
        x = 100.0 + 20 * min(seq, 3) + 20 * max(0, seq - 11)
        boxes = (
            Box(x, 200, x + 40, 300, 0, "person", 0.9),
            Box(600, 200, 640, 300, 0, "person", 0.8),
        )
    return Detections(
        camera_id=CAMERA,
        seq=seq,
        capture_ts_us=T0 + seq * 500_000,
        status=status,
        model_name="m",
        model_version="1",
        boxes=boxes,
        orig_width=1280,
        orig_height=720,
    )


FIRST = [_det(s) for s in range(4)] + [_det(s, FrameStatus.STILL) for s in range(4, 8)]
SECOND = [_det(s, FrameStatus.STILL) for s in range(8, 12)] + [_det(s) for s in range(12, 15)]


def _produce(kafka: KafkaSettings, topic: str, dets: list[Detections]) -> None:
    producer = confluent_kafka.Producer({**kafka.client_config(), "enable.idempotence": True})
    codec = DetectionsCodec()
    for d in dets:
        producer.produce(topic, codec.encode(d), key=d.camera_id)
    assert producer.flush(30) == 0


def _tracker(kafka: KafkaSettings, names: TopicSettings, log: Path, **extra: object) -> Service:
    env = service_env(
        kafka,
        names,
        tracker_group=f"trk-{names.frames_topic}",
        transactional_id=f"tx-trk-{names.frames_topic}",
        **extra,
    )
    return Service("track", env, log)


def _tracks(kafka: KafkaSettings, names: TopicSettings, expected: int) -> list[Tracks]:
    codec = TracksCodec()
    return [codec.decode(m.value()) for m in read_topic(kafka, names.tracks_topic, expected)]


def _objects(t: Tracks) -> list[tuple[object, ...]]:
    return [(o.track_id, o.box, o.first_seen_us, o.confirmed, o.hits, o.carried) for o in t.objects]


def test_tracker_when_still_records_between_inferred_ones_then_carried_and_killed_mid_still_same(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = topics()
    _produce(kafka, names.detections_topic, FIRST)
    first = _tracker(kafka, names, tmp_path / "tracker-1.log")
    try:
        wait_for(
            lambda: len(read_topic(kafka, names.tracks_topic, len(FIRST), 1.0)) >= len(FIRST),
            90,
            "the first records tracked",
        )
    finally:
        first.kill()  # SIGKILL in the middle of the still period
    _produce(kafka, names.detections_topic, SECOND)
    second = _tracker(kafka, names, tmp_path / "tracker-2.log", stop_after_idle_s=3)
    assert second.wait(120) == 0, second.text()[-3000:]

    records = FIRST + SECOND
    got = _tracks(kafka, names, len(records))
    assert [(t.seq, t.status) for t in got] == [(d.seq, d.status) for d in records]
    reference, codec = CameraTracker(CAMERA, TrackerConfig()), DetectionsCodec()
    want = [reference.step(codec.decode(codec.encode(d))) for d in records]  # float32 scores
    assert [_objects(t) for t in got] == [_objects(w) for w in want if w is not None]
    last_seen = got[3]
    for t in got[4:12]:
        assert [o.track_id for o in t.objects] == [o.track_id for o in last_seen.objects]
        assert all(o.carried for o in t.objects) and len(t.objects) == 2
    assert [o.track_id for o in got[12].objects] == [o.track_id for o in last_seen.objects]
    assert not any(o.carried for t in got[12:] for o in t.objects)
    assert re.search(r"restored [1-9][0-9]* states", second.text()), "nothing was restored"
