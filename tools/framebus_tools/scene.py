"""A generated multi-object scene with ground truth, for end-to-end tracking and alert tests.

Coloured rectangles ("person"s and a "car") move along piecewise-linear paths on a dark
background. The scene knows each actor's true box at any time, which side of a counting line it
stands on, and when it is inside a zone, so a test can compare what the tracker and the alert
rules report against the truth. `framebus_tools.scene_model` builds the ONNX detector that finds
the actors by colour.

Geometry conventions, shared with the alert rules engine:

- Boxes are (x1, y1, x2, y2) in frame pixels, x2 and y2 exclusive; every edge is even, so the
  colours survive H.264's 4:2:0 chroma subsampling and a 2x letterbox downscale cleanly.
- An actor's anchor is the bottom-centre of its box: ((x1 + x2) / 2, y2).
- The side of point p of a line from (x1, y1) to (x2, y2) is
  `(x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)`, in image coordinates (y down). A crossing is
  IN when the anchor's side goes from negative to positive, OUT the other way: for a line drawn
  from the top of the frame to the bottom, IN is walking towards -x (right to left on screen).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from framebus_tools.synthetic import write_h264

RGB = tuple[int, int, int]
Point = tuple[float, float]
Box = tuple[int, int, int, int]
Keyframe = tuple[float, int, int]  # (t_s, x, y): the box's top-left corner at time t_s

SCENE_CLASS_NAMES = ("person", "car")
BACKGROUND_LEVEL = 24
# The lights on in `framebus_tools.scenes.still_scene`: every actor's luma stays 40 or more from the ground, lit or not
# (a motion gate compares luma, and a blue of luma 88 on a grey of 64 would be nearly invisible).
LIT_LEVEL = 180
PERSON_SIZE = (70, 150)
CAR_SIZE = (160, 90)
# Saturated colours at least 0.3 apart (on 0..1) in some channel from each other, from the
# background and from the letterbox pad grey (114), so a per-channel tolerance of 0.25 tells them
# apart after H.264 at crf 18.
RED: RGB = (220, 40, 40)
BLUE: RGB = (50, 80, 230)
GREEN: RGB = (40, 200, 60)
YELLOW: RGB = (230, 210, 40)
MAGENTA: RGB = (210, 50, 200)
TRUTH_STEP_S = 0.001  # time resolution of the ground-truth helpers


@dataclass(frozen=True)
class Actor:
    """A solid rectangle of one colour moving through `keyframes`, present between the first and last.

    Between keyframes the top-left corner moves linearly; two keyframes at the same place are a
    hold (standing still).
    """

    name: str
    cls: str
    colour: RGB
    size: tuple[int, int]  # (width, height), even
    keyframes: tuple[Keyframe, ...]

    def __post_init__(self) -> None:
        times = [k[0] for k in self.keyframes]
        if len(times) < 2 or times != sorted(times):
            raise ValueError(f"actor {self.name!r}: needs 2 or more keyframes in time order")
        if self.size[0] % 2 or self.size[1] % 2:
            raise ValueError(f"actor {self.name!r}: width and height must be even")

    def box_at(self, t_s: float) -> Box | None:
        """The true box at time `t_s`, edges rounded to even pixels; None when not present."""
        kf = self.keyframes
        if not kf[0][0] <= t_s <= kf[-1][0]:
            return None
        for (t0, x0, y0), (t1, x1, y1) in zip(kf, kf[1:], strict=False):
            if t_s <= t1:
                f = 0.0 if t1 == t0 else (t_s - t0) / (t1 - t0)
                x, y = _even(x0 + f * (x1 - x0)), _even(y0 + f * (y1 - y0))
                return x, y, x + self.size[0], y + self.size[1]
        raise AssertionError("unreachable: t_s is within the keyframes")


def _even(v: float) -> int:
    return 2 * round(v / 2)


# The ground truth below is written apart from framebus_alerts.geometry on purpose: the
# truth the alert rules are judged by must not share their code.


def anchor(box: Box) -> Point:
    """The bottom-centre of a box: where the object stands."""
    return (box[0] + box[2]) / 2, float(box[3])


def line_side(line: tuple[Point, Point], p: Point) -> float:
    """Which side of `line` point `p` is on: the sign of the cross product (module docstring)."""
    (x1, y1), (x2, y2) = line
    return (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1)


def in_polygon(zone: Sequence[Point], p: Point) -> bool:
    """True when `p` is inside the polygon or on its edge."""
    inside = False
    n = len(zone)
    for i in range(n):
        (ax, ay), (bx, by) = zone[i], zone[(i + 1) % n]
        cross = (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)
        on_segment = min(ax, bx) <= p[0] <= max(ax, bx) and min(ay, by) <= p[1] <= max(ay, by)
        if cross == 0 and on_segment:
            return True
        if (ay > p[1]) != (by > p[1]) and p[0] < ax + (p[1] - ay) * (bx - ax) / (by - ay):
            inside = not inside
    return inside


@dataclass(frozen=True)
class Scene:
    """Actors on a dark background, with a counting line, a dwell zone and an occupancy zone.

    Actors are drawn in list order: a later actor hides an earlier one where they overlap.
    """

    actors: tuple[Actor, ...]
    line: tuple[Point, Point]
    zone: tuple[Point, ...]
    occupancy_zone: tuple[Point, ...]
    width: int = 1280
    height: int = 720
    fps: int = 25
    duration_s: float = 14.0
    background: int = BACKGROUND_LEVEL
    class_names: tuple[str, ...] = field(default=SCENE_CLASS_NAMES)
    # (t_s, level): the background's grey from t_s on (a light switched on); before the first, it
    # is `background`.
    lighting: tuple[tuple[float, int], ...] = ()

    def __post_init__(self) -> None:
        for a in self.actors:
            if a.cls not in self.class_names:
                raise ValueError(f"actor {a.name!r}: class {a.cls!r} not in {self.class_names}")
            w, h = a.size
            for _, x, y in a.keyframes:
                if x < 0 or y < 0 or x + w > self.width or y + h > self.height:
                    raise ValueError(f"actor {a.name!r}: keyframe ({x}, {y}) leaves the frame")

    def background_at(self, t_s: float) -> int:
        """The background's grey level at `t_s`."""
        level = self.background
        for start, value in self.lighting:
            if t_s >= start:
                level = value
        return level

    @property
    def frames(self) -> int:
        """Number of frames of the video."""
        return round(self.duration_s * self.fps)

    def box_at(self, actor_index: int, t_s: float) -> Box | None:
        """The true (full, even unoccluded) box of an actor at `t_s`, or None when absent."""
        return self.actors[actor_index].box_at(t_s)

    def labels(self, t_s: float) -> npt.NDArray[np.int8]:
        """(height, width) map of which actor each pixel shows at `t_s` (-1: background)."""
        out = np.full((self.height, self.width), -1, np.int8)
        for i, a in enumerate(self.actors):
            box = a.box_at(t_s)
            if box is not None:
                out[box[1] : box[3], box[0] : box[2]] = i
        return out

    def visible_box_at(self, actor_index: int, t_s: float) -> Box | None:
        """The bounding box of the pixels that show the actor at `t_s` (what a camera can see)."""
        ys, xs = np.nonzero(self.labels(t_s) == actor_index)
        if xs.size == 0:
            return None
        return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1

    def render(self, t_s: float, out: npt.NDArray[np.uint8] | None = None) -> npt.NDArray[np.uint8]:
        """The RGB frame at `t_s` as a (height, width, 3) uint8 array."""
        if out is None:
            out = np.empty((self.height, self.width, 3), np.uint8)
        out.fill(self.background_at(t_s))
        for a in self.actors:
            box = a.box_at(t_s)
            if box is not None:
                out[box[1] : box[3], box[0] : box[2]] = a.colour
        return out

    def _anchors(self, actor_index: int) -> list[tuple[float, Point]]:
        kf = self.actors[actor_index].keyframes
        steps = round((kf[-1][0] - kf[0][0]) / TRUTH_STEP_S)
        out = []
        for i in range(steps + 1):
            t = round(kf[0][0] + i * TRUTH_STEP_S, 6)
            box = self.box_at(actor_index, t)
            if box is not None:
                out.append((t, anchor(box)))
        return out

    def crossings(self, actor_index: int) -> list[tuple[float, str]]:
        """(time, "IN" | "OUT") each time the actor's anchor changes side of `line`."""
        out: list[tuple[float, str]] = []
        last = 0.0
        for t, p in self._anchors(actor_index):
            side = line_side(self.line, p)
            if side != 0 and last != 0 and (side > 0) != (last > 0):
                out.append((t, "IN" if side > 0 else "OUT"))
            last = side or last
        return out

    def expected_crossings(self) -> dict[str, int]:
        """Counts of line crossings by "class:IN" / "class:OUT" over the whole scene."""
        counts: dict[str, int] = {}
        for i, a in enumerate(self.actors):
            for _, direction in self.crossings(i):
                key = f"{a.cls}:{direction}"
                counts[key] = counts.get(key, 0) + 1
        return counts

    def dwell_truth(self, actor_index: int) -> tuple[float, float]:
        """(t_enter_s, t_exit_s): when the anchor first is in `zone` and then first is out (1 ms)."""
        enter: float | None = None
        last = 0.0
        for t, p in self._anchors(actor_index):
            inside = in_polygon(self.zone, p)
            if inside and enter is None:
                enter = t
            elif not inside and enter is not None:
                return enter, t
            last = t
        if enter is None:
            raise ValueError(f"actor {actor_index} never enters the zone")
        return enter, last  # still inside when it vanishes

    def count_in_zone(self, zone: Sequence[Point], t_s: float, cls: str) -> int:
        """How many actors of `cls` have their anchor in `zone` at `t_s`."""
        boxes = [a.box_at(t_s) for a in self.actors if a.cls == cls]
        return sum(1 for b in boxes if b is not None and in_polygon(zone, anchor(b)))

    def occupancy_truth(
        self, min_objects: int = 2, cls: str = "person"
    ) -> list[tuple[float, float]]:
        """(start_s, end_s) spans when `occupancy_zone` holds `min_objects` or more of `cls`.

        Times to 1 ms: start is the first instant with enough objects, end the first without.
        """
        spans: list[tuple[float, float]] = []
        start: float | None = None
        for i in range(round(self.duration_s / TRUTH_STEP_S) + 1):
            t = round(i * TRUTH_STEP_S, 6)
            full = self.count_in_zone(self.occupancy_zone, t, cls) >= min_objects
            if full and start is None:
                start = t
            elif not full and start is not None:
                spans.append((start, t))
                start = None
        if start is not None:
            spans.append((start, self.duration_s))
        return spans


