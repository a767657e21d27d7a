"""Alerts settings: the rules file, the topic the rules read, its group and its budgets."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

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
    stop_after_idle_s: float = stop_after_idle_setting("input")
    stage_timeout_s: float = stage_timeout_setting()
    http_port: int = http_port_setting()
    log_level: str = log_level_setting()

    def __post_init__(self) -> None:
        check(self.alerts_partitions >= 1, "alerts_partitions", "must be >= 1")
        check_run_settings(self)
