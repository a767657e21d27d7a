"""The alert's frame as a JPEG with its boxes drawn: which frame, and the drawing (no Kafka).

Frames on the frames topic are letterboxed model inputs; the picture inside the letterbox covers
the whole original frame, so an alert's boxes (original-frame pixels) scale onto it.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from framebus.errors import CodecError
from framebus.letterbox import letterbox_window
from framebus.messages import Box, Frame

BOX_RGB = (255, 0, 255)  # magenta: rare in camera scenes, easy to find in a test
BOX_THICKNESS_PX = 2


def pick_frame(frames: Sequence[Frame], seq: int, capture_ts_us: int) -> Frame | None:
    """The alert's frame when it has pixels; for a still frame, the last full frame before it."""
    full = [f for f in frames if not f.still]
    exact = [f for f in full if f.seq == seq and f.capture_ts_us == capture_ts_us]
    if exact:
        return exact[-1]
    before = [f for f in full if f.capture_ts_us < capture_ts_us]
    return max(before, key=lambda f: f.capture_ts_us) if before else None


def snapshot_jpeg(frame: Frame, boxes: Sequence[Box], quality: int) -> bytes:
    """The frame's picture with `boxes` drawn, as JPEG; CodecError when the frame has no picture."""
    rgb = letterbox_window(frame)
    height, width = rgb.shape[:2]
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    sx, sy = width / frame.orig_width, height / frame.orig_height
    colour = BOX_RGB[::-1]
    for box in boxes:
        top_left = (round(box.x1 * sx), round(box.y1 * sy))
        bottom_right = (round(box.x2 * sx) - 1, round(box.y2 * sy) - 1)  # x2, y2 exclusive
        cv2.rectangle(bgr, top_left, bottom_right, colour, BOX_THICKNESS_PX)
    ok, encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise CodecError(f"frame {frame.camera_id}#{frame.seq}: JPEG encoding failed")
    return bytes(encoded)
