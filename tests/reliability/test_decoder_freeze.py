"""A decoder process frozen (SIGSTOP) past `stall_timeout_s` and continued keeps its cameras.

The freeze was the decoder's own, not its sources': a file camera is not failed for good and a
live RTSP camera counts no stall (found by the chaos soak: docs/reliability.md).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus_tools.process import free_port
from tests.integration.conftest import (  # noqa: F401 - fixture
    TopicFactory,
    rtsp_server_available,
)
from tests.integration.rtsp import RtspCamera, needs_rtsp
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import (
    Service,
    decoded_frames,
    decoder_summary,
    frames_of,
    get_json,
    metric,
    scrape,
    service_env,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.rtsp, pytest.mark.slow, needs_rtsp]

STALL_TIMEOUT_S = 3
FREEZE_S = 3 * STALL_TIMEOUT_S
CAMERAS = ("file", "live")


def _decoded(port: int) -> dict[str, float]:
    return {c: decoded_frames(port, c) for c in CAMERAS}


def test_decoder_when_frozen_longer_than_stall_timeout_then_cameras_keep_streaming_and_exit_0(
    kafka: KafkaSettings, topics: TopicFactory, small_video: Path, tmp_path: Path
) -> None:
    names = topics()
    live = RtspCamera("live").start()
    cams = tmp_path / "cameras.yaml"
    cams.write_text(
        yaml.safe_dump(
            {
                "cameras": [
                    {"id": "file", "url": str(small_video), "realtime": True, "loop": True},
                    {"id": "live", "url": live.url},
                ]
            }
        )
    )
    port = free_port()
    env = service_env(
        kafka,
        names,
        cameras_file=cams,
        target_fps=5,
        input_width=MODEL_INPUT,
        input_height=MODEL_INPUT,
        stall_timeout_s=STALL_TIMEOUT_S,
        open_timeout_s=STALL_TIMEOUT_S,
        drain_timeout_s=5,
        http_port=port,
    )
    decoder = Service("decoder", env, tmp_path / "decoder.log")
    try:
        wait_for(lambda: min(_decoded(port).values()) >= 10, 60, "both cameras streaming")
        decoder.signal(signal.SIGSTOP)
        time.sleep(FREEZE_S)
        decoder.signal(signal.SIGCONT)
        resumed_us = time.time_ns() // 1000
        at_resume = _decoded(port)
        # 2 s of a 25 fps source each, decoded after the freeze.
        wait_for(
            lambda: all(_decoded(port)[c] >= at_resume[c] + 50 for c in CAMERAS),
            15,
            "both cameras decoding after the freeze",
        )
        text = scrape(port)
        code, ready = get_json(f"http://127.0.0.1:{port}/readyz")
    finally:
        decoder.signal(signal.SIGCONT)
        exit_code = decoder.stop()
        live.kill()

    assert exit_code == 0, decoder.text()[-3000:]
    assert code == 200 and not ready.get("stalled_cameras"), ready
    for cam in CAMERAS:
        assert metric(text, "framebus_decoder_source_errors_total", camera=cam) == 0, cam
        assert metric(text, "framebus_decoder_camera_state", camera=cam, state="STREAMING") == 1
    assert metric(text, "framebus_decoder_frozen_seconds_total") >= FREEZE_S - 2
    records = decoder.json_lines()
    assert any("not counted against" in r.get("msg", "") for r in records), "no freeze log"
    finished = [r for r in records if r.get("msg") == "decoder finished"]
    assert finished and not finished[-1]["failed_cameras"], finished
    summary = decoder_summary(decoder)
    frames = frames_of(kafka, names.frames_topic, sum(c["delivered"] for c in summary.values()))
    after = {
        c: sum(f.capture_ts_us > resumed_us for f in frames if f.camera_id == c) for c in CAMERAS
    }
    assert min(after.values()) >= 5, after  # at 5 fps, published after the freeze
