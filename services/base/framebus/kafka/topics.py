"""Topic administration: idempotent creation, partition counts, the cluster's size.

Which topics exist and how each is configured is `framebus.topology`'s to say.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from framebus.errors import KafkaError
from framebus.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

MAX_COPIES = 3  # replicas of a topic where the cluster has that many brokers
LEADER_POLL_S = 0.1


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions, replication and topic-level configs."""

    name: str
    partitions: int
    replication_factor: int = 1
    config: dict[str, str] = field(default_factory=dict)

    def creation_config(self) -> dict[str, str]:
        """The topic configs sent at creation: `config`, plus a fitting `min.insync.replicas`."""
        return {
            "min.insync.replicas": str(min_insync_replicas(self.replication_factor)),
            **self.config,
        }


def replication_factor_for(brokers: int) -> int:
    """Copies of each record a cluster of `brokers` keeps: three, or one per broker if fewer."""
    return max(1, min(MAX_COPIES, brokers))


def min_insync_replicas(replication_factor: int) -> int:
    """Copies a write needs before `acks=all` acknowledges it: 2 of 3 or more, else 1.

    With three copies, two must hold every acknowledged record and one broker may still die
    without refusing writes. Below three it is 1, set explicitly so such a topic stays writable
    on brokers whose own default is 2 (the local cluster's).
    """
    return 2 if replication_factor >= MAX_COPIES else 1


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
            config=s.creation_config(),
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
    partitions = {s.name: s.partitions for s in specs if s.name in created}
    wait_for_leaders(admin, partitions, time.monotonic() + timeout_s)
    return created


def wait_for_leaders(admin: AdminClient, partitions: dict[str, int], deadline: float) -> None:
    """Wait until every new topic's partitions have a leader in the metadata brokers serve.

    CreateTopics answers once the controller made the topics; brokers learn of them a little
    later, and a client asking meanwhile is told the topic does not exist.
    """
    waiting = dict(partitions)
    while waiting:
        try:
            topics = admin.list_topics(timeout=LEADER_POLL_S * 10).topics
        except confluent_kafka.KafkaException as exc:
            log.warning("cannot read the new topics' metadata: %s", exc.args[0].str())
            topics = {}
        waiting = {n: count for n, count in waiting.items() if not _led(topics.get(n), count)}
        if waiting and time.monotonic() >= deadline:
            log.warning("new topics without a leader yet: %s", ", ".join(sorted(waiting)))
            return
        if waiting:
            time.sleep(LEADER_POLL_S)


def _led(meta: Any, count: int) -> bool:
    if meta is None or meta.error is not None or len(meta.partitions) != count:
        return False
    return all(p.leader >= 0 for p in meta.partitions.values())


def broker_count(settings: KafkaSettings, timeout_s: float = 10.0) -> int:
    """How many brokers the cluster's metadata lists."""
    admin = AdminClient(settings.client_config())
    try:
        return len(admin.list_topics(timeout=timeout_s).brokers)
    except confluent_kafka.KafkaException as exc:
        err = exc.args[0]
        raise KafkaError(
            f"no Kafka broker answers at {settings.bootstrap_servers}: {err.str()}; start one "
            "(`framebus kafka start`) or set FRAMEBUS_BOOTSTRAP_SERVERS",
            err.name(),
        ) from exc


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


def wait_for_broker(
    settings: KafkaSettings, wait_s: float, probe_s: float = 5.0, pause_s: float = 1.0
) -> None:
    """Return once a broker answers; KafkaError naming the servers after `wait_s` seconds.

    For one-shot steps started beside their broker (compose, a Job) that may run first.
    """
    deadline = time.monotonic() + wait_s
    while not broker_reachable(settings, probe_s):
        if time.monotonic() + pause_s >= deadline:
            raise KafkaError(
                f"no Kafka broker answered at {settings.bootstrap_servers} within {wait_s:g} s",
                "TRANSPORT",
            )
        log.info("waiting for a Kafka broker at %s", settings.bootstrap_servers)
        time.sleep(pause_s)


def partition_count(settings: KafkaSettings, topic: str, timeout_s: float = 10.0) -> int:
    """Partitions of an existing topic; KafkaError when it does not exist."""
    admin = AdminClient(settings.client_config())
    try:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except confluent_kafka.KafkaException as exc:
        err = exc.args[0]
        raise KafkaError(f"cannot read the metadata of {topic}: {err.str()}", err.name()) from exc
    if meta is None or meta.error is not None or not meta.partitions:
        raise KafkaError(f"topic {topic} does not exist", "UNKNOWN_TOPIC_OR_PART")
    return len(meta.partitions)
