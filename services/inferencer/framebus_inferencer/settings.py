"""Inferencer settings: batching, freshness, model and delivery."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.settings import check, setting


@dataclass(frozen=True)
class InferencerSettings:
    """Everything `framebus inferencer` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    model_path: Path | None = setting(None, "ONNX detection model (YOLOv5/YOLOv8/YOLO11 export).")
    consumer_group: str = setting("framebus-inferencer", "Kafka consumer group of the inferencers.")
    max_batch: int = setting(8, "A batch closes when it holds this many frames ...")
    max_wait_ms: float = setting(20.0, "... or this long after its first frame arrived, if sooner.")
    confidence_threshold: float = setting(0.25, "Minimum score of a reported box.")
    iou_threshold: float = setting(0.45, "IoU above which NMS suppresses a box of the same class.")
    intra_op_threads: int = setting(
        0, "ONNX Runtime intra-op threads on the CPU (0 = its default)."
    )
    stop_after_idle_s: float = setting(
        0.0, "Exit after this many seconds without frames (0 = run forever; demos and tests)."
    )
    http_port: int = setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(1 <= self.max_batch <= 256, "max_batch", "must be between 1 and 256")
        check(self.max_wait_ms >= 0, "max_wait_ms", "must be >= 0")
        check(0 <= self.confidence_threshold <= 1, "confidence_threshold", "must be in [0, 1]")
        check(0 <= self.iou_threshold <= 1, "iou_threshold", "must be in [0, 1]")
        check(self.intra_op_threads >= 0, "intra_op_threads", "must be >= 0")
        check(0 <= self.http_port <= 65535, "http_port", "must be a TCP port or 0")
