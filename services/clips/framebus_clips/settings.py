"""Clips settings: the window around an alert, how long to wait for its video, where files go."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from framebus import settings as cfg
from framebus.kafka.settings import KafkaSettings
from framebus.settings import Secret, check, setting
from framebus.topology import Sizing, TopicSettings

# One alert is handled inside one loop iteration, which the watchdog allows this long.
MAX_ALERT_WAIT_S = 60.0

S3_SCHEME = "s3://"
FILE_SCHEME = "file://"


class S3Addressing(enum.Enum):
    """How the bucket appears in a request's URL (botocore's `addressing_style`)."""

    AUTO = "auto"  # botocore decides: virtual-hosted on AWS, path-style for an IP endpoint
    PATH = "path"  # http://host/bucket/key: what most self-hosted servers serve
    VIRTUAL = "virtual"  # http://bucket.host/key


@dataclass(frozen=True)
class S3Settings:
    """The object store of a `clips_target` of s3://bucket/prefix (unused for a folder)."""

    s3_endpoint_url: str | None = setting(
        None,
        "URL of an S3-compatible server (e.g. http://versitygw:7070); unset for AWS S3.",
    )
    s3_region: str | None = setting(
        None, "Region of the bucket; unset: the AWS chain (AWS_REGION, ~/.aws/config)."
    )
    s3_access_key_id: str | None = setting(
        None,
        "Access key id; unset: the AWS credential chain (AWS_ACCESS_KEY_ID, ~/.aws, an IAM "
        "role). Set with s3_secret_access_key.",
    )
    s3_secret_access_key: Secret | None = setting(
        None, "Secret access key, with s3_access_key_id (never logged)."
    )
    s3_addressing: S3Addressing = setting(
        S3Addressing.AUTO,
        "Bucket in the URL's host (virtual) or path (path: most self-hosted servers).",
        choices=tuple(m.value for m in S3Addressing),
    )
    s3_timeout_s: float = setting(
        10.0, "Seconds to connect, and to wait for each response, per S3 request."
    )
    s3_max_attempts: int = setting(
        3,
        "Attempts per S3 request (botocore's standard retries); after the last, the service "
        "exits without committing the alert, which the restarted service retries.",
    )

    def __post_init__(self) -> None:
        check(
            (self.s3_access_key_id is None) == (self.s3_secret_access_key is None),
            "s3_secret_access_key",
            "set both s3_access_key_id and s3_secret_access_key, or neither (the AWS chain)",
        )
        check(self.s3_timeout_s > 0, "s3_timeout_s", "must be > 0")
        check(self.s3_max_attempts >= 1, "s3_max_attempts", "must be >= 1")


@dataclass(frozen=True)
class ClipsSettings:
    """Everything `framebus clips` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    s3: S3Settings = field(default_factory=S3Settings)
    clips_dir: Path = setting(
        Path("clips"), "Folder the clips are written to, as <camera>/<name>.mp4 and .jpg."
    )
    clips_target: str | None = setting(
        None,
        "Where clips go instead of clips_dir: s3://bucket/prefix (an S3-compatible object "
        "store, see the s3_* settings) or a folder; unset: clips_dir.",
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
        "Seconds before the alert's frame the frames topic is searched for the last full frame, "
        "when the alert's frame (read from its own time) is still or missing.",
    )
    jpeg_quality: int = setting(90, "JPEG quality of the snapshot, 1 to 100.")
    read_retry_s: float = setting(
        30.0,
        "Seconds a read of the video or frames topic is tried again after a transient Kafka "
        "error (a broker away, a partition's leader moving); then the service exits 2 without "
        "committing the alert, which the restarted service retries.",
    )
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
        check(self.read_retry_s > 0, "read_retry_s", "must be > 0")
        check(self.video_retention_ms >= 1, "video_retention_ms", "must be >= 1")
        check(self.alerts_partitions >= 1, "alerts_partitions", "must be >= 1")
        target = self.clips_target or ""
        scheme = target.split("://", 1)[0] + "://" if "://" in target else ""
        check(
            scheme in ("", S3_SCHEME, FILE_SCHEME),
            "clips_target",
            f"{scheme} is not a target: use s3://bucket/prefix or a folder",
        )
        if scheme == S3_SCHEME:
            bucket = target.removeprefix(S3_SCHEME).split("/", 1)[0]
            check(bool(bucket), "clips_target", "s3:// needs a bucket: s3://bucket/prefix")
        cfg.check_run_settings(self)
