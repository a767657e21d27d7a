"""`framebus alerts`: evaluate alert rules on the tracks (or detections) topic, publish alerts.

The decisions live in `framebus_alerts.engine` (pure); this module decodes, traces and counts,
and `framebus.kafka.stateful` runs the exactly-once loop: per batch, the alerts, every touched
camera's rule state (to a compacted changelog topic) and the consumer offsets are committed in one
transaction. A restart or a rebalance restores the states before any record is processed, so no
alert is lost or repeated and streaks, dwell times and line counts carry on.

Each alert continues the trace of the frame that triggered it: the W3C `traceparent` of the input
record is the parent of the alert's span, whose context goes into the alert's headers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from opentelemetry import trace

from framebus.codec import AlertCodec, DetectionsCodec, TracksCodec
from framebus.errors import ConfigError
from framebus.kafka.protocol import MessageProto
from framebus.kafka.settings import instance_transactional_id
from framebus.kafka.stateful import Output, Processed, StatefulConfig, StatefulRunner
from framebus.messages import Alert
from framebus.telemetry import tracing
from framebus.topology import Sizing, Topic, TopicSettings, ensure_written_topics
from framebus_alerts.engine import AlertEngine, tracks_from_detections
from framebus_alerts.rules import load_rules, needs_tracks
from framebus_alerts.settings import AlertsSettings, AlertsSource
from framebus_alerts.stats import AlertsStats
from framebus_alerts.telemetry import alerts_telemetry

log = logging.getLogger(__name__)

SERVICE = "alerts"
Headers = list[tuple[str, bytes]]


def alert_json(alert: Alert) -> str:
    """One alert as a single JSON line (what `framebus alerts` prints)."""
    record = dataclasses.asdict(alert)
    record["anchor"] = alert.anchor.value
    record["rule_type"] = alert.rule_type.value
    record["direction"] = alert.direction.value
    record["counts"] = dict(alert.counts)
    return json.dumps(record, separators=(",", ":"))


def print_alert(alert: Alert) -> None:
    """The default alert sink: one JSON line on stdout."""
    print(alert_json(alert), flush=True)


class AlertProcessor:
    """Evaluates the rules on one record per call; keeps the engine's state per camera."""

    def __init__(
        self,
        rules: Sequence[Any],
        tracer: trace.Tracer | None = None,
        source: AlertsSource = AlertsSource.DETECTIONS,
        alerts_topic: str = TopicSettings().alerts_topic,
    ) -> None:
        self.engine = AlertEngine(rules)
        self.source = source
        self.alerts_topic = alerts_topic
        self._tracer = tracer or tracing.tracer("framebus.alerts")
        self._detections = DetectionsCodec()
        self._tracks = TracksCodec()
        self._alerts = AlertCodec()

    def handle(self, msg: MessageProto) -> tuple[str, list[tuple[Alert, Headers]]]:
        """(camera, [(alert, headers)]) for one record; CodecError if it is not one of the source."""
        value = msg.value() or b""
        if self.source is AlertsSource.TRACKS:
            frame = self._tracks.decode(value)
            # An alert names the detections record behind it, which the tracks record carries.
            where = (frame.detections_partition, frame.detections_offset)
        else:
            frame = tracks_from_detections(self._detections.decode(value))
            where = (_or(msg.partition(), -1), _or(msg.offset(), -1))
        alerts = self.engine.observe(frame, *where)
        if not alerts:
            return frame.camera_id, []
        parent = tracing.extract_context(msg.headers())
        out: list[tuple[Alert, Headers]] = []
        for alert in alerts:
            with self._tracer.start_as_current_span(
                "framebus.alert",
                context=parent,
                kind=trace.SpanKind.PRODUCER,
                attributes={
                    "framebus.rule": alert.rule,
                    "framebus.rule_type": alert.rule_type.value,
                    "framebus.camera_id": alert.camera_id,
                    "framebus.seq": alert.seq,
                    "framebus.track_id": alert.track_id,
                },
            ):
                out.append((alert, tracing.inject_headers()))
        return frame.camera_id, out

    def process(self, msg: MessageProto) -> Processed:
        """The stateful loop's entry: the camera whose state changed and the alert records."""
        camera, alerts = self.handle(msg)
        outputs = [
            Output(self.alerts_topic, a.camera_id, self._alerts.encode(a), headers, made_from=a)
            for a, headers in alerts
        ]
        return Processed(camera, outputs)

    def snapshot(self, key: str) -> Mapping[str, Any]:
        """The camera's rule state."""
        return self.engine.snapshot(key)

    def restore(self, key: str, state: Mapping[str, Any]) -> None:
        """Take a camera's rule state from the changelog."""
        self.engine.restore(key, state)

    def forget(self, key: str) -> None:
        """Drop a camera whose partition went elsewhere."""
        self.engine.forget(key)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def source_of(settings: AlertsSettings, rules: Sequence[Any]) -> AlertsSource:
    """The topic kind the rules read; ConfigError for object rules on detections."""
    wanted = settings.alerts_source
    if wanted is AlertsSource.AUTO:
        return AlertsSource.TRACKS if needs_tracks(rules) else AlertsSource.DETECTIONS
    if wanted is AlertsSource.DETECTIONS and needs_tracks(rules):
        raise ConfigError(
            "object rules (zone_enter, zone_exit, dwell, line_crossing, occupancy) need track "
            "ids: run `framebus track` and set FRAMEBUS_ALERTS_SOURCE=tracks (or auto)"
        )
    return wanted


