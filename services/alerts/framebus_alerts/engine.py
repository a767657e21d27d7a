"""The alert engine: runs every rule on each tracks record of a camera, with snapshottable state.

Pure logic, no Kafka. Per camera the engine keeps a cursor (the last seq and capture time seen) and
one state per rule that watches the camera; `snapshot` and `restore` move all of it through JSON,
so a consumer can persist it (e.g. next to its committed offsets) and a restart, or a partition
moving to another consumer, carries on where the last one stopped.

- A record whose (seq, capture time) is not newer than the camera's cursor is a replay
  (redelivery after a restart) and is ignored: no alert, no state change.
- A smaller or equal seq with a newer capture time means the decoder restarted: every rule state of
  the camera starts afresh (a line rule keeps its running counts; see `objects`).
- Frames the model did not look at (`DROPPED_STALE`, `FAILED`) move the cursor and nothing else.
- A STILL frame (the decoder's motion gate saw nothing move) is the scene as last seen: its
  carried objects go to every rule like a looked-at frame's, so zones, dwell, occupancy and
  streaks go on through a still period as if each frame had been inferred (a line rule never
  counts a carried object as a crossing: `objects`). A STILL record without objects (nothing was
  seen, or alerts on detections without a tracker, where nothing carries the boxes) moves the
  cursor and nothing else: it is then not looked at.
- A rule's state is restored only if the rule is defined exactly as when it was saved (same name
  and settings); a changed rule starts afresh, a removed one is dropped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from framebus.errors import ConfigError, StateError
from framebus.messages import (
    Alert,
    Box,
    CrossingDirection,
    Detections,
    FrameStatus,
    RuleType,
    TrackedObject,
    Tracks,
    ZoneAnchor,
    tracks_of,
)
from framebus.sequence import Arrival, arrival

ALL_CAMERAS = "*"
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class Firing:
    """What a rule state says fired on a frame; the engine adds the frame's identity and the clock."""

    rule_type: RuleType
    zone: tuple[tuple[float, float], ...]
    anchor: ZoneAnchor
    boxes: tuple[Box, ...]
    consecutive_frames: int = 1
    track_id: str = ""
    direction: CrossingDirection = CrossingDirection.NONE
    measure: float = 0.0
    counts: tuple[tuple[str, int], ...] = ()


class RuleState(Protocol):
    """What one rule remembers about one camera, and how it reacts to a looked-at frame."""

    def step(self, frame: Tracks) -> list[Firing]:
        """Account for one INFERRED frame, or a STILL one's carried objects; return what fired."""
        ...

    def dump(self) -> dict[str, Any]:
        """The state as JSON-able data."""
        ...

    def load(self, data: Mapping[str, Any]) -> None:
        """Replace the state with what `dump` returned."""
        ...

    def restart(self) -> None:
        """The camera's decoder restarted: forget what belongs to the old run."""
        ...


class AlertRule(Protocol):
    """A configured rule: frame-streak (`rules.Rule`) or object rule (`objects`)."""

    @property
    def name(self) -> str:
        """Unique name, as written in the rules file."""
        ...

    def applies_to(self, camera_id: str) -> bool:
        """True when the rule watches this camera."""
        ...

    def new_state(self) -> RuleState:
        """A fresh state for one camera."""
        ...


@dataclass
class EngineStats:
    """Counters of what the engine saw, per camera, rule and rule type (exported as metrics)."""

    frames: Counter[str] = field(default_factory=Counter)  # camera -> records evaluated
    not_looked_at: Counter[tuple[str, str]] = field(default_factory=Counter)  # (camera, status)
    replays: Counter[str] = field(default_factory=Counter)  # camera -> ignored duplicates
    restarts: Counter[str] = field(default_factory=Counter)  # camera -> decoder restarts seen
    alerts: Counter[str] = field(default_factory=Counter)  # rule -> alerts fired
    alerts_by_type: Counter[str] = field(default_factory=Counter)  # RuleType value -> alerts
    restored: Counter[str] = field(default_factory=Counter)  # camera -> snapshots restored
    discarded: Counter[str] = field(default_factory=Counter)  # rule -> saved states not reused


@dataclass
class _Camera:
    states: dict[str, RuleState]  # rule name -> state, for the rules that watch the camera
    cursor: tuple[int, int] | None = None  # (seq, capture_ts_us) of the last record


def _now_us() -> int:
    return time.time_ns() // 1000


def rule_fingerprint(rule: AlertRule) -> str:
    """A short stable digest of a rule's definition: a saved state is reused only under it."""
    if dataclasses.is_dataclass(rule):
        spec = {f.name: getattr(rule, f.name) for f in dataclasses.fields(rule)}
    else:
        spec = {"repr": repr(rule)}
    text = json.dumps({"type": type(rule).__name__, **spec}, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, RuleType | ZoneAnchor):
        return value.value
    raise TypeError(f"cannot describe {value!r}")


