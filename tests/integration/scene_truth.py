"""Scoring a tracker's output against the generated scene's ground truth (no Kafka here).

Each confirmed tracked object of a frame is matched to the actor whose visible box at the frame's
video time (`Frame.pts_s`) overlaps it most, at IoU 0.3 or more; the counts of track ids per
actor and of actors per track id then say whether tracks were split or swapped.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from framebus.messages import Alert, RuleType, Tracks
from framebus_tools.scene import Box, Scene

MIN_MATCH_IOU = 0.3


def iou(a: Box | tuple[float, float, float, float], b: Box) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def visible_boxes(scene: Scene, t_s: float) -> dict[int, Box]:
    """Actor index -> the box a camera sees at `t_s` (the full box unless another actor overlaps)."""
    full = {k: b for k in range(len(scene.actors)) if (b := scene.box_at(k, t_s)) is not None}
    out: dict[int, Box] = {}
    for k, box in full.items():
        # Only an overlap can hide part of an actor: the exact (pixel map) answer is needed then.
        hidden = any(iou(box, other) > 0 for j, other in full.items() if j != k)
        seen = scene.visible_box_at(k, t_s) if hidden else box
        if seen is not None:
            out[k] = seen
    return out


def best_actor(truth: dict[int, Box], box: tuple[float, float, float, float]) -> int | None:
    """The actor whose true box overlaps `box` most, when that IoU is at least MIN_MATCH_IOU."""
    scored = [(iou(box, b), k) for k, b in truth.items()]
    if not scored:
        return None
    best, k = max(scored)
    return k if best >= MIN_MATCH_IOU else None


@dataclass
class IdReport:
    """Which track ids each actor got, and which actors each track id was matched to (frames)."""

    ids_by_actor: dict[int, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    actors_by_id: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    unmatched: int = 0  # confirmed objects that overlap no actor

    @property
    def actors_present(self) -> int:
        """Actors matched by at least one confirmed object."""
        return len(self.ids_by_actor)

    @property
    def total_ids(self) -> int:
        """Distinct (actor, track id) pairs summed over the actors."""
        return sum(len(ids) for ids in self.ids_by_actor.values())

    def switched_frames(self) -> dict[str, int]:
        """Track id -> frames it was matched to an actor other than its usual one (when > 0)."""
        out = {}
        for tid, actors in self.actors_by_id.items():
            minority = sum(actors.values()) - max(actors.values())
            if minority:
                out[tid] = minority
        return out

    def owner(self, track_id: str) -> int | None:
        """The actor a track id was matched to most often."""
        actors = self.actors_by_id.get(track_id)
        return actors.most_common(1)[0][0] if actors else None


def score_tracks(scene: Scene, frames: Iterable[tuple[float, Tracks]]) -> IdReport:
    """Match every confirmed tracked object of (video time, tracks record) pairs to an actor."""
    report = IdReport()
    for t_s, tracks in frames:
        truth = visible_boxes(scene, t_s)
        for obj in tracks.objects:
            if not obj.confirmed:
                continue
            b = obj.box
            k = best_actor(truth, (b.x1, b.y1, b.x2, b.y2))
            if k is None:
                report.unmatched += 1
                continue
            report.ids_by_actor[k][obj.track_id] += 1
            report.actors_by_id[obj.track_id][k] += 1
    return report


def crossing_counts(alerts: Iterable[Alert]) -> dict[str, int]:
    """LINE_CROSSING alerts counted by "<class>:<direction>" (the class of the alert's box)."""
    counts: Counter[str] = Counter()
    for a in alerts:
        if a.rule_type is RuleType.LINE_CROSSING:
            cls = a.boxes[0].class_name if a.boxes else "?"
            counts[f"{cls}:{a.direction.value}"] += 1
    return dict(counts)
