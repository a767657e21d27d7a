import dataclasses
import json
from collections.abc import Iterable, Sequence

import pytest

from framebus.errors import StateError
from framebus.messages import (
    Alert,
    Box,
    CrossingDirection,
    Detections,
    FrameStatus,
    RuleType,
    TrackedObject,
    Tracks,
)
from framebus_alerts.engine import AlertEngine, AlertRule, tracks_from_detections
from framebus_alerts.geometry import crossing_side
from framebus_alerts.objects import DwellRule, LineCrossingRule, ZoneRule
from framebus_alerts.rules import OccupancyRule, Rule, needs_tracks

ZONE = ((100.0, 100.0), (200.0, 100.0), (200.0, 200.0), (100.0, 200.0))
LINE = ((0.0, 500.0), (1000.0, 500.0))  # points right: IN is downwards on screen
IN_XY, OUT_XY = (150.0, 150.0), (300.0, 150.0)
ABOVE, BELOW = (500.0, 450.0), (500.0, 550.0)
START_US = 1_000_000


def obj(
    tid: str,
    xy: tuple[float, float],
    cls: str = "person",
    score: float = 0.9,
    confirmed: bool = True,
) -> TrackedObject:
    x, y = xy  # the box's bottom-centre, the default anchor
    box = Box(x - 10, y - 40, x + 10, y, 0, cls, score)
    return TrackedObject(tid, box, first_seen_us=0, confirmed=confirmed, hits=3)


def frame(
    seq: int,
    *objects: TrackedObject,
    ts: int | None = None,
    status: FrameStatus = FrameStatus.INFERRED,
    camera: str = "cam-1",
) -> Tracks:
    capture = ts if ts is not None else START_US + seq * 100_000  # 10 fps
    return Tracks(camera, seq, capture, status, objects, model_name="m", model_version="1")


def run(engine: AlertEngine, frames: Iterable[Tracks]) -> list[Alert]:
    return [a for f in frames for a in engine.observe(f)]


def enter(**kw: object) -> ZoneRule:
    return ZoneRule(**{"name": "enter", "zone": ZONE, **kw})  # type: ignore[arg-type]


def exit_rule(**kw: object) -> ZoneRule:
    return ZoneRule(**{"name": "exit", "zone": ZONE, "event": RuleType.ZONE_EXIT, **kw})  # type: ignore[arg-type]


def line(**kw: object) -> LineCrossingRule:
    return LineCrossingRule(**{"name": "line", "line": LINE, **kw})  # type: ignore[arg-type]


def path(tid: str, *points: tuple[float, float], first: int = 0, **kw: object) -> list[Tracks]:
    return [frame(first + i, obj(tid, p, **kw)) for i, p in enumerate(points)]  # type: ignore[arg-type]


def test_zone_enter_when_inside_for_inertia_frames_then_fires_once_at_the_second() -> None:
    engine = AlertEngine([enter()], clock_us=lambda: 7)
    alerts = run(engine, path("t1", OUT_XY, OUT_XY, IN_XY, IN_XY, IN_XY, IN_XY))
    [alert] = alerts
    assert (alert.seq, alert.rule_type, alert.track_id) == (3, RuleType.ZONE_ENTER, "t1")
    assert alert.consecutive_frames == 2 and alert.boxes == (obj("t1", IN_XY).box,)
    assert (alert.zone, alert.fired_at_us, alert.model_name) == (ZONE, 7, "m")


def test_zone_enter_when_anchor_jitters_in_for_one_frame_then_inertia_holds_it_out() -> None:
    engine = AlertEngine([enter()])
    assert run(engine, path("t1", OUT_XY, IN_XY, OUT_XY, IN_XY, OUT_XY)) == []


def test_zone_enter_when_track_absent_from_frames_then_absence_neither_counts_nor_breaks() -> None:
    engine = AlertEngine([enter()])
    frames = [frame(0, obj("t1", IN_XY)), frame(1, obj("t2", OUT_XY)), frame(2, obj("t1", IN_XY))]
    assert [(a.seq, a.track_id) for a in run(engine, frames)] == [(2, "t1")]