class AlertEngine:
    """Evaluates frame-streak and object rules on tracks records, camera by camera."""

    def __init__(self, rules: Sequence[AlertRule], clock_us: Callable[[], int] = _now_us) -> None:
        names = Counter(r.name for r in rules)
        repeated = sorted(n for n, c in names.items() if c > 1)
        if repeated:
            raise ConfigError(f"rule names must be unique; repeated: {', '.join(repeated)}")
        self.rules = tuple(rules)
        self._fingerprints = {r.name: rule_fingerprint(r) for r in self.rules}
        self._clock_us = clock_us
        self._cameras: dict[str, _Camera] = {}
        self.stats = EngineStats()

    def observe(self, frame: Tracks, partition: int = -1, offset: int = -1) -> list[Alert]:
        """Account for one tracks record; return the alerts it fires (usually none).

        `partition` and `offset` locate the detections record behind it; they go into the alerts.
        """
        camera = self._cameras.get(frame.camera_id) or self._new_camera(frame.camera_id)
        if not self._advance(camera, frame):
            return []
        if not _evaluated(frame):
            self.stats.not_looked_at[(frame.camera_id, frame.status.value)] += 1
            return []
        self.stats.frames[frame.camera_id] += 1
        alerts: list[Alert] = []
        for name, state in camera.states.items():
            for firing in state.step(frame):
                alerts.append(self._alert(name, frame, firing, partition, offset))
        return alerts

    def snapshot(self, camera_id: str) -> dict[str, Any]:
        """Everything the engine remembers about a camera, as JSON-able data (`{"v": 1, ...}`)."""
        camera = self._cameras.get(camera_id)
        if camera is None:
            return {"v": SNAPSHOT_VERSION, "camera_id": camera_id, "cursor": None, "rules": {}}
        return {
            "v": SNAPSHOT_VERSION,
            "camera_id": camera_id,
            "cursor": None if camera.cursor is None else list(camera.cursor),
            "rules": {
                name: {"def": self._fingerprints[name], "state": state.dump()}
                for name, state in camera.states.items()
            },
        }

    def restore(self, camera_id: str, state: Mapping[str, Any]) -> None:
        """Replace what the engine remembers about a camera with a `snapshot` of it.

        Raises StateError when the snapshot is not one this engine wrote (the camera is then left
        as it was).
        """
        if state.get("v") != SNAPSHOT_VERSION:
            raise StateError(
                f"alert state of camera {camera_id!r} has version {state.get('v')!r}; this "
                f"engine reads version {SNAPSHOT_VERSION}: drop the saved state to start afresh"
            )
        try:
            camera = self._load_camera(camera_id, state)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateError(
                f"alert state of camera {camera_id!r} is malformed ({type(exc).__name__}: {exc}); "
                "drop the saved state to start afresh"
            ) from None
        self._cameras[camera_id] = camera
        self.stats.restored[camera_id] += 1

    def forget(self, camera_id: str) -> None:
        """Drop a camera's state (its partition was revoked: another consumer carries on)."""
        self._cameras.pop(camera_id, None)

    def _new_camera(self, camera_id: str) -> _Camera:
        camera = _Camera({r.name: r.new_state() for r in self.rules if r.applies_to(camera_id)})
        self._cameras[camera_id] = camera
        return camera

    def _load_camera(self, camera_id: str, state: Mapping[str, Any]) -> _Camera:
        camera = _Camera({r.name: r.new_state() for r in self.rules if r.applies_to(camera_id)})
        cursor = state["cursor"]
        camera.cursor = None if cursor is None else (int(cursor[0]), int(cursor[1]))
        for name, saved in dict(state["rules"]).items():
            target = camera.states.get(name)
            if target is None or saved["def"] != self._fingerprints[name]:
                self.stats.discarded[name] += 1
                continue
            target.load(saved["state"])
        return camera

    def _advance(self, camera: _Camera, frame: Tracks) -> bool:
        seen = arrival(camera.cursor, frame.seq, frame.capture_ts_us)
        if seen is Arrival.REPLAY:
            self.stats.replays[frame.camera_id] += 1
            return False
        if seen is Arrival.RESTART:
            self.stats.restarts[frame.camera_id] += 1
            for state in camera.states.values():
                state.restart()
        camera.cursor = (frame.seq, frame.capture_ts_us)
        return True

    def _alert(
        self, rule: str, frame: Tracks, firing: Firing, partition: int, offset: int
    ) -> Alert:
        self.stats.alerts[rule] += 1
        self.stats.alerts_by_type[firing.rule_type.value] += 1
        return Alert(
            rule=rule,
            camera_id=frame.camera_id,
            seq=frame.seq,
            capture_ts_us=frame.capture_ts_us,
            fired_at_us=self._clock_us(),
            model_name=frame.model_name,
            model_version=frame.model_version,
            detections_partition=partition,
            detections_offset=offset,
            **{f.name: getattr(firing, f.name) for f in dataclasses.fields(firing)},
        )


def _evaluated(frame: Tracks) -> bool:
    """True for a frame the rules see: looked at, or still with the objects it carries."""
    if frame.status is FrameStatus.STILL:
        return bool(frame.objects)
    return frame.status is FrameStatus.INFERRED


def tracks_from_detections(det: Detections) -> Tracks:
    """A detections record as a tracks record without a tracker: every box untracked.

    Objects have track_id "" and confirmed False, so only frame-streak rules react to them.
    """
    objects = tuple(
        TrackedObject(track_id="", box=b, first_seen_us=det.capture_ts_us, confirmed=False, hits=1)
        for b in det.boxes
    )
    return tracks_of(det, objects)
