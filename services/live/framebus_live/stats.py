"""Per-camera figures over a rolling window: frames in, records out, latency, drops, state. Pure."""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from framebus.messages import FrameStatus


@dataclass(frozen=True)
class CameraFigures:
    """What a tile shows under its picture."""

    frames_in: int  # frames records in the window
    records_out: int  # detections or tracks records in the window
    fps_in: float
    fps_out: float
    p50_ms: float | None  # end-to-end latency of the window's looked-at records
    p99_ms: float | None
    drops: dict[str, int] = field(default_factory=dict)  # status -> records in the window
    state: str = "waiting"  # waiting (nothing yet), live, stalled
    source: str = ""  # tracks or detections: what the boxes come from
    still: int = 0  # STILL records in the window: nothing moved, not a drop


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile `q` (0-100) of ascending values; None when there are none."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class CameraStats:
    """Rolling figures of one camera; times are monotonic seconds passed in by the caller."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._frames: deque[float] = deque()
        self._records: deque[tuple[float, str, float]] = deque()  # (t, status, e2e ms)
        self._last_seen: float | None = None
        self._last_record: tuple[int, int] | None = None  # (seq, capture_ts_us) counted last
        self.source = ""

    def frame_in(self, now: float, count: int = 1) -> None:
        """`count` frames records of this camera arrived."""
        self._frames.extend([now] * count)
        self._last_seen = now

    def record_out(
        self, now: float, seq: int, capture_ts_us: int, status: FrameStatus, e2e_ms: float
    ) -> None:
        """A detections or tracks record arrived; a frame's second record is not counted again.

        With `auto` a camera can switch from detections to tracks between the two records of one
        frame.
        """
        self._last_seen = now
        if self._last_record == (seq, capture_ts_us):
            return
        self._last_record = (seq, capture_ts_us)
        self._records.append((now, status.value, e2e_ms))

    def figures(self, now: float, stalled_after_s: float) -> CameraFigures:
        """The figures of the last `window_s` seconds as of `now`."""
        self._prune(now)
        looked_at = sorted(e2e for _, s, e2e in self._records if s == FrameStatus.INFERRED.value)
        statuses = Counter(s for _, s, _ in self._records)
        still = statuses.pop(FrameStatus.STILL.value, 0)
        drops = Counter({s: n for s, n in statuses.items() if s != FrameStatus.INFERRED.value})
        span = self._span(now)
        if self._last_seen is None:
            state = "waiting"
        else:
            state = "live" if now - self._last_seen <= stalled_after_s else "stalled"
        return CameraFigures(
            frames_in=len(self._frames),
            records_out=len(self._records),
            fps_in=round(len(self._frames) / span, 2),
            fps_out=round(len(self._records) / span, 2),
            p50_ms=percentile(looked_at, 50),
            p99_ms=percentile(looked_at, 99),
            drops=dict(sorted(drops.items())),
            still=still,
            state=state,
            source=self.source,
        )

    def _span(self, now: float) -> float:
        """Seconds the window really covers (less than window_s just after start)."""
        firsts = [self._frames[0]] if self._frames else []
        if self._records:
            firsts.append(self._records[0][0])
        if not firsts:
            return self.window_s
        return max(1.0, min(self.window_s, now - min(firsts)))

    def _prune(self, now: float) -> None:
        cutoff = now - self.window_s
        while self._frames and self._frames[0] < cutoff:
            self._frames.popleft()
        while self._records and self._records[0][0] < cutoff:
            self._records.popleft()
