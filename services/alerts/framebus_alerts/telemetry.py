"""`framebus alerts`' own metrics, read from AlertsStats at scrape time.

`framebus.telemetry.stateful` serves them beside the loop's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.families import counters
from framebus.telemetry.stateful import StatefulTelemetry
from framebus_alerts.stats import AlertsStats


class AlertsCollector:
    """Reads AlertsStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: AlertsStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """The alerts service's metric families."""
        s, p = self.stats, "framebus_alerts"
        yield counters(
            f"{p}_frames_evaluated",
            "Records evaluated by the rules (INFERRED, and STILL with carried objects), per camera.",
            ["camera_id"],
            s.engine.frames,
        )
        yield counters(
            f"{p}_frames_not_looked_at",
            "Records of frames the model did not look at, per camera and status.",
            ["camera_id", "status"],
            s.engine.not_looked_at,
        )
        yield counters(f"{p}_published", "Alerts delivered, per rule.", ["rule"], s.delivered)
        yield counters(
            f"{p}_errors",
            "Errors of the alerts service, per kind.",
            ["kind"],
            {"undecodable": s.loop.dead_letters},
        )


def alerts_telemetry(
    port: int | None, stats: AlertsStats, source_topic: str, kafka: KafkaSettings | None = None
) -> StatefulTelemetry:
    """The alerts service's health, metrics and watchdog: the loop's figures and its own."""
    return StatefulTelemetry(
        port, "framebus_alerts", stats.loop, AlertsCollector(stats), source_topic, kafka
    )
