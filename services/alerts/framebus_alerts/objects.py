"""Track rules: zone enter/exit, dwell and line crossing, which follow each track of a camera.

Each rule reads the tracks of one camera, frame by frame. Choices made here (also in the docs):

- A track takes part when its `track_id` is not empty, it is `confirmed` and its box is of one of
  the rule's classes with at least `min_score`. Other objects of the frame are, for the rule, not
  there (a line rule still records where an unconfirmed track is: see below).
- Only looked-at (INFERRED) frames count, and STILL frames' carried objects (the tracker keeps
  what was seen at its last box while nothing moves); the engine never shows a rule any other. A
  carried object is an observation like a seen one for zones and dwell, so a track standing in a
  zone through a still period keeps its visit and its dwell time. A looked-at frame without a
  track does not move that track: "consecutive" means consecutive observations of the track,
  and a track that disappears is just absent.
- Inertia (zone rules): a track becomes "in" after `inertia` consecutive observations with its
  anchor inside the polygon, and "out" again after `inertia` consecutive observations outside.
  ENTER fires when it becomes in, EXIT when it becomes out after having been in. A track that
  vanishes while in never exits.
- Dwell is measured from the capture time of the first frame of the run of observations that made
  the track "in" (so inertia does not delay the measure), and fires on the first observation in the
  zone at which that reaches `seconds`, at most once per track (a later visit fires again only
  with `cooldown_s` set, once it has passed). Becoming "out" ends the visit.
- Line direction: IN when the anchor goes from the line's left to its right, looking on screen
  from the line's first point to its second (`geometry.side` turns from negative to positive);
  OUT the other way. A crossing is a step between two observations of the track whose path meets
  the line segment itself (not its extension). Points exactly on the line are skipped.
  Unconfirmed observations still move the track's last position; a crossing made while
  unconfirmed is held and counted when the track is confirmed (a crossing back before that cancels
  it). Running counts per `<class>:IN` / `<class>:OUT` survive decoder restarts. Only seen
  movement crosses a line: a carried object keeps its track's path alive and moves nothing.
- Cooldown (per-track rules): `cooldown_s: 0` fires at most once per track (per direction for
  lines); `cooldown_s > 0` lets the same track fire again once that much capture time passed since
  its last firing.
- A track not observed by a rule for `TRACK_TTL_S` seconds of capture time is forgotten by it (it
  then counts as new), which keeps the state bounded.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from framebus.errors import ConfigError
from framebus.messages import CrossingDirection, RuleType, TrackedObject, Tracks, ZoneAnchor
from framebus_alerts.engine import ALL_CAMERAS, Firing
from framebus_alerts.geometry import Point, Polygon, anchor_point, crossing_side, side

TRACK_TTL_S = 60.0
_TTL_US = int(TRACK_TTL_S * 1_000_000)


def seconds_to_us(seconds: float) -> int:
    """Seconds as whole microseconds, the unit of capture times."""
    return round(seconds * 1_000_000)


def _may_fire(last_us: int | None, now_us: int, cooldown_us: int) -> bool:
    return last_us is None or (cooldown_us > 0 and now_us - last_us >= cooldown_us)


@dataclass(frozen=True, kw_only=True)
class ObjectRule:
    """What every object rule has: which camera, which tracks, which point of a box, cooldown."""

    name: str
    camera: str = ALL_CAMERAS
    classes: frozenset[str] = frozenset()  # empty: any class
    min_score: float = 0.5
    anchor: ZoneAnchor = ZoneAnchor.BOTTOM_CENTER
    cooldown_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_score <= 1.0:
            raise ConfigError(f"rule {self.name!r}: min_score must be in [0, 1]")
        if self.cooldown_s < 0:
            raise ConfigError(f"rule {self.name!r}: cooldown_s must be >= 0")

    def applies_to(self, camera_id: str) -> bool:
        """True when the rule watches this camera."""
        return self.camera in (ALL_CAMERAS, camera_id)

    def takes_part(self, obj: TrackedObject, *, confirmed: bool = True) -> bool:
        """True when a tracked object is one this rule looks at."""
        box = obj.box
        return (
            bool(obj.track_id)
            and (obj.confirmed or not confirmed)
            and (not self.classes or box.class_name in self.classes)
            and box.score >= self.min_score
        )

    def _check_zone(self, zone: tuple[Point, ...]) -> None:
        if len(zone) < 3:
            raise ConfigError(f"rule {self.name!r}: a zone needs at least 3 points")


@dataclass(frozen=True, kw_only=True)
class _InZoneRule(ObjectRule):
    """A rule about tracks being in a polygon, with `inertia` against anchors that jitter."""

    zone: tuple[Point, ...]
    inertia: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_zone(self.zone)
        if self.inertia < 1:
            raise ConfigError(f"rule {self.name!r}: inertia must be >= 1 frame")

    @functools.cached_property
    def polygon(self) -> Polygon:
        """The zone, ready for point tests."""
        return Polygon(self.zone)

    @property
    def rule_type(self) -> RuleType:
        """What the rule's alerts say fired."""
        raise NotImplementedError

    def due(self, p: _Presence, changed: bool, inside: bool, now_us: int) -> float | None:
        """The alert's measure when the track's presence calls for one now (cooldown aside)."""
        raise NotImplementedError

    def new_state(self) -> _ZoneState:
        """A fresh state for one camera."""
        return _ZoneState(self)


