from framebus.kafka.settings import KafkaSettings
from framebus_decoder.service import backlog_drain, producer_overrides
from framebus_decoder.settings import DecoderSettings


def test_producer_overrides_when_defaults_then_frames_are_sent_without_linger() -> None:
    # A camera's frames are 1/fps apart and keyed to one partition: lingering batches nothing.
    overrides = producer_overrides(DecoderSettings(kafka=KafkaSettings()))
    assert overrides["linger.ms"] == 0
    assert overrides["compression.type"] == "none"


def test_producer_overrides_when_linger_set_then_it_reaches_librdkafka() -> None:
    settings = DecoderSettings(kafka=KafkaSettings(), producer_linger_ms=5)
    assert producer_overrides(settings)["linger.ms"] == 5


def test_backlog_drain_when_queue_and_frame_size_set_then_marks_are_a_quarter_and_an_eighth() -> (
    None
):
    settings = DecoderSettings(
        kafka=KafkaSettings(), producer_queue_kbytes=65536, input_width=640, input_height=640
    )
    record = 640 * 640 * 3 // 2 if settings.frame_format.value == "i420" else 640 * 640 * 3
    drain = backlog_drain(settings)
    assert drain.high == 64 * 1024 * 1024 // 4 // record
    assert drain.low == drain.high // 8
    tiny = DecoderSettings(kafka=KafkaSettings(), producer_queue_kbytes=1024)
    assert backlog_drain(tiny).high == 8  # never a backlog of a frame or two
