"""`framebus render` on still frames: the last full picture, carried boxes dashed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from framebus.messages import Box, Frame, FrameStatus
from framebus_tools.render.draw import class_colour, draw_detections, original_frame
from framebus_tools.render.service import RenderStats, _draw, with_pictures
from tests.unit.framebus_tools.test_render import detections, letterboxed, scene


def still(frame: Frame, seq: int) -> Frame:
    return replace(frame, seq=seq, capture_ts_us=frame.capture_ts_us + seq, tensor=b"", still=True)


def test_with_pictures_when_still_frames_then_last_full_pixels_under_their_own_seq() -> None:
    full = letterboxed(scene())
    other = replace(letterboxed(scene() // 2), seq=10)
    frames = list(with_pictures([still(full, 1), full, still(full, 8), other, still(full, 11)]))
    assert [(f.seq, f.still) for f in frames] == [
        (1, True),
        (7, False),
        (8, True),
        (10, False),
        (11, True),
    ]
    assert frames[0].tensor == b""  # before any picture: nothing to draw it with
    assert frames[2].tensor == full.tensor and frames[4].tensor == other.tensor


def test_draw_when_still_frame_has_no_picture_then_left_out_and_counted() -> None:
    stats = RenderStats()
    assert _draw(still(letterboxed(scene()), 1), None, None, stats) is None
    assert (stats.still_unshown, stats.frames, stats.unreadable) == (1, 0, 0)


def test_draw_detections_when_still_then_carried_boxes_dashed_and_banner_says_so() -> None:
    frame = letterboxed(scene())
    base = original_frame(frame)
    box = Box(200, 100, 500, 300, 0, "square", 0.9)
    seen = draw_detections(base, frame, detections(box))
    carried = draw_detections(base, frame, detections(box, status=FrameStatus.STILL))
    colour = np.array(class_colour(0), np.uint8)
    left_edge_seen = np.all(seen[120:280, 199:203] == colour, axis=-1).any(axis=1)
    left_edge_carried = np.all(carried[120:280, 199:203] == colour, axis=-1).any(axis=1)
    assert left_edge_seen.all()
    assert left_edge_carried.any() and not left_edge_carried.all()  # dashes: gaps
    assert (carried[:60, :400] != seen[:60, :400]).any()  # the banner says STILL
    stats = RenderStats()
    _draw(frame, detections(box, status=FrameStatus.STILL), ["#3"], stats)
    assert (stats.statuses["STILL"], stats.boxes) == (1, 1)
