"""Time the decoder process itself did not run (SIGSTOP, a starved machine), for stall detection.

A ticker thread ticks every `TICK_EVERY_S`; a tick more than `LATE_S` late means no thread of the
process ran meanwhile, so that gap is frozen time. A camera's stall watch discounts it: the
process froze, not the camera. A worker blocked in FFmpeg waiting for a silent source releases the
GIL, so the ticker keeps ticking through a real stall and it is still detected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from framebus_decoder.stats import DecoderStats

log = logging.getLogger(__name__)

TICK_EVERY_S = 0.2
# A tick this much later than due marks a freeze; shorter hiccups (a GC pause, a busy machine's
# scheduling) are not counted, so a stall timeout under about a second excuses no freeze.
LATE_S = 1.0
STOP_JOIN_S = 2.0


class FreezeClock:
    """Seconds the process did not run, from the times of a ticker's ticks; thread-safe."""

    def __init__(self, now_s: float, tick_every_s: float = TICK_EVERY_S, late_s: float = LATE_S):
        self._every = tick_every_s
        self._limit = tick_every_s + late_s
        self._lock = threading.Lock()
        self._last = now_s
        self._frozen = 0.0

    def tick(self, now_s: float) -> float:
        """Record a tick at `now_s`; return the freeze it ends (0.0 for a tick on time)."""
        with self._lock:
            gap = self._gap(now_s)
            self._frozen += gap
            self._last = max(self._last, now_s)
        return gap

    def frozen_s(self, now_s: float) -> float:
        """Seconds frozen so far, a freeze still going on at `now_s` included.

        So a worker that wakes up before the ticker does after a freeze already sees it.
        """
        with self._lock:
            return self._frozen + self._gap(now_s)

    def _gap(self, now_s: float) -> float:
        since = now_s - self._last
        # A late tick's whole wait counts, less the interval it was due after anyway.
        return since - self._every if since > self._limit else 0.0


def never_frozen(now_s: float) -> float:
    """A `frozen_s` for code run without a ticker (tests, a worker on its own): never frozen."""
    return 0.0


class FreezeTicker:
    """The daemon thread that ticks a `FreezeClock`; counts and logs each freeze as it ends."""

    def __init__(
        self,
        clock: FreezeClock,
        stats: DecoderStats,
        now_s: Callable[[], float] = time.monotonic,
        tick_every_s: float = TICK_EVERY_S,
    ) -> None:
        self.clock = clock
        self._stats = stats
        self._now = now_s
        self._every = tick_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freeze-ticker", daemon=True)

    def start(self) -> FreezeTicker:
        """Start ticking; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop ticking (the decoder is shutting down)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_JOIN_S)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            frozen = self.clock.tick(self._now())
            if frozen:
                self._stats.froze(frozen)
                log.warning(
                    "the decoder process did not run for %.1f s: not counted against the "
                    "cameras' stall timeout",
                    frozen,
                    extra={"frozen_s": round(frozen, 3)},
                )
