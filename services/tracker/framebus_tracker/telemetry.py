"""The tracker's /healthz, /readyz and /metrics: counters read from TrackerStats at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from framebus.telemetry.health import Health, HealthServer

if TYPE_CHECKING:
    from framebus_tracker.service import TrackerStats

LOOP_ALLOWANCE_S = 60.0  # a restore may read a long changelog inside one consume()


class TrackerTelemetry:
    """Health server with a loop heartbeat, readiness once partitions are restored, and metrics."""

    def __init__(self, port: int, stats: TrackerStats) -> None:
        self.health = Health()
        self.registry = CollectorRegistry()
        self.server = HealthServer(port, self.health, self.registry)
        self.health.add_check(
            "kafka",
            lambda: (
                None if stats.loop.ready else "no detections partition assigned and restored yet"
            ),
        )
        self.registry.register(TrackerCollector(stats))

    def beat(self) -> None:
        """Called once per loop iteration."""
        self.health.heartbeat("track", LOOP_ALLOWANCE_S)


class TrackerCollector:
    """Reads TrackerStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: TrackerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """The tracker's metric families."""
        s = self.stats
        per_camera = (
            ("frames", "Looked-at (INFERRED) detections records tracked, per camera.", s.frames),
            ("objects", "Boxes given a track id, per camera.", s.objects),
            ("tracks_confirmed", "Tracks that became confirmed, per camera.", s.tracks_confirmed),
            ("replays", "Replayed detections records skipped, per camera.", s.replays),
        )
        for name, doc, counter in per_camera:
            family = CounterMetricFamily(f"framebus_tracker_{name}", doc, labels=["camera_id"])
            for camera, n in sorted(counter.items()):
                family.add_metric([camera], n)
            yield family
        skipped = CounterMetricFamily(
            "framebus_tracker_frames_not_looked_at",
            "Detections records of frames the model did not look at, per camera and status.",
            labels=["camera_id", "status"],
        )
        for (camera, status), n in sorted(s.not_looked_at.items()):
            skipped.add_metric([camera, status], n)
        yield skipped
        active = GaugeMetricFamily(
            "framebus_tracker_active_tracks",
            "Tracks held per camera (seen, or lost for less than max_lost_s).",
            labels=["camera_id"],
        )
        for camera, n in sorted(s.active_tracks.items()):
            active.add_metric([camera], n)
        yield active
        loop = s.loop
        for name, doc, value in (
            ("records", "Detections records consumed.", loop.records),
            ("dead_letters", "Records dead-lettered as undecodable.", loop.dead_letters),
            (
                "transactions",
                "Batches committed (tracks, states and offsets together).",
                loop.transactions,
            ),
            ("restored_states", "Camera states restored from the changelog.", loop.restored_keys),
            ("restore_seconds", "Time spent restoring states from the changelog.", loop.restore_s),
            ("step_seconds", "CPU time spent in the tracking algorithm.", s.step_seconds),
        ):
            yield CounterMetricFamily(f"framebus_tracker_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "framebus_tracker_assigned_partitions",
            "Detections partitions this instance owns.",
            value=len(loop.assigned),
        )
