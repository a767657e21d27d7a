"""Do track ids survive low sampling rates? framebus's tracker against plain IoU and norfair.

Generated ground truth: each scene has walkers (box ~60 x 150 px) at 1-2 box widths per sample
at 2 fps (120-240 px/s); the first pairs walk head-on past each other with their boxes partly
overlapping, the rest in random directions. Detections carry small box jitter and an occasional
miss. The same scenes are sampled at 2, 5 and 10 fps and fed to:

- plain IoU: last box, no motion, IoU >= min_match_iou, the tracker's own lifecycle rules;
- buffered IoU, no motion: the same with the tracker's match_buffer;
- framebus, no buffer: `CameraTracker` with match_buffer 0 (motion prediction only);
- framebus: `CameraTracker` with its defaults;
- norfair (when importable; `pip install norfair`, not a framebus dependency) with its default
  settings and an iou or a euclidean (both box corners) distance, and once more "aged in
  seconds" (hit_counter_max = max_lost_s x fps, initialization_delay 1 ~ min_hits 2).

Only confirmed ids count (framebus: `confirmed`; norfair: initialized objects), as alerts use
them. Per method and rate: confirmed ids per true object (ideal 1.00), id switches (an object's
id changes between two of its detections), shared ids (an id that was given to two true
objects), and the share of detections without a confirmed id (tentative, initializing, or
unmatched).
Then framebus's cost per frame with 10 and 30 boxes. A diagnostic: no baseline ratio, no goal.

    .venv/bin/python -m bench.diagnostics.track_matching [--scenes 20] [--objects 6]
"""

from __future__ import annotations

import importlib
import importlib.metadata
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.benchkit import parser_for, print_header
from framebus.messages import Box, Detections, FrameStatus
from framebus_tools.runstats import percentile
from framebus_tracker.matching import buffered_iou, greedy_assign
from framebus_tracker.tracker import CameraTracker, TrackerConfig

RATES = (2, 5, 10)
SECONDS = 8.0
T0_US = 1_700_000_000_000_000

Sample = tuple[int, Box]  # (true object, its detection)
Labels = list[tuple[int, str | None]]  # (true object, track id or None) per detection
Method = Callable[[int], Callable[[int, int, list[Sample]], Labels]]  # fps -> per-frame step


@dataclass(frozen=True)
class Walker:
    """One true object: start centre, velocity (px/s) and size."""

    x0: float
    y0: float
    vx: float
    vy: float
    w: float
    h: float


def scene(rng: np.random.Generator, objects: int) -> list[Walker]:
    """Walkers at 1-2 widths per 0.5 s; pairs (0, 1) and (2, 3) head-on, meeting mid-scene."""
    walkers: list[Walker] = []
    mid = SECONDS / 2
    for i in range(objects):
        w = float(rng.uniform(50, 70))
        h = 2.5 * w
        speed = float(rng.uniform(1.0, 2.0)) * w / 0.5
        if i < 4 and i % 2 == 1:  # the partner of the previous walker: meets it head-on
            prev = walkers[-1]
            y = prev.y0 + float(rng.choice([-1, 1])) * float(rng.uniform(0.2, 0.5)) * h
            meet_x = prev.x0 + prev.vx * mid
            walkers.append(Walker(meet_x + speed * mid, y, -speed, 0.0, w, h))
        elif i < 4:
            y = float(rng.uniform(200, 900))
            walkers.append(Walker(960 - speed * mid, y, speed, 0.0, w, h))
        else:
            angle = float(rng.uniform(0, 2 * np.pi))
            x, y = float(rng.uniform(300, 1600)), float(rng.uniform(200, 900))
            vx, vy = speed * np.cos(angle), speed * np.sin(angle)
            walkers.append(Walker(x - vx * mid, y - vy * mid, float(vx), float(vy), w, h))
    return walkers


def frames(
    walkers: Sequence[Walker], fps: int, rng: np.random.Generator, jitter: float, miss: float
) -> list[list[Sample]]:
    """Each frame's detections: walker boxes with jitter (fraction of size), some missed."""
    out = []
    for n in range(round(SECONDS * fps)):
        t = n / fps
        samples = []
        for i, wk in enumerate(walkers):
            if rng.random() < miss:
                continue
            cx, cy = wk.x0 + wk.vx * t, wk.y0 + wk.vy * t
            dx1, dx2 = rng.normal(0, jitter * wk.w, 2)
            dy1, dy2 = rng.normal(0, jitter * wk.h, 2)
            box = Box(
                float(cx - wk.w / 2 + dx1),
                float(cy - wk.h / 2 + dy1),
                float(cx + wk.w / 2 + dx2),
                float(cy + wk.h / 2 + dy2),
                0,
                "person",
                0.9,
            )
            samples.append((i, box))
        order = rng.permutation(len(samples))  # detectors list boxes in no particular order
        out.append([samples[k] for k in order])
    return out


