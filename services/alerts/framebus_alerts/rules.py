"""Frame-level rules (frame streak, occupancy), and the rules file: parsing every rule type.

A frame-streak rule (`type: frame_streak`, the default) fires when boxes of the right classes and
score have stood in a polygon zone for a minimum number of consecutive frames of one camera. It
looks at every box of a frame, tracked or not, so it also runs on detections without a tracker
(`engine.tracks_from_detections`). Choices made here (also in the README):

- A box is "in" the zone when its anchor point is inside the polygon (`geometry`).
- A rule fires once per episode: after firing it stays quiet until a frame that was looked at shows
  no match, which re-arms it.
- Frames the model did not look at (`DROPPED_STALE`, `FAILED`) and frames missing from the stream
  (a gap in `seq`) are "not looked at": they neither extend a streak nor break it. Only an
  `INFERRED` frame with no matching box resets the count. A `STILL` frame's carried boxes (the
  scene as last seen) count like a looked-at frame's; a still frame without them (nothing seen,
  or no tracker to carry them) is not looked at (`engine`).
- Replays and decoder restarts are decided by the engine (`engine.AlertEngine`), which also
  snapshots the streaks with the rest of a camera's state.

An occupancy rule (`type: occupancy`) counts, in each looked-at frame, the confirmed tracks of its
classes whose anchor is in its zone. With N = `min_objects` and h = `hysteresis` (default 1) it
fires when the count reaches N while armed, then stays quiet until a looked-at frame counts
max(0, N - 1 - h) or fewer, which re-arms it (so N=3, h=1 fires at 3 and re-arms at 1). Its
`cooldown_s` is the least capture time between two firings (0: none). A decoder restart re-arms.

Rules that follow each track (zone_enter, zone_exit, dwell, line_crossing) live in `objects`.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framebus.errors import ConfigError
from framebus.messages import Alert, Box, Detections, RuleType, Tracks, ZoneAnchor
from framebus_alerts.engine import (
    ALL_CAMERAS,
    AlertEngine,
    EngineStats,
    Firing,
    tracks_from_detections,
)
from framebus_alerts.geometry import Point, Polygon, anchor_point, point_in_polygon
from framebus_alerts.objects import (
    DwellRule,
    LineCrossingRule,
    ObjectRule,
    ZoneRule,
    seconds_to_us,
    taking_part,
)

__all__ = [
    "ALL_CAMERAS",
    "AnyRule",
    "EngineStats",
    "Point",
    "OccupancyRule",
    "Rule",
    "RuleEngine",
    "anchor_point",
    "load_rules",
    "needs_tracks",
    "parse_rules",
    "point_in_polygon",
]


@dataclass(frozen=True)
class Rule:
    """A frame-streak rule, as written in the rules file."""

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
            and self._polygon.contains(anchor_point(b, self.anchor))
        )

    @functools.cached_property
    def _polygon(self) -> Polygon:
        return Polygon(self.zone)

    def new_state(self) -> _StreakState:
        """A fresh streak for one camera."""
        return _StreakState(self)


class _StreakState:
    """One frame-streak rule on one camera: the count of consecutive matching frames."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.count = 0
        self.fired = False

    def step(self, frame: Tracks) -> list[Firing]:
        matched = self.rule.matching(o.box for o in frame.objects)
        if not matched:
            self.count, self.fired = 0, False
            return []
        self.count += 1
        if self.fired or self.count < self.rule.min_consecutive:
            return []
        self.fired = True
        r = self.rule
        return [Firing(RuleType.FRAME_STREAK, r.zone, r.anchor, matched, self.count)]

    def dump(self) -> dict[str, Any]:
        return {"count": self.count, "fired": self.fired}

    def load(self, data: Mapping[str, Any]) -> None:
        self.count, self.fired = int(data["count"]), bool(data["fired"])

    def restart(self) -> None:
        self.count, self.fired = 0, False


