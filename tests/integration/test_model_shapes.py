"""Models as users export them, on the real broker: static batch 1, float16, another input size.

Each model is the bright-square detector (`framebus_tools.synthetic`) exported the way a user's
YOLO export comes: without `dynamic=True` (batch fixed at 1), with it (batch, height and width
dynamic, the README's export), with `half=True` (float16 input and output), or at a size that is
not the frames' letterbox size. Heads of few anchors are decoded
right or refused before the first frame (`testkit.models`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import confluent_kafka
import numpy as np
import onnx
import pytest

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections, Frame, FrameStatus, TensorLayout
from framebus.topology import TopicSettings
from framebus_inferencer import service
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.stats import InferencerStats
from framebus_tools.synthetic import bright_square_model, write_bright_square_model
from testkit.models import (
    with_dynamic_image_dims,
    with_dynamic_output_dims,
    yolov8_model,
)
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SIZE = 160
FRAMES = 24


def square_box(seq: int) -> tuple[int, int, int, int]:
    """Where frame `seq`'s bright square is, in model (= original) pixels, x2/y2 exclusive."""
    x, y = 4 * seq, 2 * seq + 10
    return x, y, x + 30, y + 20


def make_frame(camera: str, seq: int) -> bytes:
    tensor = np.full((SIZE, SIZE, 3), 24, np.uint8)
    x1, y1, x2, y2 = square_box(seq)
    tensor[y1:y2, x1:x2] = 235
    frame = Frame(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        orig_width=SIZE,
        orig_height=SIZE,
        shape=(SIZE, SIZE, 3),
        layout=TensorLayout.HWC,
        scale=1.0,
        pad_x=0,
        pad_y=0,
        tensor=tensor.tobytes(),
    )
    return FrameCodec().encode(frame)


def produce(kafka: KafkaSettings, topic: str, n: int) -> None:
    producer = confluent_kafka.Producer({**kafka.client_config(), "enable.idempotence": True})
    for seq in range(n):
        producer.produce(topic, make_frame("cam", seq), key="cam")
        producer.poll(0)
    assert producer.flush(30) == 0


def settings_for(
    kafka: KafkaSettings, names: TopicSettings, model: Path, **kw: object
) -> InferencerSettings:
    return InferencerSettings(
        kafka=kafka,
        topics=names,
        model_path=model,
        consumer_group=f"g-{names.frames_topic}",
        **kw,  # type: ignore[arg-type]
    )


def detections_of(kafka: KafkaSettings, topic: str, n: int) -> list[Detections]:
    codec = DetectionsCodec()
    return [codec.decode(m.value()) for m in read_topic(kafka, topic, n, timeout_s=30)]


