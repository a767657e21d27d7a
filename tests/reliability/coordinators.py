"""Where a cluster's group and transaction coordinators live, and what its brokers logged.

Kafka puts a consumer group's coordinator, and a transactional id's, on the leader of one
partition of `__consumer_offsets` / `__transaction_state`: partitionFor(id). A test that must kill
the broker coordinating both picks ids by that rule and checks the cluster's own answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import confluent_kafka
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from framebus.kafka.settings import KafkaSettings, instance_transactional_id
from framebus_tools.localcluster import LocalCluster
from tests.reliability.harness import cluster_metadata, under_replicated, wait_for

# offsets.topic.num.partitions and transaction.state.log.num.partitions of the local cluster
# (framebus_tools.localkafka); checked against the metadata before a run relies on them.
INTERNAL_PARTITIONS = 4
OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"


def java_hash(text: str) -> int:
    """Java's String.hashCode() of `text` (over UTF-16 code units), a signed 32-bit int."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int = INTERNAL_PARTITIONS) -> int:
    """The internal-topic partition whose leader coordinates `key` (a group or transactional id).

    Kafka's partitionFor(): Utils.abs(key.hashCode()) % partitions, where abs(MIN_VALUE) is 0.
    Not `& 0x7fffffff` (the partitioner's toPositive): for a negative hash the two can differ.
    """
    h = java_hash(key)
    return 0 if h == -(1 << 31) else abs(h) % partitions


@dataclass(frozen=True)
class Coordinated:
    """A consumer group and transactional id whose coordinators are the same broker."""

    group: str
    txid: str
    broker: int
    group_partition: int
    txn_partition: int


def colocated_ids(kafka: KafkaSettings, tag: str, prefer: int) -> Coordinated:
    """Ids for `tag` coordinated by one broker: `prefer` if it leads both kinds of partition.

    The group and the transactional id take suffixes of their own: Java's hash of two names
    that differ only in a prefix differs by a constant, so one shared suffix could never put them
    on some pairs of partitions.
    """
    leaders = _internal_leaders(kafka)
    groups = {leaders[OFFSETS_TOPIC][coordinator_partition(g)]: g for g in _names(f"g-{tag}")}
    txids = {leaders[TXN_TOPIC][coordinator_partition(t)]: t for t in _names(f"tx-{tag}")}
    both = sorted(b for b in set(groups) & set(txids) if b >= 0)
    assert both, f"no broker leads both kinds of coordinator partition: {leaders}"
    broker = prefer if prefer in both else both[0]
    group = groups[broker]
    # What the inferencer uses: an explicit transactional id wins over group + host name.
    txid = instance_transactional_id(txids[broker], group)
    assert coordinator_partition(txid) == coordinator_partition(txids[broker])
    return Coordinated(
        group, txid, broker, coordinator_partition(group), coordinator_partition(txid)
    )


def _names(prefix: str) -> list[str]:
    return [f"{prefix}-{i}" for i in range(20)]


def _internal_leaders(kafka: KafkaSettings) -> dict[str, dict[int, int]]:
    topics = cluster_metadata(kafka).topics
    leaders = {
        t: {p.id: p.leader for p in topics[t].partitions.values()}
        for t in (OFFSETS_TOPIC, TXN_TOPIC)
    }
    assert all(len(parts) == INTERNAL_PARTITIONS for parts in leaders.values()), leaders
    return leaders


def create_internal_topics(kafka: KafkaSettings) -> None:
    """Make the broker create both coordinator topics (it does on the first lookup of each)."""
    admin = AdminClient({**kafka.client_config(), "log_level": 0})

    def group_lookup_answers() -> bool:
        try:
            admin.describe_consumer_groups(["probe"])["probe"].result(10)
        except (confluent_kafka.KafkaException, TimeoutError):
            return False  # NOT_COORDINATOR (or no answer) while __consumer_offsets is created
        return True

    wait_for(group_lookup_answers, 60, "__consumer_offsets")
    producer = confluent_kafka.Producer({**kafka.client_config(), "transactional.id": "probe"})
    producer.init_transactions(60)
    wait_for(lambda: not under_replicated(kafka), 60, "coordinator topics in sync")


def group_coordinator(kafka: KafkaSettings, group: str) -> int:
    """The broker id that coordinates `group`, as the cluster answers it."""
    admin = AdminClient({**kafka.client_config(), "log_level": 0})
    return int(admin.describe_consumer_groups([group])[group].result(10).coordinator.id)


def txn_coordinators(cluster: LocalCluster, txid: str) -> list[int]:
    """Brokers whose log says they gave `txid` its producer id: its transaction coordinator.

    (The client API has no DescribeTransactions; the coordinator logs each InitProducerId.)
    """
    needle = f"Initialized transactionalId {txid} with"
    return [
        n.node_id
        for n in cluster.nodes
        if n.log_file.exists() and needle in n.log_file.read_text(errors="replace")
    ]


def broker_log_sizes(cluster: LocalCluster) -> dict[int, int]:
    """How far each broker's log has been written (where a run's part of it starts)."""
    return {
        n.node_id: n.log_file.stat().st_size if n.log_file.exists() else 0 for n in cluster.nodes
    }


def broker_lines_since(
    cluster: LocalCluster, sizes: dict[int, int], needles: tuple[str, ...]
) -> list[str]:
    """Each broker's WARN and ERROR lines, and lines naming a needle, written after `sizes`."""
    out = []
    for n in cluster.nodes:
        if not n.log_file.exists():
            continue
        with n.log_file.open("rb") as f:
            start = sizes.get(n.node_id, 0)
            f.seek(start if start <= n.log_file.stat().st_size else 0)  # rolled over: all of it
            text = f.read().decode(errors="replace")
        out += [
            f"broker {n.node_id}: {line}"
            for line in text.splitlines()
            if " WARN " in line or " ERROR " in line or any(x in line for x in needles)
        ]
    return out


def elect_preferred_leaders(kafka: KafkaSettings) -> None:
    """Give the coordinator partitions back to their preferred replicas (after a restart)."""
    admin = AdminClient({**kafka.client_config(), "log_level": 0})
    parts = [
        confluent_kafka.TopicPartition(t, p)
        for t in (OFFSETS_TOPIC, TXN_TOPIC)
        for p in range(INTERNAL_PARTITIONS)
    ]
    # Per partition an error when its preferred replica leads already: nothing to do.
    admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, parts).result(30)


def known_everywhere(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    """True once every broker's metadata shows each partition of `topic` with a leader."""
    for node in cluster.nodes:
        meta = cluster_metadata(KafkaSettings(bootstrap_servers=node.bootstrap), topic)
        parts = meta.topics[topic].partitions
        if len(parts) != partitions or any(p.leader < 0 for p in parts.values()):
            return False
    return True
