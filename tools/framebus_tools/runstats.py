"""Running statistics over detections records: per-camera rates, latency percentiles, drops, fairness.

Pure bookkeeping (no Kafka): the demo's live table and the load test's report both read it.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from framebus.messages import Detections, FrameStatus


@dataclass
class CameraStats:
    """What one camera's detections records say so far."""

    records: int = 0
    inferred: int = 0
    boxes: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    arrivals: deque[float] = field(default_factory=deque)  # monotonic arrival times, last window
    first_arrival: float | None = None
    last_arrival: float | None = None
    last_seq: int = -1
    out_of_order: int = 0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, NaN when empty."""
    return float(np.percentile(values, q)) if values else float("nan")


class RunStats:
    """Aggregates detections records as they arrive."""

    def __init__(self, window_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self.cameras: dict[str, CameraStats] = defaultdict(CameraStats)
        self.started = clock()
        self._first_capture_us: int | None = None

    def first_capture_us(self) -> int | None:
        """Capture time of the earliest frame seen (wall clock, µs), or None before any."""
        return self._first_capture_us

    def add(self, det: Detections) -> None:
        """Account for one record."""
        cam = self.cameras[det.camera_id]
        now = self._clock()
        if self._first_capture_us is None or det.capture_ts_us < self._first_capture_us:
            self._first_capture_us = det.capture_ts_us
        cam.records += 1
        cam.statuses[det.status.value] += 1
        cam.arrivals.append(now)
        if cam.first_arrival is None:
            cam.first_arrival = now
        cam.last_arrival = now
        if det.seq <= cam.last_seq:
            cam.out_of_order += 1
        cam.last_seq = max(cam.last_seq, det.seq)
        if det.status is FrameStatus.INFERRED:
            cam.inferred += 1
            cam.boxes += len(det.boxes)
            cam.latencies_ms.append(det.e2e_latency_ms)
            cam.batch_sizes.append(det.batch_size)
        self._trim(cam, now)

    def _trim(self, cam: CameraStats, now: float) -> None:
        while cam.arrivals and now - cam.arrivals[0] > self.window_s:
            cam.arrivals.popleft()

    def fps_out(self, camera_id: str, whole_run: bool = False) -> float:
        """Records per second for the camera over the recent window.

        `whole_run`: from its first record to its last instead, for a summary read after the
        records stopped.
        """
        cam = self.cameras[camera_id]
        if whole_run:
            if cam.first_arrival is None or cam.last_arrival is None or cam.records < 2:
                return 0.0
            return (cam.records - 1) / max(cam.last_arrival - cam.first_arrival, 1e-6)
        self._trim(cam, self._clock())
        return len(cam.arrivals) / self.window_s

    @property
    def total(self) -> int:
        """Records received."""
        return sum(c.records for c in self.cameras.values())

    def all_latencies(self) -> list[float]:
        """End-to-end latencies of every inferred frame."""
        return [v for c in self.cameras.values() for v in c.latencies_ms]

    def all_batch_sizes(self) -> Counter[int]:
        """How many frames were inferred in batches of each size."""
        return Counter(b for c in self.cameras.values() for b in c.batch_sizes)

    def statuses(self) -> Counter[str]:
        """Records by status, all cameras."""
        total: Counter[str] = Counter()
        for c in self.cameras.values():
            total.update(c.statuses)
        return total

    def fairness(self) -> tuple[float, float]:
        """(min, max) share of inferred frames among cameras; equal shares give (1/N, 1/N)."""
        inferred = [c.inferred for c in self.cameras.values()]
        total = sum(inferred)
        if not total:
            return (0.0, 0.0)
        return (min(inferred) / total, max(inferred) / total)

    def table(
        self, inputs: Mapping[str, DecoderView] | None = None, whole_run: bool = False
    ) -> str:
        """The per-camera table; `inputs` adds the decoder's side (fps in, its drops).

        Live, fps out is the recent window's rate; `whole_run` (the summary) gives each camera's
        average from its first record to its last instead.
        """
        inputs = inputs or {}
        head = (
            f"{'camera':<14}{'fps in':>7}{'fps out':>8}{'frames':>8}{'batch':>7}"
            f"{'p50 ms':>9}{'p99 ms':>9}  drops by reason"
        )
        rows = [head, "-" * len(head)]
        for cid in sorted(set(self.cameras) | set(inputs)):
            cam = self.cameras[cid]
            view = inputs.get(cid, DecoderView())
            drops = [f"{s.lower()} {n}" for s, n in cam.statuses.items() if s != "INFERRED"]
            drops += [f"{r} {n}" for r, n in view.dropped.items() if n]
            mean_batch = float(np.mean(cam.batch_sizes[-50:])) if cam.batch_sizes else 0.0
            rows.append(
                f"{cid:<14}{view.fps_in:>7.1f}{self.fps_out(cid, whole_run):>8.1f}{cam.records:>8}"
                f"{mean_batch:>7.1f}{percentile(cam.latencies_ms, 50):>9.0f}"
                f"{percentile(cam.latencies_ms, 99):>9.0f}  {', '.join(drops) or '-'}"
            )
        return "\n".join(rows)


@dataclass(frozen=True)
class DecoderView:
    """What the decoder's /metrics say about one camera, for the live table."""

    fps_in: float = 0.0
    published: int = 0
    dropped: Mapping[str, int] = field(default_factory=dict)
