from typing import Any

from framebus.kafka.consumer import Consumer
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.malloc import MMAP_THRESHOLD_BYTES

GLIBC_MMAP_CEILING = MMAP_THRESHOLD_BYTES  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit glibc


def _config(**overrides: Any) -> dict[str, Any]:
    made: dict[str, Any] = {}

    def factory(config: dict[str, Any]) -> object:
        made.update(config)
        return object()

    _ = Consumer(KafkaSettings(), "g", overrides, factory=factory).client
    return made


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
