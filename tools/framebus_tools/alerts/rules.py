"""The alert rule engine: pure logic, no Kafka.

A rule fires when boxes of the right classes and score have stood in a polygon zone for a minimum
number of consecutive frames of one camera. Choices made here (also in the README):

- A box is "in" the zone when its anchor point is inside the polygon. The default anchor is the
  box's bottom-centre: where a person or vehicle touches the ground, which is what a zone drawn on
  the floor of a scene means. `anchor: center` suits top-down views. Points exactly on an edge
  count as inside.
- A rule fires once per episode: after firing it stays quiet until a frame that was looked at shows
  no match, which re-arms it.
- Frames the model did not look at (`DROPPED_STALE`, `FAILED`) and frames missing from the stream
  (a gap in `seq`) are "not looked at": they neither extend a streak nor break it. Only an
  `INFERRED` frame with no matching box resets the count. So a streak of 3 hits across a stale drop
  fires, and a drop never makes an object look gone.
- A record whose (seq, capture time) is not newer than the last one seen for its camera is a replay
  (redelivery after a restart) and is ignored; a smaller seq with a newer capture time means the
  decoder restarted, and starts the camera's state afresh.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from framebus.errors import ConfigError
from framebus.messages import Alert, Box, Detections, FrameStatus, ZoneAnchor

ALL_CAMERAS = "*"
Point = tuple[float, float]


@dataclass(frozen=True)
class Rule:
    """One alert rule, as written in the rules file."""

    name: str
    zone: tuple[Point, ...]  # polygon vertices in original-frame pixels, in order
    camera: str = ALL_CAMERAS
    classes: frozenset[str] = frozenset()  # empty: any class
    min_score: float = 0.5
    min_consecutive: int = 1
    anchor: ZoneAnchor = ZoneAnchor.BOTTOM_CENTER

    def __post_init__(self) -> None:
        if len(self.zone) < 3:
            raise ConfigError(f"rule {self.name!r}: a zone needs at least 3 points")
        if not 0.0 <= self.min_score <= 1.0:
            raise ConfigError(f"rule {self.name!r}: min_score must be in [0, 1]")
        if self.min_consecutive < 1:
            raise ConfigError(f"rule {self.name!r}: min_consecutive must be >= 1")

    def applies_to(self, camera_id: str) -> bool:
        """True when the rule watches this camera."""
        return self.camera in (ALL_CAMERAS, camera_id)

    def matching(self, boxes: Iterable[Box]) -> tuple[Box, ...]:
        """The boxes of the rule's classes, with enough score, whose anchor lies in the zone."""
        return tuple(
            b
            for b in boxes
            if (not self.classes or b.class_name in self.classes)
            and b.score >= self.min_score
            and self._in_zone(anchor_point(b, self.anchor))
        )

    @functools.cached_property
    def _zone_bounds(self) -> tuple[float, float, float, float]:
        xs, ys = [p[0] for p in self.zone], [p[1] for p in self.zone]
        return min(xs), min(ys), max(xs), max(ys)

    def _in_zone(self, point: Point) -> bool:
        # The bounding-box test rejects most points before the polygon walk.
        x0, y0, x1, y1 = self._zone_bounds
        inside_bounds = x0 <= point[0] <= x1 and y0 <= point[1] <= y1
        return inside_bounds and point_in_polygon(point, self.zone)


def anchor_point(box: Box, anchor: ZoneAnchor) -> Point:
    """The point of a box that is tested against a zone."""
    cx = (box.x1 + box.x2) / 2.0
    if anchor is ZoneAnchor.CENTER:
        return cx, (box.y1 + box.y2) / 2.0
    return cx, box.y2


def point_in_polygon(point: Point, polygon: Sequence[Point]) -> bool:
    """Even-odd ray casting; a point on an edge or vertex counts as inside."""
    x, y = point
    inside = False
    n = len(polygon)
    for i in range(n):
        (x1, y1), (x2, y2) = polygon[i], polygon[(i + 1) % n]
        if _on_segment(x, y, x1, y1, x2, y2):
            return True
        if (y1 > y) != (y2 > y):
            x_cross = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
            if x < x_cross:
                inside = not inside
    return inside


def _on_segment(x: float, y: float, x1: float, y1: float, x2: float, y2: float) -> bool:
    cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
    if abs(cross) > 1e-9 * max(1.0, abs(x2 - x1) + abs(y2 - y1)):
        return False
    return min(x1, x2) <= x <= max(x1, x2) and min(y1, y2) <= y <= max(y1, y2)


def parse_rules(document: Mapping[str, Any]) -> tuple[Rule, ...]:
    """Rules from a parsed rules document: `{rules: [{name, camera, classes, zone, ...}]}`."""
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise ConfigError("a rules file needs a non-empty `rules:` list")
    rules = tuple(_parse_rule(i, r) for i, r in enumerate(raw_rules))
    names = Counter(r.name for r in rules)
    duplicated = sorted(n for n, c in names.items() if c > 1)
    if duplicated:
        raise ConfigError(f"rule names must be unique; repeated: {', '.join(duplicated)}")
    return rules


