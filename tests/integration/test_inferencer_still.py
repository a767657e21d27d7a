"""Still frames through the real inferencer process on the real broker: one STILL record each."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import confluent_kafka
import numpy as np
import onnx
import pytest

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Frame, FrameStatus, TensorLayout
from framebus_tools.process import ServiceProcess
from testkit.models import yolov8_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SIZE = 64
CAMERAS = ["cam-a", "cam-b", "cam-c"]
FRAMES = 30  # per camera; every third one after the first is still


def is_still(seq: int) -> bool:
    return seq % 3 != 0


def frame_record(camera: str, seq: int) -> bytes:
    still = is_still(seq)
    return FrameCodec().encode(
        Frame(
            camera_id=camera,
            seq=seq,
            capture_ts_us=time.time_ns() // 1000,
            orig_width=128,
            orig_height=64,
            shape=(SIZE, SIZE, 3),
            layout=TensorLayout.HWC,
            scale=0.5,
            pad_x=0,
            pad_y=16,
            tensor=b"" if still else bytes(SIZE * SIZE * 3),
            still=still,
        )
    )


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_inferencer_when_full_and_still_frames_mix_then_one_record_each_still_ones_still(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, delivery: str
) -> None:
    rows = np.zeros((4 + 2, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9, 0.0]
    model = tmp_path / "box.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing", "other"]), str(model))
    names = topics(frames_partitions=2)
    producer = confluent_kafka.Producer({**kafka.client_config(), "enable.idempotence": True})
    for seq in range(FRAMES):
        for camera in CAMERAS:
            producer.produce(names.frames_topic, frame_record(camera, seq), key=camera)
    assert producer.flush(30) == 0
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_DELIVERY": delivery,
        "FRAMEBUS_TRANSACTIONAL_ID": f"tx-{names.frames_topic}",
        "FRAMEBUS_MAX_BATCH": "4",
        "FRAMEBUS_MAX_WAIT_MS": "20",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
    }
    log = tmp_path / "inferencer.log"
    assert ServiceProcess("inferencer", env, log).wait(120) == 0, log.read_text()

    total = FRAMES * len(CAMERAS)
    codec = DetectionsCodec()
    messages = read_topic(kafka, names.detections_topic, total, timeout_s=30, settle_s=1)
    dets = [codec.decode(m.value()) for m in messages]
    assert Counter((d.camera_id, d.seq) for d in dets) == Counter(
        (c, s) for c in CAMERAS for s in range(FRAMES)
    )
    for camera in CAMERAS:  # in seq order per camera: the tracker relies on it
        assert [d.seq for d in dets if d.camera_id == camera] == list(range(FRAMES))
    for d in dets:
        if is_still(d.seq):
            assert d.status is FrameStatus.STILL and d.boxes == () and d.batch_size == 0
        else:
            assert d.status is FrameStatus.INFERRED and len(d.boxes) == 1
    assert read_topic(kafka, names.deadletter_topic, 1, timeout_s=2) == []
