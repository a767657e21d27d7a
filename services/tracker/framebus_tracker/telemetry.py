"""The tracker's own metrics, read from TrackerStats at scrape time.

`framebus.telemetry.stateful` serves them beside the loop's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.stateful import StatefulTelemetry
from framebus_tracker.stats import TrackerStats


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
        yield CounterMetricFamily(
            "framebus_tracker_step_seconds",
            "CPU time spent in the tracking algorithm.",
            value=s.step_seconds,
        )


def tracker_telemetry(
    port: int | None, stats: TrackerStats, kafka: KafkaSettings | None = None
) -> StatefulTelemetry:
    """The tracker's health, metrics and watchdog: the loop's figures and its own."""
    return StatefulTelemetry(
        port, "framebus_tracker", stats.loop, TrackerCollector(stats), "detections", kafka
    )
