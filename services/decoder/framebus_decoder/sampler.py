"""Timestamp-based frame sampling: at most `target_fps` frames per second of stream time."""

from __future__ import annotations

# Fractional part of the golden ratio: the phases k * GOLDEN mod 1 stay evenly spread for any
# number of cameras, and adding a camera never moves the phases of those already running.
GOLDEN = 0.6180339887498949


def spread_phase(index: int) -> float:
    """The sampling phase of the `index`-th camera started, when its file does not set one."""
    return (index * GOLDEN) % 1.0


class FpsSampler:
    """Decides per frame, from its timestamp, whether to publish it.

    Works on presentation time, not frame count, so variable-frame-rate sources sample evenly.
    `phase` (0 <= phase < 1) shifts the sampling grid by that fraction of the interval: cameras
    started together would otherwise sample the same instants and reach the inferencer in bursts.
    """

    def __init__(self, target_fps: float, phase: float = 0.0) -> None:
        if not 0.0 <= phase < 1.0:
            raise ValueError(f"sampling phase must be in [0, 1), got {phase}")
        self._interval = 1.0 / target_fps if target_fps > 0 else 0.0
        self._phase_s = phase * self._interval
        self._next_due: float | None = None

    def accept(self, ts_s: float) -> bool:
        """True if the frame at `ts_s` (seconds) should be published."""
        if self._interval == 0.0:
            return True
        if self._next_due is None:
            self._next_due = ts_s + self._phase_s
        if ts_s >= self._next_due - 1e-6:
            # Advance on a fixed grid so rounding never drifts the rate; resync after a jump.
            due = self._next_due
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
