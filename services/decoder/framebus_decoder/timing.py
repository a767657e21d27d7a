"""Time decisions of a camera worker: reconnect backoff, realtime pacing, stall detection."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from framebus_decoder.freeze import never_frozen


class Backoff:
    """Exponential reconnect delays with jitter: initial, 2x, 4x, ... capped at `max_s`."""

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        jitter: float,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._initial = initial_s
        self._max = max_s
        self._jitter = jitter
        self._rand = rand
        self.attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one failed attempt."""
        base = min(self._max, self._initial * float(2 ** min(self.attempt, 30)))
        self.attempt += 1
        # Jitter spreads the reconnects of many cameras that lost the same server at once.
        return max(0.0, base * (1.0 + self._jitter * (2.0 * self._rand() - 1.0)))

    def reset(self) -> None:
        """Back to the initial delay, after a source delivered frames again."""
        self.attempt = 0


class RealtimePacer:
    """How long to wait before handing out a frame so a file plays at its own speed."""

    def __init__(self, max_wait_s: float = 1.0, epoch_s: Callable[[], float] = time.time) -> None:
        self._origin: tuple[float, float] | None = None  # (pts_s, wall_s) of the first frame
        self._epoch_origin = 0.0  # the same moment on the UTC clock
        self._max_wait = max_wait_s
        self._epoch_s = epoch_s

    def wait_s(self, pts_s: float, now_s: float) -> float:
        """Seconds until the frame at `pts_s` is due (0 when late); resyncs after a jump."""
        if self._origin is None:
            self._restart(pts_s, now_s)
            return 0.0
        pts0, wall0 = self._origin
        wait = (pts_s - pts0) - (now_s - wall0)
        if wait > self._max_wait or wait < -self._max_wait:
            # A gap or a jump in the timestamps, or we fell far behind: restart the clock here.
            self._restart(pts_s, now_s)
            return 0.0
        return max(0.0, wait)

    def anchor(self, pts_s: float, now_s: float) -> None:
        """Start the clock at `pts_s` unless it runs: a packet is demuxed before its frame."""
        if self._origin is None:
            self._restart(pts_s, now_s)

    def scheduled_us(self, pts_s: float) -> int:
        """The UTC time (µs) the frame at `pts_s` is due: a played file's capture time.

        It follows the file's own timeline, so sampled frames are exactly 1/fps apart, as a
        camera's would be, instead of carrying the jitter of when the thread woke up.
        """
        if self._origin is None:
            return round(self._epoch_s() * 1_000_000)
        return round((self._epoch_origin + pts_s - self._origin[0]) * 1_000_000)

    def _restart(self, pts_s: float, now_s: float) -> None:
        self._origin = (pts_s, now_s)
        self._epoch_origin = self._epoch_s()


class StallWatch:
    """Tracks the last time a source made progress; time held back is excused.

    Held back: a wait on backpressure (reported as progress) or time the process itself did not
    run (`frozen_s`, a `FreezeClock`'s: seconds frozen so far), which is the decoder's, not the
    source's.
    """

    def __init__(
        self,
        timeout_s: float,
        now_s: float,
        frozen_s: Callable[[float], float] = never_frozen,
    ) -> None:
        self._timeout = timeout_s
        self._frozen = frozen_s
        self._last = now_s
        self._frozen_at_last = frozen_s(now_s)

    def progress(self, now_s: float) -> None:
        """The source delivered a frame, or a wait on the producer ended."""
        self._last = now_s
        self._frozen_at_last = self._frozen(now_s)

    def stalled(self, now_s: float) -> bool:
        """True when nothing came for longer than the timeout while the process ran."""
        return self.idle_s(now_s) > self._timeout

    def idle_s(self, now_s: float) -> float:
        """Seconds since the last progress, less those the process was frozen meanwhile."""
        return now_s - self._last - self.frozen_s(now_s)

    def frozen_s(self, now_s: float) -> float:
        """Seconds since the last progress that the process was frozen."""
        return self._frozen(now_s) - self._frozen_at_last

    def frozen_past_timeout(self, now_s: float) -> bool:
        """True when, since the last progress, the process did not run for longer than the timeout."""
        return self.frozen_s(now_s) > self._timeout
