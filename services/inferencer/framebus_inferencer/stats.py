"""Counters, latency samples and histograms of the inferencer, read by `metrics` at scrape time.

The histograms are prometheus_client's, created unregistered: each `InferencerStats` owns its
own (tests make many), and `metrics.StatsCollector` exports them with the other figures.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import Histogram

from framebus.messages import FrameStatus
from framebus_inferencer.batcher import CloseReason

SAMPLES = 4096  # recent samples kept per series; enough for percentiles, bounded in memory


# ---- histograms -------------------------------------------------------------------------------

# Bucket upper bounds in seconds; frames of a live site take tens of ms to seconds end to end.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def _histogram(name: str, help_text: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram of this stats object only: `registry=None` keeps it out of the global one."""
    return Histogram(f"framebus_inferencer_{name}", help_text, buckets=buckets, registry=None)


# ---- consumer lag -----------------------------------------------------------------------------

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionLag:
    """How far one partition's processing is behind its log and behind real time."""

    messages: int  # high watermark - lowest offset not yet delivered
    seconds: float  # age of the oldest frame not yet delivered (0 when nothing waits)


def partition_lag(
    in_flight_capture_us: Mapping[int, int],
    high_watermark: int | None,
    position: int | None,
    last_capture_us: int | None,
    now_us: int,
) -> PartitionLag:
    """Lag of one partition from what is in flight (offset -> capture time) and the watermarks.

    Messages: from the lowest offset received but not yet delivered (or the consumer's position
    when nothing is in flight) to the high watermark. Seconds: now minus the capture time of the
    oldest in-flight frame; when nothing is in flight but unread messages wait in the log, their
    capture times are unknown without reading them, so the capture time of the last frame
    received from the partition stands in (an upper bound: the next frame was captured later).
    """
    oldest_offset = min(in_flight_capture_us) if in_flight_capture_us else position
    messages = 0
    if high_watermark is not None and high_watermark >= 0 and oldest_offset is not None:
        messages = max(0, high_watermark - oldest_offset)
    if in_flight_capture_us:
        oldest_us = min(in_flight_capture_us.values())
    elif messages > 0 and last_capture_us is not None:
        oldest_us = last_capture_us
    else:
        return PartitionLag(messages, 0.0)
    return PartitionLag(messages, max(0.0, (now_us - oldest_us) / 1e6))


class LagTracker:
    """Frames received but not yet delivered, per partition, plus the latest watermarks.

    The receive thread reports frames and watermarks; the publish thread reports deliveries
    (which also gives the capture -> delivered latency); a scrape reads `lags`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[TopicPartition, dict[int, int]] = {}
        self._last_capture: dict[TopicPartition, int] = {}
        self._marks: dict[TopicPartition, tuple[int, int]] = {}  # (high watermark, position)
        self._untimed: dict[TopicPartition, set[int]] = {}  # still frames: no latency to give

    def received(
        self, tp: TopicPartition, offset: int, capture_us: int, timed: bool = True
    ) -> None:
        """A frame entered the pipeline; `timed=False`: a still frame, in the lag only.

        The capture -> delivered latency is the model pipeline's, which a still frame skips.
        """
        with self._lock:
            self._in_flight.setdefault(tp, {})[offset] = capture_us
            self._last_capture[tp] = max(capture_us, self._last_capture.get(tp, 0))
            if not timed:
                self._untimed.setdefault(tp, set()).add(offset)

    def delivered(self, offsets: Iterable[tuple[TopicPartition, int]]) -> list[int]:
        """Frames whose results were delivered; returns their capture times (µs)."""
        out = []
        with self._lock:
            for tp, offset in offsets:
                capture = self._in_flight.get(tp, {}).pop(offset, None)
                untimed = self._untimed.get(tp)
                if untimed and offset in untimed:
                    untimed.discard(offset)
                elif capture is not None:
                    out.append(capture)
        return out

    def watermarks(self, tp: TopicPartition, high: int, position: int) -> None:
        """The partition's high watermark and the consumer's position, as last read."""
        with self._lock:
            self._marks[tp] = (high, position)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions revoked: their lag is now another instance's."""
        with self._lock:
            for tp in tps:
                self._in_flight.pop(tp, None)
                self._last_capture.pop(tp, None)
                self._marks.pop(tp, None)
                self._untimed.pop(tp, None)

    def lags(self, now_us: int) -> dict[TopicPartition, PartitionLag]:
        """Current lag of every partition this instance owns or has frames of."""
        with self._lock:
            tps = set(self._in_flight) | set(self._marks)
            state = {
                tp: (
                    dict(self._in_flight.get(tp, {})),
                    self._marks.get(tp, (None, None)),
                    self._last_capture.get(tp),
                )
                for tp in tps
            }
        return {
            tp: partition_lag(flight, marks[0], marks[1], last, now_us)
            for tp, (flight, marks, last) in state.items()
        }


# The `reason` label of frames_dropped_total for each status that is not INFERRED.
DROP_REASONS = {FrameStatus.DROPPED_STALE: "stale", FrameStatus.FAILED: "failed"}


