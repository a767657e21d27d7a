"""Rules on STILL frames: the tracker's carried objects are the scene, but never a movement."""

from __future__ import annotations

import dataclasses

import pytest

from framebus.messages import (
    CrossingDirection,
    Detections,
    FrameStatus,
    RuleType,
    TrackedObject,
    Tracks,
)
from framebus_alerts.engine import AlertEngine, tracks_from_detections
from framebus_alerts.objects import DwellRule
from framebus_alerts.rules import Rule
from tests.unit.framebus_alerts.test_objects import (
    ABOVE,
    BELOW,
    IN_XY,
    OUT_XY,
    ZONE,
    enter,
    frame,
    line,
    obj,
    occupancy,
    run,
)

STILL = FrameStatus.STILL


def carried(o: TrackedObject) -> TrackedObject:
    return dataclasses.replace(o, carried=True)


def dwell_frames(fps: int, still_from_s: float, still_to_s: float) -> list[Tracks]:
    """t1 enters the zone at 1.03 s and stands there; frames in [from, to) are still."""
    dt_us, entered_us = 1_000_000 // fps, 1_030_000
    frames = []
    for seq in range(12 * fps):
        ts = seq * dt_us
        seen = obj("t1", IN_XY if ts >= entered_us else OUT_XY)
        if still_from_s * 1e6 <= ts < still_to_s * 1e6:
            frames.append(frame(seq, carried(seen), ts=ts, status=STILL))
        else:
            frames.append(frame(seq, seen, ts=ts))
    return frames


@pytest.mark.parametrize("fps", [2, 5, 10])
@pytest.mark.parametrize(("still_from_s", "still_to_s"), [(2.0, 8.0), (1.5, 4.5), (3.5, 12.0)])
def test_dwell_when_track_stands_through_a_still_period_then_fires_once_as_if_all_inferred(
    fps: int, still_from_s: float, still_to_s: float
) -> None:
    rules = [DwellRule(name="dwell", zone=ZONE, seconds=3.0)]
    inferred = run(AlertEngine(rules), dwell_frames(fps, 0, 0))
    [alert] = run(AlertEngine(rules), dwell_frames(fps, still_from_s, still_to_s))
    assert [(a.seq, a.capture_ts_us, a.measure) for a in inferred] == [
        (alert.seq, alert.capture_ts_us, alert.measure)
    ]
    assert alert.rule_type is RuleType.DWELL


def test_line_when_objects_carried_then_never_a_crossing_but_the_path_is_kept() -> None:
    engine = AlertEngine([line()])
    t1 = obj("t1", ABOVE)
    # A carried box is where the track was last seen; even one placed across the line moves
    # nothing: only a seen movement crosses.
    every_20_s = [(seq, 1_000_000 + seq * 20_000_000) for seq in range(1, 6)]
    stills = [frame(seq, carried(t1), ts=ts, status=STILL) for seq, ts in every_20_s[:-1]]
    stills += [frame(5, carried(obj("t1", BELOW)), ts=every_20_s[-1][1], status=STILL)]
    assert run(engine, [frame(0, t1), *stills]) == []
    # 110 s after it was last seen, longer than a path is kept unobserved: the still frames kept
    # it, and the next seen step (from above to below) crosses once.
    [crossing] = engine.observe(frame(6, obj("t1", BELOW), ts=1_000_000 + 110_000_000))
    assert crossing.direction is CrossingDirection.IN and crossing.track_id == "t1"


def test_occupancy_when_objects_carried_then_count_goes_on_and_does_not_rearm() -> None:
    engine = AlertEngine([occupancy()])
    two = [obj("t1", IN_XY), obj("t2", (160.0, 160.0))]
    [fired] = engine.observe(frame(0, *two))
    assert fired.measure == 2.0
    stills = [frame(seq, *map(carried, two), status=STILL) for seq in range(1, 6)]
    assert run(engine, stills) == []
    assert engine.observe(frame(6, *two)) == []  # still the same crowd: not a second one
    assert engine.stats.frames["cam-1"] == 7


def test_zone_enter_when_inertia_completes_during_still_frames_then_fires_there_once() -> None:
    engine = AlertEngine([enter(inertia=3)])
    t1 = obj("t1", IN_XY)
    frames = [frame(0, obj("t1", OUT_XY)), frame(1, t1)]
    frames += [frame(seq, carried(t1), status=STILL) for seq in range(2, 6)]
    [alert] = run(engine, frames)
    assert alert.seq == 3 and alert.rule_type is RuleType.ZONE_ENTER


def test_frame_streak_when_still_frames_carry_matches_then_streak_goes_on() -> None:
    engine = AlertEngine([Rule(name="streak", zone=ZONE, min_consecutive=3)])
    t1 = obj("t1", IN_XY)
    frames = [
        frame(0, t1),
        frame(1, carried(t1), status=STILL),
        frame(2, carried(t1), status=STILL),
    ]
    [alert] = run(engine, frames)
    assert alert.seq == 2 and alert.consecutive_frames == 3


def test_rules_when_still_frame_carries_nothing_then_not_looked_at_and_nothing_moves() -> None:
    engine = AlertEngine([enter(), Rule(name="streak", zone=ZONE, min_consecutive=2), line()])
    assert run(engine, [frame(0, obj("t1", IN_XY))]) == []
    assert run(engine, [frame(1, status=STILL), frame(2, status=STILL)]) == []
    assert engine.stats.not_looked_at[("cam-1", "STILL")] == 2
    # The streak neither broke nor grew at the empty still frames: the next match is its second.
    fired = engine.observe(frame(3, obj("t1", IN_XY)))
    assert sorted(a.rule for a in fired) == ["enter", "streak"]


def test_rules_on_detections_when_still_then_not_looked_at_without_a_tracker() -> None:
    engine = AlertEngine([Rule(name="streak", zone=ZONE, min_consecutive=2)])
    seen = frame(0, obj("", IN_XY))
    still = tracks_from_detections(
        dataclasses.replace(_detections_of(seen), seq=1, status=STILL, boxes=())
    )
    assert run(engine, [seen, still]) == []
    assert [a.seq for a in engine.observe(frame(2, obj("", IN_XY)))] == [2]


def _detections_of(t: Tracks) -> Detections:
    return Detections(
        camera_id=t.camera_id,
        seq=t.seq,
        capture_ts_us=t.capture_ts_us + 100_000,
        status=t.status,
        model_name=t.model_name,
        model_version=t.model_version,
        boxes=tuple(o.box for o in t.objects),
    )
