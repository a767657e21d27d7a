"""Turning frames and model results into detections and dead-letter records (pure logic)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from framebus.kafka.deadletter import dead_letter_headers
from framebus.kafka.protocol import MessageProto
from framebus.letterbox import boxes_to_original
from framebus.messages import Box, Detections, Frame, FrameStatus, PixelFormat, TensorLayout
from framebus.pixels import Colour, colour_code, i420_nbytes
from framebus_inferencer.postprocess import RawDetections, class_name


@dataclass(frozen=True)
class Received:
    """A consumed frame message, decoded; `tensor` is a flat uint8 view into the record."""

    msg: MessageProto
    frame: Frame
    tensor: npt.NDArray[np.uint8] | bytes


@dataclass(frozen=True)
class Outgoing:
    """One Kafka record to produce."""

    topic: str
    value: bytes
    key: bytes | str | None
    headers: list[tuple[str, bytes]]


def boxes_of(det: RawDetections, frame: Frame, names: Sequence[str]) -> tuple[Box, ...]:
    """Model-input boxes of one frame, mapped back to its original pixels and clipped."""
    if not len(det.boxes):
        return ()  # most frames of a camera: no numpy calls for them
    xyxy = boxes_to_original(
        det.boxes, frame.scale, frame.pad_x, frame.pad_y, frame.orig_width, frame.orig_height
    )
    return tuple(
        Box(
            float(b[0]),
            float(b[1]),
            float(b[2]),
            float(b[3]),
            int(c),
            class_name(names, int(c)),
            float(s),
        )
        for b, c, s in zip(xyxy, det.class_ids, det.scores, strict=True)
    )


def detections(
    item: Received,
    status: FrameStatus,
    model: tuple[str, str],
    boxes: tuple[Box, ...] = (),
    reason: str | None = None,
    queue_wait_ms: float = 0.0,
    inference_ms: float = 0.0,
    batch_size: int = 0,
    now_s: float | None = None,
) -> Detections:
    """The one detections record of a frame."""
    frame = item.frame
    now = time.time() if now_s is None else now_s
    return Detections(
        camera_id=frame.camera_id,
        seq=frame.seq,
        capture_ts_us=frame.capture_ts_us,
        status=status,
        model_name=model[0],
        model_version=model[1],
        boxes=boxes,
        reason=reason,
        orig_width=frame.orig_width,
        orig_height=frame.orig_height,
        queue_wait_ms=queue_wait_ms,
        inference_ms=inference_ms,
        batch_size=batch_size,
        e2e_latency_ms=max(0.0, now * 1000 - frame.capture_ts_us / 1000),
        frame_partition=item.msg.partition() or 0,
        frame_offset=item.msg.offset() or 0,
    )


def dead_letter(msg: MessageProto, topic: str, reason: str, error_type: str) -> Outgoing:
    """The dead-letter record of a message that cannot be processed."""
    return Outgoing(
        topic,
        msg.value() or b"",
        msg.key(),
        dead_letter_headers(msg, reason, error_type, "inferencer"),
    )


def check_tensor(
    frame: Frame, tensor: npt.NDArray[np.uint8] | bytes, expected: tuple[int, int, int]
) -> str | None:
    """Why a frame's tensor cannot be fed to the model, or None when it can.

    `expected` is the model's (H, W, C): an RGB frame must be that, HWC; an I420 frame (H, W),
    with a matrix and range this release converts.
    """
    if frame.dtype != "uint8":
        return f"frame dtype {frame.dtype} is not uint8"
    fmt = frame.pixel_format
    shape: tuple[int, ...]
    if fmt is PixelFormat.RGB:
        if frame.layout is not TensorLayout.HWC:
            return f"frame layout {frame.layout.value} is not HWC"
        shape, size = expected, math.prod(expected)
    elif fmt is PixelFormat.I420:
        try:
            colour_code(Colour.of(frame))
        except ValueError as exc:
            return f"I420 frame: {exc}, a colour of a later release: upgrade the inferencer"
        shape, size = expected[:2], i420_nbytes(*expected[:2])
    else:
        return f"pixel format {fmt.name}: a format of a later release: upgrade the inferencer"
    if frame.shape != shape or len(tensor) != size:
        return (
            f"frame tensor shape {frame.shape} ({len(tensor)} B) does not match the model input "
            f"{shape} ({fmt.name}); set the decoder's input size to the model's"
        )
    return None
