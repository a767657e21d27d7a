"""`framebus clips`: one clip record per alert, exactly once, through the shared stateful loop.

`framebus.kafka.stateful` runs the loop without state (no changelog): per alert, the clip record
and the alert's consumer offset commit in one transaction, so a crash before the commit replays
the alert, whose files have deterministic names and are written again in place (no second
object), and its record is published once. One alert per transaction (`max_batch=1`): cutting a
clip may wait for its post-roll, and a transaction opens only when its record is sent.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from opentelemetry import trace

from framebus.codec import AlertCodec, ClipCodec
from framebus.kafka.protocol import MessageProto
from framebus.kafka.retry import RetryPolicy
from framebus.kafka.settings import instance_transactional_id
from framebus.kafka.stateful import Output, Processed, StatefulConfig
from framebus.kafka.topics import ensure_topics
from framebus.messages import Clip
from framebus.telemetry import tracing
from framebus.topology import Sizing, Topic, pipeline_specs
from framebus_clips.maker import ClipMaker
from framebus_clips.reading import CameraReader
from framebus_clips.settings import ClipsSettings
from framebus_clips.stats import ClipsStats
from framebus_clips.store import ClipStore, parse_target
from framebus_clips.stores import open_store
from framebus_clips.telemetry import clips_telemetry

log = logging.getLogger(__name__)

SERVICE = "clips"


class ClipProcessor:
    """Turns one alert record into its clip record; keeps no state between alerts."""

    def __init__(self, maker: ClipMaker, clips_topic: str, tracer: trace.Tracer | None = None):
        self.maker = maker
        self.clips_topic = clips_topic
        self._tracer = tracer or tracing.tracer("framebus.clips")
        self._alerts = AlertCodec()
        self._clips = ClipCodec()

    def process(self, msg: MessageProto) -> Processed:
        """The alert's clip record; CodecError (dead-lettered by the loop) for a malformed one."""
        alert = self._alerts.decode(msg.value() or b"")
        partition, offset = msg.partition(), msg.offset()
        with self._tracer.start_as_current_span(
            "framebus.clip",
            context=tracing.extract_context(msg.headers()),
            kind=trace.SpanKind.PRODUCER,
            attributes={"framebus.rule": alert.rule, "framebus.camera_id": alert.camera_id},
        ):
            clip = self.maker.make(
                alert, -1 if partition is None else partition, -1 if offset is None else offset
            )
            headers = tracing.inject_headers()
        value = self._clips.encode(clip)
        return Processed(None, [Output(self.clips_topic, clip.camera_id, value, headers, clip)])

    def snapshot(self, key: str) -> Mapping[str, Any]:
        """No state: never asked (no key is ever touched)."""
        return {}

    def restore(self, key: str, state: Mapping[str, Any]) -> None:
        """No state to restore."""

    def forget(self, key: str) -> None:
        """No state to drop."""


def _ensure_topics(settings: ClipsSettings) -> None:
    sizing = Sizing(alerts_partitions=settings.alerts_partitions)
    sizing = Sizing(
        alerts_partitions=settings.alerts_partitions,
        replication_factor=sizing.copies(settings.kafka),
    )
    ensure_topics(
        settings.kafka, pipeline_specs(settings.topics, sizing, (Topic.CLIPS, Topic.DEADLETTER))
    )


def run(
    settings: ClipsSettings, stop: threading.Event | None = None, tracer: trace.Tracer | None = None
) -> int:
    """Consume alerts until `stop` is set (or idle for `stop_after_idle_s`); return the exit code."""
    stop = stop or threading.Event()
    tracing.setup_tracing("framebus-clips", os.environ)
    _ensure_topics(settings)
    store = open_store(settings)
    try:
        store.check()  # a wrong bucket, endpoint or key stops the service here, not per alert
        return _serve(settings, store, stop, tracer)
    finally:
        store.close()


def _serve(
    settings: ClipsSettings, store: ClipStore, stop: threading.Event, tracer: trace.Tracer | None
) -> int:
    stats = ClipsStats()
    reader = CameraReader(settings.kafka, RetryPolicy(settings.read_retry_s), stats.read_retried)
    maker = ClipMaker(settings, reader, stats, store=store)
    processor = ClipProcessor(maker, settings.topics.clips_topic, tracer)

    def committed(outputs: Sequence[Output]) -> None:
        for out in outputs:
            clip = cast(Clip, out.made_from)  # ClipProcessor made every output
            stats.delivered[clip.status.name] += 1
            log.info(
                "clip %s of %s#%d: %s",
                clip.status.name,
                clip.camera_id,
                clip.seq,
                clip.uri or clip.reason,
            )

    alerts_topic = settings.topics.alerts_topic
    telemetry = clips_telemetry(settings.http_port or None, stats, alerts_topic, settings.kafka)
    config = StatefulConfig(
        service=SERVICE,
        group=settings.clips_group,
        source_topic=alerts_topic,
        changelog_topic=None,
        deadletter_topic=settings.topics.deadletter_topic,
        transactional_id=instance_transactional_id(settings.transactional_id, settings.clips_group),
        max_batch=1,
        stop_after_idle_s=settings.stop_after_idle_s,
        stage_timeout_s=settings.stage_timeout_s,
    )
    runner = telemetry.runner(settings.kafka, config, processor, committed)
    log.info(
        "clips service started",
        extra={"alerts": alerts_topic, "target": str(parse_target(settings))},
    )
    try:
        with telemetry.running():
            runner.run(stop)
    finally:
        reader.close()
    log.info(
        "clips service finished",
        extra={
            "alerts": stats.loop.records,
            "clips": dict(stats.delivered),
            "dead_letters": stats.loop.dead_letters,
        },
    )
    return 1 if stats.loop.dead_letters else 0
