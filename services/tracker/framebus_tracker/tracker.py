"""One camera's multi-object tracker: detections records in, tracks records out. Pure logic, no I/O.

Semantics, per camera:

- Cursor: the last (seq, capture_ts_us). A record with seq <= last seq and a capture time <= the
  last one is a replay (a redelivery after a rebalance or a restart): `step` returns None and
  changes nothing. seq <= last seq with a newer capture time means the decoder restarted: the
  camera's state starts afresh (a new epoch), then the record is processed. `missing_before` is
  the count of seqs skipped since the last record (0 for the first record of a state).
- Only INFERRED records update tracks. DROPPED_STALE and FAILED pass through as a tracks record
  with their status and reason and no objects: they neither confirm nor end a track (no ageing
  at them), but they advance the cursor.
- STILL (the decoder's motion gate saw nothing move since the previous frame) means the world as
  last seen holds: the record carries every track seen at the last looked-at frame (not the lost
  ones) at its last detection's box, `carried=True`, with its id, first_seen, hits and
  confirmation unchanged; no hit is counted and nothing ends. The time from the previous record
  to the still one does not count as unseen: every track's last-seen time moves on by it, so a
  still period neither ages a lost track nor ends one by `max_lost_s`, and a track's predicted
  box (and the velocity learnt at its next match) is as if the still period had not happened.
- Track ids are `<camera>/<epoch>/<n>`: epoch is the capture second of the state's first record
  (one more than the previous epoch if that is not later), n counts from 1. So ids follow from the
  data alone, and are unique across cameras and decoder restarts.
- Every box of an INFERRED record gets a track id, a new tentative track's if nothing matches it.
  Objects keep the detections' order, box and score. A track is confirmed once matched in
  `min_hits` looked-at frames, and stays so.
- Ageing is by capture time, not frame count, so it does not depend on the sampling rate: at a
  looked-at frame an unmatched tentative track ends; an unmatched confirmed track is kept (lost,
  and can be matched again under its id) until it has gone unseen for more than `max_lost_s`,
  or until its predicted box lies wholly outside the frame (`orig_width` x `orig_height`, when
  the record has them): an object that walked out is gone, not hidden.
- Matching: each track predicts its box at the frame's capture time with a constant-velocity
  alpha-beta filter on the box centre (px/s, dt from capture times; size from the last
  detection), and the score is the buffered IoU of prediction and detection (see `matching`),
  same class only, gated by `min_match_iou`, assigned greedily best-first. At 2-5 samples/s a
  walking person moves more than its width between samples, which defeats plain IoU. A track
  seen once has no velocity yet: the buffer is what lets its second sample match. Rounds, each
  over what the earlier left: tracks with a velocity; tracks without; tracks without at
  `NEW_TRACK_BUFFER` x `match_buffer`. A lost track is re-taken only by a box whose centre lies
  in its predicted box grown by `match_buffer`: its old id must not pass to another object that
  turns up nearby (at an edge, one that enters where another left).
- Deterministic: the same records give the same output, and `snapshot` -> JSON -> `restore`
  between two records gives exactly what an uninterrupted run gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from framebus.errors import ConfigError, StateError
from framebus.messages import Box, Detections, FrameStatus, TrackedObject, Tracks, tracks_of
from framebus.sequence import Arrival, arrival
from framebus_tracker.matching import assign_in_rounds, centres_within

SNAPSHOT_VERSION = 1
# Alpha-beta gains: the share of a match's position residual taken into the centre, and into
# the velocity (per second of the gap). Lower: smoother under box jitter, slower to turn.
ALPHA = 0.75
BETA = 0.4
US = 1_000_000
# A track seen once has no velocity: what is left after the first rounds gets a last one where
# such tracks grow by this x match_buffer. At 0.5 (x1) a second sample matches up to ~1.8 box
# widths away, at 1.0 (x2) up to ~2.7. Tracks with a velocity rely on their prediction instead:
# a wide buffer on them swaps ids of objects that pass close by.
NEW_TRACK_BUFFER = 2.0


class TrackerStateError(StateError):
    """A tracker snapshot cannot be restored (another version, camera, or a damaged record)."""


@dataclass(frozen=True)
class TrackerConfig:
    """The tracking algorithm's knobs (see `TrackerSettings` for their meaning)."""

    min_hits: int = 2  # matches (looked-at frames) before a track is confirmed
    max_lost_s: float = 2.0  # capture-time seconds a confirmed track survives unmatched
    match_buffer: float = 0.5  # buffered IoU margin, fraction of box width/height on each side
    min_match_iou: float = 0.05  # least buffered IoU of a match

    def __post_init__(self) -> None:
        if self.min_hits < 1:
            raise ConfigError(f"min_hits must be >= 1, got {self.min_hits}")
        if self.max_lost_s <= 0:
            raise ConfigError(f"max_lost_s must be > 0, got {self.max_lost_s}")
        if self.match_buffer < 0:
            raise ConfigError(f"match_buffer must be >= 0, got {self.match_buffer}")
        if not 0 < self.min_match_iou <= 1:
            raise ConfigError(f"min_match_iou must be in (0, 1], got {self.min_match_iou}")


