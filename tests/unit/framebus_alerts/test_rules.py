import json
from pathlib import Path

import pytest

from framebus.errors import ConfigError
from framebus.messages import Box, Detections, FrameStatus, RuleType, ZoneAnchor
from framebus_alerts.engine import AlertEngine, tracks_from_detections
from framebus_alerts.objects import DwellRule, LineCrossingRule, ZoneRule
from framebus_alerts.rules import (
    OccupancyRule,
    Rule,
    RuleEngine,
    anchor_point,
    load_rules,
    parse_rules,
    point_in_polygon,
)

SQUARE_ZONE = ((100.0, 100.0), (200.0, 100.0), (200.0, 200.0), (100.0, 200.0))
# A concave "L": the notch (150..200, 150..200) is outside.
L_ZONE = ((0.0, 0.0), (200.0, 0.0), (200.0, 150.0), (150.0, 150.0), (150.0, 200.0), (0.0, 200.0))


def box(cx: float, bottom: float, cls: str = "person", score: float = 0.9) -> Box:
    return Box(cx - 10, bottom - 40, cx + 10, bottom, 0, cls, score)


def det(
    seq: int,
    *boxes: Box,
    status: FrameStatus = FrameStatus.INFERRED,
    camera: str = "cam-1",
    ts: int | None = None,
) -> Detections:
    return Detections(
        camera_id=camera,
        seq=seq,
        capture_ts_us=ts if ts is not None else 1_000_000 + seq * 40_000,
        status=status,
        model_name="m",
        model_version="1",
        boxes=boxes,
    )


def rule(**kw: object) -> Rule:
    base: dict[str, object] = {
        "name": "r",
        "zone": SQUARE_ZONE,
        "classes": frozenset({"person"}),
        "min_score": 0.5,
        "min_consecutive": 3,
    }
    base.update(kw)
    return Rule(**base)  # type: ignore[arg-type]


IN = box(150, 150)
OUT = box(300, 150)


@pytest.mark.parametrize(
    ("point", "inside"),
    [
        ((150, 150), True),
        ((99.9, 150), False),
        ((100, 150), True),  # on an edge
        ((200, 200), True),  # on a vertex
        ((201, 150), False),
        ((150, 99), False),
    ],
)
def test_point_in_polygon_when_square_zone_then_edges_count_as_inside(
    point: tuple[float, float], inside: bool
) -> None:
    assert point_in_polygon(point, SQUARE_ZONE) is inside


def test_point_in_polygon_when_concave_zone_then_notch_is_outside() -> None:
    assert point_in_polygon((50, 180), L_ZONE)
    assert point_in_polygon((180, 50), L_ZONE)
    assert not point_in_polygon((180, 180), L_ZONE)


def test_zone_membership_when_anchor_bottom_center_then_feet_decide_not_head() -> None:
    # Head inside the zone, feet below it: outside with the default anchor, inside with CENTER.
    tall = Box(140, 120, 160, 230, 0, "person", 0.9)
    assert anchor_point(tall, ZoneAnchor.BOTTOM_CENTER) == (150, 230)
    assert rule().matching([tall]) == ()
    assert rule(anchor=ZoneAnchor.CENTER).matching([tall]) == (tall,)


def test_rule_when_class_or_score_wrong_then_box_does_not_match() -> None:
    r = rule()
    assert r.matching([box(150, 150, cls="car")]) == ()
    assert r.matching([box(150, 150, score=0.49)]) == ()
    assert r.matching([box(150, 150, score=0.5)]) != ()
    assert rule(classes=frozenset()).matching([box(150, 150, cls="car")]) != ()


def test_engine_when_object_in_zone_for_min_consecutive_frames_then_fires_once_at_that_frame() -> (
    None
):
    engine = RuleEngine([rule()], clock_us=lambda: 42)
    fired = [(d.seq, engine.observe(d)) for d in [det(s, IN) for s in range(6)]]
    alerts = [a for _, got in fired for a in got]
    assert len(alerts) == 1
    alert = alerts[0]
    assert (alert.seq, alert.consecutive_frames, alert.fired_at_us) == (2, 3, 42)
    assert alert.boxes == (IN,) and alert.rule == "r" and alert.zone == SQUARE_ZONE


def test_engine_when_streak_broken_by_empty_frame_then_count_restarts() -> None:
    engine = RuleEngine([rule()])
    frames = [det(0, IN), det(1, IN), det(2), det(3, IN), det(4, IN)]
    assert [a for d in frames for a in engine.observe(d)] == []
    assert engine.streak("r", "cam-1") == 2
    assert [a.seq for a in engine.observe(det(5, IN))] == [5]


def test_engine_when_object_leaves_and_returns_then_fires_again_for_new_episode() -> None:
    engine = RuleEngine([rule(min_consecutive=2)])
    frames = [det(0, IN), det(1, IN), det(2, IN), det(3, OUT), det(4, IN), det(5, IN)]
    assert [a.seq for d in frames for a in engine.observe(d)] == [1, 5]


