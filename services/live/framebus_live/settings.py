"""Live viewer settings: topics, its own consumer groups, the HTTP server and the tile budget."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings
from framebus.settings import check, setting
from framebus.topology import TopicSettings


class LiveSource(enum.Enum):
    """Which records give the boxes drawn on the frames."""

    AUTO = "auto"  # per camera: tracks while the camera's tracks records arrive, else detections
    TRACKS = "tracks"
    DETECTIONS = "detections"

    def topics(self, tracks_topic: str, detections_topic: str) -> list[str]:
        """The topics to read boxes from in this mode."""
        if self is LiveSource.TRACKS:
            return [tracks_topic]
        if self is LiveSource.DETECTIONS:
            return [detections_topic]
        return [tracks_topic, detections_topic]


class LiveAuth(enum.Enum):
    """Who may see the page, its streams and the clips."""

    PASSWORD = "password"  # noqa: S105 - a mode's name; a login with the password in `password_file`; a signed cookie after
    OFF = "off"  # no login: only with http_host on loopback (the demo, a laptop)


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class LiveSettings:
    """Everything `framebus live` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    live_group: str = setting(
        "framebus-live",
        "Prefix of this instance's consumer group ids (a unique suffix is added per instance and "
        "topic); it reads from the latest end and never commits offsets, so no other reader is "
        "affected.",
    )
    live_source: LiveSource = setting(
        LiveSource.AUTO,
        "Records whose boxes are drawn: auto = tracks for a camera while its tracks arrive, else "
        "its detections.",
    )
    http_port: int = setting(
        8090, "Port of the page (/), /ws, /mjpeg/<camera>, /healthz, /readyz and /metrics."
    )
    http_host: str = setting(
        "0.0.0.0",  # noqa: S104 - the page, probes and scrapes come from outside the pod
        "Address the HTTP server binds (127.0.0.1 to keep it on this machine).",
    )
    tile_fps: float = setting(5.0, "Most frames per second pushed to a page per camera.")
    max_tiles_per_s: float = setting(
        80.0,
        "Most tiles per second the server JPEG-encodes over all cameras that pages show; the "
        "per-camera rate drops below tile_fps to stay within it (64 cameras: 1.25/s each).",
    )
    page_size: int = setting(
        16, "Most cameras a page receives frames and boxes of at once (the page pages the rest)."
    )
    tile_height: int = setting(
        360, "Height in pixels of the JPEG tiles sent to pages (never above the letterbox's)."
    )
    jpeg_quality: int = setting(75, "JPEG quality of tiles and /mjpeg frames, 1-100.")
    alerts_feed_size: int = setting(50, "Alerts kept for the feed (a new page gets them all).")
    stats_window_s: float = setting(60.0, "Seconds of records the per-camera figures cover.")
    stalled_after_s: float = setting(
        5.0, "A camera whose last frame or record is older than this is shown as stalled."
    )
    pair_wait_ms: float = setting(
        1000.0,
        "A frame whose boxes have not arrived after this long is shown without boxes (no "
        "inferencer running, or it dropped the frame).",
    )
    clips_dir: Path = setting(
        Path("clips"),
        "Folder `framebus clips` writes to (mounted at the same path): its files are served "
        "under /clips/ and linked from the alerts feed; nothing outside it is served.",
    )
    auth: LiveAuth = setting(
        LiveAuth.PASSWORD,
        "password = every route but the probes and /metrics needs a login with the password "
        "in password_file; off = no login, allowed only with http_host on loopback.",
    )
    password_file: Path | None = setting(
        None,
        "File holding the page's password (a mounted Secret; one trailing newline ignored). "
        "Required with auth=password; the password is never logged.",
    )
    session_max_age_s: float = setting(
        43200.0, "Seconds a login lasts before the page asks for the password again."
    )
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(
            self.auth is not LiveAuth.OFF or self.http_host in LOOPBACK_HOSTS,
            "auth",
            "may be off only with http_host 127.0.0.1 (set password_file to serve others)",
        )
        check(self.session_max_age_s > 0, "session_max_age_s", "must be > 0")
        check(bool(self.live_group.strip()), "live_group", "must not be empty")
        check(1 <= self.http_port <= 65535, "http_port", "must be a TCP port")
        check(self.tile_fps > 0, "tile_fps", "must be > 0")
        check(self.max_tiles_per_s > 0, "max_tiles_per_s", "must be > 0")
        check(self.page_size >= 1, "page_size", "must be >= 1")
        check(16 <= self.tile_height <= 2160, "tile_height", "must be between 16 and 2160")
        check(1 <= self.jpeg_quality <= 100, "jpeg_quality", "must be between 1 and 100")
        check(self.alerts_feed_size >= 1, "alerts_feed_size", "must be >= 1")
        check(self.stats_window_s > 0, "stats_window_s", "must be > 0")
        check(self.stalled_after_s > 0, "stalled_after_s", "must be > 0")
        check(self.pair_wait_ms >= 0, "pair_wait_ms", "must be >= 0")