@dataclass
class InferencerStats:
    """What the inferencer did so far; every method is safe to call from any thread."""

    provider: str = ""  # the provider that ran the graph (the registered one until warm-up)
    registered_provider: str = ""  # the session's first registered provider
    provider_time_share: dict[str, float] = field(default_factory=dict)  # first run's kernel time
    # Providers asked for that do not run as asked: (provider, kind), kind a MismatchKind value.
    provider_fallbacks: tuple[tuple[str, str], ...] = ()
    arena_limit_bytes: int = 0
    arena_limit_enforced_by: str = "none"  # a providers.LimitedBy value
    arena_limit_excludes: str = "none"  # e.g. tensorrt_engines: allocations the limit misses
    batch_mode: str = ""  # "batched", or "loop" for a static-batch model (see engine.BatchMode)
    static_batch: int = 0  # the model's fixed batch size; 0 when its batch is dynamic
    candidate_selection: str = ""  # "device" (in the model graph) or "host" (postprocess.py)
    candidate_fallback: bool = False  # the graph was to select them and cannot take the head
    # Frames whose K candidate rows were all above the threshold (more may have been cut).
    saturated_frames: int = 0
    frames_received: int = 0
    batches: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    drops_by_reason: Counter[str] = field(default_factory=Counter)
    frames_by_camera: Counter[str] = field(default_factory=Counter)
    batch_sizes: Counter[int] = field(default_factory=Counter)
    batch_close_reasons: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0
    commit_window_waits: int = 0
    converted_on_host_by_format: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    queue_wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    inference_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    e2e_latency_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    device_id: int = 0
    batch_size: Histogram = field(
        default_factory=lambda: _histogram(
            "batch_size", "Frames per inferred batch", BATCH_SIZE_BUCKETS
        )
    )
    queue_wait_s: Histogram = field(
        default_factory=lambda: _histogram(
            "queue_wait_seconds",
            "Time a frame waited from receipt to inference",
            LATENCY_BUCKETS_S,
        )
    )
    inference_s: Histogram = field(
        default_factory=lambda: _histogram(
            "inference_seconds", "Engine time per batch", LATENCY_BUCKETS_S
        )
    )
    delivered_latency_s: Histogram = field(
        default_factory=lambda: _histogram(
            "e2e_latency_seconds",
            "Capture (decoder) to detections record delivered (broker acknowledged)",
            LATENCY_BUCKETS_S,
        )
    )
    lag: LagTracker = field(default_factory=LagTracker)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # Every field is written under the lock, through a method (the histograms and the lag
    # tracker lock themselves), by whichever thread reports; only the metrics read them.

    def engine_loaded(
        self, provider: str, limit_bytes: int, enforced_by: str, excludes: str
    ) -> None:
        """The loaded engine: its first registered provider and what its memory limit covers."""
        with self._lock:
            self.provider = self.registered_provider = provider
            self.arena_limit_bytes = limit_bytes
            self.arena_limit_enforced_by = enforced_by
            self.arena_limit_excludes = excludes

    def engine_described(
        self,
        batch_mode: str,
        static_batch: int,
        fallbacks: tuple[tuple[str, str], ...],
        candidate_selection: str = "",
        candidate_fallback: bool = False,
    ) -> None:
        """How a batch runs, which providers fell back at load, where candidates are selected."""
        with self._lock:
            self.batch_mode, self.static_batch = batch_mode, static_batch
            self.provider_fallbacks = fallbacks
            self.candidate_selection = candidate_selection
            self.candidate_fallback = candidate_fallback

    def candidates_saturated(self, frames: int) -> None:
        """`frames` frames of a batch filled all K candidate rows of the graph."""
        if frames:
            with self._lock:
                self.saturated_frames += frames

    def engine_ran(self, provider: str, time_share: dict[str, float]) -> None:
        """The provider that ran the warm-up's graph, and each provider's share of its time."""
        with self._lock:
            self.provider, self.provider_time_share = provider, time_share

    def batch(
        self, size: int, reason: CloseReason, inference_ms: float, waits_ms: list[float]
    ) -> None:
        """Record one inferred batch."""
        with self._lock:
            self.batches += 1
            self.batch_sizes[size] += 1
            self.batch_close_reasons[reason] += 1
            self.inference_ms.append(inference_ms)
            self.queue_wait_ms.extend(waits_ms)
        self.batch_size.observe(size)
        self.inference_s.observe(inference_ms / 1000)
        for w in waits_ms:
            self.queue_wait_s.observe(w / 1000)

    def delivered(self, offsets: Iterable[tuple[TopicPartition, int]], now_us: int) -> None:
        """Results of these frame offsets were delivered: capture -> delivered latency, lag."""
        for capture_us in self.lag.delivered(offsets):
            self.delivered_latency_s.observe(max(0.0, (now_us - capture_us) / 1e6))

    def outcome(self, camera: str, status: FrameStatus, e2e_ms: float) -> None:
        """Record the final status of one frame (a frame not inferred counts as a drop too)."""
        drop = DROP_REASONS.get(status)
        with self._lock:
            self.by_status[status.value] += 1
            self.frames_by_camera[camera] += 1
            if status is not FrameStatus.STILL:  # answered without the model: not its latency
                self.e2e_latency_ms.append(e2e_ms)
            if drop is not None:
                self.drops_by_reason[drop] += 1

    def error(self, kind: str) -> None:
        """Count an error that was handled (reported, not swallowed)."""
        with self._lock:
            self.errors[kind] += 1

    def received(self, n: int) -> None:
        """Count consumed frame messages."""
        with self._lock:
            self.frames_received += n

    def commit_window_wait(self) -> None:
        """Count one batch that waited for a commit before it could be delivered."""
        with self._lock:
            self.commit_window_waits += 1

    def converted_on_host(self, pixel_format: str) -> None:
        """Count one frame converted on the host to the pixel format the model graph takes."""
        with self._lock:
            self.converted_on_host_by_format[pixel_format] += 1

    def dead_letter(self) -> None:
        """Count one dead-lettered message."""
        with self._lock:
            self.dead_letters += 1