def _parse_rule(index: int, raw: Any) -> Rule:
    if not isinstance(raw, Mapping) or "name" not in raw or "zone" not in raw:
        raise ConfigError(f"rule #{index + 1}: needs at least `name` and `zone`")
    name = str(raw["name"])
    known = {"name", "camera", "classes", "zone", "min_score", "min_consecutive", "anchor"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"rule {name!r}: unknown keys {unknown}; allowed: {sorted(known)}")
    try:
        zone = tuple((float(p[0]), float(p[1])) for p in raw["zone"])
        classes = raw.get("classes") or []
        if isinstance(classes, str):
            classes = [classes]
        return Rule(
            name=name,
            zone=zone,
            camera=str(raw.get("camera", ALL_CAMERAS)),
            classes=frozenset(str(c) for c in classes),
            min_score=float(raw.get("min_score", 0.5)),
            min_consecutive=int(raw.get("min_consecutive", 1)),
            anchor=ZoneAnchor(str(raw.get("anchor", "bottom_center")).upper()),
        )
    except (TypeError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"rule {name!r}: {exc}; zone is a list of [x, y] pixel points, "
            "anchor is bottom_center or center"
        ) from None


def load_rules(path: Path) -> tuple[Rule, ...]:
    """Read and validate a YAML rules file."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read rules file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"rules file {path} is not valid YAML: {exc}") from None
    if not isinstance(document, Mapping):
        raise ConfigError(f"rules file {path}: expected a mapping with a `rules:` list")
    return parse_rules(document)


@dataclass
class _Streak:
    count: int = 0
    fired: bool = False


@dataclass
class _CameraCursor:
    seq: int
    capture_ts_us: int


@dataclass
class EngineStats:
    """Counters of what the engine saw, per camera and per rule (exported as metrics)."""

    frames: Counter[str] = field(default_factory=Counter)  # camera -> records evaluated
    not_looked_at: Counter[tuple[str, str]] = field(default_factory=Counter)  # (camera, status)
    replays: Counter[str] = field(default_factory=Counter)  # camera -> ignored duplicates
    restarts: Counter[str] = field(default_factory=Counter)  # camera -> decoder restarts seen
    alerts: Counter[str] = field(default_factory=Counter)  # rule -> alerts fired


class RuleEngine:
    """Keeps one streak per (rule, camera) and turns detections records into alerts."""

    def __init__(
        self, rules: Sequence[Rule], clock_us: Callable[[], int] = lambda: time.time_ns() // 1000
    ) -> None:
        self.rules = tuple(rules)
        self._clock_us = clock_us
        self._streaks: dict[tuple[str, str], _Streak] = {}
        self._cursors: dict[str, _CameraCursor] = {}
        self.stats = EngineStats()

    def observe(self, det: Detections) -> list[Alert]:
        """Account for one detections record; return the alerts it fires (usually none)."""
        if not self._advance(det):
            return []
        if det.status is not FrameStatus.INFERRED:
            # Not looked at: nothing is known about this frame, so every streak stays as it is.
            self.stats.not_looked_at[(det.camera_id, det.status.value)] += 1
            return []
        self.stats.frames[det.camera_id] += 1
        alerts: list[Alert] = []
        for rule in self.rules:
            if rule.applies_to(det.camera_id):
                alert = self._apply(rule, det)
                if alert is not None:
                    alerts.append(alert)
        return alerts

    def streak(self, rule_name: str, camera_id: str) -> int:
        """Current consecutive-frame count of a rule on a camera."""
        s = self._streaks.get((rule_name, camera_id))
        return 0 if s is None else s.count

    def _advance(self, det: Detections) -> bool:
        cursor = self._cursors.get(det.camera_id)
        if cursor is not None and det.seq <= cursor.seq:
            if det.capture_ts_us <= cursor.capture_ts_us:
                self.stats.replays[det.camera_id] += 1
                return False
            self.stats.restarts[det.camera_id] += 1
            for key in [k for k in self._streaks if k[1] == det.camera_id]:
                del self._streaks[key]
        self._cursors[det.camera_id] = _CameraCursor(det.seq, det.capture_ts_us)
        return True

    def _apply(self, rule: Rule, det: Detections) -> Alert | None:
        streak = self._streaks.setdefault((rule.name, det.camera_id), _Streak())
        matched = rule.matching(det.boxes)
        if not matched:
            streak.count, streak.fired = 0, False
            return None
        streak.count += 1
        if streak.fired or streak.count < rule.min_consecutive:
            return None
        streak.fired = True
        self.stats.alerts[rule.name] += 1
        return Alert(
            rule=rule.name,
            camera_id=det.camera_id,
            seq=det.seq,
            capture_ts_us=det.capture_ts_us,
            fired_at_us=self._clock_us(),
            consecutive_frames=streak.count,
            zone=rule.zone,
            anchor=rule.anchor,
            boxes=matched,
            model_name=det.model_name,
            model_version=det.model_version,
        )
