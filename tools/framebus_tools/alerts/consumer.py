"""`framebus alerts`: read the detections topic in an own consumer group, publish and print alerts.

The decisions live in `framebus_tools.alerts.rules`; this module does the Kafka I/O, tracing and metrics.
Each alert continues the trace of the frame that triggered it: the W3C `traceparent` of the
detections record is the parent of the alert's span, whose context goes into the alert's headers.
An offset is stored only after the alerts it produced are delivered. The streaks live in memory:
after a restart they start again from the committed offset (an object already in a zone needs
`min_consecutive` more frames to fire again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace

from framebus.codec import AlertCodec, DetectionsCodec
from framebus.errors import CodecError, ConfigError, DeliveryError
from framebus.kafka.consumer import Consumer
from framebus.kafka.deadletter import dead_letter_headers
from framebus.kafka.producer import Producer
from framebus.kafka.protocol import MessageProto
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import DAY_MS, TopicSpec, ensure_topics
from framebus.messages import Alert
from framebus.settings import check, setting
from framebus.telemetry import tracing
from framebus_tools.alerts.rules import EngineStats, Rule, RuleEngine, load_rules

log = logging.getLogger(__name__)

SERVICE = "alerts"
Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class AlertsSettings:
    """Everything `framebus alerts` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    rules: Path | None = setting(None, "YAML file of alert rules (see examples/rules.yaml).")
    alerts_topic: str = setting("framebus.alerts", "Topic the alert records are published to.")
    alerts_partitions: int = setting(
        3, "Partitions of the alerts topic when `framebus alerts` creates it."
    )
    alerts_group: str = setting(
        "framebus-alerts", "Consumer group of the alerts consumer (its own, apart from others)."
    )
    stop_after_idle_s: float = setting(
        0.0, "Exit after this many seconds without detections (0 = run forever; demos and tests)."
    )
    http_port: int = setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(bool(self.alerts_topic.strip()), "alerts_topic", "must not be empty")
        check(self.alerts_partitions >= 1, "alerts_partitions", "must be >= 1")
        check(self.stop_after_idle_s >= 0, "stop_after_idle_s", "must be >= 0")
        check(0 <= self.http_port <= 65535, "http_port", "must be a TCP port or 0")


@dataclass
class AlertsStats:
    """What the consumer did, for metrics and the exit summary."""

    engine: EngineStats
    delivered: Counter[str] = field(default_factory=Counter)  # rule -> alerts delivered
    errors: Counter[str] = field(default_factory=Counter)  # kind -> count


def alert_json(alert: Alert) -> str:
    """One alert as a single JSON line (what `framebus alerts` prints)."""
    record = dataclasses.asdict(alert)
    record["anchor"] = alert.anchor.value
    record["rule_type"] = alert.rule_type.value
    record["direction"] = alert.direction.value
    record["counts"] = dict(alert.counts)
    return json.dumps(record, separators=(",", ":"))


class AlertProcessor:
    """Turns one detections message into (alert, headers) pairs, each in a span of the frame's trace."""

    def __init__(self, rules: Sequence[Rule], tracer: trace.Tracer | None = None) -> None:
        self.engine = RuleEngine(rules)
        self._tracer = tracer or tracing.tracer("framebus.alerts")
        self._detections = DetectionsCodec()

    def handle(self, msg: MessageProto) -> list[tuple[Alert, Headers]]:
        """Evaluate the rules on one message; raise CodecError if it is not a detections record."""
        det = self._detections.decode(msg.value() or b"")
        alerts = self.engine.observe(det)
        if not alerts:
            return []
        parent = tracing.extract_context(msg.headers())
        out: list[tuple[Alert, Headers]] = []
        for alert in alerts:
            located = dataclasses.replace(
                alert,
                detections_partition=_or(msg.partition(), -1),
                detections_offset=_or(msg.offset(), -1),
            )
            with self._tracer.start_as_current_span(
                "framebus.alert",
                context=parent,
                kind=trace.SpanKind.PRODUCER,
                attributes={
                    "framebus.rule": alert.rule,
                    "framebus.camera_id": alert.camera_id,
                    "framebus.seq": alert.seq,
                    "framebus.consecutive_frames": alert.consecutive_frames,
                },
            ):
                out.append((located, tracing.inject_headers()))
        return out


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def print_alert(alert: Alert) -> None:
    """The default alert sink: one JSON line on stdout."""
    print(alert_json(alert), flush=True)


