"""Alerts settings: the rules file, the topic the rules read, its group and its budgets."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings
from framebus.settings import check, setting
from framebus.topology import TopicSettings


class AlertsSource(enum.Enum):
    """Which topic the rules read; `auto`: tracks when any rule is an object rule."""

    AUTO = "auto"
    DETECTIONS = "detections"
    TRACKS = "tracks"


@dataclass(frozen=True)
class AlertsSettings:
    """Everything `framebus alerts` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    rules: Path | None = setting(None, "YAML file of alert rules (see examples/rules.yaml).")
    alerts_source: AlertsSource = setting(
        AlertsSource.AUTO,
        "Topic the rules read: tracks (needed by object rules), detections (frame rules only, "
        "no tracker running), or auto.",
    )
    alerts_partitions: int = setting(
        3, "Partitions of the alerts topic when `framebus alerts` creates it."
    )
    alerts_group: str = setting(
        "framebus-alerts", "Consumer group of the alerts consumer (its own, apart from others)."
    )
    transactional_id: str | None = setting(
        None, "Kafka transactional.id of this instance; default: <alerts_group>-<hostname>."
    )
    stop_after_idle_s: float = setting(
        0.0, "Exit after this many seconds without input (0 = run forever; demos and tests)."
    )
    stage_timeout_s: float = setting(
        60.0,
        "The loop stuck this long, or a Kafka call in it: every thread's stack is logged, "
        "/livez and /readyz fail, and the process exits 70 to be restarted.",
    )
    http_port: int = setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")
    log_level: str = setting("info", "Log level: debug, info, warning, error.")

    def __post_init__(self) -> None:
        check(self.alerts_partitions >= 1, "alerts_partitions", "must be >= 1")
        check(self.stop_after_idle_s >= 0, "stop_after_idle_s", "must be >= 0")
        check(0 <= self.http_port <= 65535, "http_port", "must be a TCP port or 0")
        check(1 <= self.stage_timeout_s <= 240, "stage_timeout_s", "must be between 1 and 240")
