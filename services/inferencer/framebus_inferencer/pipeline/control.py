"""The stages' shared signals: stop, start-up readiness, failure, heartbeats and watched calls."""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager

from framebus.telemetry.health import Health, thread_loop_name

DEFAULT_STAGE_TIMEOUT_S = 60.0  # the `stage_timeout_s` setting's default


def wall_us() -> int:
    """Wall-clock time in microseconds (capture timestamps are wall-clock)."""
    return time.time_ns() // 1000


class Control:
    """Stop and failure of the pipeline, and the start-up gates the receive thread waits for."""

    def __init__(self, health: Health, stage_timeout_s: float = DEFAULT_STAGE_TIMEOUT_S) -> None:
        self.health = health
        # A loop that has not come round, or a call that has not returned, for this long is
        # stuck: the watchdog (`framebus.telemetry.watchdog`) then ends the process.
        self.stage_timeout_s = stage_timeout_s
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
        if threading.current_thread().name.startswith("fb-"):
            self.health.heartbeat(thread_loop_name(), self.stage_timeout_s)

    def call(self, name: str, budget_s: float | None = None) -> AbstractContextManager[None]:
        """Watch a call that may block (default budget: `stage_timeout_s`)."""
        return self.health.call(name, self.stage_timeout_s if budget_s is None else budget_s)

    def retire(self) -> None:
        """The calling stage ended: its loop is no longer watched."""
        self.health.retire(thread_loop_name())
