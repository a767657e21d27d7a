"""The alert's frame with its boxes, as JPEG."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from framebus.letterbox import Letterbox
from framebus.messages import Box, Frame, PixelFormat, TensorLayout
from framebus_clips.snapshot import BOX_RGB, pick_frame, snapshot_jpeg

ORIG_W, ORIG_H = 1280, 720
BOX = Box(x1=400.0, y1=200.0, x2=600.0, y2=400.0, class_id=0, class_name="square", score=0.9)


def frame(seq: int, capture_ts_us: int, still: bool = False) -> Frame:
    fit = Letterbox.fit(ORIG_W, ORIG_H, 640, 640)
    tensor = np.full((640, 640, 3), 40, np.uint8)
    return Frame(
        "cam-1", seq, capture_ts_us, ORIG_W, ORIG_H, (640, 640, 3), TensorLayout.HWC,
        fit.scale, fit.pad_x, fit.pad_y, b"" if still else tensor.tobytes(),
        pixel_format=PixelFormat.RGB, still=still,
    )  # fmt: skip


def test_pick_frame_when_the_alert_frame_has_pixels_then_it() -> None:
    frames = [frame(1, 100), frame(2, 200), frame(3, 300)]
    assert pick_frame(frames, 2, 200) == frames[1]


def test_pick_frame_when_the_alert_frame_is_still_then_the_last_full_frame_before() -> None:
    frames = [frame(1, 100), frame(2, 200), frame(3, 300, still=True)]
    assert pick_frame(frames, 3, 300) == frames[1]
    assert pick_frame([frame(3, 300, still=True)], 3, 300) is None


def test_snapshot_jpeg_when_box_given_then_box_colour_on_its_edge_and_not_inside() -> None:
    jpeg = snapshot_jpeg(frame(1, 100), [BOX], quality=95)
    bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    # The letterbox's picture is 640 x 360: original pixels scale by 0.5.
    assert bgr.shape == (360, 640, 3)
    edge = bgr[150, 200].astype(int)  # the left edge, at x1 * 0.5, halfway down
    inside = bgr[150, 250].astype(int)
    assert np.abs(edge - np.array(BOX_RGB[::-1])).max() < 40
    assert np.abs(inside - 40).max() < 10


def test_snapshot_jpeg_when_no_boxes_then_the_picture_alone() -> None:
    jpeg = snapshot_jpeg(dataclasses.replace(frame(1, 100)), [], quality=80)
    assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).shape == (360, 640, 3)
