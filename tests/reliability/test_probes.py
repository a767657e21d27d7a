"""`/readyz` of a decoder process tells a stalled camera from a backpressured one, for real.

Stalled: a live RTSP camera whose server stops sending (SIGSTOP: the connection stays open, no
packet comes) until the read timeout (`stall_timeout_s`) fires; the camera reconnects and, once
the server resumes (SIGCONT), streams again. Backpressured: the producer cannot keep up, because
the broker throttles this decoder's client id with a Kafka client quota (`producer_byte_rate`),
so a file camera decoded as fast as possible (a batch job: it blocks, never drops) waits on a
full producer queue while the broker stays healthy. Both happen in one process: the decoder stays
ready (a camera still produces) and `/readyz` names each camera in its own field.
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus_tools.localkafka import LocalKafka
from framebus_tools.process import free_port
from tests.integration.conftest import (  # noqa: F401 - fixture
    TEST_KAFKA_PORT,
    TopicFactory,
    rtsp_server_available,
)
from tests.integration.rtsp import RtspCamera, needs_rtsp
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import (
    Service,
    decoded_frames,
    decoder_summary,
    get_json,
    metric,
    scrape,
    service_env,
    unaccounted_decoder_frames,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.rtsp, pytest.mark.slow, needs_rtsp]

# Bytes per second the broker lets this decoder's client id produce: a 160x160x3 frame is
# 76,800 B, so about one frame a second for both cameras together.
QUOTA_BYTES_PER_S = 65536


def _configs(kafka: KafkaSettings, *args: str) -> None:
    command = LocalKafka(port=TEST_KAFKA_PORT).tool_command(
        "kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, *args
    )
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def throttled_client(kafka: KafkaSettings) -> Iterator[str]:
    """A client id the broker throttles to QUOTA_BYTES_PER_S of produce (removed afterwards)."""
    client_id = f"throttled-{uuid.uuid4().hex[:8]}"
    entity = ("--entity-type", "clients", "--entity-name", client_id)
    _configs(kafka, "--alter", "--add-config", f"producer_byte_rate={QUOTA_BYTES_PER_S}", *entity)
    try:
        yield client_id
    finally:
        _configs(kafka, "--alter", "--delete-config", "producer_byte_rate", *entity)


def _ready(port: int) -> dict[str, Any]:
    code, body = get_json(f"http://127.0.0.1:{port}/readyz")
    return {**body, "code": code}


def test_decoder_readyz_when_one_camera_stalls_and_another_is_backpressured_then_each_named_apart_and_still_ready(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    throttled_client: str,
    tmp_path: Path,
) -> None:
    names = topics()
    live = RtspCamera("live").start()
    cams = tmp_path / "cameras.yaml"
    cams.write_text(
        yaml.safe_dump(
            {
                "cameras": [
                    {"id": "live", "url": live.url, "target_fps": 5},
                    # Not realtime: decoded as fast as possible, so it blocks rather than drops.
                    {"id": "bulk", "url": str(small_video), "target_fps": 25, "loop": True},
                ]
            }
        )
    )
    port = free_port()
    env = service_env(
        kafka,
        names,
        cameras_file=cams,
        client_id=throttled_client,
        input_width=MODEL_INPUT,
        input_height=MODEL_INPUT,
        producer_queue_kbytes=1024,  # the smallest local queue: it fills in a dozen frames
        stall_timeout_s=2,
        open_timeout_s=2,
        reconnect_initial_s=0.3,
        reconnect_max_s=1,
        drain_timeout_s=5,
        http_port=port,
    )
    decoder = Service("decoder", env, tmp_path / "decoder.log")
    assert live.proc is not None
    try:
        # The live camera streams (stopped while still opening, it would fail to open instead)
        # and the bulk one is held back by the producer.
        wait_for(
            lambda: (
                decoded_frames(port, "live") >= 5
                and "bulk" in _ready(port).get("backpressure_cameras", {})
            ),
            60,
            "live streaming, bulk backpressured",
        )
        live.proc.send_signal(signal.SIGSTOP)  # the camera stops sending; its socket stays open
        wait_for(lambda: "live" in _ready(port).get("stalled_cameras", {}), 30, "the stall")
        wait_for(lambda: "bulk" in _ready(port).get("backpressure_cameras", {}), 10, "both")
        both = _ready(port)
        stalled_metrics = scrape(port)
        live.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: not _ready(port).get("stalled_cameras"), 60, "the camera's return")
        assert decoder.alive(), decoder.text()[-3000:]
    finally:
        if live.proc is not None:
            live.proc.send_signal(signal.SIGCONT)
        decoder.stop()
        live.kill()

    assert both["code"] == 200 and both["status"] == "ready", both  # bulk still produces
    assert both["stalled_cameras"]["live"] in ("stall", "open_failed"), both
    assert both["backpressure_cameras"] == {"bulk": "producer queue full"}, both
    assert metric(stalled_metrics, "framebus_decoder_source_errors_total", camera="live") >= 1
    assert metric(stalled_metrics, "framebus_decoder_source_errors_total", camera="bulk") == 0
    assert (
        metric(
            stalled_metrics, "framebus_decoder_camera_state", camera="bulk", state="BACKPRESSURE"
        )
        == 1
    )
    summary = decoder_summary(decoder)
    assert summary["live"]["error_stall"] >= 1, summary["live"]
    for cam, counters in summary.items():
        assert unaccounted_decoder_frames(counters) == 0, (cam, counters)
    # The live camera keeps the freshest frames; the bulk one waits and loses none to the queue.
    assert summary["live"].get("dropped_backpressure_drop_oldest", 0) > 0, summary["live"]
    assert not any(k.startswith("dropped_backpressure") for k in summary["bulk"]), summary["bulk"]
