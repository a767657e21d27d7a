"""The decoder's motion gate against real Kafka and real video: still records, refreshes, lighting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest
import yaml

from framebus.codec import FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Frame, PixelFormat
from framebus.pixels import FrameFormat
from framebus_decoder import service
from framebus_decoder.motion import MotionConfig, MotionGate
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.source import letterbox_frame
from framebus_decoder.stats import DecoderStats
from framebus_tools.synthetic import write_h264
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

FPS, SECONDS = 25, 9
WIDTH, HEIGHT = 640, 360
MOVING = range(25, 75)  # 1 s to 3 s: a box crosses the picture
LIGHTS_ON = 200  # 8 s: the whole picture 40 brighter
REFRESH_S = 2.0


def scene_frames() -> Iterator[npt.NDArray[np.uint8]]:
    """A still grey gradient, a moving box for two seconds, still again, then brighter."""
    ramp = np.linspace(40, 120, WIDTH, dtype=np.float32)
    ground = np.repeat(np.tile(ramp, (HEIGHT, 1))[:, :, None], 3, axis=2).astype(np.uint8)
    for i in range(FPS * SECONDS):
        img = ground.copy()
        if i in MOVING:
            x = 40 + (i - MOVING.start) * 10
            img[150:210, x : x + 60] = 220
        if i >= LIGHTS_ON:
            img = img + np.uint8(40)
        yield img


def predicted_still(video: Path, frames: list[Frame], config: MotionConfig) -> list[bool]:
    """What the pure gate says for the published frames, replayed on the same decoded pictures."""
    wanted = {round(f.pts_s or 0.0, 3) for f in frames}
    gate = MotionGate(config)
    buffer = LetterboxBuffer(640, 640, fmt=FrameFormat.I420)
    still = []
    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            pts = round(float(frame.pts * frame.time_base), 3)
            if pts in wanted:
                lb = letterbox_frame(frame, buffer)
                still.append(gate.check(buffer.picture(lb), lb.scale, pts).still)
    return still


def test_decoder_when_motion_gate_on_then_still_records_between_motion_refresh_and_lighting(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    video = write_h264(tmp_path / "motion.mp4", WIDTH, HEIGHT, FPS, scene_frames())
    cams = tmp_path / "cameras.yaml"
    motion = {"enabled": True, "still_refresh_s": REFRESH_S}
    cams.write_text(yaml.safe_dump({"cameras": [{"id": "m", "url": str(video), "motion": motion}]}))
    names = topics()
    stats = DecoderStats()
    settings = DecoderSettings(kafka=kafka, topics=names, cameras_file=cams, target_fps=5)
    assert service.run(settings, stats=stats) == 0

    codec = FrameCodec()
    frames = [codec.decode(m.value()) for m in read_topic(kafka, names.frames_topic, 45)]
    assert [f.seq for f in frames] == list(range(45))
    for f in frames:
        assert (f.orig_width, f.orig_height, f.shape, f.pad_y) == (640, 360, (640, 640), 140)
        assert f.pixel_format is PixelFormat.I420
        assert len(f.tensor) == (0 if f.still else 640 * 640 * 3 // 2)
    full_at = [round(f.pts_s or 0.0, 1) for f in frames if not f.still]
    moving = [t for t in full_at if 1.0 <= t <= 3.0]
    # Every sampled frame while the box moves goes in full, and the first without it (a change
    # from the last full frame, which showed it).
    assert len(moving) == 11
    # Still after: the frame after motion ends, then one refresh every 2 s, then the lights.
    assert [t for t in full_at if t > 3.0] == [3.2, 5.2, 7.2, 8.0]
    assert full_at[0] == 0.0 and all(t >= 1.0 for t in full_at[1:])

    gated = stats.snapshot()["m"].gated
    assert gated == {
        "first": 1,
        "motion": 11,
        "motion_end": 1,
        "refresh": 2,
        "lighting": 1,
        "still": 29,
    }
    config = MotionConfig(still_refresh_s=REFRESH_S)
    assert [f.still for f in frames] == predicted_still(video, frames, config)
