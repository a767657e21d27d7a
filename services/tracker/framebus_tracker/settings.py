"""Tracker settings: topics, consumer group, changelog and the tracking algorithm's knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from framebus.kafka.settings import KafkaSettings
from framebus.settings import check, setting
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
    stop_after_idle_s: float = setting(
        0.0, "Exit after this many seconds without detections (0 = run forever; demos and tests)."
    )
    stage_timeout_s: float = setting(
        60.0,
        "The loop stuck this long, or a Kafka call in it: every thread's stack is logged, "
        "/livez and /readyz fail, and the process exits 70 to be restarted.",
    )
    http_port: int = setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(self.min_hits >= 1, "min_hits", "must be >= 1")
        check(self.max_lost_s > 0, "max_lost_s", "must be > 0")
        check(self.match_buffer >= 0, "match_buffer", "must be >= 0")
        check(0 < self.min_match_iou <= 1, "min_match_iou", "must be in (0, 1]")
        check(self.stop_after_idle_s >= 0, "stop_after_idle_s", "must be >= 0")
        check(0 <= self.http_port <= 65535, "http_port", "must be a TCP port or 0")
        check(1 <= self.stage_timeout_s <= 240, "stage_timeout_s", "must be between 1 and 240")
