"""`framebus clips` over real Kafka, as a process: video topic + frames + alerts -> MP4, JPEG, records.

The video topic is filled from a generated H.264 file with `framebus.videopackets` (what the
decoder will publish), with capture times in the recent past as Kafka timestamps.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import av
import confluent_kafka
import cv2
import numpy as np
import pytest

from framebus.codec import AlertCodec, ClipCodec, FrameCodec, VideoPacketCodec
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.letterbox import Letterbox
from framebus.messages import (
    Alert,
    Box,
    Clip,
    ClipStatus,
    Frame,
    PixelFormat,
    RuleType,
    TensorLayout,
    VideoPacket,
    ZoneAnchor,
)
from framebus.topology import Sizing, Topic, TopicSettings, camera_partition, pipeline_specs
from framebus.videopackets import demux_file, kafka_timestamp_ms
from framebus_clips.snapshot import BOX_RGB
from framebus_tools.synthetic import MovingSquare, write_square_video
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import Service, service_env, wait_for

pytestmark = [pytest.mark.integration]

S = 1_000_000
FPS, GOP = 25, 25  # a keyframe every second
SCENE = MovingSquare(width=1280, height=720, side=120, frames=20 * FPS, fps=FPS)
PRE_S = POST_S = 5
STEP_US = S // FPS


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_square_video(tmp_path_factory.mktemp("clips") / "720p.mp4", SCENE, gop=GOP)


def clip_topics(kafka: KafkaSettings, topics: TopicFactory) -> TopicSettings:
    names = topics()
    sizing = Sizing(alerts_partitions=1, video_partitions=3, replication_factor=1)
    wanted = (Topic.VIDEO, Topic.ALERTS, Topic.CLIPS)
    ensure_topics(kafka, pipeline_specs(names, sizing, wanted))
    return names


def producer_config(kafka: KafkaSettings) -> dict[str, object]:
    # A 640x640 RGB frame (1.2 MB) is over librdkafka's default 1 MB record limit.
    return {**kafka.client_config(), "message.max.bytes": MAX_RECORD_BYTES}


def publish_packets(kafka: KafkaSettings, topic: str, packets: Sequence[VideoPacket]) -> None:
    """As the decoder will: keyed by camera, default partitioner, Kafka timestamp = capture."""
    producer = confluent_kafka.Producer(producer_config(kafka))
    codec = VideoPacketCodec()
    for p in packets:
        value = codec.encode(p)
        producer.produce(topic, value, key=p.camera_id, timestamp=kafka_timestamp_ms(p))
        producer.poll(0)
    assert producer.flush(30) == 0


def produce(kafka: KafkaSettings, topic: str, records: Sequence[tuple[str, bytes]]) -> None:
    producer = confluent_kafka.Producer(producer_config(kafka))
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def frame_of(camera: str, index: int, start_us: int, still: bool = False) -> bytes:
    """The scene's frame `index`, letterboxed to 640x640 RGB as the decoder publishes it."""
    fit = Letterbox.fit(SCENE.width, SCENE.height, 640, 640)
    tensor = np.full((640, 640, 3), 114, np.uint8)
    picture = cv2.resize(SCENE.render(index), (fit.resized_width, fit.resized_height))
    tensor[
        fit.pad_y : fit.pad_y + fit.resized_height, fit.pad_x : fit.pad_x + fit.resized_width
    ] = picture
    frame = Frame(
        camera, index, start_us + index * STEP_US, SCENE.width, SCENE.height, (640, 640, 3),
        TensorLayout.HWC, fit.scale, fit.pad_x, fit.pad_y, b"" if still else tensor.tobytes(),
        pixel_format=PixelFormat.RGB, still=still,
    )  # fmt: skip
    return FrameCodec().encode(frame)


def alert_at(camera: str, index: int, start_us: int) -> Alert:
    x1, y1, x2, y2 = SCENE.box(index)
    box = Box(float(x1), float(y1), float(x2), float(y2), 0, "square", 0.9)
    return Alert(
        "square-dwell", camera, index, start_us + index * STEP_US, time.time_ns() // 1000, 3,
        ((0.0, 0.0), (1280.0, 0.0), (1280.0, 720.0)), ZoneAnchor.CENTER, (box,),
        rule_type=RuleType.DWELL, track_id=f"{camera}/1/{index}",
    )  # fmt: skip


def start_clips(kafka: KafkaSettings, names: TopicSettings, out: Path, group: str) -> Service:
    env = service_env(
        kafka, names, clips_dir=out, clips_group=group, stop_after_idle_s=6, log_level="info"
    )
    return Service("clips", env, out.parent / f"clips-{uuid.uuid4().hex[:6]}.log")


def clips_of(kafka: KafkaSettings, names: TopicSettings, expected: int) -> list[Clip]:
    messages = read_topic(kafka, names.clips_topic, expected, timeout_s=60, settle_s=1.0)
    return [ClipCodec().decode(m.value()) for m in messages]


def mp4_packets(uri: str) -> tuple[list[bytes], tuple[int, int, float]]:
    with av.open(uri.removeprefix("file://")) as container:
        stream = container.streams.video[0]
        shape = (stream.width, stream.height, float(stream.average_rate or 0))
        data = [bytes(p) for p in container.demux(stream) if p.size]
    with av.open(uri.removeprefix("file://")) as container:
        assert sum(1 for _ in container.decode(video=0)) == len(data)  # every packet decodes
    return data, shape


def expected_span(packets: Sequence[VideoPacket], alert: Alert) -> list[VideoPacket]:
    start = alert.capture_ts_us - PRE_S * S
    first = max(i for i, p in enumerate(packets) if p.keyframe and p.capture_ts_us <= start)
    end = alert.capture_ts_us + POST_S * S
    last = min(i for i, p in enumerate(packets) if p.capture_ts_us >= end)
    return list(packets[first : last + 1])


def recorded(video: Path, seconds_ago: float) -> tuple[int, list[VideoPacket]]:
    """cam-a's packets of `video` as if it began `seconds_ago`: (its start, the packets)."""
    start_us = time.time_ns() // 1000 - round(seconds_ago * S)
    return start_us, list(demux_file(video, "cam-a", start_us))


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
