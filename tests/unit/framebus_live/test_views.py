from __future__ import annotations

from dataclasses import replace

from framebus.messages import Box, FrameStatus
from framebus_live.records import BoxesRecord, LiveBox
from framebus_live.settings import LiveSource
from framebus_live.source import SourceChooser
from framebus_live.views import CameraView
from tests.unit.framebus_live.test_geometry import _frame

BASE = _frame(1280, 720, 64)


def frame(seq: int):  # type: ignore[no-untyped-def]
    return replace(BASE, seq=seq, capture_ts_us=1000 + seq)


def boxes(seq: int, source: str = "detections") -> BoxesRecord:
    box = LiveBox(Box(1, 2, 3, 4, 0, "person", 0.9))
    return BoxesRecord(
        "cam", seq, 1000 + seq, FrameStatus.INFERRED, 1280, 720, 40.0, (box,), source
    )


def test_view_when_boxes_follow_frame_then_paired_display() -> None:
    view = CameraView(pair_wait_s=1.0)
    assert not view.add_frame(frame(1), now=0.0)
    assert view.add_boxes(boxes(1))
    assert view.display is not None
    assert (view.display.frame.seq, view.display.boxes) == (1, boxes(1))


def test_view_when_boxes_come_before_frame_then_paired_on_arrival() -> None:
    view = CameraView(pair_wait_s=1.0)
    assert not view.add_boxes(boxes(2))
    assert view.add_frame(frame(2), now=0.0)
    assert view.display is not None and view.display.boxes == boxes(2)


def test_view_when_boxes_late_then_frame_shown_bare_after_wait() -> None:
    view = CameraView(pair_wait_s=1.0)
    view.add_frame(frame(1), now=0.0)
    assert not view.expire(0.5)
    assert view.expire(1.0)
    assert view.display is not None and view.display.boxes is None


def test_view_when_newer_frame_before_boxes_then_older_counted_unpaired() -> None:
    view = CameraView(pair_wait_s=1.0)
    view.add_frame(frame(1), now=0.0)
    view.add_frame(frame(2), now=0.1)
    assert view.unpaired == 1
    assert not view.add_boxes(boxes(1))  # its frame is gone: nothing to show
    assert view.add_boxes(boxes(2))


def test_view_when_same_seq_after_decoder_restart_then_not_paired_with_old_record() -> None:
    view = CameraView(pair_wait_s=1.0)
    view.add_boxes(boxes(1))
    restarted = replace(frame(1), capture_ts_us=99_999)
    assert not view.add_frame(restarted, now=0.0)


def test_view_when_tracks_record_after_detections_then_boxes_replaced() -> None:
    view = CameraView(pair_wait_s=1.0)
    view.add_frame(frame(1), now=0.0)
    view.add_boxes(boxes(1))
    assert view.add_boxes(boxes(1, "tracks"))
    assert view.display is not None and view.display.boxes is not None
    assert view.display.boxes.source == "tracks"
    assert view.display.version == 2


def test_chooser_when_auto_then_tracks_while_they_come_else_detections() -> None:
    chooser = SourceChooser(LiveSource.AUTO, tracks_ttl_s=3.0)
    assert chooser.use("cam", "detections", 0.0)  # no tracker seen yet
    assert chooser.use("cam", "tracks", 1.0)
    assert not chooser.use("cam", "detections", 2.0)
    assert chooser.use("other", "detections", 2.0)  # per camera
    assert chooser.use("cam", "detections", 4.5)  # the tracker went quiet
    assert LiveSource.AUTO.topics("t", "d") == ["t", "d"]


def test_chooser_when_fixed_then_only_that_source() -> None:
    chooser = SourceChooser(LiveSource.DETECTIONS)
    assert chooser.use("cam", "detections", 0.0)
    assert not chooser.use("cam", "tracks", 0.0)
    assert LiveSource.DETECTIONS.topics("t", "d") == ["d"]
