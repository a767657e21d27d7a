"""Clips of what the real decoder published: a paced file and a live RTSP camera, as processes.

`framebus decoder` (video on) fills the video topic and the frames topic; an alert names one of
its frames; `framebus clips` cuts the clip around it. The clip must decode, cover the pre- and
post-roll within one keyframe interval, keep the source's size and rate, and hold the very bytes
the decoder demuxed.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import av
import pytest

from framebus.codec import AlertCodec, FrameCodec, VideoPacketCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Box, Clip, ClipStatus, Frame, RuleType, VideoPacket, ZoneAnchor
from framebus.topology import TopicSettings
from framebus_tools.synthetic import MovingSquare, write_square_video
from tests.h264 import length_prefixed
from tests.integration.clipsutil import clip_topics, clips_of, mp4_packets, produce, start_clips
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.rtsp import RtspCamera, needs_rtsp
from tests.reliability.harness import Service, service_env

pytestmark = [pytest.mark.integration]

S = 1_000_000
FPS = GOP = 25  # a keyframe every second, in the file and from the RTSP server
ROLL_S = 2
SCENE = MovingSquare(width=640, height=360, side=60, frames=12 * FPS, fps=FPS)


def start_decoder(
    kafka: KafkaSettings, names: TopicSettings, url: str, log_dir: Path, **settings: object
) -> Service:
    env = service_env(
        kafka, names, camera_url=url, camera_id="cam-a", video_enabled="true", **settings
    )
    return Service("decoder", env, log_dir / f"decoder-{uuid.uuid4().hex[:6]}.log")


def middle_frame(kafka: KafkaSettings, names: TopicSettings, at_least: int) -> Frame:
    """A frame the decoder published, from the middle of what it published."""
    codec = FrameCodec()
    frames = [codec.decode(m.value()) for m in read_topic(kafka, names.frames_topic, at_least)]
    assert len(frames) >= at_least
    return frames[len(frames) // 2]


def alert_on(frame: Frame) -> Alert:
    box = Box(100.0, 100.0, 200.0, 200.0, 0, "square", 0.9)
    return Alert(
        "square-dwell", frame.camera_id, frame.seq, frame.capture_ts_us, time.time_ns() // 1000,
        3, ((0.0, 0.0), (640.0, 0.0), (640.0, 360.0)), ZoneAnchor.CENTER, (box,),
        rule_type=RuleType.DWELL, track_id=f"{frame.camera_id}/1/{frame.seq}",
    )  # fmt: skip


def clip_for(kafka: KafkaSettings, names: TopicSettings, alert: Alert, out: Path) -> Clip:
    produce(kafka, names.alerts_topic, [(alert.camera_id, AlertCodec().encode(alert))])
    group = f"clips-{names.alerts_topic}"
    clips = start_clips(kafka, names, out, group, pre_roll_s=ROLL_S, post_roll_s=ROLL_S)
    assert clips.wait(120) == 0, clips.text()
    (clip,) = clips_of(kafka, names, 1)
    assert clip.status is ClipStatus.WRITTEN and clip.reason is None, clip
    assert clip.snapshot_uri is not None
    assert Path(clip.snapshot_uri.removeprefix("file://")).stat().st_size > 0
    return clip


def assert_covers_window(clip: Clip, alert: Alert) -> None:
    """From the keyframe at or before alert - pre-roll to just past alert + post-roll."""
    start, end = alert.capture_ts_us - ROLL_S * S, alert.capture_ts_us + ROLL_S * S
    assert start - GOP * S // FPS < clip.start_ts_us <= start
    assert end <= clip.end_ts_us < end + GOP * S // FPS


def run_of(sequence: list[bytes], part: list[bytes]) -> int:
    """Where `part` sits in `sequence` as one contiguous run (fails when it does not)."""
    first = sequence.index(part[0])
    assert sequence[first : first + len(part)] == part
    return first


def test_clips_when_decoder_publishes_a_paced_file_then_clip_holds_the_files_own_packets(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = clip_topics(kafka, topics)
    video = write_square_video(tmp_path / "12s.mp4", SCENE, gop=GOP)
    decoder = start_decoder(kafka, names, str(video), tmp_path, realtime="true", target_fps=5)
    assert decoder.wait(60) == 0, decoder.text()
    alert = alert_on(middle_frame(kafka, names, 12 * 5))

    clip = clip_for(kafka, names, alert, tmp_path / "clips")
    data, shape = mp4_packets(clip.uri or "")
    with av.open(str(video)) as container:
        demuxed = [p for p in container.demux(video=0) if p.size]
        source, keys = [bytes(p) for p in demuxed], [p.is_keyframe for p in demuxed]
    first = run_of(source, data)  # bit-exact: the file's packets, remuxed, never re-encoded
    assert keys[first]
    assert shape == (SCENE.width, SCENE.height, float(FPS))
    assert_covers_window(clip, alert)


@needs_rtsp
@pytest.mark.rtsp
def test_clips_when_decoder_publishes_a_live_rtsp_camera_then_clip_holds_what_it_received(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = clip_topics(kafka, topics)
    camera = RtspCamera("cam-a", fps=FPS).start()
    try:
        decoder = start_decoder(kafka, names, camera.url, tmp_path, target_fps=5)
        time.sleep(10)
        assert decoder.stop() == 0, decoder.text()
    finally:
        camera.kill()
    alert = alert_on(middle_frame(kafka, names, 5 * 5))

    clip = clip_for(kafka, names, alert, tmp_path / "clips")
    data, shape = mp4_packets(clip.uri or "")
    codec = VideoPacketCodec()
    received: list[VideoPacket] = [
        codec.decode(m.value()) for m in read_topic(kafka, names.video_topic, 10_000, timeout_s=10)
    ]
    assert len({p.segment for p in received}) == 1 and received[0].packet_seq == 0
    # The server sends Annex-B (start codes); MP4 frames each NAL unit by its length instead.
    first = run_of([length_prefixed(p.data) for p in received], data)
    assert received[first].keyframe
    assert shape == (640, 360, float(FPS))
    assert_covers_window(clip, alert)