@dataclass
class _Track:
    """One track's state. Plain ints and floats, so a snapshot round-trips exactly."""

    track_id: str
    class_id: int
    first_seen_us: int
    last_seen_us: int
    hits: int
    confirmed: bool
    cx: float  # filtered box centre, px
    cy: float
    w: float  # last detection's size, px
    h: float
    last_box: Box  # the last matched detection, as a still frame carries it
    vx: float = 0.0  # px/s; 0 until the second match
    vy: float = 0.0
    lost: bool = False  # unmatched at the last looked-at frame

    @classmethod
    def new(cls, track_id: str, box: Box, at_us: int, min_hits: int) -> _Track:
        cx, cy, w, h = _centre_size(box)
        return cls(track_id, box.class_id, at_us, at_us, 1, min_hits <= 1, cx, cy, w, h, box)

    def predicted(self, at_us: int) -> tuple[float, float, float, float]:
        """The box (x1, y1, x2, y2) this track expects at capture time `at_us`."""
        dt = max(0, at_us - self.last_seen_us) / US
        cx, cy = self.cx + self.vx * dt, self.cy + self.vy * dt
        return cx - self.w / 2, cy - self.h / 2, cx + self.w / 2, cy + self.h / 2

    def hit(self, box: Box, at_us: int, min_hits: int) -> None:
        """Take a matched detection: filter the centre and velocity, count the hit."""
        zx, zy, self.w, self.h = _centre_size(box)
        self.last_box = box
        dt = (at_us - self.last_seen_us) / US
        if dt <= 0:  # no time passed (clock step back): nothing to learn a velocity from
            self.cx, self.cy = zx, zy
        elif self.hits == 1:  # second sample: the first velocity is the displacement
            self.vx, self.vy = (zx - self.cx) / dt, (zy - self.cy) / dt
            self.cx, self.cy = zx, zy
        else:
            rx = zx - (self.cx + self.vx * dt)
            ry = zy - (self.cy + self.vy * dt)
            self.cx += self.vx * dt + ALPHA * rx
            self.cy += self.vy * dt + ALPHA * ry
            self.vx += BETA * rx / dt
            self.vy += BETA * ry / dt
        self.last_seen_us = max(self.last_seen_us, at_us)
        self.lost = False
        self.hits += 1
        self.confirmed = self.confirmed or self.hits >= min_hits


def _centre_size(box: Box) -> tuple[float, float, float, float]:
    return (
        (float(box.x1) + float(box.x2)) / 2,
        (float(box.y1) + float(box.y2)) / 2,
        float(box.x2) - float(box.x1),
        float(box.y2) - float(box.y1),
    )


