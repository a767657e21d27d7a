from typing import Any

from framebus.kafka.consumer import Consumer
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.malloc import MMAP_THRESHOLD_BYTES

GLIBC_MMAP_CEILING = MMAP_THRESHOLD_BYTES  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit glibc


def _config(**overrides: Any) -> dict[str, Any]:
    return Consumer(KafkaSettings(), "g", overrides).config


def test_consumer_config_when_built_then_fetch_responses_fit_below_glibc_mmap_ceiling() -> None:
    config = _config()
    # Each response is one buffer: above the ceiling it is fresh pages every time.
    assert config["fetch.max.bytes"] < GLIBC_MMAP_CEILING
    assert MAX_RECORD_BYTES <= config["max.partition.fetch.bytes"] <= config["fetch.max.bytes"]


def test_consumer_config_when_built_then_full_queue_backs_off_briefly_not_librdkafkas_second() -> (
    None
):
    assert _config()["fetch.queue.backoff.ms"] <= 50


def test_consumer_config_when_overridden_then_override_wins() -> None:
    assert _config(**{"fetch.max.bytes": 1 << 20})["fetch.max.bytes"] == 1 << 20


class _AssigningClient:
    """Stands in for confluent_kafka.Consumer: records the subscription and the assignment."""

    def __init__(self) -> None:
        self.on_assign: Any = None
        self.assigned: list[Any] = []

    def subscribe(self, topics: list[str], on_assign: Any) -> None:
        self.on_assign = on_assign

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert not cached  # the broker's end now, not the last fetch's
        return 0, 100 + tp.partition

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]


def test_subscribe_at_end_when_assigned_then_each_partition_starts_at_its_end_now() -> None:
    import confluent_kafka

    client = _AssigningClient()
    told: list[Any] = []
    consumer = Consumer(KafkaSettings(), "g", factory=lambda _config: client)
    consumer.subscribe_at_end(["frames"], told.append)
    client.on_assign(client, [confluent_kafka.TopicPartition("frames", p) for p in (0, 1)])
    assert client.assigned == [("frames", 0, 100), ("frames", 1, 101)]
    assert told == [[("frames", 0), ("frames", 1)]]
