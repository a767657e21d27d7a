"""Bad inputs: a clear error each, the service still running, bad messages dead-lettered.

Covered elsewhere, not repeated here: garbage bytes from a real decoder run
(tests/integration/test_pipeline.py), a truncated video, a corrupt file, an unsupported codec and
an unreachable camera URL (tests/integration/test_decoder.py, `..._when_inputs_are_bad_...`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka import deadletter
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import TopicSpec, ensure_topics
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.stats import CameraState, DecoderStats
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.stats import InferencerStats
from framebus_tools.testmodels import fixed_output_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import SIZE, make_frame, produce, wait_for

pytestmark = pytest.mark.integration


def test_inferencer_when_bad_messages_then_each_dead_lettered_with_source_and_reason_and_it_runs_on(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path
) -> None:
    names = topics()
    good = make_frame("cam-ok", 0)
    garbage = b"\x00definitely not avro\xff" * 8
    unknown_schema = b"\xc3\x01" + bytes(range(8)) + good[10:]  # marker, foreign fingerprint
    wrong_shape = make_frame("cam-small", 0, size=SIZE // 2)  # model expects SIZE x SIZE
    bad = [(b"garbage", garbage), (b"unknown", unknown_schema), (b"shape", wrong_shape)]
    produce(kafka, names.frames_topic, [(k.decode(), v) for k, v in bad])
    stats, stop = InferencerStats(), threading.Event()
    settings = InferencerSettings(
        kafka=kafka, topics=names, model_path=box_model, consumer_group=f"g-{names.frames_topic}"
    )
    thread = threading.Thread(target=inferencer_service.run, args=(settings, stop, stats))
    thread.start()
    try:
        dead = read_topic(kafka, names.deadletter_topic, 3, timeout_s=60)
        produce(kafka, names.frames_topic, [("cam-ok", good)])  # after the bad ones: still served
        (result,) = read_topic(kafka, names.detections_topic, 1, timeout_s=60)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(30)
    assert DetectionsCodec().decode(result.value()).camera_id == "cam-ok"
    assert [m.value() for m in dead] == [v for _, v in bad]  # the original bytes, in order
    reasons = []
    for offset, msg in enumerate(dead):
        headers = dict(msg.headers())
        assert headers[deadletter.SOURCE_TOPIC] == names.frames_topic.encode()
        assert headers[deadletter.SOURCE_PARTITION] == b"0"
        assert headers[deadletter.SOURCE_OFFSET] == str(offset).encode()
        assert headers[deadletter.SERVICE] == b"inferencer"
        assert msg.key() == bad[offset][0]
        reasons.append(headers[deadletter.REASON].decode())
    assert "C3 01" in reasons[0] or "marker" in reasons[0], reasons[0]
    assert "unknown schema fingerprint 0001020304050607" in reasons[1], reasons[1]
    assert f"does not match the model input ({SIZE}, {SIZE}, 3)" in reasons[2], reasons[2]
    assert stats.dead_letters == 3
    assert stats.by_status["INFERRED"] == 1


def test_decoder_when_record_larger_than_topic_allows_then_counted_logged_and_it_runs_on(
    kafka: KafkaSettings, small_video: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = f"small-{time.monotonic_ns()}"
    names = TopicSettings(f"{run}.frames", f"{run}.detections", f"{run}.deadletter")
    # 20 kB per record on this topic; a 160x160x3 frame is 76,800 B.
    ensure_topics(kafka, [TopicSpec(names.frames_topic, 1, 1, {"max.message.bytes": "20000"})])
    stats, stop = DecoderStats(), threading.Event()
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        camera_id="big",
        camera_url=str(small_video),
        target_fps=5,
        loop=True,
        realtime=True,
        input_width=160,
        input_height=160,
        drain_timeout_s=5,
    )
    caplog.set_level(logging.ERROR)
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(decoder_service.run(settings, stop, stats))
    )
    thread.start()
    try:
        wait_for(lambda: stats.total("delivery_failed") >= 3, 30, "failed deliveries counted")
        assert thread.is_alive() and stats.state("big") is CameraState.STREAMING
    finally:
        stop.set()
        thread.join(30)
    snap = stats.snapshot()["big"]
    assert snap.count("delivered") == 0
    # Every frame is accounted for: refused by the broker (counted), or dropped for a reason.
    assert snap.count("published") == snap.count("delivery_failed")
    assert snap.count("decoded") == (
        snap.count("sampled_out") + snap.count("published") + sum(snap.dropped.values())
    )
    assert "MSG_SIZE_TOO_LARGE" in snap.last_error or "too large" in snap.last_error.lower()
    assert any("frame delivery failed" in r.getMessage() for r in caplog.records)
    assert codes == [1]  # undelivered frames make a non-zero exit


def _cli(command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEBUS_")}
    return subprocess.Popen(
        [sys.executable, "-m", "framebus_tools.cli", command],
        env={**clean, "FRAMEBUS_BOOTSTRAP_SERVERS": "127.0.0.1:1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_services_when_started_with_bad_model_or_config_then_exit_2_with_a_clear_message(
    tmp_path: Path,
) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not a protobuf" * 10)
    odd_head = tmp_path / "odd-head.onnx"
    outputs = {"output0": np.zeros((5, 5, 5), np.float32)}
    onnx.save(fixed_output_model(outputs, input_size=SIZE), str(odd_head))
    cases = {
        "missing model": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(tmp_path / "nope.onnx")}),
        "corrupt model": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(corrupt)}),
        "unrecognised head": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(odd_head)}),
        "invalid inferencer setting": ("inferencer", {"FRAMEBUS_MAX_BATCH": "0"}),
        "invalid decoder setting": ("decoder", {"FRAMEBUS_TARGET_FPS": "fast"}),
    }
    procs = {name: _cli(cmd, env) for name, (cmd, env) in cases.items()}
    out = {}
    for name, proc in procs.items():
        text, _ = proc.communicate(timeout=60)
        out[name] = (proc.returncode, text)
    expected = {
        "missing model": "model file not found",
        "corrupt model": "cannot load ONNX model",
        "unrecognised head": "cannot tell the detector head from output shape",
        "invalid inferencer setting": "FRAMEBUS_MAX_BATCH (--max-batch): must be between 1 and 256",
        "invalid decoder setting": "FRAMEBUS_TARGET_FPS (--target-fps): cannot use 'fast'",
    }
    for name, needle in expected.items():
        code, text = out[name]
        assert code == 2, (name, text[-2000:])
        assert needle in text, (name, text[-2000:])
        assert "Traceback" not in text, (name, text[-2000:])


def test_frame_codec_when_truncated_record_then_codec_error_not_crash() -> None:
    from framebus.errors import CodecError

    good = make_frame("c", 1)
    with pytest.raises(CodecError):
        FrameCodec().decode(good[: len(good) // 3])