# ---------------------------------------------------------------------------------------------
# The methods


def framebus_method(config: TrackerConfig) -> Method:
    def start(fps: int) -> Callable[[int, int, list[Sample]], Labels]:
        tracker = CameraTracker("cam", config)

        def step(seq: int, at_us: int, samples: list[Sample]) -> Labels:
            det = Detections(
                "cam", seq, at_us, FrameStatus.INFERRED, "m", "1", tuple(b for _, b in samples)
            )
            tracks = tracker.step(det)
            assert tracks is not None
            return [
                (i, o.track_id if o.confirmed else None)
                for (i, _), o in zip(samples, tracks.objects, strict=True)
            ]

        return step

    return start


@dataclass
class StillTrack:
    track_id: int
    box: tuple[float, float, float, float]
    last_seen_us: int
    hits: int


def still_method(config: TrackerConfig) -> Method:
    """No motion: a track expects its last box; same lifecycle rules as framebus's tracker."""

    def start(fps: int) -> Callable[[int, int, list[Sample]], Labels]:
        tracks: list[StillTrack] = []
        counter = [0]
        max_lost_us = config.max_lost_s * 1e6

        def step(seq: int, at_us: int, samples: list[Sample]) -> Labels:
            alive = [
                t
                for t in tracks
                if t.hits < config.min_hits or at_us - t.last_seen_us <= max_lost_us
            ]
            boxes = [(b.x1, b.y1, b.x2, b.y2) for _, b in samples]
            pairs = []
            if alive and boxes:
                scores = buffered_iou(
                    np.array([t.box for t in alive]), np.array(boxes), config.match_buffer
                )
                pairs = greedy_assign(scores, config.min_match_iou)
            owner: dict[int, StillTrack] = {}
            for r, c in pairs:
                alive[r].box, alive[r].last_seen_us = boxes[c], at_us
                alive[r].hits += 1
                owner[c] = alive[r]
            matched = {r for r, _ in pairs}
            tracks[:] = [
                t for k, t in enumerate(alive) if k in matched or t.hits >= config.min_hits
            ]
            for c, b in enumerate(boxes):
                if c not in owner:
                    counter[0] += 1
                    owner[c] = StillTrack(counter[0], b, at_us, 1)
                    tracks.append(owner[c])
            return [
                (i, str(owner[c].track_id) if owner[c].hits >= config.min_hits else None)
                for c, (i, _) in enumerate(samples)
            ]

        return step

    return start


def norfair_method(norfair: Any, distance: str, threshold: float, seconds_aged: bool) -> Method:
    """norfair's Tracker; a detection's id is that of the active object it was matched to."""

    def start(fps: int) -> Callable[[int, int, list[Sample]], Labels]:
        extra: dict[str, Any] = {}
        if seconds_aged:
            extra = {"hit_counter_max": round(2.0 * fps), "initialization_delay": 1}
        tracker = norfair.Tracker(distance_function=distance, distance_threshold=threshold, **extra)

        def step(seq: int, at_us: int, samples: list[Sample]) -> Labels:
            dets = [
                norfair.Detection(np.array([[b.x1, b.y1], [b.x2, b.y2]]), data=i, label=0)
                for i, b in samples
            ]
            found: dict[int, str] = {}
            for obj in tracker.update(dets):
                for d in dets:
                    if obj.last_detection is d:
                        found[id(d)] = str(obj.id)
            return [(i, found.get(id(d))) for (i, _), d in zip(samples, dets, strict=True)]

        return step

    return start


# ---------------------------------------------------------------------------------------------
# Scoring


@dataclass
class Score:
    objects: int = 0
    ids: int = 0
    switches: int = 0
    shared: int = 0
    detections: int = 0
    unlabelled: int = 0
    seconds: float = 0.0
    frames: int = 0

    def add(self, labels: list[Labels]) -> None:
        seen: dict[int, list[str]] = defaultdict(list)
        owners: dict[str, set[int]] = defaultdict(set)
        for frame in labels:
            for true, track in frame:
                self.detections += 1
                if track is None:
                    self.unlabelled += 1
                    continue
                seen[true].append(track)
                owners[track].add(true)
        self.objects += len(seen)
        for tracks in seen.values():
            self.ids += len(set(tracks))
            self.switches += sum(a != b for a, b in zip(tracks, tracks[1:], strict=False))
        self.shared += sum(len(o) > 1 for o in owners.values())

    def line(self, name: str, fps: int) -> str:
        return (
            f"{name:<30} {fps:>3} fps  ids/object {self.ids / max(self.objects, 1):5.2f}  "
            f"switches {self.switches:4d}  shared ids {self.shared:3d}  "
            f"no id {100 * self.unlabelled / max(self.detections, 1):5.1f} %  "
            f"{1e6 * self.seconds / max(self.frames, 1):6.0f} us/frame"
        )


