"""Prometheus export of `InferencerStats`, and readiness (connected to Kafka and warmed up)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from framebus.telemetry.health import Health, HealthServer
from framebus_inferencer.stats import InferencerStats


class StatsCollector:
    """Reads the stats object at scrape time; the hot path only bumps plain counters."""

    def __init__(self, stats: InferencerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """Metric families for one scrape."""
        s = self.stats
        frames = CounterMetricFamily(
            "framebus_inferencer_frames", "Frames by final status", labels=["status"]
        )
        for status, n in s.by_status.items():
            frames.add_metric([status], n)
        yield frames
        sizes = CounterMetricFamily(
            "framebus_inferencer_batches", "Inferred batches by size", labels=["size"]
        )
        for size, n in sorted(s.batch_sizes.items()):
            sizes.add_metric([str(size)], n)
        yield sizes
        errors = CounterMetricFamily(
            "framebus_inferencer_errors", "Handled errors by kind", labels=["kind"]
        )
        for kind, n in s.errors.items():
            errors.add_metric([kind], n)
        yield errors
        yield CounterMetricFamily(
            "framebus_inferencer_dead_letters", "Dead-lettered messages", value=s.dead_letters
        )
        for name, series in (
            ("queue_wait_ms", s.queue_wait_ms),
            ("inference_ms", s.inference_ms),
            ("e2e_latency_ms", s.e2e_latency_ms),
        ):
            recent = sorted(series)
            g = GaugeMetricFamily(
                f"framebus_inferencer_{name}", f"Recent {name} quantiles", labels=["quantile"]
            )
            for q in (0.5, 0.99):
                g.add_metric([str(q)], recent[int(q * (len(recent) - 1))] if recent else 0.0)
            yield g
        provider = GaugeMetricFamily(
            "framebus_inferencer_provider", "Execution provider in use", labels=["provider"]
        )
        provider.add_metric([s.provider or "none"], 1)
        yield provider
        yield GaugeMetricFamily(
            "framebus_inferencer_arena_limit_bytes",
            "Memory arena limit of the provider in use",
            value=s.arena_limit_bytes,
        )


def start_health_server(port: int, stats: InferencerStats) -> HealthServer:
    """Serve /healthz, /readyz (ready = connected and warmed up) and /metrics on `port`."""
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    health = Health()
    health.add_check(
        "inferencer",
        lambda: (
            None
            if stats.ready
            else ("not warmed up" if not stats.warmed_up else "no Kafka partitions assigned yet")
        ),
    )
    return HealthServer(port, health, registry).start()
