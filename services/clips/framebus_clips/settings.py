"""Clips settings: the window around an alert, how long to wait for its video, where files go."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from framebus import settings as cfg
from framebus.kafka.settings import KafkaSettings
from framebus.settings import check, setting
from framebus.topology import Sizing, TopicSettings

# One alert is handled inside one loop iteration, which the watchdog allows this long.
MAX_ALERT_WAIT_S = 60.0


@dataclass(frozen=True)
class ClipsSettings:
    """Everything `framebus clips` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    clips_dir: Path = setting(
        Path("clips"), "Folder the clips are written to, as <camera>/<name>.mp4 and .jpg."
    )
    pre_roll_s: float = setting(
        5.0, "Seconds of video before the alert's frame a clip starts at (from a keyframe)."
    )
    post_roll_s: float = setting(5.0, "Seconds of video after the alert's frame a clip ends at.")
    gop_margin_s: float = setting(
        10.0,
        "Seconds before the pre-roll the video topic is read from, to find the keyframe a clip "
        "starts at: at least the cameras' keyframe interval.",
    )
    max_wait_s: float = setting(
        10.0,
        "Seconds past the post-roll's end (wall clock) to wait for its packets before the "
        "clip is cut short, for an alert whose post-roll is still to come.",
    )
    snapshot_search_s: float = setting(
        10.0,
        "Seconds before the alert's frame the frames topic is read from, for the alert's frame "
        "(or, when it is still, the last full frame before it).",
    )
    jpeg_quality: int = setting(90, "JPEG quality of the snapshot, 1 to 100.")
    video_retention_ms: int = setting(
        Sizing.video_retention_ms,
        "The video topic's retention (as `framebus topics create` set it): an alert whose "
        "video is gone and older than this gets status VIDEO_AGED_OUT rather than NO_VIDEO.",
    )
    alerts_partitions: int = setting(
        3, "Partitions of the clips topic when `framebus clips` creates it (one per alert's)."
    )
    clips_group: str = setting(
        "framebus-clips",
        "Consumer group of the alerts topic's reader (its own, apart from others).",
    )
    transactional_id: str | None = cfg.transactional_id_setting("clips_group")
    stop_after_idle_s: float = cfg.stop_after_idle_setting("alerts")
    stage_timeout_s: float = cfg.stage_timeout_setting()
    http_port: int = cfg.http_port_setting()
    log_level: str = cfg.log_level_setting()

    def __post_init__(self) -> None:
        check(self.pre_roll_s >= 0, "pre_roll_s", "must be >= 0")
        check(self.post_roll_s >= 0, "post_roll_s", "must be >= 0")
        check(self.gop_margin_s >= 0, "gop_margin_s", "must be >= 0")
        check(self.max_wait_s >= 0, "max_wait_s", "must be >= 0")
        check(
            self.post_roll_s + self.max_wait_s <= MAX_ALERT_WAIT_S,
            "max_wait_s",
            f"post_roll_s + max_wait_s must be <= {MAX_ALERT_WAIT_S:g} (one alert's budget)",
        )
        check(self.snapshot_search_s >= 0, "snapshot_search_s", "must be >= 0")
        check(1 <= self.jpeg_quality <= 100, "jpeg_quality", "must be 1 to 100")
        check(self.video_retention_ms >= 1, "video_retention_ms", "must be >= 1")
        check(self.alerts_partitions >= 1, "alerts_partitions", "must be >= 1")
        cfg.check_run_settings(self)
