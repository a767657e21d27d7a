from pathlib import Path

import pytest

from framebus.errors import ConfigError
from framebus.messages import Box, Detections, FrameStatus, ZoneAnchor
from framebus_tools.alerts.rules import (
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


def test_parse_rules_when_yaml_example_then_loads_every_field() -> None:
    rules = load_rules(Path(__file__).parents[3] / "examples" / "rules.yaml")
    assert [r.name for r in rules] == ["square-in-right-third", "person-on-loading-bay"]
    assert rules[1].camera == "demo-cam-0" and rules[1].min_consecutive == 5
    assert rules[1].classes == frozenset({"person", "forklift"})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "non-empty `rules:` list"),
        ({"rules": [{"name": "a"}]}, "needs at least `name` and `zone`"),
        ({"rules": [{"name": "a", "zone": [[0, 0], [1, 1]]}]}, "at least 3 points"),
        ({"rules": [{"name": "a", "zone": [[0, 0], [1, 0], [1, 1]], "colour": 1}]}, "unknown"),
        ({"rules": [{"name": "a", "zone": [[0, 0], [1, 0], [1, 1]], "anchor": "top"}]}, "anchor"),
        ({"rules": [{"name": "a", "zone": [[0, 0], [1, 0], [1, 1]], "min_score": 2}]}, "min_score"),
        (
            {"rules": [{"name": "a", "zone": [[0, 0], [1, 0], [1, 1]]}] * 2},
            "unique; repeated: a",
        ),
    ],
)
def test_parse_rules_when_invalid_then_config_error_says_what_is_wrong(
    doc: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rules(doc)
