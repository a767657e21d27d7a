"""Decoder settings: which cameras, at what rate, into which model input."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.messages import Compression
from framebus.settings import check, setting


@dataclass(frozen=True)
class DecoderSettings:
    """Everything `framebus decoder` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    camera_id: str = setting("cam0", "Camera id for a single camera given by --camera-url.")
    camera_url: str | None = setting(None, "Video URL or file path of a single camera.")
    cameras_file: Path | None = setting(
        None, "YAML or JSON file listing cameras (id, url, target_fps)."
    )
    target_fps: float = setting(5.0, "Frames per second published per camera (0 = every frame).")
    input_width: int = setting(640, "Model input width in pixels; frames are letterboxed to it.")
    input_height: int = setting(640, "Model input height in pixels.")
    compression: Compression = setting(Compression.NONE, "Compression of the tensor bytes.")
    loop: bool = setting(False, "Restart file sources at their end (demos, load tests).")
    max_frames: int = setting(
        0, "Stop each camera after publishing this many frames (0 = no limit)."
    )
    http_port: int = setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(self.target_fps >= 0, "target_fps", "must be >= 0")
        check(16 <= self.input_width <= 4096, "input_width", "must be between 16 and 4096")
        check(16 <= self.input_height <= 4096, "input_height", "must be between 16 and 4096")
        check(self.max_frames >= 0, "max_frames", "must be >= 0")
        check(0 <= self.http_port <= 65535, "http_port", "must be a TCP port or 0")