def write_scene_video(
    path: Path, scene: Scene, crf: int = 18, start_s: float = 0.0, end_s: float | None = None
) -> Path:
    """Encode the scene (or the part from `start_s` to `end_s`) to an H.264 MP4 file."""
    first = round(start_s * scene.fps)
    last = scene.frames if end_s is None else round(end_s * scene.fps)
    buffer = np.empty((scene.height, scene.width, 3), dtype=np.uint8)
    frames = (scene.render(i / scene.fps, buffer) for i in range(first, last))
    return write_h264(path, scene.width, scene.height, scene.fps, frames, crf)


def _points(points: Sequence[Point]) -> list[list[int]]:
    return [[round(x), round(y)] for x, y in points]


def scene_rules_document(
    scene: Scene, dwell_s: float = 2.0, camera: str = "*", min_objects: int = 2
) -> dict[str, Any]:
    """The alert rules for `scene` (what examples/scene-rules.yaml holds), in original pixels."""
    return {
        "rules": [
            {
                "name": "person-crosses-line",
                "type": "line_crossing",
                "camera": camera,
                "classes": ["person"],
                "line": _points(scene.line),
                "anchor": "bottom_center",
            },
            {
                "name": "person-dwells-in-zone",
                "type": "dwell",
                "camera": camera,
                "classes": ["person"],
                "zone": _points(scene.zone),
                "seconds": dwell_s,
                "anchor": "bottom_center",
            },
            {
                "name": "people-crowd-the-middle",
                "type": "occupancy",
                "camera": camera,
                "classes": ["person"],
                "zone": _points(scene.occupancy_zone),
                "min_objects": min_objects,
                "anchor": "bottom_center",
            },
        ]
    }
