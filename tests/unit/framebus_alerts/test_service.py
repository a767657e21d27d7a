import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from framebus.codec import AlertCodec, DetectionsCodec, TracksCodec
from framebus.errors import CodecError, ConfigError
from framebus.messages import Box, Detections, FrameStatus, TrackedObject, tracks_of
from framebus.settings import load
from framebus_alerts.rules import Rule
from framebus_alerts.service import AlertProcessor, alert_json
from framebus_alerts.settings import AlertsSettings, AlertsSource

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
ZONE = ((0.0, 0.0), (100.0, 0.0), (100.0, 100.0), (0.0, 100.0))


@dataclass
class StubMessage:
    """A consumed Kafka message (satisfies framebus.kafka.protocol.MessageProto)."""

    payload: bytes
    hdrs: list[tuple[str, bytes]] = field(default_factory=list)
    off: int = 0

    def value(self) -> bytes | None:
        return self.payload

    def key(self) -> bytes | None:
        return b"cam-1"

    def topic(self) -> str | None:
        return "framebus.detections"

    def partition(self) -> int | None:
        return 2

    def offset(self) -> int | None:
        return self.off

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.hdrs

    def error(self) -> Any:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def detections_message(seq: int, traceparent: str | None = None) -> StubMessage:
    record = Detections(
        camera_id="cam-1",
        seq=seq,
        capture_ts_us=1_700_000_000_000_000 + seq,
        status=FrameStatus.INFERRED,
        model_name="m",
        model_version="1",
        boxes=(Box(40, 40, 60, 60, 0, "person", 0.9),),
    )
    headers = [("traceparent", traceparent.encode())] if traceparent else []
    return StubMessage(DetectionsCodec().encode(record), headers, off=100 + seq)


def test_processor_when_alert_fires_then_span_continues_frame_trace_and_goes_into_headers() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = AlertProcessor(
        [Rule(name="r", zone=ZONE, min_consecutive=2)], provider.get_tracer("test")
    )
    traceparent = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"

    assert processor.handle(detections_message(0, traceparent)) == ("cam-1", [])
    _camera, [(alert, headers)] = processor.handle(detections_message(1, traceparent))

    [span] = exporter.get_finished_spans()
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_SPAN_ID
    assert span.attributes is not None and span.attributes["framebus.rule"] == "r"
    sent = dict(headers)["traceparent"].decode()
    assert sent == f"00-{TRACE_ID}-{format(span.context.span_id, '016x')}-01"
    assert (alert.seq, alert.detections_partition, alert.detections_offset) == (1, 2, 101)


def test_processor_when_no_traceparent_then_alert_starts_its_own_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = AlertProcessor([Rule(name="r", zone=ZONE)], provider.get_tracer("test"))
    _camera, [(_alert, headers)] = processor.handle(detections_message(0))
    [span] = exporter.get_finished_spans()
    assert span.parent is None
    assert TRACE_ID not in dict(headers)["traceparent"].decode()


def test_processor_when_message_not_detections_then_codec_error() -> None:
    processor = AlertProcessor([Rule(name="r", zone=ZONE)])
    with pytest.raises(CodecError):
        processor.handle(StubMessage(b"not avro at all"))


def test_alert_codec_when_round_trip_then_equal_and_json_line_readable() -> None:
    processor = AlertProcessor([Rule(name="r", zone=ZONE)])
    _camera, [(alert, _)] = processor.handle(detections_message(3))
    codec = AlertCodec()
    assert codec.decode(codec.encode(alert)) == alert
    printed = json.loads(alert_json(alert))
    assert printed["rule"] == "r" and printed["seq"] == 3 and printed["anchor"] == "BOTTOM_CENTER"


def test_alerts_settings_when_from_env_then_topic_and_rules_set_and_validated(
    tmp_path: Any,
) -> None:
    loaded = load(
        AlertsSettings, {"FRAMEBUS_ALERTS_TOPIC": "site.alerts", "FRAMEBUS_RULES": "r.yaml"}
    )
    assert loaded.topics.alerts_topic == "site.alerts" and str(loaded.rules) == "r.yaml"
    with pytest.raises(ConfigError, match="FRAMEBUS_ALERTS_PARTITIONS"):
        load(AlertsSettings, {"FRAMEBUS_ALERTS_PARTITIONS": "0"})


def test_processor_when_processed_then_camera_is_the_state_key_and_alerts_are_encoded() -> None:
    processor = AlertProcessor([Rule(name="r", zone=ZONE)], alerts_topic="alerts")
    done = processor.process(detections_message(0))
    assert done.key == "cam-1"
    [out] = done.outputs
    assert (out.topic, out.key) == ("alerts", "cam-1")
    assert AlertCodec().decode(out.value).rule == "r"
    restored = AlertProcessor([Rule(name="r", zone=ZONE)])
    restored.restore("cam-1", json.loads(json.dumps(processor.snapshot("cam-1"))))
    assert restored.process(detections_message(0)).outputs == []  # a replay: already seen


def test_processor_when_reading_tracks_then_alert_names_the_detections_record_behind_it() -> None:
    det = DetectionsCodec().decode(detections_message(0).payload)
    processor = AlertProcessor([Rule(name="r", zone=ZONE)], source=AlertsSource.TRACKS)
    frame = tracks_of(
        det,
        tuple(TrackedObject("cam-1/1/1", b, det.capture_ts_us, True, 2) for b in det.boxes),
        detections_partition=4,
        detections_offset=77,
    )
    _camera, [(alert, _)] = processor.handle(StubMessage(TracksCodec().encode(frame), off=5))
    assert (alert.detections_partition, alert.detections_offset) == (4, 77)