class CameraTracker:
    """The tracker of one camera; `step` it with that camera's detections records in seq order."""

    def __init__(self, camera_id: str, config: TrackerConfig) -> None:
        self.camera_id = camera_id
        self.config = config
        self._max_lost_us = round(config.max_lost_s * US)
        self._epoch = 0  # set by the state's first record
        self._counter = 0
        self._last_seq: int | None = None
        self._last_capture_us = 0
        self._tracks: list[_Track] = []

    @property
    def last_seq(self) -> int | None:
        """Seq of the last record taken (None before the first)."""
        return self._last_seq

    @property
    def active_tracks(self) -> int:
        """Tracks alive now: tentative, confirmed and lost."""
        return len(self._tracks)

    def step(
        self, det: Detections, tracked_at_us: int = 0, partition: int = -1, offset: int = -1
    ) -> Tracks | None:
        """One detections record in, one tracks record out; None for a replay (skip it)."""
        if det.camera_id != self.camera_id:
            raise ValueError(f"tracker of {self.camera_id!r} got a record of {det.camera_id!r}")
        last = None if self._last_seq is None else (self._last_seq, self._last_capture_us)
        missing = 0
        previous_us = self._last_capture_us
        match arrival(last, det.seq, det.capture_ts_us):
            case Arrival.REPLAY:
                return None
            case Arrival.FIRST:
                self._start(det.capture_ts_us // US)
            case Arrival.RESTART:
                self._start(max(det.capture_ts_us // US, self._epoch + 1))
            case Arrival.NEXT if last is not None:
                missing = det.seq - last[0] - 1
        self._last_seq, self._last_capture_us = det.seq, det.capture_ts_us
        objects: tuple[TrackedObject, ...] = ()
        if det.status is FrameStatus.INFERRED:
            objects = self._track(det)
        elif det.status is FrameStatus.STILL:
            objects = self._carry(det.capture_ts_us - previous_us)
        return tracks_of(
            det,
            objects,
            missing_before=missing,
            tracked_at_us=tracked_at_us,
            detections_partition=partition,
            detections_offset=offset,
        )

    def _start(self, epoch: int) -> None:
        self._epoch, self._counter, self._tracks = epoch, 0, []

    def _track(self, det: Detections) -> tuple[TrackedObject, ...]:
        now = det.capture_ts_us
        tracks = [t for t in self._tracks if not t.confirmed or self._alive(t, now, det)]
        owners: list[_Track | None] = [None] * len(det.boxes)
        matched: set[int] = set()
        for row, col in self._match(tracks, det.boxes, now):
            tracks[row].hit(det.boxes[col], now, self.config.min_hits)
            owners[col] = tracks[row]
            matched.add(row)
        # Unmatched tentative tracks end here; unmatched confirmed ones are kept, lost.
        self._tracks = [t for i, t in enumerate(tracks) if i in matched or t.confirmed]
        for i, t in enumerate(tracks):
            t.lost = i not in matched
        objects = []
        for col, box in enumerate(det.boxes):
            track = owners[col]
            if track is None:
                track = self._new_track(box, now)
            objects.append(
                TrackedObject(track.track_id, box, track.first_seen_us, track.confirmed, track.hits)
            )
        return tuple(objects)

    def _carry(self, still_us: int) -> tuple[TrackedObject, ...]:
        # Nothing moved for `still_us`: that time is not time unseen (a track started by this
        # record's restart has none before it; a clock step back carries no time).
        for t in self._tracks:
            t.last_seen_us += max(0, still_us)
        return tuple(
            TrackedObject(t.track_id, t.last_box, t.first_seen_us, t.confirmed, t.hits, True)
            for t in self._tracks
            if not t.lost
        )

    def _alive(self, track: _Track, now_us: int, det: Detections) -> bool:
        if now_us - track.last_seen_us > self._max_lost_us:
            return False
        if not track.lost or det.orig_width <= 0 or det.orig_height <= 0:
            return True
        x1, y1, x2, y2 = track.predicted(now_us)
        return x2 > 0 and y2 > 0 and x1 < det.orig_width and y1 < det.orig_height

    def _match(
        self, tracks: list[_Track], boxes: tuple[Box, ...], now_us: int
    ) -> list[tuple[int, int]]:
        if not tracks or not boxes:
            return []
        predicted = np.array([t.predicted(now_us) for t in tracks], dtype=np.float64)
        detected = np.array([(b.x1, b.y1, b.x2, b.y2) for b in boxes], dtype=np.float64)
        track_classes = np.array([t.class_id for t in tracks])
        box_classes = np.array([b.class_id for b in boxes])
        same_class = track_classes[:, None] == box_classes[None, :]
        unmoving = np.array([t.hits == 1 for t in tracks])[:, None]
        buffer = self.config.match_buffer
        lost = np.array([t.lost for t in tracks])[:, None]
        allowed = same_class & (~lost | centres_within(predicted, detected, buffer))
        # Tracks with a velocity first: a new track's guess must not take an established
        # track's detection (at 2 fps, two walkers a width apart otherwise swap ids each sample).
        rounds = [
            (buffer, allowed & ~unmoving),
            (buffer, allowed & unmoving),
            (NEW_TRACK_BUFFER * buffer, allowed & unmoving),
        ]
        return assign_in_rounds(predicted, detected, rounds, self.config.min_match_iou)

    def _new_track(self, box: Box, now_us: int) -> _Track:
        self._counter += 1
        track = _Track.new(
            f"{self.camera_id}/{self._epoch}/{self._counter}", box, now_us, self.config.min_hits
        )
        self._tracks.append(track)
        return track

    # -- state ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able values (a changelog record), restorable by `restore`."""
        return {
            "v": SNAPSHOT_VERSION,
            "camera_id": self.camera_id,
            "epoch": self._epoch,
            "counter": self._counter,
            "last_seq": self._last_seq,
            "last_capture_us": self._last_capture_us,
            "tracks": [
                {
                    "id": t.track_id,
                    "class_id": t.class_id,
                    "first_seen_us": t.first_seen_us,
                    "last_seen_us": t.last_seen_us,
                    "hits": t.hits,
                    "confirmed": t.confirmed,
                    "box": [t.cx, t.cy, t.w, t.h],
                    "velocity": [t.vx, t.vy],
                    "lost": t.lost,
                    "last_box": _box_json(t.last_box),
                }
                for t in self._tracks
            ],
        }

    @classmethod
    def restore(
        cls, camera_id: str, config: TrackerConfig, state: Mapping[str, Any]
    ) -> CameraTracker:
        """A tracker that goes on exactly where the one that took `snapshot()` stopped."""
        if state.get("v") != SNAPSHOT_VERSION:
            raise TrackerStateError(
                f"tracker snapshot of {camera_id!r} has version {state.get('v')!r}, this tracker "
                f"reads {SNAPSHOT_VERSION}; the camera's tracks will start afresh if it is dropped"
            )
        if state.get("camera_id") != camera_id:
            raise TrackerStateError(
                f"tracker snapshot of {state.get('camera_id')!r} offered for {camera_id!r}: "
                "the changelog record's key and value disagree"
            )
        tracker = cls(camera_id, config)
        try:
            tracker._epoch = int(state["epoch"])
            tracker._counter = int(state["counter"])
            tracker._last_seq = None if state["last_seq"] is None else int(state["last_seq"])
            tracker._last_capture_us = int(state["last_capture_us"])
            tracker._tracks = [_track_from(t) for t in state["tracks"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TrackerStateError(
                f"tracker snapshot of {camera_id!r} is damaged ({exc!r}); drop it to start afresh"
            ) from exc
        return tracker


def _box_json(box: Box) -> list[Any]:
    return [box.x1, box.y1, box.x2, box.y2, box.class_id, box.class_name, box.score]


def _box_from(item: Mapping[str, Any], cx: float, cy: float, w: float, h: float) -> Box:
    last = item.get("last_box")
    if last is None:  # a snapshot from before still frames: the filtered box, no name or score
        x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
        return Box(x1, y1, x2, y2, int(item["class_id"]), "", 0.0)
    x1, y1, x2, y2, class_id, class_name, score = last
    return Box(
        float(x1), float(y1), float(x2), float(y2), int(class_id), str(class_name), float(score)
    )


def _track_from(item: Mapping[str, Any]) -> _Track:
    cx, cy, w, h = (float(v) for v in item["box"])
    vx, vy = (float(v) for v in item["velocity"])
    return _Track(
        track_id=str(item["id"]),
        class_id=int(item["class_id"]),
        first_seen_us=int(item["first_seen_us"]),
        last_seen_us=int(item["last_seen_us"]),
        hits=int(item["hits"]),
        confirmed=bool(item["confirmed"]),
        cx=cx,
        cy=cy,
        w=w,
        h=h,
        last_box=_box_from(item, cx, cy, w, h),
        vx=vx,
        vy=vy,
        # Snapshots from before "lost" existed: the track is taken as seen, for one frame.
        lost=bool(item.get("lost", False)),
    )
