"""Reading whole topics back in tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka

from framebus.kafka.settings import KafkaSettings


def read_topic(
    kafka: KafkaSettings,
    topic: str,
    expected: int,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
    settle_s: float = 0.0,
) -> list[Any]:
    """Read messages from the beginning until `expected` arrived (then `settle_s` more) or timeout."""
    consumer = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"test-reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    out.append(msg)
            if len(out) >= expected:
                if settle_until is None:
                    settle_until = time.monotonic() + settle_s
                if time.monotonic() >= settle_until:
                    break
    finally:
        consumer.close()
    return out