@pytest.mark.parametrize("status", [FrameStatus.DROPPED_STALE, FrameStatus.FAILED])
def test_engine_when_frames_not_looked_at_mid_streak_then_neither_counted_nor_reset(
    status: FrameStatus,
) -> None:
    engine = RuleEngine([rule()])
    frames = [det(0, IN), det(1, IN), det(2, status=status), det(3, status=status)]
    assert [a for d in frames for a in engine.observe(d)] == []
    # Two stale frames did not count as hits (no alert at 2 hits)...
    assert engine.streak("r", "cam-1") == 2
    # ...and did not count as "nothing there": the third hit completes the streak.
    alerts = engine.observe(det(4, IN))
    assert [(a.seq, a.consecutive_frames) for a in alerts] == [(4, 3)]
    assert engine.stats.not_looked_at[("cam-1", status.value)] == 2


def test_engine_when_stale_frames_after_firing_then_not_rearmed() -> None:
    engine = RuleEngine([rule(min_consecutive=1)])
    frames = [det(0, IN), det(1, status=FrameStatus.DROPPED_STALE), det(2, IN)]
    assert [a.seq for d in frames for a in engine.observe(d)] == [0]


def test_engine_when_seq_gap_then_missing_frames_treated_as_not_looked_at() -> None:
    engine = RuleEngine([rule()])
    frames = [det(0, IN), det(1, IN), det(7, IN)]
    assert [a.seq for d in frames for a in engine.observe(d)] == [7]


def test_engine_when_record_replayed_then_ignored() -> None:
    engine = RuleEngine([rule(min_consecutive=2)])
    assert engine.observe(det(0, IN)) == []
    assert engine.observe(det(0, IN)) == []  # redelivered: not a second hit
    assert engine.stats.replays["cam-1"] == 1
    assert [a.seq for a in engine.observe(det(1, IN))] == [1]


def test_engine_when_decoder_restarts_seq_then_state_starts_afresh() -> None:
    engine = RuleEngine([rule(min_consecutive=2)])
    for d in (det(5, IN, ts=100), det(6, IN, ts=200)):
        engine.observe(d)
    # seq back to 0 with a newer capture time: a new decoder run, the old streak is gone.
    assert engine.observe(det(0, IN, ts=300)) == []
    assert engine.stats.restarts["cam-1"] == 1
    assert [a.seq for a in engine.observe(det(1, IN, ts=400))] == [1]


def test_engine_when_rule_names_camera_then_other_cameras_ignored_and_streaks_separate() -> None:
    engine = RuleEngine([rule(camera="cam-1", min_consecutive=2), rule(name="all", camera="*")])
    frames = [det(s, IN, camera=c) for s in range(3) for c in ("cam-1", "cam-2")]
    got = [(a.rule, a.camera_id, a.seq) for d in frames for a in engine.observe(d)]
    assert got == [("r", "cam-1", 1), ("all", "cam-1", 2), ("all", "cam-2", 2)]


def test_engine_when_streak_snapshotted_then_restart_carries_it_on() -> None:
    engine = AlertEngine([rule()])
    for d in (det(0, IN), det(1, IN)):
        engine.observe(tracks_from_detections(d))
    saved = json.loads(json.dumps(engine.snapshot("cam-1")))
    assert saved["rules"]["r"]["state"] == {"count": 2, "fired": False}
    restarted = AlertEngine([rule()])
    restarted.restore("cam-1", saved)
    assert restarted.observe(tracks_from_detections(det(1, IN))) == []  # replay after restart
    [alert] = restarted.observe(tracks_from_detections(det(2, IN)))
    assert (alert.seq, alert.consecutive_frames, alert.rule_type) == (2, 3, RuleType.FRAME_STREAK)


OLD_RULES_YAML = """
rules:
  - name: square-in-right-third
    camera: "*"
    classes: [square]
    zone: [[1280, 0], [1920, 0], [1920, 1080], [1280, 1080]]
    min_score: 0.5
    min_consecutive: 3
"""