def test_zone_exit_when_in_then_seen_outside_for_inertia_frames_then_fires_once() -> None:
    engine = AlertEngine([exit_rule()])
    points = (IN_XY, IN_XY, IN_XY, OUT_XY, IN_XY, OUT_XY, OUT_XY, OUT_XY)
    [alert] = run(engine, path("t1", *points))
    assert (alert.seq, alert.rule_type) == (6, RuleType.ZONE_EXIT)
    assert alert.consecutive_frames == 4  # observations in the zone during the visit


def test_zone_exit_when_never_in_or_vanishes_inside_then_no_exit() -> None:
    engine = AlertEngine([exit_rule()])
    assert run(engine, path("t1", OUT_XY, OUT_XY, OUT_XY)) == []
    vanishing = path("t2", IN_XY, IN_XY, first=3) + [frame(s) for s in range(5, 30)]
    assert run(engine, vanishing) == []


def test_zone_rules_when_cooldown_zero_then_once_per_track_else_again_after_cooldown() -> None:
    back_and_forth = [IN_XY] * 2 + [OUT_XY] * 2 + [IN_XY] * 2 + [OUT_XY] * 20 + [IN_XY] * 2
    once = AlertEngine([enter()])
    assert [a.seq for a in run(once, path("t1", *back_and_forth))] == [1]
    again = AlertEngine([enter(cooldown_s=1.0)])  # 1 s = 10 frames
    assert [a.seq for a in run(again, path("t1", *back_and_forth))] == [1, 27]


def test_object_rules_when_track_unconfirmed_or_wrong_class_or_score_then_ignored() -> None:
    engine = AlertEngine([enter(classes=frozenset({"person"}))])
    assert run(engine, path("t1", IN_XY, IN_XY, IN_XY, confirmed=False)) == []
    assert run(engine, path("t2", IN_XY, IN_XY, cls="car", first=3)) == []
    assert run(engine, path("t3", IN_XY, IN_XY, score=0.2, first=5)) == []
    untracked = [frame(7 + i, obj("", IN_XY)) for i in range(3)]
    assert run(engine, untracked) == []


@pytest.mark.parametrize("status", [FrameStatus.DROPPED_STALE, FrameStatus.FAILED])
def test_object_rules_when_frames_not_looked_at_then_nothing_moves(status: FrameStatus) -> None:
    engine = AlertEngine([enter(), line()])
    frames = [
        frame(0, obj("t1", IN_XY), obj("t2", ABOVE)),
        frame(1, obj("t1", IN_XY), obj("t2", BELOW), status=status),  # not looked at
        frame(2, obj("t1", OUT_XY), obj("t2", ABOVE)),
        frame(3, obj("t1", IN_XY), obj("t2", ABOVE)),
    ]
    assert run(engine, frames) == []
    assert engine.stats.not_looked_at[("cam-1", status.value)] == 1
    assert [a.rule for a in engine.observe(frame(4, obj("t1", IN_XY)))] == ["enter"]


@pytest.mark.parametrize("fps", [2, 5, 10])
def test_dwell_when_track_stays_then_fires_exactly_once_within_one_interval_of_truth(
    fps: int,
) -> None:
    dt_us, entered_us, seconds = 1_000_000 // fps, 1_030_000, 3.0
    engine = AlertEngine([DwellRule(name="dwell", zone=ZONE, seconds=seconds)])
    frames = []
    for seq in range(12 * fps):
        ts = seq * dt_us
        frames.append(frame(seq, obj("t1", IN_XY if ts >= entered_us else OUT_XY), ts=ts))
    [alert] = run(engine, frames)
    truth_us = entered_us + 3_000_000
    assert truth_us <= alert.capture_ts_us < truth_us + dt_us
    assert alert.rule_type is RuleType.DWELL and alert.measure == seconds
    assert alert.consecutive_frames == 3 * fps + 1


