"""`framebus clips` over real Kafka, as a process: video topic + frames + alerts -> MP4, JPEG, records.

The video topic is filled from a generated H.264 file with `framebus.videopackets` (what the
decoder will publish), with capture times in the recent past as Kafka timestamps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np
import pytest

from framebus.codec import AlertCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, ClipStatus, VideoPacket
from framebus.topology import camera_partition
from framebus.videopackets import demux_file
from framebus_clips.snapshot import BOX_RGB
from tests.integration.clipsutil import (
    FPS,
    GOP,
    POST_S,
    PRE_S,
    SCENE,
    STEP_US,
    S,
    alert_at,
    clip_topics,
    clips_of,
    expected_span,
    frame_of,
    mp4_packets,
    produce,
    publish_packets,
    recorded,
    square_video,
    start_clips,
)
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import wait_for

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return square_video(tmp_path_factory.mktemp("clips"))


def test_clips_when_alerts_on_recorded_video_then_bit_exact_clip_and_snapshot_each(
    kafka: KafkaSettings, topics: TopicFactory, video: Path, tmp_path: Path
) -> None:
    names = clip_topics(kafka, topics)
    start_us, packets = recorded(video, 30)
    other = list(demux_file(video, "cam-b", start_us - 3 * S))  # another camera, shifted
    publish_packets(kafka, names.video_topic, packets + other)
    # The first alert's frame has pixels; the second's is still: its snapshot is the frame before.
    produce(
        kafka,
        names.frames_topic,
        [
            ("cam-a", frame_of("cam-a", 262, start_us)),
            ("cam-a", frame_of("cam-a", 349, start_us)),
            ("cam-a", frame_of("cam-a", 350, start_us, still=True)),
        ],
    )
    alerts = [alert_at("cam-a", 262, start_us), alert_at("cam-a", 350, start_us)]
    no_video = alert_at("cam-z", 262, start_us)
    codec = AlertCodec()
    records = [(a.camera_id, codec.encode(a)) for a in [*alerts, no_video]]
    produce(kafka, names.alerts_topic, [*records, ("cam-a", b"not an alert")])

    out = tmp_path / "clips"
    service = start_clips(kafka, names, out, f"clips-{names.alerts_topic}")
    assert service.wait(120) == 1, service.text()  # 1: a record was dead-lettered

    by_seq = {(c.camera_id, c.seq): c for c in clips_of(kafka, names, 3)}
    assert len(by_seq) == 3
    missing = by_seq[("cam-z", 262)]
    assert missing.status is ClipStatus.NO_VIDEO and missing.reason and missing.uri is None
    for alert in alerts:
        clip = by_seq[(alert.camera_id, alert.seq)]
        assert clip.status is ClipStatus.WRITTEN, clip
        assert clip.reason is None
        assert clip.uri is not None and clip.snapshot_uri is not None
        data, shape = mp4_packets(clip.uri)
        span = expected_span(packets, alert)
        assert data == [p.data for p in span]  # bit-exact: remuxed, never re-encoded
        assert shape == (SCENE.width, SCENE.height, float(FPS))
        assert alert.capture_ts_us - (PRE_S + 1) * S < clip.start_ts_us
        assert clip.start_ts_us <= alert.capture_ts_us - PRE_S * S
        assert clip.end_ts_us >= alert.capture_ts_us + POST_S * S
        assert clip.end_ts_us < alert.capture_ts_us + POST_S * S + GOP * STEP_US
        assert clip.size_bytes == Path(clip.uri.removeprefix("file://")).stat().st_size
        assert_box_drawn(clip.snapshot_uri, alert)
    assert sorted(p.name for p in (out / "cam-a").iterdir()) == sorted(
        f"{Path(c.uri or '').stem}{ext}"
        for c in by_seq.values()
        if c.uri
        for ext in (".jpg", ".mp4")
    )
    dead = read_topic(kafka, names.deadletter_topic, 1, settle_s=0.5)
    assert [m.value() for m in dead] == [b"not an alert"]
    # The reader found the camera where the producer's default partitioner put it.
    assert partition_of_key(kafka, names.video_topic, "cam-a") == camera_partition("cam-a", 3)


def partition_of_key(kafka: KafkaSettings, topic: str, key: str) -> int:
    (found,) = {
        m.partition()
        for m in read_topic(kafka, topic, 1000, timeout_s=20)
        if m.key() == key.encode()
    }
    return int(found)


def assert_box_drawn(snapshot_uri: str, alert: Alert) -> None:
    bgr = cv2.imread(snapshot_uri.removeprefix("file://"))
    assert bgr is not None and bgr.shape == (360, 640, 3)
    (box,) = alert.boxes
    x, y = round(box.x1 / 2), round((box.y1 + box.y2) / 4)  # the left edge, halfway down
    assert np.abs(bgr[y, x].astype(int) - np.array(BOX_RGB[::-1])).max() < 60
    assert np.abs(bgr[y, x + 20].astype(int) - np.array(BOX_RGB[::-1])).max() > 100


def test_clips_when_sigkilled_mid_work_and_restarted_then_one_record_and_one_file_per_alert(
    kafka: KafkaSettings, topics: TopicFactory, video: Path, tmp_path: Path
) -> None:
    names = clip_topics(kafka, topics)
    start_us, packets = recorded(video, 30)
    publish_packets(kafka, names.video_topic, packets)
    alerts = [alert_at("cam-a", index, start_us) for index in range(150, 350, 25)]
    codec = AlertCodec()
    produce(kafka, names.alerts_topic, [(a.camera_id, codec.encode(a)) for a in alerts])

    out, group = tmp_path / "clips", f"clips-{names.alerts_topic}"
    first = start_clips(kafka, names, out, group)
    wait_for(lambda: any((out / "cam-a").glob("*.mp4")), 60, "the first clip file")
    first.kill()
    before = len(read_topic(kafka, names.clips_topic, len(alerts), timeout_s=3))
    assert before < len(alerts), "killed after the last alert: nothing was left to replay"

    second = start_clips(kafka, names, out, group)
    assert second.wait(120) == 0, second.text()
    clips = clips_of(kafka, names, len(alerts))
    # Exactly once: one record per alert, the first run's committed ones not repeated.
    assert sorted(c.seq for c in clips) == [a.seq for a in alerts]
    assert {c.status for c in clips} == {ClipStatus.WRITTEN}
    files = sorted(p.name for p in (out / "cam-a").iterdir())
    # The replayed alerts' clips were written again under the same names: one file each, and
    # no temporary file left by the killed run.
    assert files == sorted(Path(c.uri or "").name for c in clips)
    for clip, alert in zip(sorted(clips, key=lambda c: c.seq), alerts, strict=True):
        data, _ = mp4_packets(clip.uri or "")
        assert data == [p.data for p in expected_span(packets, alert)]


def test_clips_when_post_roll_in_the_future_then_waits_for_its_packets(
    kafka: KafkaSettings, topics: TopicFactory, video: Path, tmp_path: Path
) -> None:
    names = clip_topics(kafka, topics)
    start_us, packets = recorded(video, 8)
    now_us = time.time_ns() // 1000
    publish_packets(kafka, names.video_topic, [p for p in packets if p.capture_ts_us <= now_us])
    alert = alert_at("cam-a", 6 * FPS + 12, start_us)  # 6.48 s: its post-roll ends 3.5 s ahead
    assert alert.capture_ts_us + POST_S * S > now_us + 2 * S
    produce(kafka, names.alerts_topic, [(alert.camera_id, AlertCodec().encode(alert))])

    later = [p for p in packets if p.capture_ts_us > now_us]
    stop = threading.Event()
    live = threading.Thread(target=publish_live, args=(kafka, names.video_topic, later, stop))
    live.start()
    try:
        service = start_clips(kafka, names, tmp_path / "clips", f"clips-{names.alerts_topic}")
        (clip,) = clips_of(kafka, names, 1)
        assert service.wait(60) == 0, service.text()
    finally:
        stop.set()
        live.join(30)
    assert clip.status is ClipStatus.WRITTEN and clip.reason == (
        "no snapshot: the alert's frame is not on the frames topic"
    )
    assert clip.end_ts_us >= alert.capture_ts_us + POST_S * S
    data, _ = mp4_packets(clip.uri or "")
    assert data == [p.data for p in expected_span(packets, alert)]


def publish_live(
    kafka: KafkaSettings, topic: str, packets: Sequence[VideoPacket], stop: threading.Event
) -> None:
    """Each packet once the wall clock passes its capture time, as a live camera would."""
    for batch in _due(packets, stop):
        publish_packets(kafka, topic, batch)


def _due(packets: Sequence[VideoPacket], stop: threading.Event) -> Iterator[list[VideoPacket]]:
    pending = list(packets)
    while pending and not stop.is_set():
        now_us = time.time_ns() // 1000
        due = [p for p in pending if p.capture_ts_us <= now_us]
        if due:
            pending = pending[len(due) :]
            yield due
        stop.wait(0.1)
