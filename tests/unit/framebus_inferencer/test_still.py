"""Still frames (the decoder's motion gate saw nothing move): no pixels, no model, one record.

The batcher never gives them a place in a batch but keeps them behind earlier frames of their
partition; the receive thread takes them before any tensor check; the infer stage answers each
with a STILL detections record, in offset order with the batch's other records.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from framebus.codec import FrameCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.deadletter import REASON
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Frame, FrameStatus, TensorLayout
from framebus.telemetry.health import Health
from framebus_inferencer.batcher import CloseReason, DeadlineBatcher, Pending
from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.handoff import InFlight, Publication, StageQueue, Work
from framebus_inferencer.pipeline.infer import Inference
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.pipeline.receive import Receiver
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.records import Outgoing, Received
from framebus_inferencer.settings import InferencerSettings, Provider
from framebus_inferencer.stats import InferencerStats
from framebus_tools.synthetic import bright_square_model
from tests.unit.framebus_inferencer.stubkafka import Blocking, StubConsumerClient, StubMessage
from tests.unit.framebus_inferencer.test_lag import exported_histogram

NOW_US = 1_700_000_000_000_000
SIZE = 32


def item(camera: str, offset: int, still: bool = False, partition: int = 0) -> Pending[int]:
    return Pending(camera, NOW_US, 1000.0, partition, offset, offset, still)


def test_batcher_when_a_still_frame_has_nothing_before_it_then_it_leaves_at_once_alone() -> None:
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=50)
    b.add(item("a", 0, still=True))
    b.add(item("b", 0, partition=1))
    assert b.next_deadline_ms(NOW_US) == float("-inf")
    batch = b.poll(1000.0, NOW_US)
    assert batch is not None and batch.reason is CloseReason.STILL_ONLY
    assert [p.offset for p in batch.still] == [0] and batch.frames == () and batch.stale == ()
    assert len(b) == 1  # the other partition's frame waits for its deadline as before
    assert b.poll(1000.0, NOW_US) is None


def test_batcher_when_a_still_frame_follows_a_waiting_frame_then_it_leaves_with_that_batch() -> (
    None
):
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=50)
    b.add(item("a", 0))
    b.add(item("a", 1, still=True))
    assert b.poll(1049.0, NOW_US) is None  # it must not overtake frame 0 of its partition
    batch = b.poll(1050.0, NOW_US)
    assert batch is not None and batch.reason is CloseReason.DEADLINE
    assert [p.offset for p in batch.frames] == [0] and [p.offset for p in batch.still] == [1]
    assert len(b) == 0


def test_batcher_when_a_frame_before_a_still_one_is_held_by_the_quota_then_both_wait() -> None:
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=5, camera_quota=1)
    b.add(item("a", 0))
    b.add(item("a", 1))
    b.add(item("a", 2, still=True))
    first = b.poll(1005.0, NOW_US)
    assert first is not None and [p.offset for p in first.frames] == [0] and first.still == ()
    second = b.poll(1010.0, NOW_US)
    assert second is not None and [p.offset for p in second.frames] == [1]
    assert [p.offset for p in second.still] == [2]


def test_batcher_when_flushed_then_still_frames_leave_too() -> None:
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=50)
    b.add(item("a", 0))
    b.add(item("a", 1, still=True))
    batch = b.flush(1000.0, NOW_US)
    assert batch is not None and len(batch.frames) == 1 and len(batch.still) == 1


def frame(seq: int, still: bool = False) -> Frame:
    return Frame(
        camera_id="cam",
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        orig_width=SIZE,
        orig_height=SIZE,
        shape=(SIZE, SIZE, 3),
        layout=TensorLayout.HWC,
        scale=1.0,
        pad_x=0,
        pad_y=0,
        tensor=b"" if still else bytes(SIZE * SIZE * 3),
        still=still,
    )


def receiver() -> Receiver:
    settings = InferencerSettings(model_path=Path("unused.onnx"), providers=(Provider.CPU,))
    control = Control(Health())
    consumer = Consumer(KafkaSettings(), "g", factory=lambda _c: StubConsumerClient([], Blocking()))
    return Receiver(
        StageContext(settings, control),
        CommitLedger(8),
        StageQueue(control, maxsize=1),
        InFlight(),
        consumer,
        (SIZE, SIZE, 3),
    )


def accept(rx: Receiver, frames: list[Frame]) -> list[Outgoing]:
    rejects: list[Outgoing] = []
    for offset, f in enumerate(frames):
        msg = StubMessage(FrameCodec().encode(f), b"cam", "frames", 0, offset)
        rx._accept(msg, rejects, [])
    return rejects


def test_receive_when_a_still_frame_has_an_empty_tensor_then_it_waits_as_still_not_dead() -> None:
    rx = receiver()
    assert accept(rx, [frame(0), frame(1, still=True)]) == []
    assert [p.still for p in rx.batcher._pending] == [False, True]
    assert rx.stats.dead_letters == 0


def test_receive_when_a_still_frame_carries_pixels_then_dead_lettered_with_the_reason() -> None:
    rx = receiver()
    (rejected,) = accept(rx, [replace(frame(0), still=True)])
    assert "still frame carries a 3072 B tensor" in dict(rejected.headers)[REASON].decode()
    assert len(rx.batcher) == 0


def pending(f: Frame) -> Pending[Received]:
    msg = StubMessage(FrameCodec().encode(f), b"cam", "frames", 0, f.seq)
    tensor = np.frombuffer(f.tensor, np.uint8)
    return Pending("cam", f.capture_ts_us, 0.0, 0, f.seq, Received(msg, f, tensor), f.still)


def test_inference_when_a_batch_has_still_frames_then_each_is_answered_still_in_seq_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(bright_square_model(SIZE), str(path))
    engine = Engine(path, EngineOptions(providers=(Provider.CPU,), max_batch=4))
    control, stats = Control(Health()), InferencerStats()
    ctx = StageContext(
        InferencerSettings(),
        control,
        stats,
        tracing=BatchTracing("frames", "g"),
        clock_ms=lambda: 0.0,
    )
    inference = Inference(ctx, StageQueue(control, 1), StageQueue[Publication](control, 1), engine)
    frames = [pending(frame(0)), pending(frame(2))]
    still = [pending(frame(1, still=True)), pending(frame(3, still=True))]
    b: DeadlineBatcher[Received] = DeadlineBatcher(max_batch=4, max_wait_ms=0)
    for p in (frames[0], still[0], frames[1], still[1]):
        b.add(p)
    batch = b.poll(1.0, NOW_US)
    assert batch is not None
    publication = inference.process(Work(batch))
    dets = [inference.codec.decode(r.value) for r in publication.records]
    assert [d.seq for d in dets] == [0, 1, 2, 3]
    assert [d.status for d in dets] == [
        FrameStatus.INFERRED,
        FrameStatus.STILL,
        FrameStatus.INFERRED,
        FrameStatus.STILL,
    ]
    assert all(d.boxes == () and d.batch_size == 0 for d in dets[1::2])
    assert all(d.e2e_latency_ms > 0 for d in dets[1::2])
    assert sorted(o for _, o in publication.offsets) == [0, 1, 2, 3]
    assert stats.by_status == {"INFERRED": 2, "STILL": 2}
    assert stats.batch_sizes == {2: 1}  # the model ran on the two full frames only
    assert not stats.drops_by_reason  # nothing was dropped


def test_stats_when_still_frames_delivered_then_in_the_lag_but_not_the_latencies() -> None:
    stats = InferencerStats()
    tp = ("frames", 0)
    stats.lag.received(tp, 0, NOW_US)
    stats.lag.received(tp, 1, NOW_US, timed=False)
    assert stats.lag.lags(NOW_US)[tp].messages == 0 and len(stats.lag._in_flight[tp]) == 2
    stats.delivered([(tp, 0), (tp, 1)], NOW_US + 50_000)
    _, total_s, count = exported_histogram(stats, "e2e_latency_seconds")
    assert (count, round(total_s, 3)) == (1, 0.05)  # only the inferred frame's
    assert stats.lag._in_flight[tp] == {}
    stats.outcome("cam", FrameStatus.STILL, 1.0)
    stats.outcome("cam", FrameStatus.INFERRED, 80.0)
    assert list(stats.e2e_latency_ms) == [80.0]
    assert stats.by_status == {"STILL": 1, "INFERRED": 1}