def run(
    settings: AlertsSettings,
    stop: threading.Event | None = None,
    sink: Callable[[Alert], None] = print_alert,
    tracer: trace.Tracer | None = None,
) -> int:
    """Consume until `stop` is set (or idle for `stop_after_idle_s`); return the exit code."""
    if settings.rules is None:
        raise ConfigError("no rules: set FRAMEBUS_RULES (--rules rules.yaml)")
    rules = load_rules(settings.rules)
    source = source_of(settings, rules)
    source_topic = (
        settings.topics.tracks_topic
        if source is AlertsSource.TRACKS
        else settings.topics.detections_topic
    )
    stop = stop or threading.Event()
    tracing.setup_tracing("framebus-alerts", os.environ)
    ensure_written_topics(
        settings.kafka,
        settings.topics,
        (Topic.ALERTS, Topic.ALERTS_CHANGELOG),
        Topic.TRACKS if source is AlertsSource.TRACKS else Topic.DETECTIONS,
        Sizing(alerts_partitions=settings.alerts_partitions),
    )
    processor = AlertProcessor(rules, tracer, source, settings.topics.alerts_topic)
    stats = AlertsStats(engine=processor.engine.stats)

    def committed(outputs: Sequence[Output]) -> None:
        for out in outputs:
            alert = cast(Alert, out.made_from)  # AlertProcessor made every output
            stats.delivered[alert.rule] += 1
            sink(alert)

    telemetry = alerts_telemetry(settings.http_port or None, stats, source_topic, settings.kafka)
    runner = StatefulRunner(
        settings.kafka,
        StatefulConfig(
            service=SERVICE,
            group=settings.alerts_group,
            source_topic=source_topic,
            changelog_topic=settings.topics.alerts_changelog_topic,
            deadletter_topic=settings.topics.deadletter_topic,
            transactional_id=instance_transactional_id(
                settings.transactional_id, settings.alerts_group
            ),
            stop_after_idle_s=settings.stop_after_idle_s,
            stage_timeout_s=settings.stage_timeout_s,
        ),
        processor,
        stats.loop,
        on_committed=committed,
        heartbeat=telemetry.beat,
        watch=telemetry.health.call,
    )
    log.info("alerts consumer started", extra={"rules": len(rules), "source": source_topic})
    with telemetry.running():
        runner.run(stop)
    stats.errors["undecodable"] = stats.loop.dead_letters
    log.info(
        "alerts consumer finished",
        extra={
            "records": stats.loop.records,
            "alerts": sum(stats.delivered.values()),
            "dead_letters": stats.loop.dead_letters,
        },
    )
    return 1 if stats.loop.dead_letters else 0
