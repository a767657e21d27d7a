"""FAILED for real: a model that fails inside ONNX Runtime on some frames, through the process.

The inferencer warms every batch bucket up at start-up, so a model that failed for a batch size
(a Reshape that fits some buckets only, or a CPU arena too small for the largest) is refused
before the first frame, with exit code 2 (tests/reliability/test_bad_inputs.py). What fails
mid-stream, then, is data: `poison_pixel_model` fails any batch holding a frame whose first pixel
is 255, through a real Gather out of bounds in ONNX Runtime. A batch is inferred as one call, so
every frame of a failed batch is FAILED, with the reason, and the frames of other batches go on.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus_tools.process import free_port
from testkit.models import poison_pixel_model
from tests.integration.conftest import TopicFactory
from tests.reliability.harness import (
    SIZE,
    Service,
    detections_of,
    frame_record,
    metric,
    produce,
    scrape,
    service_env,
    wait_records,
)

pytestmark = pytest.mark.integration

POISON = 255
MAX_BATCH = 4


@pytest.fixture(scope="module")
def poison_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The box model's output, failing on frames whose first pixel is POISON."""
    rows = np.zeros((4 + 2, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9, 0.0]
    path = tmp_path_factory.mktemp("poison") / "poison.onnx"
    onnx.save(poison_pixel_model(rows, SIZE, ["thing", "other"], POISON), str(path))
    return path


def test_inferencer_process_when_a_batch_fails_in_onnxruntime_then_its_frames_failed_with_reason_others_inferred_and_counted(
    kafka: KafkaSettings, topics: TopicFactory, poison_model: Path, tmp_path: Path
) -> None:
    names = topics()
    port = free_port()
    # A long max_wait_ms: each burst below closes as one batch (full at 4, or 1 s after its
    # first frame), whatever the fetches look like.
    env = service_env(
        kafka, names, model_path=poison_model, max_batch=MAX_BATCH, max_wait_ms=1000, http_port=port
    )
    inferencer = Service("inferencer", env, tmp_path / "inferencer.log")
    seq = 0
    expected: dict[tuple[str, int], FrameStatus] = {}

    def burst(fills: list[int], status: FrameStatus) -> None:
        """One batch: frames of these pixel values; wait for every record so far."""
        nonlocal seq
        records = []
        for fill in fills:
            records.append(("cam", frame_record("cam", seq, fill=fill)))
            expected[("cam", seq)] = status
            seq += 1
        produce(kafka, names.frames_topic, records)
        wait_records(kafka, names.detections_topic, len(expected), [inferencer], 90)

    try:
        burst([10, 20, 30, 40], FrameStatus.INFERRED)
        burst([50, POISON, 60, 70], FrameStatus.FAILED)  # one poison frame fails its whole batch
        burst([POISON], FrameStatus.FAILED)
        burst([80, 90, 100, 110], FrameStatus.INFERRED)  # and the service goes on
        metrics = scrape(port)
        assert inferencer.alive(), inferencer.text()[-3000:]
    finally:
        code = inferencer.stop()
    assert code == 0, inferencer.text()[-3000:]

    records = detections_of(kafka, names.detections_topic, len(expected), 30, settle_s=2)
    got = Counter((d.camera_id, d.seq) for _, d in records)
    assert got == Counter(set(expected)), "each frame exactly one record"
    for _, d in records:
        assert d.status is expected[(d.camera_id, d.seq)], (d.seq, d.status, d.reason)
        if d.status is FrameStatus.FAILED:
            assert d.reason is not None
            assert "inference of a batch of" in d.reason, d.reason
            assert "indices element out of data bounds" in d.reason, d.reason
            assert d.boxes == ()
        else:
            assert d.reason is None and len(d.boxes) == 1
    failed = sum(s is FrameStatus.FAILED for s in expected.values())
    inferred = len(expected) - failed
    assert metric(metrics, "framebus_inferencer_frames_total", status="FAILED") == failed
    assert metric(metrics, "framebus_inferencer_frames_dropped_total", reason="failed") == failed
    assert metric(metrics, "framebus_inferencer_frames_total", status="INFERRED") == inferred
    assert metric(metrics, "framebus_inferencer_errors_total", kind="InferenceError") == 2
    assert metric(metrics, "framebus_inferencer_dead_letters_total") == 0
    assert inferencer.text().count("batch of") >= 2  # each failed batch logged with its reason
