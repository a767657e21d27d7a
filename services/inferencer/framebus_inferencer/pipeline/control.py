"""The stages' shared signals: stop, start-up readiness, failure, and their heartbeats."""

from __future__ import annotations

import threading
import time

from framebus.telemetry.health import Health

LOOP_ALLOWANCE_S = 60.0  # a stage that has not come round its loop for this long is stuck


def wall_us() -> int:
    """Wall-clock time in microseconds (capture timestamps are wall-clock)."""
    return time.time_ns() // 1000


class Control:
    """Stop and failure of the pipeline, and the start-up gates the receive thread waits for."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self.stop = threading.Event()
        self.warmed = threading.Event()  # set by the infer thread once the engine is warm
        self.publisher_ready = threading.Event()  # set once the producer can send
        self._failures: list[BaseException] = []
        self._lock = threading.Lock()

    def fail(self, exc: BaseException) -> None:
        """A stage failed: stop the others (and release anyone waiting for the start-up)."""
        with self._lock:
            self._failures.append(exc)
        self.stop.set()
        self.warmed.set()
        self.publisher_ready.set()

    @property
    def failed(self) -> bool:
        """True once any stage failed."""
        return bool(self._failures)

    @property
    def first_failure(self) -> BaseException | None:
        """The failure to report, if any."""
        with self._lock:
            return self._failures[0] if self._failures else None

    def beat(self) -> None:
        """A stage waiting on a queue is alive (backpressure is not a stall): it beats."""
        name = threading.current_thread().name
        if name.startswith("fb-"):
            self.health.heartbeat(name.removeprefix("fb-"), LOOP_ALLOWANCE_S)
