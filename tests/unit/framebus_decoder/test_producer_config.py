from framebus.kafka.settings import KafkaSettings
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import DecoderSettings


def test_producer_overrides_when_defaults_then_frames_are_sent_without_linger() -> None:
    # A camera's frames are 1/fps apart and keyed to one partition: lingering batches nothing.
    overrides = producer_overrides(DecoderSettings(kafka=KafkaSettings()))
    assert overrides["linger.ms"] == 0
    assert overrides["compression.type"] == "none"


def test_producer_overrides_when_linger_set_then_it_reaches_librdkafka() -> None:
    settings = DecoderSettings(kafka=KafkaSettings(), producer_linger_ms=5)
    assert producer_overrides(settings)["linger.ms"] == 5
