"""The receive thread with frames of either pixel format: accepted, counted, or dead-lettered."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from framebus.codec import FrameCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.deadletter import REASON
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Frame, PixelFormat
from framebus.telemetry.health import Health
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.handoff import InFlight, StageQueue
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.pipeline.receive import Receiver
from framebus_inferencer.records import Outgoing
from framebus_inferencer.settings import InferencerSettings, Provider
from tests.unit.framebus_inferencer.frames import record
from tests.unit.framebus_inferencer.stubkafka import Blocking, StubConsumerClient, StubMessage

SIZE = 32
RGB = record(SIZE, with_tensor=True)
I420 = record(SIZE, PixelFormat.I420, with_tensor=True)


def receiver(input_format: PixelFormat) -> Receiver:
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
        input_format=input_format,
    )


def accept(rx: Receiver, frames: list[Frame]) -> list[Outgoing]:
    rejects: list[Outgoing] = []
    for offset, frame in enumerate(frames):
        msg = StubMessage(FrameCodec().encode(frame), b"cam", "frames", 0, offset)
        rx._accept(msg, rejects, [])
    return rejects


def test_receive_when_frames_of_both_formats_then_batched_and_the_other_format_counted() -> None:
    rx = receiver(PixelFormat.I420)
    assert accept(rx, [I420, RGB, replace(I420, seq=2)]) == []
    assert len(rx.batcher) == 3
    assert dict(rx.stats.converted_on_host_by_format) == {"rgb": 1}


def test_receive_when_pixel_format_unknown_then_dead_lettered_with_the_reason() -> None:
    rx = receiver(PixelFormat.I420)
    (rejected,) = accept(rx, [replace(I420, pixel_format=PixelFormat.UNKNOWN)])
    reason = dict(rejected.headers)[REASON].decode()
    assert "pixel format UNKNOWN: a format of a later release" in reason
    assert len(rx.batcher) == 0 and rx.stats.dead_letters == 1