def assert_every_square_found(dets: list[Detections]) -> None:
    assert sorted(d.seq for d in dets) == list(range(FRAMES))
    for d in dets:
        assert d.status is FrameStatus.INFERRED, d.reason
        (box,) = d.boxes  # the model's shifted duplicate anchor is suppressed by NMS
        assert (box.x1, box.y1, box.x2, box.y2) == square_box(d.seq)
        assert box.class_name == "square" and box.score == pytest.approx(1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape_until(port: int, line: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:  # noqa: S310 - loopback
                text = r.read().decode()
        except OSError:
            text = ""
        if line in text:
            return text
        time.sleep(0.2)
    raise AssertionError(f"/metrics never showed {line!r}; last scrape:\n{text}")


def test_inferencer_when_model_has_static_batch_1_then_batches_loop_and_every_frame_is_boxed(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    model = write_bright_square_model(tmp_path / "static1.onnx", SIZE, static_batch=1)
    names = topics()
    produce(kafka, names.frames_topic, FRAMES)
    port = free_port()
    stats = InferencerStats()
    stop = threading.Event()
    s = settings_for(
        kafka,
        names,
        model,
        max_batch=8,
        max_wait_ms=200,
        input_width=SIZE,  # the decoder's letterbox size, as FRAMEBUS_INPUT_WIDTH sets both
        input_height=SIZE,
        http_port=port,
        stop_after_idle_s=20,
    )
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(service.run(s, stop, stats)))
    runner.start()
    try:
        text = scrape_until(
            port, f'framebus_inferencer_frames_total{{status="INFERRED"}} {FRAMES}.0', 60
        )
    finally:
        stop.set()
        runner.join(60)
    assert codes == [0]
    assert 'framebus_inferencer_engine_batch_mode{mode="loop"} 1.0' in text
    assert "framebus_inferencer_model_static_batch 1.0" in text
    dets = detections_of(kafka, names.detections_topic, FRAMES)
    assert_every_square_found(dets)
    # Batches of several frames were formed and reported as such, each run as batch-1 calls.
    assert max(stats.batch_sizes) > 1
    assert max(d.batch_size for d in dets) == max(stats.batch_sizes)
    assert stats.by_status == Counter({"INFERRED": FRAMES})


def test_inferencer_when_readme_export_with_dynamic_height_and_width_then_every_frame_is_boxed(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    # `yolo export ... dynamic=True` gives ['batch', 3, 'height', 'width']: it was refused at
    # start-up. It runs at the frames' size (FRAMEBUS_INPUT_WIDTH/HEIGHT, as compose and the
    # chart set them), here not the 640 its imgsz metadata names.
    dynamic = with_dynamic_image_dims(bright_square_model(640))
    model = tmp_path / "dynamic.onnx"
    onnx.save(dynamic, str(model))
    names = topics()
    produce(kafka, names.frames_topic, FRAMES)
    stats = InferencerStats()
    s = settings_for(
        kafka,
        names,
        model,
        max_batch=4,
        max_wait_ms=50,
        input_width=SIZE,
        input_height=SIZE,
        stop_after_idle_s=3,
    )
    assert service.run(s, threading.Event(), stats) == 0
    assert_every_square_found(detections_of(kafka, names.detections_topic, FRAMES))
    assert stats.batch_mode == "batched" and max(stats.batch_sizes) > 1
    assert stats.by_status == Counter({"INFERRED": FRAMES})


def test_inferencer_when_model_is_float16_then_every_frame_is_boxed(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    model = write_bright_square_model(tmp_path / "half.onnx", SIZE, float16=True)
    names = topics()
    produce(kafka, names.frames_topic, FRAMES)
    stats = InferencerStats()
    s = settings_for(kafka, names, model, max_batch=4, max_wait_ms=50, stop_after_idle_s=3)
    assert service.run(s, threading.Event(), stats) == 0
    assert_every_square_found(detections_of(kafka, names.detections_topic, FRAMES))
    assert stats.batch_mode == "batched" and stats.static_batch == 0
    assert stats.by_status == Counter({"INFERRED": FRAMES})


def test_inferencer_when_yolov8_head_has_one_anchor_then_every_frame_is_boxed_not_a_crash(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    # [N, 6, 1] (4 box rows, 2 classes, 1 anchor) was taken for YOLOv5: warm-up passed and the
    # first batch killed the infer stage with an IndexError.
    one_anchor = np.array([[16], [16], [8], [8], [0.1], [0.9]], np.float32)
    model = tmp_path / "one-anchor.onnx"
    onnx.save(yolov8_model(one_anchor, input_size=SIZE, names=["square", "other"]), str(model))
    names = topics()
    produce(kafka, names.frames_topic, FRAMES)
    stats = InferencerStats()
    s = settings_for(kafka, names, model, max_batch=4, max_wait_ms=50, stop_after_idle_s=3)
    assert service.run(s, threading.Event(), stats) == 0
    dets = detections_of(kafka, names.detections_topic, FRAMES)
    assert sorted(d.seq for d in dets) == list(range(FRAMES))
    for d in dets:
        assert d.status is FrameStatus.INFERRED, d.reason
        (box,) = d.boxes
        assert (box.x1, box.y1, box.x2, box.y2) == (12, 12, 20, 20)
        assert box.class_name == "other" and box.score == pytest.approx(0.9)
    assert stats.by_status == Counter({"INFERRED": FRAMES})


def inferencer_env(kafka: KafkaSettings, names: TopicSettings, model: Path) -> dict[str, str]:
    return {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "FRAMEBUS_FRAMES_TOPIC": names.frames_topic,
        "FRAMEBUS_DETECTIONS_TOPIC": names.detections_topic,
        "FRAMEBUS_DEADLETTER_TOPIC": names.deadletter_topic,
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
    }


def test_inferencer_when_warm_up_outputs_cannot_be_decoded_then_exits_2_before_consuming(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    # The output dims are dynamic, so only the warm-up's real outputs show that [N, 6, 1]
    # cannot be the YOLOv5 head the user asked for.
    one_anchor = np.array([[16], [16], [8], [8], [0.1], [0.9]], np.float32)
    model = tmp_path / "dynamic-head.onnx"
    onnx.save(with_dynamic_output_dims(yolov8_model(one_anchor, input_size=SIZE)), str(model))
    names = topics()
    produce(kafka, names.frames_topic, 2)
    env = inferencer_env(kafka, names, model) | {
        "FRAMEBUS_HEAD_FORMAT": "yolov5",
        "FRAMEBUS_MAX_BATCH": "2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "framebus_tools.cli", "inferencer"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (
        "framebus inferencer: error: the model's output shape [1, 6, 1] cannot be decoded as the "
        "yolov5 head it was taken for"
    ) in done.stderr
    assert "--head-format / FRAMEBUS_HEAD_FORMAT" in done.stderr
    assert read_topic(kafka, names.detections_topic, 1, timeout_s=3) == []
    assert read_topic(kafka, names.deadletter_topic, 1, timeout_s=3) == []


def test_inferencer_when_frames_size_differs_from_model_then_exits_naming_both_sizes(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    model = write_bright_square_model(tmp_path / "small.onnx", SIZE)
    names = topics()
    produce(kafka, names.frames_topic, 2)
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "FRAMEBUS_FRAMES_TOPIC": names.frames_topic,
        "FRAMEBUS_DETECTIONS_TOPIC": names.detections_topic,
        "FRAMEBUS_DEADLETTER_TOPIC": names.deadletter_topic,
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_INPUT_WIDTH": "640",  # what the decoder letterboxes to
        "FRAMEBUS_INPUT_HEIGHT": "640",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
    }
    done = subprocess.run(
        [sys.executable, "-m", "framebus_tools.cli", "inferencer"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        "framebus inferencer: error: model small takes 160x160 images (its input images is "
        "[N, 3, 160, 160] float32) but frames are letterboxed to 640x640 (FRAMEBUS_INPUT_WIDTH / "
        "FRAMEBUS_INPUT_HEIGHT): set FRAMEBUS_INPUT_WIDTH=160 FRAMEBUS_INPUT_HEIGHT=160 for the "
        "decoder and the inferencer, or export the model at 640x640"
    ) in done.stderr
    # Refused before consuming: no frame was answered, none was dead-lettered.
    assert read_topic(kafka, names.detections_topic, 1, timeout_s=3) == []
    assert read_topic(kafka, names.deadletter_topic, 1, timeout_s=3) == []
