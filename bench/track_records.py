"""The detections `bench.track` feeds the tracker, and the track ids it compares.

`generate` builds `testkit.walkers` cameras' records interleaved as a live feed, at the cameras'
sampling rate (FPS) and with about the asked number of walkers in every frame; `track_ids` and
`Ids` are what the bare loop's output and the service's are checked against, record for record.
"""

from __future__ import annotations

from framebus.messages import Detections, Tracks
from testkit.walkers import camera_detections

FPS = 5.0  # the generated cameras' sampling rate (capture time between a camera's records)
CROSS_S = 7.6  # mean time a walker takes to cross the 1280-px frame (walkers.py's speeds)
Ids = dict[tuple[str, int], tuple[str, ...]]  # (camera, seq) -> the track id of each box


def generate(cameras: int, frames: int, boxes: float, seed: int = 0) -> list[Detections]:
    """`frames` records per camera interleaved as a live feed, about `boxes` walkers in each."""
    duration_s = frames / FPS
    count = max(1, round(boxes * duration_s / CROSS_S))
    per_camera = [
        list(camera_detections(f"cam-{c:02d}", FPS, duration_s, seed + c, count))
        for c in range(cameras)
    ]
    return [per_camera[c][i] for i in range(frames) for c in range(cameras)]


def track_ids(tracks: Tracks) -> tuple[str, ...]:
    """The track id of each object, in the detections' order."""
    return tuple(o.track_id for o in tracks.objects)
