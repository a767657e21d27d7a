"""`framebus alerts`' own metrics, read from AlertsStats at scrape time.

`framebus.telemetry.stateful` serves them beside the loop's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.stateful import StatefulTelemetry
from framebus_alerts.stats import AlertsStats


class AlertsCollector:
    """Reads AlertsStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: AlertsStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """The alerts consumer's metric families."""
        s = self.stats
        frames = CounterMetricFamily(
            "framebus_alerts_frames_evaluated",
            "Looked-at (INFERRED) records evaluated, per camera.",
            labels=["camera_id"],
        )
        for camera, n in sorted(s.engine.frames.items()):
            frames.add_metric([camera], n)
        skipped = CounterMetricFamily(
            "framebus_alerts_frames_not_looked_at",
            "Records of frames the model did not look at, per camera and status.",
            labels=["camera_id", "status"],
        )
        for (camera, status), n in sorted(s.engine.not_looked_at.items()):
            skipped.add_metric([camera, status], n)
        fired = CounterMetricFamily(
            "framebus_alerts_published", "Alerts delivered, per rule.", labels=["rule"]
        )
        for rule, n in sorted(s.delivered.items()):
            fired.add_metric([rule], n)
        errors = CounterMetricFamily(
            "framebus_alerts_errors", "Errors of the alerts consumer, per kind.", labels=["kind"]
        )
        errors.add_metric(["undecodable"], s.loop.dead_letters)
        yield from (frames, skipped, fired, errors)


def alerts_telemetry(
    port: int | None, stats: AlertsStats, source_topic: str, kafka: KafkaSettings | None = None
) -> StatefulTelemetry:
    """The alerts service's health, metrics and watchdog: the loop's figures and its own."""
    return StatefulTelemetry(
        port, "framebus_alerts", stats.loop, AlertsCollector(stats), source_topic, kafka
    )