@dataclass(frozen=True, kw_only=True)
class OccupancyRule(ObjectRule):
    """OCCUPANCY: at least `min_objects` tracks in a polygon at once."""

    zone: tuple[Point, ...]
    min_objects: int
    hysteresis: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_zone(self.zone)
        if self.min_objects < 1:
            raise ConfigError(f"rule {self.name!r}: min_objects must be >= 1")
        if self.hysteresis < 0:
            raise ConfigError(f"rule {self.name!r}: hysteresis must be >= 0")

    @property
    def rearm_at(self) -> int:
        """The count at or below which a fired rule is armed again."""
        return max(0, self.min_objects - 1 - self.hysteresis)

    @functools.cached_property
    def polygon(self) -> Polygon:
        """The zone, ready for point tests."""
        return Polygon(self.zone)

    def new_state(self) -> _OccupancyState:
        """A fresh state for one camera."""
        return _OccupancyState(self)


class _OccupancyState:
    """OCCUPANCY on one camera: armed or not, and when it last fired."""

    def __init__(self, rule: OccupancyRule) -> None:
        self.rule = rule
        self.armed = True
        self.fired_us: int | None = None

    def step(self, frame: Tracks) -> list[Firing]:
        rule, now = self.rule, frame.capture_ts_us
        inside = [
            o
            for o in taking_part(rule, frame)
            if rule.polygon.contains(anchor_point(o.box, rule.anchor))
        ]
        count = len(inside)
        if not self.armed:
            self.armed = count <= rule.rearm_at
            return []
        cooled = self.fired_us is None or now - self.fired_us >= seconds_to_us(rule.cooldown_s)
        if count < rule.min_objects or not cooled:
            return []
        self.armed, self.fired_us = False, now
        boxes = tuple(o.box for o in inside)
        return [Firing(RuleType.OCCUPANCY, rule.zone, rule.anchor, boxes, measure=float(count))]

    def dump(self) -> dict[str, Any]:
        return {"armed": self.armed, "fired_us": self.fired_us}

    def load(self, data: Mapping[str, Any]) -> None:
        self.armed = bool(data["armed"])
        fired = data["fired_us"]
        self.fired_us = None if fired is None else int(fired)

    def restart(self) -> None:
        self.armed, self.fired_us = True, None


AnyRule = Rule | ZoneRule | DwellRule | LineCrossingRule | OccupancyRule


def needs_tracks(rules: Iterable[AnyRule]) -> bool:
    """True when any rule is an object rule, which only a tracker's output can feed."""
    return any(isinstance(r, ObjectRule) for r in rules)


class RuleEngine:
    """Rules on detections records (no tracker): `AlertEngine` through `tracks_from_detections`."""

    def __init__(
        self, rules: Sequence[AnyRule], clock_us: Callable[[], int] = lambda: time.time_ns() // 1000
    ) -> None:
        self.engine = AlertEngine(rules, clock_us)
        self.rules = self.engine.rules
        self.stats = self.engine.stats

    def observe(self, det: Detections, partition: int = -1, offset: int = -1) -> list[Alert]:
        """Account for one detections record; return the alerts it fires (usually none)."""
        return self.engine.observe(tracks_from_detections(det), partition, offset)

    def streak(self, rule_name: str, camera_id: str) -> int:
        """Current consecutive-frame count of a frame-streak rule on a camera."""
        state = self.engine.snapshot(camera_id)["rules"].get(rule_name)
        return 0 if state is None else int(state["state"]["count"])


def parse_rules(document: Mapping[str, Any]) -> tuple[AnyRule, ...]:
    """Rules from a parsed rules document: `{rules: [{name, type, camera, classes, ...}]}`."""
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise ConfigError("a rules file needs a non-empty `rules:` list")
    rules = tuple(_parse_rule(i, r) for i, r in enumerate(raw_rules))
    names = Counter(r.name for r in rules)
    duplicated = sorted(n for n, c in names.items() if c > 1)
    if duplicated:
        raise ConfigError(f"rule names must be unique; repeated: {', '.join(duplicated)}")
    return rules


