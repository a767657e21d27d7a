"""`framebus track`: detections in, one tracks record per frame out, state in a changelog topic.

The tracking itself is `framebus_tracker.tracker` (pure, deterministic); this module decodes,
encodes, traces and counts, and `framebus.kafka.stateful` does the exactly-once Kafka loop: the
tracks, the cameras' tracker states and the offsets are committed in one transaction per batch.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace

from framebus.codec import DetectionsCodec, TracksCodec
from framebus.kafka.protocol import MessageProto
from framebus.kafka.settings import instance_transactional_id
from framebus.kafka.stateful import (
    Output,
    Processed,
    StatefulConfig,
    StatefulRunner,
)
from framebus.messages import FrameStatus, Tracks
from framebus.telemetry import tracing
from framebus.topology import TRACKER_SOURCE, Topic, ensure_written_topics
from framebus_tracker.settings import TrackerSettings
from framebus_tracker.stats import TrackerStats
from framebus_tracker.telemetry import tracker_telemetry
from framebus_tracker.tracker import CameraTracker, TrackerConfig

log = logging.getLogger(__name__)

SERVICE = "tracker"


def _now_us() -> int:
    return time.time_ns() // 1000


class TrackProcessor:
    """One CameraTracker per camera of the assigned partitions (a KeyedProcessor)."""

    def __init__(
        self,
        settings: TrackerSettings,
        stats: TrackerStats | None = None,
        clock_us: Callable[[], int] = _now_us,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.config = TrackerConfig(
            min_hits=settings.min_hits,
            max_lost_s=settings.max_lost_s,
            match_buffer=settings.match_buffer,
            min_match_iou=settings.min_match_iou,
        )
        self.stats = stats or TrackerStats()
        self.trackers: dict[str, CameraTracker] = {}
        self._clock_us = clock_us
        self._tracer = tracer or tracing.tracer("framebus.tracker")
        self._detections = DetectionsCodec()
        self._tracks = TracksCodec()

    def process(self, msg: MessageProto) -> Processed:
        """Track one detections record; CodecError (dead-lettered) when it is not one."""
        det = self._detections.decode(msg.value() or b"")
        camera = det.camera_id
        tracker = self.trackers.get(camera)
        if tracker is None:
            tracker = self.trackers[camera] = CameraTracker(camera, self.config)
        # The span covers the tracking and the record it makes, and continues the frame's trace.
        with self._tracer.start_as_current_span(
            "framebus.track",
            context=tracing.extract_context(msg.headers()),
            kind=trace.SpanKind.PRODUCER,
            attributes={"framebus.camera_id": camera, "framebus.seq": det.seq},
        ):
            started = time.perf_counter()
            tracks = tracker.step(
                det,
                tracked_at_us=self._clock_us(),
                partition=_or(msg.partition(), -1),
                offset=_or(msg.offset(), -1),
            )
            self.stats.step_seconds += time.perf_counter() - started
            if tracks is None:
                self.stats.replays[camera] += 1
                return Processed(None)
            self._count(camera, tracks, tracker.active_tracks)
            value = self._tracks.encode(tracks)
            headers = tracing.inject_headers()
        return Processed(
            camera, [Output(self.settings.topics.tracks_topic, camera, value, headers)]
        )

    def _count(self, camera: str, tracks: Tracks, active: int) -> None:
        if tracks.status is FrameStatus.INFERRED:
            self.stats.frames[camera] += 1
            self.stats.objects[camera] += len(tracks.objects)
            self.stats.tracks_confirmed[camera] += sum(
                1 for o in tracks.objects if o.confirmed and o.hits == self.config.min_hits
            )
        else:
            self.stats.not_looked_at[(camera, tracks.status.value)] += 1
        self.stats.active_tracks[camera] = active

    def snapshot(self, key: str) -> Mapping[str, Any]:
        """The camera's tracker state."""
        return self.trackers[key].snapshot()

    def restore(self, key: str, state: Mapping[str, Any]) -> None:
        """Take a camera's state from the changelog; StateError when it cannot be read."""
        self.trackers[key] = CameraTracker.restore(key, self.config, state)

    def forget(self, key: str) -> None:
        """Drop a camera whose partition went elsewhere."""
        self.trackers.pop(key, None)
        self.stats.active_tracks.pop(key, None)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def ensure_tracker_topics(settings: TrackerSettings) -> None:
    """Create the tracks topic and the changelog to fit the detections topic (topology's rule)."""
    ensure_written_topics(
        settings.kafka, settings.topics, (Topic.TRACKS, Topic.TRACKER_CHANGELOG), TRACKER_SOURCE
    )


def stateful_config(settings: TrackerSettings) -> StatefulConfig:
    """The exactly-once loop's settings for this tracker: its group, topics and transactional id."""
    return StatefulConfig(
        service=SERVICE,
        group=settings.tracker_group,
        source_topic=settings.topics.detections_topic,
        changelog_topic=settings.topics.tracker_changelog_topic,
        deadletter_topic=settings.topics.deadletter_topic,
        transactional_id=instance_transactional_id(
            settings.transactional_id, settings.tracker_group
        ),
        stop_after_idle_s=settings.stop_after_idle_s,
        stage_timeout_s=settings.stage_timeout_s,
    )


def run(settings: TrackerSettings, stop: threading.Event | None = None) -> int:
    """Track until `stop` is set (or idle for `stop_after_idle_s`); return the exit code."""
    stop = stop or threading.Event()
    tracing.setup_tracing("framebus-tracker", os.environ)
    ensure_tracker_topics(settings)
    stats = TrackerStats()
    processor = TrackProcessor(settings, stats)
    config = stateful_config(settings)
    telemetry = tracker_telemetry(settings.http_port or None, stats, settings.kafka)
    runner = StatefulRunner(
        settings.kafka,
        config,
        processor,
        stats.loop,
        heartbeat=telemetry.beat,
        watch=telemetry.health.call,
    )
    log.info("tracker started", extra={"transactional_id": config.transactional_id})
    with telemetry.running():
        runner.run(stop)
    log.info(
        "tracker finished",
        extra={
            "records": stats.loop.records,
            "tracks_records": stats.loop.outputs,
            "dead_letters": stats.loop.dead_letters,
            "replays": sum(stats.replays.values()),
        },
    )
    return 0
