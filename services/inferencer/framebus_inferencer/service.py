"""The inferencer service: consume a micro-batch, infer, publish one record per frame, commit."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.errors import CodecError, DeliveryError, ModelError
from framebus.kafka.consumer import Consumer, MessageProto
from framebus.kafka.deadletter import dead_letter_headers
from framebus.kafka.producer import Producer
from framebus.letterbox import boxes_to_original
from framebus.messages import Box, Detections, Frame, FrameStatus
from framebus_inferencer.engine import Engine
from framebus_inferencer.postprocess import decode_yolov8
from framebus_inferencer.settings import InferencerSettings

log = logging.getLogger(__name__)


def collect_batch(
    consumer: Consumer, max_batch: int, max_wait_ms: float, idle_poll_s: float
) -> list[MessageProto]:
    """Wait for a first message, then gather more until `max_batch` or `max_wait_ms` after it."""
    batch = consumer.consume(max_batch, idle_poll_s)
    if not batch:
        return batch
    deadline = time.monotonic() + max_wait_ms / 1000.0
    while len(batch) < max_batch:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        batch.extend(consumer.consume(max_batch - len(batch), remaining))
    return batch


class Inferencer:
    """Turns batches of frame messages into detections records."""

    def __init__(self, settings: InferencerSettings, engine: Engine, producer: Producer) -> None:
        self.settings = settings
        self.engine = engine
        self.producer = producer
        self.frames = FrameCodec()
        self.detections = DetectionsCodec()
        self.delivery_errors: list[str] = []

    def process(self, batch: list[MessageProto]) -> None:
        """Infer a batch and publish its records; raise DeliveryError if any was not delivered."""
        received = time.time()
        good: list[tuple[MessageProto, Frame]] = []
        for msg in batch:
            try:
                frame = self.frames.decode(msg.value() or b"")
                self._check_shape(frame)
                good.append((msg, frame))
            except CodecError as exc:
                self._dead_letter(msg, str(exc), type(exc).__name__)
        if good:
            self._infer(good, received)
        self._flush()

    def _check_shape(self, frame: Frame) -> None:
        info = self.engine.info
        expected = (info.input_height, info.input_width, 3)
        if frame.shape != expected or len(frame.tensor) != int(np.prod(expected)):
            raise CodecError(
                f"frame tensor shape {frame.shape} ({len(frame.tensor)} B) does not match the "
                f"model input {expected}; set the decoder's input size to the model's"
            )

    def _infer(self, good: list[tuple[MessageProto, Frame]], received: float) -> None:
        batch = np.stack([np.frombuffer(f.tensor, np.uint8).reshape(f.shape) for _, f in good])
        started = time.time()
        output = self.engine.run(batch)
        inference_ms = (time.time() - started) * 1000
        raw = decode_yolov8(output, self.settings.confidence_threshold, self.settings.iou_threshold)
        names = self.engine.info.class_names
        for (msg, frame), det in zip(good, raw, strict=True):
            xyxy = boxes_to_original(
                det.boxes,
                frame.scale,
                frame.pad_x,
                frame.pad_y,
                frame.orig_width,
                frame.orig_height,
            )
            boxes = tuple(
                Box(
                    float(b[0]),
                    float(b[1]),
                    float(b[2]),
                    float(b[3]),
                    int(c),
                    names[c] if c < len(names) else str(c),
                    float(s),
                )
                for b, c, s in zip(xyxy, det.class_ids, det.scores, strict=True)
            )
            record = Detections(
                camera_id=frame.camera_id,
                seq=frame.seq,
                capture_ts_us=frame.capture_ts_us,
                status=FrameStatus.INFERRED,
                model_name=self.engine.info.name,
                model_version=self.engine.info.version,
                boxes=boxes,
                orig_width=frame.orig_width,
                orig_height=frame.orig_height,
                queue_wait_ms=(started - received) * 1000,
                inference_ms=inference_ms,
                batch_size=len(good),
                e2e_latency_ms=time.time() * 1000 - frame.capture_ts_us / 1000,
                frame_partition=msg.partition() or 0,
                frame_offset=msg.offset() or 0,
            )
            self._produce(
                self.settings.topics.detections_topic,
                self.detections.encode(record),
                frame.camera_id,
                msg.headers(),
            )

    def _dead_letter(self, msg: MessageProto, reason: str, error_type: str) -> None:
        log.error(
            "dead-lettering message: %s",
            reason,
            extra={"partition": msg.partition(), "offset": msg.offset()},
        )
        self._produce(
            self.settings.topics.deadletter_topic,
            msg.value() or b"",
            msg.key(),
            dead_letter_headers(msg, reason, error_type, "inferencer"),
        )

    def _produce(self, topic: str, value: bytes, key: Any, headers: Any) -> None:
        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                self.delivery_errors.append(f"{topic}: {err.str()}")

        self.producer.produce(
            topic, value, key=key, headers=headers, on_delivery=report, block_s=30.0
        )

    def _flush(self) -> None:
        pending = self.producer.flush(30.0)
        if pending or self.delivery_errors:
            errors, self.delivery_errors = self.delivery_errors, []
            raise DeliveryError(f"{pending} records undelivered; errors: {errors[:3]}")


def run(settings: InferencerSettings, stop: threading.Event | None = None) -> int:
    """Consume until `stop` is set (or idle for `stop_after_idle_s`); return an exit code."""
    stop = stop or threading.Event()
    if settings.model_path is None:
        raise ModelError("no model: set FRAMEBUS_MODEL_PATH (--model-path)")
    engine = Engine(settings.model_path, settings.intra_op_threads)
    log.info("model loaded", extra={"model": engine.info.name, "provider": engine.provider})
    last_frame = time.monotonic()
    with (
        Producer(settings.kafka) as producer,
        Consumer(settings.kafka, settings.consumer_group) as consumer,
    ):
        consumer.subscribe([settings.topics.frames_topic])
        inferencer = Inferencer(settings, engine, producer)
        try:
            while not stop.is_set():
                batch = collect_batch(consumer, settings.max_batch, settings.max_wait_ms, 0.5)
                if batch:
                    inferencer.process(batch)
                    # Only now, with every record delivered, may these offsets be committed.
                    consumer.store_offsets(batch)
                    last_frame = time.monotonic()
                elif (
                    settings.stop_after_idle_s
                    and time.monotonic() - last_frame > settings.stop_after_idle_s
                ):
                    log.info("no frames for %.1f s: exiting", settings.stop_after_idle_s)
                    return 0
        except KeyboardInterrupt:
            return 0
    return 0