def test_parse_rules_when_rules_file_predates_types_then_frame_streak(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(OLD_RULES_YAML, encoding="utf-8")
    [only] = load_rules(path)
    assert only == Rule(
        name="square-in-right-third",
        zone=((1280, 0), (1920, 0), (1920, 1080), (1280, 1080)),
        classes=frozenset({"square"}),
        min_consecutive=3,
    )


def test_parse_rules_when_yaml_example_then_one_rule_of_each_type_with_its_settings() -> None:
    rules = load_rules(Path(__file__).parents[3] / "examples" / "rules.yaml")
    by_name = {r.name: r for r in rules}
    assert [type(r).__name__ for r in rules] == [
        "Rule",
        "Rule",
        "ZoneRule",
        "ZoneRule",
        "DwellRule",
        "LineCrossingRule",
        "OccupancyRule",
    ]
    streak = by_name["person-on-loading-bay"]
    assert isinstance(streak, Rule) and streak.camera == "demo-cam-0"
    assert streak.min_consecutive == 5 and streak.classes == frozenset({"person", "forklift"})
    exit_rule = by_name["person-leaves-loading-bay"]
    assert isinstance(exit_rule, ZoneRule) and exit_rule.event is RuleType.ZONE_EXIT
    dwell = by_name["loiter-at-door"]
    assert isinstance(dwell, DwellRule) and (dwell.seconds, dwell.inertia) == (10.0, 3)
    counter = by_name["door-counter"]
    assert isinstance(counter, LineCrossingRule) and counter.line == ((600, 700), (1300, 700))
    crowd = by_name["crowd-on-loading-bay"]
    assert isinstance(crowd, OccupancyRule) and (crowd.min_objects, crowd.rearm_at) == (4, 2)


def test_parse_rules_when_object_rule_keys_omitted_then_documented_defaults() -> None:
    zone = [[0, 0], [10, 0], [10, 10]]
    doc = {
        "rules": [
            {"name": "e", "type": "zone_enter", "zone": zone},
            {"name": "l", "type": "line_crossing", "line": [[0, 0], [10, 0]]},
            {"name": "o", "type": "occupancy", "zone": zone, "min_objects": 1},
        ]
    }
    enter, crossing, crowd = parse_rules(doc)
    assert isinstance(enter, ZoneRule) and (enter.inertia, enter.cooldown_s) == (2, 0.0)
    assert enter.event is RuleType.ZONE_ENTER and enter.anchor is ZoneAnchor.BOTTOM_CENTER
    assert enter.camera == "*" and enter.classes == frozenset() and enter.min_score == 0.5
    assert isinstance(crossing, LineCrossingRule) and crossing.cooldown_s == 0.0
    assert isinstance(crowd, OccupancyRule) and (crowd.hysteresis, crowd.rearm_at) == (1, 0)


SQ = [[0, 0], [1, 0], [1, 1]]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "non-empty `rules:` list"),
        ({"rules": [{"zone": SQ}]}, r"rule #1: needs a `name`"),
        ({"rules": [{"name": "a"}]}, r"'a' \(frame_streak\): needs `zone`"),
        ({"rules": [{"name": "a", "zone": [[0, 0], [1, 1]]}]}, "at least 3 points"),
        ({"rules": [{"name": "a", "zone": SQ, "colour": 1}]}, "unknown keys"),
        ({"rules": [{"name": "a", "zone": SQ, "anchor": "top"}]}, "`anchor` must be bottom_center"),
        ({"rules": [{"name": "a", "zone": SQ, "min_score": 2}]}, "min_score"),
        ({"rules": [{"name": "a", "zone": SQ}] * 2}, "unique; repeated: a"),
        ({"rules": [{"name": "a", "type": "tripwire"}]}, "unknown type 'tripwire'; one of: frame"),
        ({"rules": [{"name": "a", "type": "zone_exit"}]}, "needs `zone`"),
        ({"rules": [{"name": "a", "type": "dwell", "zone": SQ}]}, "needs `seconds`"),
        ({"rules": [{"name": "a", "type": "dwell"}]}, "needs `zone` and `seconds`"),
        ({"rules": [{"name": "a", "type": "line_crossing"}]}, "needs `line`"),
        ({"rules": [{"name": "a", "type": "occupancy", "zone": SQ}]}, "needs `min_objects`"),
        (
            {"rules": [{"name": "a", "type": "line_crossing", "line": SQ}]},
            "`line` must be a list of 2",
        ),
        (
            {"rules": [{"name": "a", "type": "line_crossing", "line": [[0, 0], [0, 0]]}]},
            "two different",
        ),
        (
            {
                "rules": [
                    {"name": "a", "type": "line_crossing", "line": [[0, 0], [1, 1]], "zone": SQ}
                ]
            },
            r"unknown keys \['zone'\]",
        ),
        (
            {"rules": [{"name": "a", "type": "dwell", "zone": SQ, "seconds": 0}]},
            "seconds must be > 0",
        ),
        (
            {"rules": [{"name": "a", "type": "dwell", "zone": SQ, "seconds": "long"}]},
            "`seconds` must be a number, got 'long'",
        ),
        (
            {"rules": [{"name": "a", "type": "zone_enter", "zone": SQ, "inertia": 0}]},
            "inertia must be >= 1",
        ),
        (
            {"rules": [{"name": "a", "type": "zone_enter", "zone": SQ, "inertia": 1.5}]},
            "`inertia` must be a whole number",
        ),
        (
            {"rules": [{"name": "a", "type": "zone_enter", "zone": SQ, "cooldown_s": -1}]},
            "cooldown_s must be >= 0",
        ),
        (
            {"rules": [{"name": "a", "type": "occupancy", "zone": SQ, "min_objects": 0}]},
            "min_objects must be >= 1",
        ),
        (
            {
                "rules": [
                    {
                        "name": "a",
                        "type": "occupancy",
                        "zone": SQ,
                        "min_objects": 2,
                        "hysteresis": -1,
                    }
                ]
            },
            "hysteresis must be >= 0",
        ),
        ({"rules": [{"name": "a", "zone": "everywhere"}]}, "`zone` must be a list of"),
    ],
)
def test_parse_rules_when_invalid_then_config_error_says_what_is_wrong(
    doc: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rules(doc)
