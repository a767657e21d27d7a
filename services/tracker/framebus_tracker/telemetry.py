"""The tracker's own metrics, read from TrackerStats at scrape time.

`framebus.telemetry.stateful` serves them beside the loop's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.families import counters, gauges
from framebus.telemetry.stateful import StatefulTelemetry
from framebus_tracker.stats import TrackerStats


class TrackerCollector:
    """Reads TrackerStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: TrackerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """The tracker's metric families."""
        s, p, cam = self.stats, "framebus_tracker", ["camera_id"]
        yield counters(
            f"{p}_frames",
            "Looked-at (INFERRED) detections records tracked, per camera.",
            cam,
            s.frames,
        )
        yield counters(f"{p}_objects", "Boxes given a track id, per camera.", cam, s.objects)
        yield counters(
            f"{p}_tracks_confirmed",
            "Tracks that became confirmed, per camera.",
            cam,
            s.tracks_confirmed,
        )
        yield counters(
            f"{p}_replays", "Replayed detections records skipped, per camera.", cam, s.replays
        )
        yield counters(
            f"{p}_frames_not_looked_at",
            "Detections records of frames the model did not look at, per camera and status.",
            ["camera_id", "status"],
            s.not_looked_at,
        )
        yield gauges(
            f"{p}_active_tracks",
            "Tracks held per camera (seen, or lost for less than max_lost_s).",
            cam,
            s.active_tracks,
        )
        yield CounterMetricFamily(
            f"{p}_step_seconds", "CPU time spent in the tracking algorithm.", value=s.step_seconds
        )


def tracker_telemetry(
    port: int | None, stats: TrackerStats, kafka: KafkaSettings | None = None
) -> StatefulTelemetry:
    """The tracker's health, metrics and watchdog: the loop's figures and its own."""
    return StatefulTelemetry(
        port, "framebus_tracker", stats.loop, TrackerCollector(stats), "detections", kafka
    )