def test_dwell_when_track_leaves_before_seconds_then_run_resets() -> None:
    engine = AlertEngine([DwellRule(name="dwell", zone=ZONE, seconds=1.0)])
    # 0.9 s in, out for 2 frames (inertia), 0.9 s in again: never 1 s in one visit.
    points = [IN_XY] * 10 + [OUT_XY] * 2 + [IN_XY] * 10
    assert run(engine, path("t1", *points)) == []
    # One frame out is jitter: the visit goes on and reaches 1 s.
    engine = AlertEngine([DwellRule(name="dwell", zone=ZONE, seconds=1.0)])
    [alert] = run(engine, path("t1", *([IN_XY] * 6 + [OUT_XY] + [IN_XY] * 6)))
    assert (alert.seq, alert.measure) == (10, 1.0)


def test_line_crossing_when_each_direction_then_direction_and_running_counts() -> None:
    engine = AlertEngine([line()])
    frames = [
        frame(0, obj("a", ABOVE), obj("b", BELOW), obj("c", ABOVE, cls="car")),
        frame(1, obj("a", BELOW), obj("b", ABOVE), obj("c", BELOW, cls="car")),
        frame(2, obj("d", (600, 400))),
        frame(3, obj("d", (620, 600))),
    ]
    got = [(a.track_id, a.direction, a.measure, a.counts) for a in run(engine, frames)]
    assert got == [
        ("a", CrossingDirection.IN, 1.0, (("person:IN", 1),)),
        ("b", CrossingDirection.OUT, 1.0, (("person:IN", 1), ("person:OUT", 1))),
        ("c", CrossingDirection.IN, 1.0, (("car:IN", 1), ("person:IN", 1), ("person:OUT", 1))),
        ("d", CrossingDirection.IN, 2.0, (("car:IN", 1), ("person:IN", 2), ("person:OUT", 1))),
    ]


def test_line_crossing_when_direction_defined_then_cross_product_sign_decides() -> None:
    # Looking from (0, 500) to (1000, 500), on screen (y down) the right-hand side is below.
    assert crossing_side(ABOVE, BELOW, *LINE) == 1
    assert crossing_side(BELOW, ABOVE, *LINE) == -1
    assert crossing_side(ABOVE, BELOW, LINE[1], LINE[0]) == -1


def test_line_crossing_when_pacing_on_the_line_then_counted_once_per_direction() -> None:
    engine = AlertEngine([line()])
    alerts = run(engine, path("t1", ABOVE, BELOW, ABOVE, BELOW, ABOVE, (500, 500), BELOW))
    assert [(a.seq, a.direction) for a in alerts] == [
        (1, CrossingDirection.IN),
        (2, CrossingDirection.OUT),
    ]
    again = AlertEngine([line(cooldown_s=0.25)])
    alerts = run(again, path("t1", ABOVE, BELOW, ABOVE, ABOVE, ABOVE, BELOW))
    assert [a.seq for a in alerts] == [1, 2, 5]


def test_line_crossing_when_path_passes_beyond_segment_end_then_not_a_crossing() -> None:
    engine = AlertEngine([line()])
    assert run(engine, path("t1", (1500, 450), (1500, 550))) == []
    assert run(engine, path("t2", (-10, 450), (-5, 550), first=2)) == []
    # A step that lands exactly on the line is skipped: the crossing counts on the next step.
    assert [a.seq for a in run(engine, path("t3", ABOVE, (500, 500), BELOW, first=4))] == [6]


def test_line_crossing_when_crossed_while_unconfirmed_then_counted_once_confirmed() -> None:
    engine = AlertEngine([line()])
    frames = [
        frame(0, obj("t1", ABOVE, confirmed=False)),
        frame(1, obj("t1", BELOW, confirmed=False)),
        frame(2, obj("t1", (500, 560), confirmed=True)),
        # crossed and back while unconfirmed: no net crossing
        frame(3, obj("t2", ABOVE, confirmed=False)),
        frame(4, obj("t2", BELOW, confirmed=False)),
        frame(5, obj("t2", ABOVE, confirmed=False)),
        frame(6, obj("t2", ABOVE, confirmed=True)),
    ]
    assert [(a.seq, a.track_id, a.direction) for a in run(engine, frames)] == [
        (2, "t1", CrossingDirection.IN)
    ]


def occupancy(**kw: object) -> OccupancyRule:
    return OccupancyRule(**{"name": "crowd", "zone": ZONE, "min_objects": 2, **kw})  # type: ignore[arg-type]


