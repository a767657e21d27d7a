"""Four live RTSP cameras; one camera's server dies and comes back while the others stream on.

The cameras publish their video too: the reconnect starts a new segment of the victim's packets.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from framebus.codec import FrameCodec, VideoPacketCodec
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.messages import Frame, VideoPacket
from framebus.topology import Sizing, Topic, pipeline_specs
from framebus_decoder import service
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.stats import CameraSnapshot, CameraState, DecoderStats
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.rtsp import RtspCamera, needs_rtsp

pytestmark = [pytest.mark.integration, pytest.mark.rtsp, needs_rtsp]


@pytest.fixture
def rtsp_cameras() -> Iterator[list[RtspCamera]]:
    cams = [RtspCamera(f"cam{i}") for i in range(4)]
    try:
        for cam in cams:
            cam.start()
        yield cams
    finally:
        for cam in cams:
            cam.kill()


def delivered(stats: DecoderStats, camera_id: str) -> int:
    snap = stats.snapshot().get(camera_id)
    return 0 if snap is None else snap.count("delivered")


def wait_for(cond: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_decoder_when_one_rtsp_server_restarts_then_it_reconnects_and_others_have_no_gap(
    kafka: KafkaSettings, topics: TopicFactory, rtsp_cameras: list[RtspCamera], tmp_path: Path
) -> None:
    names = topics(frames_partitions=2)
    ensure_topics(kafka, pipeline_specs(names, Sizing(replication_factor=1), (Topic.VIDEO,)))
    cams_file = tmp_path / "cameras.yaml"
    cams_file.write_text(
        yaml.safe_dump({"cameras": [{"id": c.name, "url": c.url} for c in rtsp_cameras]})
    )
    stats = DecoderStats()
    stop = threading.Event()
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        cameras_file=cams_file,
        target_fps=5,
        stall_timeout_s=3,
        open_timeout_s=3,
        reconnect_initial_s=0.3,
        reconnect_max_s=1.0,
        video_enabled=True,
    )
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(service.run(settings, stop, stats)))
    runner.start()
    victim = rtsp_cameras[1]
    try:
        wait_for(
            lambda: all(delivered(stats, c.name) >= 5 for c in rtsp_cameras), 30, "all cameras"
        )
        victim.kill()
        wait_for(lambda: stats.state(victim.name) is CameraState.RECONNECTING, 10, "the reconnect")
        time.sleep(1.5)  # a few failed attempts against a dead server
        before = delivered(stats, victim.name)
        victim.start()
        wait_for(lambda: delivered(stats, victim.name) >= before + 5, 30, "the victim's return")
        time.sleep(1.0)
    finally:
        stop.set()
        runner.join(30)
    snaps = stats.snapshot()
    total = sum(s.count("delivered") for s in snaps.values())
    codec = FrameCodec()
    by_cam: dict[str, list[Frame]] = defaultdict(list)
    for msg in read_topic(kafka, names.frames_topic, total, timeout_s=30):
        frame = codec.decode(msg.value())
        by_cam[frame.camera_id].append(frame)
    for cam in rtsp_cameras:
        seqs = [f.seq for f in by_cam[cam.name]]
        assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), cam.name
    for cam in rtsp_cameras:
        if cam is victim:
            continue
        ts = [f.capture_ts_us for f in by_cam[cam.name]]
        gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:], strict=False)]
        assert max(gaps) < 1.0, (cam.name, max(gaps))
        assert snaps[cam.name].count("reconnects") == 0
    assert snaps[victim.name].count("reconnects") >= 1
    assert sum(snaps[victim.name].errors.values()) >= 1
    assert codes == [0]
    segments = video_segments(kafka, names.video_topic, snaps)
    assert len(segments[victim.name]) >= 2  # the reconnect started a new one
    for cam in rtsp_cameras:
        if cam is not victim:
            assert len(segments[cam.name]) == 1, cam.name


def video_segments(
    kafka: KafkaSettings, topic: str, snaps: dict[str, CameraSnapshot]
) -> dict[str, dict[str, list[int]]]:
    """Each camera's packet_seq numbers by segment; every one numbered 0, 1, 2, ... in order."""
    total = sum(s.video.get("delivered", 0) for s in snaps.values())
    codec = VideoPacketCodec()
    packets: list[VideoPacket] = [
        codec.decode(m.value()) for m in read_topic(kafka, topic, total, timeout_s=30)
    ]
    assert len(packets) == total > 0
    by_cam: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for p in packets:
        by_cam[p.camera_id][p.segment].append(p.packet_seq)
    for segments in by_cam.values():
        for seqs in segments.values():
            assert seqs == list(range(len(seqs)))
    return by_cam
