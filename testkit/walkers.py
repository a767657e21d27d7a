"""Generated detections of objects walking across cameras, deterministic for a given seed.

Input for tracker tests and benchmarks that need no video or model.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from framebus.messages import Box, Detections, FrameStatus

WIDTH, HEIGHT = 1280, 720
BASE_TS_US = 1_800_000_000_000_000  # a fixed capture-time origin, so runs compare exactly


@dataclass(frozen=True)
class Walker:
    """An object crossing the frame at constant speed between appearing and leaving."""

    x0: float
    y0: float
    vx: float  # pixels per second
    vy: float
    w: float
    h: float
    start_s: float
    end_s: float
    class_name: str = "person"

    def box(self, t_s: float) -> Box | None:
        """Its box at `t_s`, or None when it is not in the scene."""
        if not self.start_s <= t_s < self.end_s:
            return None
        dt = t_s - self.start_s
        x1, y1 = self.x0 + self.vx * dt, self.y0 + self.vy * dt
        return Box(
            x1,
            y1,
            x1 + self.w,
            y1 + self.h,
            0 if self.class_name == "person" else 1,
            self.class_name,
            0.9,
        )


def walkers(seed: int, count: int, duration_s: float) -> list[Walker]:
    """`count` walkers crossing left to right or right to left at 0.7-1.5 box widths per 0.5 s."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        w, h = 70.0, 150.0
        speed = rng.uniform(100, 210) * (1 if i % 2 == 0 else -1)
        x0 = 40.0 if speed > 0 else WIDTH - 40.0 - w
        start = rng.uniform(0, max(0.0, duration_s - 6))
        cross_s = (WIDTH - 80 - w) / abs(speed)
        y0 = rng.uniform(100, HEIGHT - h - 100)
        out.append(Walker(x0, y0, speed, rng.uniform(-15, 15), w, h, start, start + cross_s))
    return out


def camera_detections(
    camera: str, fps: float, duration_s: float, seed: int, count: int = 4
) -> Iterator[Detections]:
    """One INFERRED detections record per sample of `camera`, with every walker present."""
    people = walkers(seed, count, duration_s)
    frames = int(duration_s * fps)
    for seq in range(frames):
        t = seq / fps
        boxes = tuple(b for b in (p.box(t) for p in people) if b is not None)
        yield Detections(
            camera_id=camera,
            seq=seq,
            capture_ts_us=BASE_TS_US + round(t * 1_000_000),
            status=FrameStatus.INFERRED,
            model_name="walkers",
            model_version="1",
            boxes=boxes,
            orig_width=WIDTH,
            orig_height=HEIGHT,
        )