@dataclass(frozen=True, kw_only=True)
class ZoneRule(_InZoneRule):
    """ZONE_ENTER or ZONE_EXIT (`event`): a track's anchor came into, or left, a polygon."""

    event: RuleType = RuleType.ZONE_ENTER

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.event not in (RuleType.ZONE_ENTER, RuleType.ZONE_EXIT):
            raise ConfigError(f"rule {self.name!r}: event must be ZONE_ENTER or ZONE_EXIT")

    @property
    def rule_type(self) -> RuleType:
        """ZONE_ENTER or ZONE_EXIT."""
        return self.event

    def due(self, p: _Presence, changed: bool, inside: bool, now_us: int) -> float | None:
        """0.0 when the track just became in (ENTER) or out (EXIT)."""
        wanted_inside = self.event is RuleType.ZONE_ENTER
        return 0.0 if changed and p.inside == wanted_inside else None


@dataclass(frozen=True, kw_only=True)
class DwellRule(_InZoneRule):
    """DWELL: a track stayed in a polygon for `seconds` of capture time."""

    seconds: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.seconds <= 0:
            raise ConfigError(f"rule {self.name!r}: seconds must be > 0")

    @property
    def rule_type(self) -> RuleType:
        """DWELL."""
        return RuleType.DWELL

    def due(self, p: _Presence, changed: bool, inside: bool, now_us: int) -> float | None:
        """Seconds in the zone when they reach `seconds` with the anchor in it (once a visit)."""
        in_zone_us = now_us - p.visit_start_us
        if not (p.inside and inside) or p.dwelt or in_zone_us < seconds_to_us(self.seconds):
            return None
        return in_zone_us / 1_000_000


@dataclass(frozen=True, kw_only=True)
class LineCrossingRule(ObjectRule):
    """LINE_CROSSING: a track's anchor crossed a line segment, counted per class and direction."""

    line: tuple[Point, Point]

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.line) != 2 or self.line[0] == self.line[1]:
            raise ConfigError(f"rule {self.name!r}: a line is two different [x, y] points")

    def new_state(self) -> _LineState:
        """A fresh state for one camera."""
        return _LineState(self)


class _Seen(Protocol):
    seen_us: int


T = TypeVar("T", bound=_Seen)


class _TrackTable(Generic[T]):
    """Per-track records of one rule on one camera; a record unseen for the TTL counts as gone."""

    def __init__(self, new: Callable[[int], T]) -> None:
        self._new = new
        self.records: dict[str, T] = {}
        self._prune_at = 0

    def get(self, track_id: str, now_us: int) -> T:
        record = self.records.get(track_id)
        # Expiry is decided here, by capture time, so output never depends on when pruning ran.
        if record is None or now_us - record.seen_us > _TTL_US:
            record = self.records[track_id] = self._new(now_us)
        record.seen_us = now_us
        return record

    def prune(self, now_us: int) -> None:
        if now_us >= self._prune_at:
            self.records = {k: r for k, r in self.records.items() if now_us - r.seen_us <= _TTL_US}
            self._prune_at = now_us + _TTL_US

    def dump(self) -> dict[str, Any]:
        return {k: dataclasses.asdict(r) for k, r in self.records.items()}  # type: ignore[call-overload]

    def load(self, data: Mapping[str, Any], kind: Callable[..., T]) -> None:
        self.records = {str(k): kind(**v) for k, v in data.items()}
        self._prune_at = 0


@dataclass
class _Presence:
    """Where one track stands with one zone."""

    seen_us: int
    inside: bool = False
    streak: int = 0  # consecutive observations that contradict `inside`
    since_us: int = 0  # capture time of the first of them
    visit_start_us: int = 0  # capture time of the first in-zone frame of the current visit
    frames_in: int = 0  # observations in the zone during the current (or last) visit
    dwelt: bool = False  # DWELL fired during the current visit
    fired_us: int | None = None  # capture time of the rule's last firing for this track

    def step(self, inside_now: bool, now_us: int, inertia: int) -> bool:
        """Account for one observation; True when the track became in or out."""
        if inside_now == self.inside:
            self.streak = 0
            self.frames_in += inside_now
            return False
        if self.streak == 0:
            self.since_us = now_us
        self.streak += 1
        if self.streak < inertia:
            return False
        self.inside, self.streak = inside_now, 0
        if inside_now:
            self.visit_start_us, self.frames_in, self.dwelt = self.since_us, inertia, False
        return True


