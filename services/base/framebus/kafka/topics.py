"""Idempotent creation of framebus's topics."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from framebus.errors import KafkaError
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings, TopicSettings

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions, replication and topic-level configs."""

    name: str
    partitions: int
    replication_factor: int = 1
    config: dict[str, str] = field(default_factory=dict)


def framebus_topics(
    names: TopicSettings,
    frames_partitions: int,
    detections_partitions: int,
    replication_factor: int = 1,
    frames_retention_ms: int = 10 * 60 * 1000,
) -> list[TopicSpec]:
    """The frames, detections and dead-letter topics with framebus's configs."""
    frame_limit = str(MAX_RECORD_BYTES + 65536)
    return [
        # Frames are only useful for seconds; keep minutes so a restarted inferencer can catch up.
        TopicSpec(
            names.frames_topic,
            frames_partitions,
            replication_factor,
            {
                "retention.ms": str(frames_retention_ms),
                "max.message.bytes": frame_limit,
                "segment.bytes": str(128 * 1024 * 1024),
            },
        ),
        TopicSpec(
            names.detections_topic,
            detections_partitions,
            replication_factor,
            {"retention.ms": str(7 * DAY_MS)},
        ),
        # A dead letter holds the original message, which may be frame-sized.
        TopicSpec(
            names.deadletter_topic,
            1,
            replication_factor,
            {"retention.ms": str(7 * DAY_MS), "max.message.bytes": frame_limit},
        ),
    ]


def ensure_topics(
    settings: KafkaSettings, specs: list[TopicSpec], timeout_s: float = 30.0
) -> list[str]:
    """Create the topics that do not exist yet; return the names created."""
    admin = AdminClient(settings.client_config())
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor,
            config=s.config,
        )
        for s in specs
    ]
    created: list[str] = []
    for name, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            if err.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                log.info("topic %s already exists", name)
                continue
            raise KafkaError(f"cannot create topic {name}: {err.str()}", err.name()) from exc
    return created


def broker_reachable(settings: KafkaSettings, timeout_s: float = 5.0) -> bool:
    """True when a broker answers a metadata request within the timeout."""
    # log_level 0: a probe of a broker that is down must not spray librdkafka connect errors.
    admin = AdminClient(
        {**settings.client_config(), "socket.timeout.ms": int(timeout_s * 1000), "log_level": 0}
    )
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except confluent_kafka.KafkaException:
        return False