def crowd(seq: int, inside: int, outside: int = 1, confirmed: bool = True) -> Tracks:
    objects = [obj(f"in{i}", IN_XY, confirmed=confirmed) for i in range(inside)]
    objects += [obj(f"out{i}", OUT_XY) for i in range(outside)]
    return frame(seq, *objects)


def test_occupancy_when_count_reaches_n_then_fires_and_rearms_only_below_hysteresis() -> None:
    engine = AlertEngine([occupancy()])  # N=2, hysteresis 1: re-arms at 0
    counts = [1, 2, 3, 1, 2, 0, 2]
    alerts = run(engine, [crowd(s, n) for s, n in enumerate(counts)])
    assert [(a.seq, a.measure, len(a.boxes), a.track_id) for a in alerts] == [
        (1, 2.0, 2, ""),
        (6, 2.0, 2, ""),
    ]
    assert alerts[0].rule_type is RuleType.OCCUPANCY
    zero = AlertEngine([occupancy(hysteresis=0)])  # re-arms at 1
    assert [a.seq for a in run(zero, [crowd(s, n) for s, n in enumerate(counts)])] == [1, 4, 6]


def test_occupancy_when_tracks_unconfirmed_then_not_counted() -> None:
    engine = AlertEngine([occupancy(min_objects=1)])
    assert run(engine, [crowd(0, 3, confirmed=False)]) == []
    assert [a.measure for a in engine.observe(crowd(1, 1))] == [1.0]


def test_engine_when_record_replayed_then_ignored_and_nothing_changes() -> None:
    engine = AlertEngine([enter()])
    first = frame(0, obj("t1", IN_XY))
    assert run(engine, [first, first]) == []
    assert engine.stats.replays["cam-1"] == 1
    assert [a.seq for a in engine.observe(frame(1, obj("t1", IN_XY)))] == [1]


def test_engine_when_decoder_restarts_then_tracks_start_afresh_but_line_counts_stay() -> None:
    engine = AlertEngine([enter(), line()])
    run(engine, [frame(5, obj("t1", IN_XY), obj("t2", ABOVE)), frame(6, obj("t2", BELOW))])
    restarted = [frame(0, obj("t1", IN_XY), ts=9_000_000), frame(1, obj("t1", IN_XY), ts=9_100_000)]
    assert [a.seq for a in run(engine, restarted)] == [1]  # one frame before it would not be
    assert engine.stats.restarts["cam-1"] == 1
    later = run(engine, path("t3", ABOVE, BELOW, first=2))
    assert [a.counts for a in later] == [(("person:IN", 2),)]


def test_engine_when_track_unseen_for_ttl_then_forgotten_and_counts_as_new() -> None:
    engine = AlertEngine([enter()])
    assert len(run(engine, path("t1", IN_XY, IN_XY))) == 1
    back = [frame(2, obj("t1", IN_XY), ts=62_000_000), frame(3, obj("t1", IN_XY), ts=62_100_000)]
    assert [a.seq for a in run(engine, back)] == [3]


def test_engine_when_alert_fires_then_it_carries_partition_and_offset() -> None:
    engine = AlertEngine([enter(inertia=1)])
    [alert] = engine.observe(frame(0, obj("t1", IN_XY)), partition=4, offset=99)
    assert (alert.detections_partition, alert.detections_offset) == (4, 99)
    assert engine.stats.alerts_by_type["ZONE_ENTER"] == 1


def _scripted() -> list[Tracks]:
    """Two cameras, every rule type, stale frames, a replay and a decoder restart."""
    frames: list[Tracks] = []
    for seq in range(60):
        ts = START_US + seq * 200_000
        y = 400 + 12 * seq if seq < 25 else 700 - 12 * (seq - 25)
        objects = [
            obj("walker", (500, y)),
            obj("stayer", IN_XY if 5 <= seq < 40 else OUT_XY),
            obj("late", IN_XY if seq % 7 else OUT_XY, confirmed=seq > 10),
        ]
        status = FrameStatus.DROPPED_STALE if seq % 9 == 4 else FrameStatus.INFERRED
        frames.append(frame(seq, *objects, ts=ts, status=status, camera=f"cam-{seq % 2}"))
    frames.insert(30, frames[28])  # a replay
    frames.append(frame(0, obj("walker", (500, 300)), ts=100_000_000, camera="cam-0"))
    return frames


