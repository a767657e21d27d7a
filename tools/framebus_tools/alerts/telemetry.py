"""`framebus alerts`' /healthz, /readyz and /metrics, read from AlertsStats at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily

from framebus.telemetry.health import Health, HealthServer

if TYPE_CHECKING:
    from framebus_tools.alerts.consumer import AlertsStats

LOOP_ALLOWANCE_S = 60.0  # a restore may read a long changelog inside one consume()


class AlertsTelemetry:
    """Health server with a loop heartbeat, readiness once partitions are restored, and metrics."""

    def __init__(self, port: int, stats: AlertsStats) -> None:
        self.health = Health()
        self.registry = CollectorRegistry()
        self.server = HealthServer(port, self.health, self.registry)
        self.health.add_check(
            "kafka", lambda: None if stats.loop.ready else "no partition assigned and restored yet"
        )
        self.registry.register(AlertsCollector(stats))

    def beat(self) -> None:
        """Called once per loop iteration."""
        self.health.heartbeat("consume", LOOP_ALLOWANCE_S)


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
        for name, doc, value in (
            ("records", "Input records consumed.", s.loop.records),
            ("transactions", "Batches committed (alerts, states, offsets).", s.loop.transactions),
            (
                "restored_states",
                "Camera rule states restored from the changelog.",
                s.loop.restored_keys,
            ),
        ):
            yield CounterMetricFamily(f"framebus_alerts_{name}", doc, value=value)
