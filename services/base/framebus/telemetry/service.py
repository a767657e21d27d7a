"""Every service's telemetry, one shape: health, a metrics registry, the HTTP server, the watchdog.

A service's own `telemetry` module builds one `ServiceTelemetry` from its stats collector and
its readiness checks; the service runs inside `running()`. The HTTP server (`/healthz`, `/livez`,
`/readyz`, `/metrics`) is optional (no port: none), a service that serves HTTP itself answers
those paths with `framebus.telemetry.health.answer`, and the watchdog always runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.health import Health, HealthServer, ReadinessCheck
from framebus.telemetry.kafka_check import KafkaCheck
from framebus.telemetry.watchdog import Watchdog


class Collector(Protocol):
    """A prometheus_client collector: metric families read at scrape time."""

    def collect(self) -> Iterator[Any]:
        """The metric families."""
        ...


class ServiceTelemetry:
    """One service run's health, registry, optional HTTP server and watchdog."""

    def __init__(
        self,
        port: int | None,
        collectors: tuple[Collector, ...] = (),
        kafka: KafkaSettings | None = None,
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from outside the pod
    ) -> None:
        """`kafka`: readiness also needs its brokers to answer (the `kafka` reason)."""
        self.health = Health()
        self.registry = CollectorRegistry()
        for collector in collectors:
            self.registry.register(collector)  # type: ignore[arg-type]
        if kafka is not None:
            self.health.add_check("kafka", KafkaCheck(kafka))
        self.server = None if port is None else HealthServer(port, self.health, self.registry, host)

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        """A readiness reason: `check` returns None when ready, else why not."""
        self.health.add_check(name, check)

    @property
    def port(self) -> int | None:
        """The bound port of the HTTP server (None without one)."""
        return None if self.server is None else self.server.port

    @contextmanager
    def running(self, watchdog: bool = True) -> Iterator[ServiceTelemetry]:
        """Serve (with a port) and watch for stalls until the block ends."""
        if self.server is not None:
            self.server.start()
        try:
            if watchdog:
                with Watchdog(self.health):
                    yield self
            else:
                yield self
        finally:
            if self.server is not None:
                self.server.stop()