class _ZoneState:
    """ZONE_ENTER, ZONE_EXIT or DWELL on one camera: where each track stands with the zone."""

    def __init__(self, rule: _InZoneRule) -> None:
        self.rule = rule
        self.tracks = _TrackTable(lambda now: _Presence(seen_us=now))

    def step(self, frame: Tracks) -> list[Firing]:
        now = frame.capture_ts_us
        fired = [f for obj in taking_part(self.rule, frame) if (f := self._track(obj, now))]
        self.tracks.prune(now)
        return fired

    def _track(self, obj: TrackedObject, now: int) -> Firing | None:
        rule, p = self.rule, self.tracks.get(obj.track_id, now)
        inside = rule.polygon.contains(anchor_point(obj.box, rule.anchor))
        measure = rule.due(p, p.step(inside, now, rule.inertia), inside, now)
        if measure is None or not _may_fire(p.fired_us, now, seconds_to_us(rule.cooldown_s)):
            return None
        p.fired_us, p.dwelt = now, True
        return Firing(
            rule.rule_type,
            rule.zone,
            rule.anchor,
            (obj.box,),
            p.frames_in,
            obj.track_id,
            measure=measure,
        )

    def dump(self) -> dict[str, Any]:
        return {"tracks": self.tracks.dump()}

    def load(self, data: Mapping[str, Any]) -> None:
        self.tracks.load(data["tracks"], _Presence)

    def restart(self) -> None:
        self.tracks.load({}, _Presence)


@dataclass
class _Path:
    """Where one track was last seen off a line, and what it has done there."""

    seen_us: int
    x: float | None = None
    y: float | None = None
    pending: int = 0  # +1 / -1: crossed IN / OUT while unconfirmed, not counted yet
    fired_in_us: int | None = None
    fired_out_us: int | None = None


class _LineState:
    """LINE_CROSSING on one camera: per-track paths and the running counts."""

    def __init__(self, rule: LineCrossingRule) -> None:
        self.rule = rule
        self.tracks = _TrackTable(lambda now: _Path(seen_us=now))
        self.counts: Counter[str] = Counter()

    def step(self, frame: Tracks) -> list[Firing]:
        now = frame.capture_ts_us
        fired: list[Firing] = []
        for obj in frame.objects:
            if not self.rule.takes_part(obj, confirmed=False):
                continue
            if obj.carried:  # not seen: it keeps the path (and its TTL), never crosses
                self.tracks.get(obj.track_id, now)
            else:
                fired.extend(self._track(obj, now))
        self.tracks.prune(now)
        return fired

    def _track(self, obj: TrackedObject, now: int) -> Iterator[Firing]:
        a, b = self.rule.line
        point = anchor_point(obj.box, self.rule.anchor)
        path = self.tracks.get(obj.track_id, now)
        if side(point, a, b) == 0:
            return
        crossed = (
            0 if path.x is None or path.y is None else crossing_side((path.x, path.y), point, a, b)
        )
        path.x, path.y = point
        if not obj.confirmed:
            if crossed:
                path.pending = 0 if path.pending == -crossed else crossed
            return
        for direction in (path.pending, crossed):
            if direction:
                firing = self._count(obj, path, now, direction)
                if firing is not None:
                    yield firing
        path.pending = 0

    def _count(self, obj: TrackedObject, path: _Path, now: int, direction: int) -> Firing | None:
        last = path.fired_in_us if direction > 0 else path.fired_out_us
        if not _may_fire(last, now, seconds_to_us(self.rule.cooldown_s)):
            return None
        if direction > 0:
            path.fired_in_us, way = now, CrossingDirection.IN
        else:
            path.fired_out_us, way = now, CrossingDirection.OUT
        key = f"{obj.box.class_name}:{way.value}"
        self.counts[key] += 1
        rule = self.rule
        return Firing(
            RuleType.LINE_CROSSING,
            rule.line,
            rule.anchor,
            (obj.box,),
            track_id=obj.track_id,
            direction=way,
            measure=float(self.counts[key]),
            counts=tuple(sorted(self.counts.items())),
        )

    def dump(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "tracks": self.tracks.dump()}

    def load(self, data: Mapping[str, Any]) -> None:
        self.counts = Counter({str(k): int(v) for k, v in data["counts"].items()})
        self.tracks.load(data["tracks"], _Path)

    def restart(self) -> None:
        # A decoder restart ends every track, not the line's tally of the day.
        self.tracks.load({}, _Path)


def taking_part(rule: ObjectRule, frame: Tracks) -> Iterator[TrackedObject]:
    """The confirmed tracks of a frame that a rule looks at."""
    return (o for o in frame.objects if rule.takes_part(o))
