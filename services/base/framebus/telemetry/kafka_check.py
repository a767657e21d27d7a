"""Readiness check shared by the services: whether the Kafka brokers answer."""

from __future__ import annotations

import time

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import broker_reachable


class KafkaCheck:
    """Readiness: the brokers answer (asked at most every `every_s`, since probes are frequent)."""

    def __init__(self, kafka: KafkaSettings, every_s: float = 3.0) -> None:
        self._kafka = kafka
        self._every_s = every_s
        self._checked_at = -1e9
        self._reason: str | None = "not checked yet"

    def __call__(self) -> str | None:
        """None when the brokers answer, else the reason (naming the brokers, never credentials)."""
        now = time.monotonic()
        if now - self._checked_at >= self._every_s:
            self._checked_at = now
            ok = broker_reachable(self._kafka, 2.0)
            self._reason = (
                None if ok else f"Kafka brokers {self._kafka.bootstrap_servers} do not answer"
            )
        return self._reason
