"""What the tracker did, per camera: counters only, written by its one loop thread."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from framebus.kafka.stateful import StatefulStats


@dataclass
class TrackerStats:
    """What the tracker did, per camera; read at scrape time."""

    frames: Counter[str] = field(default_factory=Counter)  # camera -> records tracked
    not_looked_at: Counter[tuple[str, str]] = field(default_factory=Counter)  # (camera, status)
    replays: Counter[str] = field(default_factory=Counter)
    objects: Counter[str] = field(default_factory=Counter)  # camera -> boxes given a track id
    tracks_confirmed: Counter[str] = field(default_factory=Counter)  # camera -> tracks confirmed
    active_tracks: dict[str, int] = field(default_factory=dict)
    step_seconds: float = 0.0
    loop: StatefulStats = field(default_factory=StatefulStats)
