"""Which records' boxes a camera shows: tracks, detections, or (auto) tracks while they come. Pure."""

from __future__ import annotations

from framebus_live.settings import LiveSource

# In auto mode a camera whose last tracks record is older than this falls back to detections: the
# tracker stopped, or never ran for it. A few sampling intervals, so one late record is no switch.
TRACKS_TTL_S = 3.0


class SourceChooser:
    """Decides, per camera and record, whether the record's boxes are the ones shown."""

    def __init__(self, mode: LiveSource, tracks_ttl_s: float = TRACKS_TTL_S) -> None:
        self.mode = mode
        self.tracks_ttl_s = tracks_ttl_s
        self._tracks_seen: dict[str, float] = {}  # camera -> monotonic time of its last tracks

    def use(self, camera: str, source: str, now: float) -> bool:
        """Whether a `source` ("tracks" or "detections") record of `camera` arriving at `now` counts."""
        if self.mode is LiveSource.TRACKS:
            return source == "tracks"
        if self.mode is LiveSource.DETECTIONS:
            return source == "detections"
        if source == "tracks":
            self._tracks_seen[camera] = now
            return True
        seen = self._tracks_seen.get(camera)
        return seen is None or now - seen > self.tracks_ttl_s
