"""/healthz, /readyz and /metrics of a service that runs `framebus.kafka.stateful`'s loop.

The tracker and the alerts consumer share it: a loop heartbeat, readiness once a partition is
assigned and its states restored, and the loop's counters under the service's metric prefix,
beside the service's own collector; and the watchdog, which ends the process when the loop or a
call it makes stops making progress, with or without the HTTP server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from framebus.kafka.changelog import RESTORE_TIMEOUT_S
from framebus.kafka.stateful import StatefulStats
from framebus.telemetry.health import Health, HealthServer
from framebus.telemetry.watchdog import Watchdog

# One loop iteration may hold a whole restore (inside consume()): the heartbeat allows for it.
LOOP_ALLOWANCE_S = 2 * RESTORE_TIMEOUT_S


class Collector(Protocol):
    """A prometheus_client collector."""

    def collect(self) -> Iterator[Any]:
        """The metric families."""
        ...


class StatefulTelemetry:
    """Health, metrics and watchdog of a stateful service; `beat()` once per loop iteration.

    `port` None: no HTTP server (the health is still watched).
    """

    def __init__(
        self, port: int | None, prefix: str, loop: StatefulStats, own: Collector, source: str
    ) -> None:
        self.health = Health()
        self.registry = CollectorRegistry()
        self.server = None if port is None else HealthServer(port, self.health, self.registry)
        self.health.add_check(
            "kafka",
            lambda: None if loop.ready else f"no {source} partition assigned and restored yet",
        )
        self.registry.register(own)
        self.registry.register(LoopCollector(prefix, loop))

    def beat(self) -> None:
        """Called once per loop iteration."""
        self.health.heartbeat("consume", LOOP_ALLOWANCE_S)

    @contextmanager
    def running(self) -> Iterator[StatefulTelemetry]:
        """Serve (when a port was given) and watch, until the block ends."""
        if self.server is not None:
            self.server.start()
        try:
            with Watchdog(self.health):
                yield self
        finally:
            if self.server is not None:
                self.server.stop()


class LoopCollector:
    """The stateful loop's counters, read at scrape time."""

    def __init__(self, prefix: str, loop: StatefulStats) -> None:
        self.prefix = prefix
        self.loop = loop

    def collect(self) -> Iterator[Any]:
        """`<prefix>_records`, `_dead_letters`, `_transactions`, the restores, the partitions."""
        loop, p = self.loop, self.prefix
        for name, doc, value in (
            ("records", "Input records consumed.", loop.records),
            ("dead_letters", "Records dead-lettered as undecodable.", loop.dead_letters),
            ("transactions", "Batches committed (output, states, offsets).", loop.transactions),
            ("restored_states", "Key states restored from the changelog.", loop.restored_keys),
            (
                "restore_failures",
                "Changelog states unreadable, started afresh.",
                loop.restore_failures,
            ),
            ("restore_seconds", "Time spent restoring states from the changelog.", loop.restore_s),
        ):
            yield CounterMetricFamily(f"{p}_{name}", doc, value=value)
        yield GaugeMetricFamily(
            f"{p}_assigned_partitions",
            "Source partitions this instance owns.",
            value=len(loop.assigned),
        )
