"""Timestamp-based frame sampling: at most `target_fps` frames per second of stream time."""

from __future__ import annotations


class FpsSampler:
    """Decides per frame, from its timestamp, whether to publish it.

    Works on presentation time, not frame count, so variable-frame-rate sources sample evenly.
    """

    def __init__(self, target_fps: float) -> None:
        self._interval = 1.0 / target_fps if target_fps > 0 else 0.0
        self._next_due: float | None = None

    def accept(self, ts_s: float) -> bool:
        """True if the frame at `ts_s` (seconds) should be published."""
        if self._interval == 0.0:
            return True
        if self._next_due is None or ts_s >= self._next_due - 1e-6:
            # Advance on a fixed grid so rounding never drifts the rate; resync after a jump.
            due = ts_s if self._next_due is None else self._next_due
            while due <= ts_s + 1e-6:
                due += self._interval
            if due - ts_s > 2 * self._interval:
                due = ts_s + self._interval
            self._next_due = due
            return True
        if ts_s < self._next_due - 2 * self._interval:  # timestamps went backwards (loop, reset)
            self._next_due = ts_s + self._interval
            return True
        return False