class AlertsService:
    """The consume -> evaluate -> publish -> store-offsets loop."""

    def __init__(
        self,
        settings: AlertsSettings,
        rules: Sequence[Rule],
        producer: Producer,
        sink: Callable[[Alert], None] = print_alert,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.processor = AlertProcessor(rules, tracer)
        self.producer = producer
        self.sink = sink
        self.codec = AlertCodec()
        self.stats = AlertsStats(engine=self.processor.engine.stats)
        self._delivery_errors: list[str] = []

    def process(self, batch: Sequence[MessageProto]) -> list[Alert]:
        """Evaluate a batch, publish its alerts and wait for their delivery; return them."""
        fired: list[Alert] = []
        for msg in batch:
            try:
                results = self.processor.handle(msg)
            except CodecError as exc:
                self.stats.errors["undecodable"] += 1
                self._dead_letter(msg, str(exc), type(exc).__name__)
                continue
            for alert, headers in results:
                self._produce(self.settings.alerts_topic, self.codec.encode(alert), alert, headers)
                fired.append(alert)
        self._flush()
        for alert in fired:
            self.stats.delivered[alert.rule] += 1
            self.sink(alert)
        return fired

    def _produce(self, topic: str, value: bytes, alert: Alert, headers: Headers) -> None:
        self.producer.produce(
            topic,
            value,
            key=alert.camera_id,
            headers=headers,
            on_delivery=self._report(topic),
            block_s=30.0,
        )

    def _dead_letter(self, msg: MessageProto, reason: str, error_type: str) -> None:
        log.error("dead-lettering a detections message: %s", reason)
        topic = self.settings.topics.deadletter_topic
        self.producer.produce(
            topic,
            msg.value() or b"",
            key=msg.key(),
            headers=dead_letter_headers(msg, reason, error_type, SERVICE),
            on_delivery=self._report(topic),
            block_s=30.0,
        )

    def _report(self, topic: str) -> Callable[[Any, Any], None]:
        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                self._delivery_errors.append(f"{topic}: {err.str()}")

        return report

    def _flush(self) -> None:
        pending = self.producer.flush(30.0)
        if pending or self._delivery_errors:
            errors, self._delivery_errors = self._delivery_errors, []
            self.stats.errors["delivery"] += pending + len(errors)
            raise DeliveryError(f"{pending} alert records undelivered; errors: {errors[:3]}")


def alerts_topic_spec(settings: AlertsSettings) -> TopicSpec:
    """The alerts topic: small records, kept for 30 days."""
    return TopicSpec(
        settings.alerts_topic, settings.alerts_partitions, 1, {"retention.ms": str(30 * DAY_MS)}
    )


def run(
    settings: AlertsSettings,
    stop: threading.Event | None = None,
    sink: Callable[[Alert], None] = print_alert,
    tracer: trace.Tracer | None = None,
) -> int:
    """Consume detections until `stop` is set (or idle for `stop_after_idle_s`); return exit code."""
    if settings.rules is None:
        raise ConfigError("no rules: set FRAMEBUS_RULES (--rules rules.yaml)")
    rules = load_rules(settings.rules)
    stop = stop or threading.Event()
    tracing.setup_tracing("framebus-alerts", os.environ)
    ensure_topics(settings.kafka, [alerts_topic_spec(settings)])
    with contextlib.ExitStack() as stack:
        producer = stack.enter_context(Producer(settings.kafka))
        consumer = stack.enter_context(Consumer(settings.kafka, settings.alerts_group))
        service = AlertsService(settings, rules, producer, sink, tracer)
        health: _Telemetry | None = None
        if settings.http_port:
            health = _Telemetry(settings.http_port, service.stats)
            stack.enter_context(health.server)
        consumer.subscribe([settings.topics.detections_topic], on_assign=_on_assign(health))
        log.info("alerts consumer started", extra={"rules": len(rules)})
        _loop(settings, service, consumer, stop, health)
    _log_summary(service.stats)
    return 1 if service.stats.errors else 0


def _loop(
    settings: AlertsSettings,
    service: AlertsService,
    consumer: Consumer,
    stop: threading.Event,
    health: _Telemetry | None,
) -> None:
    last_message = time.monotonic()
    while not stop.is_set():
        if health is not None:
            health.beat()
        batch = consumer.consume(256, 0.5)
        if batch:
            service.process(batch)
            # Only now, with every alert delivered, may these offsets be committed.
            consumer.store_offsets(batch)
            last_message = time.monotonic()
        elif (
            settings.stop_after_idle_s
            and time.monotonic() - last_message > settings.stop_after_idle_s
        ):
            log.info("no detections for %.1f s: exiting", settings.stop_after_idle_s)
            return


def _on_assign(health: _Telemetry | None) -> Callable[[Any, Any], None]:
    def on_assign(_consumer: Any, partitions: Any) -> None:
        if health is not None:
            health.assigned = True
        log.info("assigned %d detections partitions", len(partitions))

    return on_assign


def _log_summary(stats: AlertsStats) -> None:
    log.info(
        "alerts consumer finished",
        extra={
            "records": sum(stats.engine.frames.values()),
            "not_looked_at": sum(stats.engine.not_looked_at.values()),
            "alerts": sum(stats.delivered.values()),
            "errors": dict(stats.errors),
        },
    )


class _Telemetry:
    """Metrics from the stats objects, a loop heartbeat and readiness on the health server."""

    def __init__(self, port: int, stats: AlertsStats) -> None:
        from prometheus_client import CollectorRegistry

        from framebus.telemetry.health import Health, HealthServer

        self.health = Health()
        self.registry = CollectorRegistry()
        self.server = HealthServer(port, self.health, self.registry)
        self.assigned = False
        self.health.add_check(
            "kafka", lambda: None if self.assigned else "no detections partition assigned yet"
        )
        self.registry.register(_StatsCollector(stats))

    def beat(self) -> None:
        self.health.heartbeat("consume", 30.0)


class _StatsCollector:
    """Reads AlertsStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: AlertsStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        s = self.stats
        frames = CounterMetricFamily(
            "framebus_alerts_frames_evaluated",
            "Looked-at (INFERRED) detections records evaluated, per camera.",
            labels=["camera_id"],
        )
        for camera, n in s.engine.frames.items():
            frames.add_metric([camera], n)
        skipped = CounterMetricFamily(
            "framebus_alerts_frames_not_looked_at",
            "Detections records of frames the model did not look at, per camera and status.",
            labels=["camera_id", "status"],
        )
        for (camera, status), n in s.engine.not_looked_at.items():
            skipped.add_metric([camera, status], n)
        fired = CounterMetricFamily(
            "framebus_alerts_published", "Alerts delivered, per rule.", labels=["rule"]
        )
        for rule, n in s.delivered.items():
            fired.add_metric([rule], n)
        errors = CounterMetricFamily(
            "framebus_alerts_errors", "Errors of the alerts consumer, per kind.", labels=["kind"]
        )
        for kind, n in s.errors.items():
            errors.add_metric([kind], n)
        yield from (frames, skipped, fired, errors)
