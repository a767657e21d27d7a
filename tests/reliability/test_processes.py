"""Both services as processes: compressed frames and a live RTSP camera, each frame accounted.

The Helm CPU values compress tensors with zstd; here `framebus decoder --compression lz4|zstd`
processes feed one `framebus inferencer` process, and the records are checked against where
the square really is, so a tensor that did not survive compression would show. A live RTSP
camera (GStreamer's RTSP server, `tests/integration/rtsp.py`) goes through both processes too.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression, FrameStatus
from framebus_tools.synthetic import MovingSquare
from tests.integration.conftest import TopicFactory, rtsp_server_available  # noqa: F401 - fixture
from tests.integration.rtsp import RtspCamera, needs_rtsp
from tests.reliability.conftest import MODEL_INPUT, VIDEO_SIZE
from tests.reliability.harness import (
    Service,
    decoder_summary,
    detections_of,
    frames_of,
    service_env,
    unaccounted_decoder_frames,
    wait_records,
)

pytestmark = pytest.mark.integration

SCENE = MovingSquare(width=VIDEO_SIZE[0], height=VIDEO_SIZE[1], side=40, frames=100)
BOX_TOLERANCE_PX = 4  # original pixels; the model sees the frame at half scale


def _inferencer(kafka: KafkaSettings, names, model: Path, log: Path) -> Service:  # type: ignore[no-untyped-def]
    env = service_env(kafka, names, model_path=model, max_batch=8, max_wait_ms=20)
    return Service("inferencer", env, log)


def _decoder_env(kafka: KafkaSettings, names, camera: str, url: object, **extra: object):  # type: ignore[no-untyped-def]
    return service_env(
        kafka,
        names,
        camera_id=camera,
        camera_url=url,
        input_width=MODEL_INPUT,
        input_height=MODEL_INPUT,
        **extra,
    )


def test_pipeline_processes_when_decoders_compress_with_lz4_and_zstd_then_every_frame_has_one_accurate_record(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    square_model_160: Path,
    tmp_path: Path,
) -> None:
    names = topics(frames_partitions=2)
    inferencer = _inferencer(kafka, names, square_model_160, tmp_path / "inferencer.log")
    cams = {"cam-lz4": Compression.LZ4, "cam-zstd": Compression.ZSTD}
    decoders = {
        cam: Service(
            "decoder",
            _decoder_env(kafka, names, cam, small_video, target_fps=0, compression=c.value),
            tmp_path / f"{cam}.log",
        )
        for cam, c in cams.items()
    }
    try:
        for decoder in decoders.values():
            assert decoder.wait(120) == 0, decoder.text()[-3000:]
        wait_records(kafka, names.detections_topic, 2 * SCENE.frames, [inferencer], 120)
    finally:
        code = inferencer.stop()
        for decoder in decoders.values():
            decoder.stop()
    assert code == 0, inferencer.text()[-3000:]

    for cam, decoder in decoders.items():
        counters = decoder_summary(decoder)[cam]
        assert counters["published"] == counters["delivered"] == SCENE.frames, counters
    written = Counter(
        (f.camera_id, f.compression) for f in frames_of(kafka, names.frames_topic, 200)
    )
    assert written == {(cam, c): SCENE.frames for cam, c in cams.items()}
    records = detections_of(kafka, names.detections_topic, 2 * SCENE.frames, 30, settle_s=2)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    assert keys == Counter({(cam, s): 1 for cam in cams for s in range(SCENE.frames)})
    for _, d in records:
        assert d.status is FrameStatus.INFERRED, (d.camera_id, d.seq, d.reason)
        assert len(d.boxes) == 1, (d.camera_id, d.seq, d.boxes)
        b = d.boxes[0]
        got, want = (b.x1, b.y1, b.x2, b.y2), SCENE.box(d.seq)
        assert all(abs(g - w) <= BOX_TOLERANCE_PX for g, w in zip(got, want, strict=True)), (
            d.camera_id,
            d.seq,
            got,
            want,
        )


@needs_rtsp
@pytest.mark.rtsp
def test_pipeline_processes_when_a_live_rtsp_camera_streams_then_every_delivered_frame_has_one_record(
    kafka: KafkaSettings, topics: TopicFactory, square_model_160: Path, tmp_path: Path
) -> None:
    names = topics()
    camera = RtspCamera("live").start()
    inferencer = _inferencer(kafka, names, square_model_160, tmp_path / "inferencer.log")
    decoder = Service(
        "decoder",
        _decoder_env(kafka, names, "live", camera.url, target_fps=5, stall_timeout_s=5),
        tmp_path / "decoder.log",
    )
    try:
        # About 4 s of live frames at 5 fps through both processes, then the decoder stops.
        wait_records(kafka, names.detections_topic, 20, [inferencer, decoder], 90)
        started = time.monotonic()
        decoder.signal(signal.SIGTERM)
        assert decoder.wait(15) == 0, decoder.text()[-3000:]
        assert time.monotonic() - started < 15
        counters = decoder_summary(decoder)["live"]
        delivered = counters["delivered"]
        wait_records(kafka, names.detections_topic, delivered, [inferencer], 60)
    finally:
        code = inferencer.stop()
        decoder.stop()
        camera.kill()
    assert code == 0, inferencer.text()[-3000:]
    assert counters["published"] == delivered >= 20, counters
    assert unaccounted_decoder_frames(counters) == 0, counters
    records = detections_of(kafka, names.detections_topic, delivered, 30, settle_s=2)
    assert Counter(d.seq for _, d in records) == Counter(range(delivered))
    assert {d.status for _, d in records} == {FrameStatus.INFERRED}
    # The live stream's own size (scripts/rtsp_server.py's 640x360 pattern), mapped back.
    assert {(d.orig_width, d.orig_height) for _, d in records} == {(640, 360)}
