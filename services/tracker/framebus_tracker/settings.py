"""Tracker settings: topics, consumer group, changelog and the tracking algorithm's knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from framebus.kafka.settings import KafkaSettings
from framebus.settings import (
    check,
    check_run_settings,
    http_port_setting,
    log_level_setting,
    setting,
    stage_timeout_setting,
    stop_after_idle_setting,
)
from framebus.topology import TopicSettings


@dataclass(frozen=True)
class TrackerSettings:
    """Everything `framebus track` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    tracker_group: str = setting(
        "framebus-tracker", "Consumer group of the trackers (instances share the cameras)."
    )
    transactional_id: str | None = setting(
        None,
        "Kafka transactional.id of this instance; default: <tracker_group>-<hostname>.",
    )
    min_hits: int = setting(
        2, "Looked-at frames a track must be matched in before it is confirmed."
    )
    max_lost_s: float = setting(
        2.0, "Seconds of capture time a confirmed track survives without a match."
    )
    match_buffer: float = setting(
        0.5,
        "Buffered-IoU margin: boxes grow by this fraction of their size on each side before "
        "matching, so an object that moved more than its width between samples still matches.",
    )
    min_match_iou: float = setting(
        0.05, "Least buffered IoU between a track's predicted box and a detection it takes."
    )
    stop_after_idle_s: float = stop_after_idle_setting("detections")
    stage_timeout_s: float = stage_timeout_setting()
    http_port: int = http_port_setting()
    log_level: str = log_level_setting()

    def __post_init__(self) -> None:
        check(self.min_hits >= 1, "min_hits", "must be >= 1")
        check(self.max_lost_s > 0, "max_lost_s", "must be > 0")
        check(self.match_buffer >= 0, "match_buffer", "must be >= 0")
        check(0 < self.min_match_iou <= 1, "min_match_iou", "must be in (0, 1]")
        check_run_settings(self)