def evaluate(method: Method, fps: int, scenes: list[list[list[Sample]]]) -> Score:
    score = Score()
    for samples in scenes:
        step = method(fps)
        labels = []
        started = time.perf_counter()
        for n, frame in enumerate(samples):
            labels.append(step(n + 1, T0_US + round(n * 1e6 / fps), frame))
        score.seconds += time.perf_counter() - started
        score.frames += len(samples)
        score.add(labels)
    return score


def step_cost_us(boxes: int, frames_n: int) -> tuple[float, float]:
    """framebus's median and 90th-percentile microseconds per step with `boxes` walkers."""
    rng = np.random.default_rng(1)
    walkers = scene(rng, boxes)
    samples = frames(walkers, 5, rng, 0.03, 0.0)
    tracker = CameraTracker("cam", TrackerConfig())
    costs = []
    for n in range(frames_n):
        frame = samples[n % len(samples)]
        det = Detections(
            "cam",
            n + 1,
            T0_US + n * 200_000,
            FrameStatus.INFERRED,
            "m",
            "1",
            tuple(b for _, b in frame),
        )
        started = time.perf_counter()
        tracker.step(det)
        costs.append((time.perf_counter() - started) * 1e6)
    return statistics.median(costs), percentile(costs, 90)


def methods(args: Any) -> list[tuple[str, Method]]:
    default = TrackerConfig()
    found: list[tuple[str, Method]] = [
        ("plain IoU (no motion)", still_method(TrackerConfig(match_buffer=0.0))),
        ("buffered IoU, no motion", still_method(default)),
        ("framebus, no buffer", framebus_method(TrackerConfig(match_buffer=0.0))),
        ("framebus", framebus_method(default)),
    ]
    try:
        norfair = importlib.import_module("norfair")
    except ImportError:
        print("note: norfair is not importable here (pip install norfair): its rows are skipped")
        return found
    print(f"norfair {importlib.metadata.version('norfair')}")
    found += [
        ("norfair iou", norfair_method(norfair, "iou", args.iou_threshold, False)),
        ("norfair euclidean", norfair_method(norfair, "euclidean", args.px_threshold, False)),
        ("norfair iou, aged in seconds", norfair_method(norfair, "iou", args.iou_threshold, True)),
        (
            "norfair eucl., aged in seconds",
            norfair_method(norfair, "euclidean", args.px_threshold, True),
        ),
    ]
    return found


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--scenes", type=int, default=20, help="scenes per rate")
    parser.add_argument("--objects", type=int, default=6, help="walkers per scene")
    parser.add_argument("--jitter", type=float, default=0.03, help="box edge noise, x box size")
    parser.add_argument("--miss", type=float, default=0.05, help="chance a box is not detected")
    parser.add_argument(
        "--iou-threshold", type=float, default=0.7, help="norfair iou distance (1 - IoU) gate"
    )
    parser.add_argument(
        "--px-threshold",
        type=float,
        default=150.0,
        help="norfair euclidean gate, px, on the 4 corner coordinates (~1.8 box widths of shift)",
    )
    parser.add_argument("--cost-frames", type=int, default=3000, help="frames of the cost run")
    args = parser.parse_args()
    print_header(provider=None)
    print(
        f"numpy {np.__version__}; {args.scenes} scenes x {args.objects} walkers x {SECONDS:g} s, "
        f"jitter {args.jitter:g}, miss {args.miss:g}; {TrackerConfig()}"
    )
    chosen = methods(args)
    for fps in RATES:
        # The same walkers at every rate (seeded by scene); the noise drawn per rate.
        scenes = [
            frames(
                scene(np.random.default_rng(k), args.objects),
                fps,
                np.random.default_rng((k, fps)),
                args.jitter,
                args.miss,
            )
            for k in range(args.scenes)
        ]
        print()
        for name, method in chosen:
            print(evaluate(method, fps, scenes).line(name, fps), flush=True)
    for boxes in (10, 30):
        median, p90 = step_cost_us(boxes, args.cost_frames)
        print(f"\nframebus step with {boxes} boxes: median {median:.0f} us, p90 {p90:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