_COMMON_KEYS = ("name", "type", "camera", "classes", "min_score", "anchor")
# type -> (required keys, optional keys) besides the common ones
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "frame_streak": (("zone",), ("min_consecutive",)),
    "zone_enter": (("zone",), ("inertia", "cooldown_s")),
    "zone_exit": (("zone",), ("inertia", "cooldown_s")),
    "dwell": (("zone", "seconds"), ("inertia", "cooldown_s")),
    "line_crossing": (("line",), ("cooldown_s",)),
    "occupancy": (("zone", "min_objects"), ("hysteresis", "cooldown_s")),
}


def _parse_rule(index: int, raw: Any) -> AnyRule:
    if not isinstance(raw, Mapping) or "name" not in raw:
        raise ConfigError(f"rule #{index + 1}: needs a `name`")
    name, kind = str(raw["name"]), str(raw.get("type", "frame_streak")).lower()
    if kind not in _KEYS:
        raise ConfigError(f"rule {name!r}: unknown type {kind!r}; one of: {', '.join(_KEYS)}")
    required, optional = _KEYS[kind]
    missing = [f"`{k}`" for k in required if k not in raw]
    if missing:
        raise ConfigError(f"rule {name!r} ({kind}): needs {' and '.join(missing)}")
    allowed = {*_COMMON_KEYS, *required, *optional}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"rule {name!r} ({kind}): unknown keys {unknown}; allowed: {sorted(allowed)}"
        )
    v = _Values(name, raw)
    common: dict[str, Any] = {
        "name": name,
        "camera": str(raw.get("camera", ALL_CAMERAS)),
        "classes": v.classes(),
        "min_score": v.number("min_score", 0.5),
        "anchor": v.anchor(),
    }
    if kind == "frame_streak":
        return Rule(zone=v.points("zone"), min_consecutive=v.whole("min_consecutive", 1), **common)
    common["cooldown_s"] = v.number("cooldown_s", 0.0)
    if kind == "line_crossing":
        a, b = v.points("line", count=2)
        return LineCrossingRule(line=(a, b), **common)
    if kind == "occupancy":
        return OccupancyRule(
            zone=v.points("zone"),
            min_objects=v.whole("min_objects", 1),
            hysteresis=v.whole("hysteresis", 1),
            **common,
        )
    common.update(zone=v.points("zone"), inertia=v.whole("inertia", 2))
    if kind == "dwell":
        return DwellRule(seconds=v.number("seconds", 0.0), **common)
    return ZoneRule(event=RuleType(kind.upper()), **common)


class _Values:
    """Typed values of one rule's keys, with errors that name the rule and the key."""

    def __init__(self, name: str, raw: Mapping[str, Any]) -> None:
        self.name, self.raw = name, raw

    def _bad(self, key: str, what: str) -> ConfigError:
        return ConfigError(f"rule {self.name!r}: `{key}` must be {what}, got {self.raw[key]!r}")

    def number(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, "a number")
        return float(value)

    def whole(self, key: str, default: int) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "a whole number")
        return value

    def points(self, key: str, count: int | None = None) -> tuple[Point, ...]:
        value = self.raw[key]
        what = f"a list of {count or 'at least 3'} [x, y] pixel points"
        if not isinstance(value, list) or (count is not None and len(value) != count):
            raise self._bad(key, what)
        if not all(isinstance(p, list) and len(p) == 2 for p in value):
            raise self._bad(key, what)
        try:
            return tuple((float(p[0]), float(p[1])) for p in value)
        except (TypeError, ValueError):
            raise self._bad(key, what) from None

    def classes(self) -> frozenset[str]:
        value = self.raw.get("classes") or []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self._bad("classes", "a class name or a list of them")
        return frozenset(str(c) for c in value)

    def anchor(self) -> ZoneAnchor:
        value = str(self.raw.get("anchor", "bottom_center")).upper()
        if value not in ZoneAnchor.__members__:
            raise self._bad("anchor", "bottom_center or center")
        return ZoneAnchor[value]


def load_rules(path: Path) -> tuple[AnyRule, ...]:
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
