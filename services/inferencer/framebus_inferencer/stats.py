"""Counters and latency samples of the inferencer, kept in plain objects for any exporter."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field

SAMPLES = 4096  # recent samples kept per series; enough for percentiles, bounded in memory


@dataclass
class InferencerStats:
    """What the inferencer did so far; every method is safe to call from any thread."""

    provider: str = ""
    arena_limit_bytes: int = 0
    warmed_up: bool = False
    connected: bool = False
    frames_received: int = 0
    batches: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    drops_by_reason: Counter[str] = field(default_factory=Counter)
    frames_by_camera: Counter[str] = field(default_factory=Counter)
    batch_sizes: Counter[int] = field(default_factory=Counter)
    batch_close_reasons: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    queue_wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    inference_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    e2e_latency_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ready(self) -> bool:
        """Connected to Kafka and every batch bucket warmed up."""
        return self.connected and self.warmed_up

    def batch(self, size: int, reason: str, inference_ms: float, waits_ms: list[float]) -> None:
        """Record one inferred batch."""
        with self._lock:
            self.batches += 1
            self.batch_sizes[size] += 1
            self.batch_close_reasons[reason] += 1
            self.inference_ms.append(inference_ms)
            self.queue_wait_ms.extend(waits_ms)

    def outcome(self, camera: str, status: str, e2e_ms: float, reason: str | None = None) -> None:
        """Record the final status of one frame."""
        with self._lock:
            self.by_status[status] += 1
            self.frames_by_camera[camera] += 1
            self.e2e_latency_ms.append(e2e_ms)
            if reason is not None:
                self.drops_by_reason[reason] += 1

    def error(self, kind: str) -> None:
        """Count an error that was handled (reported, not swallowed)."""
        with self._lock:
            self.errors[kind] += 1

    def received(self, n: int) -> None:
        """Count consumed frame messages."""
        with self._lock:
            self.frames_received += n

    def dead_letter(self) -> None:
        """Count one dead-lettered message."""
        with self._lock:
            self.dead_letters += 1
