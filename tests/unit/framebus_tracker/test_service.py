import dataclasses
import json

import pytest

from framebus.codec import DetectionsCodec, TracksCodec
from framebus.errors import CodecError, StateError
from framebus.messages import FrameStatus
from framebus.topology import TopicSettings
from framebus_tracker.service import TrackProcessor
from framebus_tracker.settings import TrackerSettings
from testkit.walkers import camera_detections
from tests.unit.framebus_alerts.test_service import StubMessage


def _messages(count: int) -> list[StubMessage]:
    codec = DetectionsCodec()
    dets = list(camera_detections("cam-1", 5.0, count / 5.0, seed=3))
    return [StubMessage(codec.encode(d), off=i) for i, d in enumerate(dets)]


def test_processor_when_records_tracked_then_one_tracks_record_per_frame_keyed_by_camera() -> None:
    processor = TrackProcessor(
        TrackerSettings(topics=TopicSettings(tracks_topic="t")), clock_us=lambda: 7
    )
    outs = [processor.process(m) for m in _messages(20)]
    assert all(o.key == "cam-1" and len(o.outputs) == 1 for o in outs)
    tracks = [TracksCodec().decode(o.outputs[0].value) for o in outs]
    assert [t.seq for t in tracks] == list(range(20))
    assert all(t.tracked_at_us == 7 and t.detections_partition == 2 for t in tracks)
    assert processor.stats.frames["cam-1"] == 20


def test_processor_when_restored_from_json_snapshot_then_continues_like_an_uninterrupted_one() -> (
    None
):
    messages = _messages(30)
    whole = TrackProcessor(TrackerSettings(), clock_us=lambda: 0)
    want = [whole.process(m).outputs for m in messages]
    first = TrackProcessor(TrackerSettings(), clock_us=lambda: 0)
    for m in messages[:12]:
        first.process(m)
    second = TrackProcessor(TrackerSettings(), clock_us=lambda: 0)
    second.restore("cam-1", json.loads(json.dumps(first.snapshot("cam-1"))))
    assert second.process(messages[11]).key is None  # a replay after the restore: skipped
    got = [second.process(m).outputs for m in messages[12:]]
    assert [o[0].value for o in got] == [o[0].value for o in want[12:]]


def test_processor_when_record_or_state_is_unreadable_then_codec_error() -> None:
    processor = TrackProcessor(TrackerSettings())
    with pytest.raises(CodecError):
        processor.process(StubMessage(b"garbage"))
    with pytest.raises(StateError):
        processor.restore("cam-1", {"v": 99})


def test_processor_when_still_records_then_tracks_records_carry_objects_through_the_codec() -> None:
    codec = DetectionsCodec()
    dets = list(camera_detections("cam-1", 5.0, 2.0, seed=3))
    stills = [
        dataclasses.replace(d, status=FrameStatus.STILL, boxes=(), seq=d.seq + len(dets))
        for d in dets
    ]
    stills = [
        dataclasses.replace(d, capture_ts_us=dets[-1].capture_ts_us + 200_000 * (i + 1))
        for i, d in enumerate(stills)
    ]
    processor = TrackProcessor(TrackerSettings(), clock_us=lambda: 0)
    outs = [processor.process(StubMessage(codec.encode(d), off=i)) for i, d in enumerate(dets)]
    last = TracksCodec().decode(outs[-1].outputs[0].value)
    assert last.objects
    carried = [
        TracksCodec().decode(processor.process(StubMessage(codec.encode(d))).outputs[0].value)
        for d in stills
    ]
    assert all(t.status is FrameStatus.STILL for t in carried)
    assert all(
        [(o.track_id, o.box, o.carried) for o in t.objects]
        == [(o.track_id, o.box, True) for o in last.objects]
        for t in carried
    )
    assert processor.stats.not_looked_at[("cam-1", "STILL")] == len(stills)
