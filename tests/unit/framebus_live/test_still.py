"""Still frames on the live page: the camera's last full picture, carried boxes drawn dashed."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from framebus.messages import Box, Frame, FrameStatus, TrackedObject, Tracks
from framebus_live import protocol
from framebus_live.inbox import Inbox
from framebus_live.records import BoxesRecord, LiveBox, from_tracks
from framebus_live.stats import CameraStats
from framebus_live.tiles import draw_boxes
from framebus_live.views import CameraView
from tests.unit.framebus_live.test_geometry import _frame

BASE = _frame(1280, 720, 64)


def full(seq: int) -> Frame:
    return replace(BASE, seq=seq, capture_ts_us=1000 + seq)


def still(seq: int) -> Frame:
    return replace(BASE, seq=seq, capture_ts_us=1000 + seq, tensor=b"", still=True)


def carried_record(seq: int) -> BoxesRecord:
    box = Box(100, 100, 300, 400, 0, "person", 0.9)
    obj = TrackedObject("cam/1/7", box, 0, True, 5, carried=True)
    tracks = Tracks("cam", seq, 1000 + seq, FrameStatus.STILL, (obj,), orig_width=1280)
    return replace(from_tracks(tracks), orig_height=720)


def test_view_when_still_frame_then_last_full_picture_shown_with_its_carried_boxes() -> None:
    view = CameraView(pair_wait_s=1.0)
    view.add_frame(full(1), now=0.0)
    assert not view.add_frame(still(2), now=0.1)
    assert view.add_boxes(carried_record(2))
    shown = view.display
    assert shown is not None and shown.boxes == carried_record(2)
    assert (shown.frame.seq, shown.frame.still) == (2, True)
    assert bytes(shown.frame.tensor) == bytes(BASE.tensor)
    assert shown.boxes.boxes[0].carried and shown.boxes.boxes[0].track == "#7"


def test_view_when_still_frame_before_any_full_one_then_not_shown_and_counted() -> None:
    view = CameraView(pair_wait_s=1.0)
    assert not view.add_frame(still(1), now=0.0)
    assert not view.expire(5.0)
    assert view.display is None and view.unshown_still == 1
    view.add_frame(full(2), now=5.0)
    assert view.expire(6.0)


def test_inbox_when_still_frame_replaces_an_untaken_full_one_then_it_keeps_its_pixels() -> None:
    inbox: Inbox[object] = Inbox(wake=lambda: None)
    inbox.put_frame(full(1))
    inbox.put_frame(still(2))
    inbox.put_frame(still(3))
    [(frame, arrivals)], _ = inbox.drain()
    assert (frame.seq, frame.still, arrivals) == (3, True, 3)
    assert bytes(frame.tensor) == bytes(BASE.tensor)


def test_boxes_message_when_carried_then_the_page_is_told() -> None:
    body = json.loads(protocol.boxes_message(carried_record(2), "cam", 2))
    assert body["status"] == "STILL" and body["boxes"][0]["carried"] is True


def test_draw_boxes_when_carried_then_dashed_outline_and_carried_label() -> None:
    solid, dashed = np.zeros((180, 320, 3), np.uint8), np.zeros((180, 320, 3), np.uint8)
    record = carried_record(2)
    seen = replace(record, boxes=(replace(record.boxes[0], carried=False),))
    draw_boxes(solid, seen)
    draw_boxes(dashed, record)
    # The dashed outline leaves gaps along the box's left edge, the solid one none.
    column = 100 * 320 // 1280
    edge = slice(100 * 180 // 720 + 15, 400 * 180 // 720 - 2)
    assert solid[edge, column].any(axis=1).all()
    assert not dashed[edge, column].any(axis=1).all() and dashed[edge, column].any()


def test_figures_when_still_records_then_counted_as_still_not_as_drops() -> None:
    stats = CameraStats(window_s=60.0)
    for seq in range(10):
        status = FrameStatus.STILL if seq % 2 else FrameStatus.INFERRED
        stats.record_out(seq * 0.2, seq, seq, status, 30.0 + seq)
    f = stats.figures(2.0, stalled_after_s=5.0)
    assert (f.still, f.drops, f.records_out) == (5, {}, 10)
    assert f.p99_ms == 38.0  # the latency of looked-at records only


def test_live_box_when_from_detections_then_not_carried() -> None:
    assert not LiveBox(Box(0, 0, 1, 1, 0, "p", 1.0)).carried
