"""The inferencer over the real Kafka broker: batching, fairness, freshness, exactly-once."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
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
from framebus_tools.process import ServiceProcess
from testkit.models import yolov8_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SIZE = 64  # small frames keep 1,600-frame runs quick on two cores
CAMERAS = [f"cam-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def box_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = np.zeros((4 + 2, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9, 0.0]  # one box of class 0 in the middle
    path = tmp_path_factory.mktemp("models") / "box.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing", "other"]), str(path))
    return path


def make_frame(camera: str, seq: int, age_s: float = 0.0) -> bytes:
    tensor = np.full((SIZE, SIZE, 3), seq % 250, np.uint8).tobytes()
    frame = Frame(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000 - int(age_s * 1e6),
        orig_width=128,
        orig_height=64,
        shape=(SIZE, SIZE, 3),
        layout=TensorLayout.HWC,
        scale=0.5,
        pad_x=0,
        pad_y=16,
        tensor=tensor,
    )
    return FrameCodec().encode(frame)


def produce(kafka: KafkaSettings, topic: str, items: list[tuple[str, int, float]]) -> None:
    # Idempotent, as the decoder's producer is: a plain producer may reorder records on retries.
    producer = confluent_kafka.Producer({**kafka.client_config(), "enable.idempotence": True})
    for camera, seq, age in items:
        producer.produce(topic, make_frame(camera, seq, age), key=camera)
        producer.poll(0)
    assert producer.flush(30) == 0


def settings_for(
    kafka: KafkaSettings, names: TopicSettings, model: Path, **kw
) -> InferencerSettings:
    return InferencerSettings(
        kafka=kafka,
        topics=names,
        model_path=model,
        consumer_group=f"g-{names.frames_topic}",
        **kw,
    )


def decode_all(messages: list) -> list[Detections]:
    codec = DetectionsCodec()
    return [codec.decode(m.value()) for m in messages]


def test_inferencer_when_8_cameras_200_frames_then_one_record_per_frame_in_camera_order(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names = topics(frames_partitions=4, detections_partitions=2)
    frames = 200
    # Interleaved like live cameras, plus a burst of one camera to exercise the fairness quota.
    items = [(c, s, 0.0) for s in range(frames - 40) for c in CAMERAS]
    items += [(c, s, 0.0) for c in CAMERAS for s in range(frames - 40, frames)]
    produce(kafka, names.frames_topic, items)
    stats = InferencerStats()
    s = settings_for(
        kafka,
        names,
        box_model,
        max_batch=8,
        max_wait_ms=5,
        max_frames_per_camera=2,
        stop_after_idle_s=3,
    )
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.service"):
        assert service.run(s, threading.Event(), stats) == 0
    dets = decode_all(read_topic(kafka, names.detections_topic, len(items), timeout_s=30))
    (at_exit,) = [r for r in caplog.records if r.getMessage() == "CPU seconds at exit"]
    # The engine ran 200 batches and more (bench.marginal subtracts it from the process's CPU).
    assert 0 < at_exit.engine_cpu_s < at_exit.process_cpu_s  # type: ignore[attr-defined]

    by_camera: dict[str, list[int]] = defaultdict(list)
    for d in dets:
        by_camera[d.camera_id].append(d.seq)
        assert d.status is FrameStatus.INFERRED
        (box,) = d.boxes  # (24..40, 24..40) in model pixels -> x (48..80), y (16..48)
        assert (box.x1, box.y1, box.x2, box.y2) == (48, 16, 80, 48)
        assert box.class_name == "thing"
        assert 1 <= d.batch_size <= 8
    assert {c: by_camera[c] for c in CAMERAS} == {c: list(range(frames)) for c in CAMERAS}
    assert stats.by_status == Counter({"INFERRED": len(items)})
    assert max(stats.batch_sizes) == 8
    assert stats.provider == "CPUExecutionProvider"


def test_inferencer_when_frames_are_stale_then_dropped_as_stale_and_never_inferred(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path
) -> None:
    names = topics()
    items = [("old", s, 30.0) for s in range(10)] + [("new", s, 0.0) for s in range(10)]
    produce(kafka, names.frames_topic, items)
    stats = InferencerStats()
    s = settings_for(kafka, names, box_model, max_frame_age_ms=10_000, stop_after_idle_s=3)
    assert service.run(s, threading.Event(), stats) == 0
    dets = decode_all(read_topic(kafka, names.detections_topic, len(items), timeout_s=30))
    assert len(dets) == len(items)
    for d in dets:
        if d.camera_id == "old":
            assert d.status is FrameStatus.DROPPED_STALE
            assert d.boxes == () and d.batch_size == 0 and "max_frame_age_ms" in (d.reason or "")
        else:
            assert d.status is FrameStatus.INFERRED and len(d.boxes) == 1
    assert stats.by_status == Counter({"DROPPED_STALE": 10, "INFERRED": 10})
    assert sum(n * count for n, count in stats.batch_sizes.items()) == 10  # only fresh inferred


@pytest.mark.slow
def test_inferencer_when_killed_mid_stream_in_exactly_once_mode_then_one_committed_record_per_frame(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=2, detections_partitions=2)
    per_camera = 150
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
        "FRAMEBUS_MODEL_PATH": str(box_model),
        "FRAMEBUS_DELIVERY": "exactly_once",
        "FRAMEBUS_TRANSACTIONAL_ID": f"tx-{names.frames_topic}",
        "FRAMEBUS_MAX_BATCH": "4",
        "FRAMEBUS_MAX_WAIT_MS": "5",
    }
    log = tmp_path / "inferencer.log"
    first = ServiceProcess("inferencer", env, log)
    # Frames keep arriving while the first inferencer works, so the kill lands mid-stream.
    feeder = threading.Thread(
        target=lambda: [
            (
                produce(kafka, names.frames_topic, [(c, s, 0.0) for c in CAMERAS[:4]]),
                time.sleep(0.01),
            )
            for s in range(per_camera)
        ]
    )
    feeder.start()
    try:
        seen = read_topic(
            kafka, names.detections_topic, 60, timeout_s=60, isolation="read_uncommitted"
        )
        assert len(seen) >= 60, log.read_text()
    finally:
        first.kill()
        feeder.join(60)
    second = ServiceProcess("inferencer", {**env, "FRAMEBUS_STOP_AFTER_IDLE_S": "4"}, log)
    assert second.wait(120) == 0, log.read_text()

    total = 4 * per_camera
    dets = decode_all(read_topic(kafka, names.detections_topic, total, timeout_s=30, settle_s=2))
    keys = Counter((d.camera_id, d.seq) for d in dets)
    assert len(keys) == total, f"missing {total - len(keys)} frames"
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
    by_camera: dict[str, list[int]] = defaultdict(list)
    for d in dets:
        by_camera[d.camera_id].append(d.seq)
    assert all(seqs == list(range(per_camera)) for seqs in by_camera.values())
