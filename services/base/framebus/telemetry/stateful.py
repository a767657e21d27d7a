"""The telemetry of a service that runs `framebus.kafka.stateful`'s loop (tracker, alerts).

A `ServiceTelemetry` with a loop heartbeat, readiness once a partition is assigned and its states
restored (and the brokers answer), and the loop's counters under the service's metric prefix
beside the service's own collector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from framebus.kafka.changelog import RESTORE_TIMEOUT_S
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.stateful import (
    KeyedProcessor,
    OnCommitted,
    StatefulConfig,
    StatefulRunner,
    StatefulStats,
)
from framebus.telemetry.service import Collector, ServiceTelemetry

# One loop iteration may hold a whole restore (inside consume()): the heartbeat allows for it.
LOOP_ALLOWANCE_S = 2 * RESTORE_TIMEOUT_S


class StatefulTelemetry(ServiceTelemetry):
    """Telemetry of a stateful service; `beat()` once per loop iteration.

    Ready once a source partition is assigned and its states restored, and the brokers answer.
    """

    def __init__(
        self,
        port: int | None,
        prefix: str,
        loop: StatefulStats,
        own: Collector,
        source: str,
        kafka: KafkaSettings | None = None,
    ) -> None:
        super().__init__(port, (own, LoopCollector(prefix, loop)), kafka)
        self.loop = loop
        self.add_check(
            "assigned",
            lambda: None if loop.ready else f"no {source} partition assigned and restored yet",
        )

    def beat(self) -> None:
        """Called once per loop iteration."""
        self.health.heartbeat("consume", LOOP_ALLOWANCE_S)

    def runner(
        self,
        kafka: KafkaSettings,
        config: StatefulConfig,
        processor: KeyedProcessor,
        on_committed: OnCommitted | None = None,
    ) -> StatefulRunner:
        """The stateful loop this telemetry watches: its heartbeat, its calls, its counters."""
        return StatefulRunner(
            kafka,
            config,
            processor,
            self.loop,
            on_committed=on_committed,
            heartbeat=self.beat,
            watch=self.health.call,
        )


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