RULES: Sequence[AlertRule] = (
    Rule(name="streak", zone=ZONE, min_consecutive=3),
    enter(),
    exit_rule(),
    DwellRule(name="dwell", zone=ZONE, seconds=1.5, cooldown_s=2.0),
    line(),
    occupancy(),
)


def _comparable(alerts: Iterable[Alert]) -> list[Alert]:
    return [dataclasses.replace(a, fired_at_us=0) for a in alerts]


@pytest.mark.parametrize("split", [1, 9, 20, 31, 45, 61])
def test_engine_when_state_snapshotted_through_json_and_restored_then_same_alerts(
    split: int,
) -> None:
    frames = _scripted()
    want = _comparable(run(AlertEngine(RULES), frames))
    assert {a.rule_type for a in want} == set(RuleType)  # the script exercises every rule type
    before = AlertEngine(RULES, clock_us=lambda: 1)
    got = run(before, frames[:split])
    after = AlertEngine(RULES, clock_us=lambda: 2)
    for camera in ("cam-0", "cam-1"):
        after.restore(camera, json.loads(json.dumps(before.snapshot(camera))))
    got += run(after, frames[split:])
    assert _comparable(got) == want


def test_engine_when_not_restored_then_a_restart_would_differ() -> None:
    # Guards the test above: without the snapshot, the split changes the output.
    frames = _scripted()
    want = _comparable(run(AlertEngine(RULES), frames))
    got = run(AlertEngine(RULES), frames[:31]) + run(AlertEngine(RULES), frames[31:])
    assert _comparable(got) != want


def test_restore_when_rule_changed_then_its_state_starts_afresh_and_others_continue() -> None:
    engine = AlertEngine([enter(), Rule(name="streak", zone=ZONE, min_consecutive=2)])
    engine.observe(frame(0, obj("t1", IN_XY)))
    saved = json.loads(json.dumps(engine.snapshot("cam-1")))
    assert saved["v"] == 1 and saved["cursor"] == [0, START_US]
    changed = AlertEngine([enter(inertia=3), Rule(name="streak", zone=ZONE, min_consecutive=2)])
    changed.restore("cam-1", saved)
    assert changed.stats.discarded["enter"] == 1
    assert [a.rule for a in changed.observe(frame(1, obj("t1", IN_XY)))] == ["streak"]


def test_restore_when_snapshot_foreign_then_codec_error_and_camera_unchanged() -> None:
    engine = AlertEngine([enter()])
    engine.observe(frame(0, obj("t1", IN_XY)))
    with pytest.raises(StateError, match="version"):
        engine.restore("cam-1", {"v": 2})
    with pytest.raises(StateError, match="malformed"):
        engine.restore("cam-1", {"v": 1, "cursor": None, "rules": {"enter": {}}})
    assert [a.seq for a in engine.observe(frame(1, obj("t1", IN_XY)))] == [1]


def test_forget_when_partition_revoked_then_camera_state_gone() -> None:
    engine = AlertEngine([enter()])
    engine.observe(frame(0, obj("t1", IN_XY)))
    engine.forget("cam-1")
    assert engine.snapshot("cam-1") == {"v": 1, "camera_id": "cam-1", "cursor": None, "rules": {}}
    assert engine.observe(frame(1, obj("t1", IN_XY))) == []


def test_tracks_from_detections_when_no_tracker_then_only_frame_rules_fire() -> None:
    det = Detections("cam-1", 0, START_US, FrameStatus.INFERRED, "m", "1", (obj("", IN_XY).box,))
    tracks = tracks_from_detections(det)
    assert [(o.track_id, o.confirmed) for o in tracks.objects] == [("", False)]
    engine = AlertEngine(
        [Rule(name="streak", zone=ZONE), enter(inertia=1), occupancy(min_objects=1)]
    )
    assert [a.rule_type for a in engine.observe(tracks)] == [RuleType.FRAME_STREAK]
    assert needs_tracks([Rule(name="s", zone=ZONE), line()])
    assert not needs_tracks([Rule(name="s", zone=ZONE)])
