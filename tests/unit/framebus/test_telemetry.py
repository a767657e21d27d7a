import json
import logging
import urllib.error
import urllib.request

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, Counter

from framebus.logs import JsonFormatter
from framebus.telemetry.health import PATHS, Health, HealthServer, answer
from framebus.telemetry.tracing import (
    extract_context,
    inject_headers,
    span_context_of,
    tracing_enabled,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_health_when_loop_misses_its_allowance_then_not_alive() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("consume", allowance_s=5)
    assert health.liveness()[0]
    clock.now = 6
    alive, body = health.liveness()
    assert not alive
    assert body["stuck_loops_s"] == {"consume": 6.0}


def test_health_when_check_fails_or_raises_then_not_ready_with_reasons() -> None:
    health = Health()
    health.add_check("kafka", lambda: "broker 127.0.0.1:9 unreachable")
    health.add_check("model", lambda: None)

    def broken() -> str | None:
        raise RuntimeError("boom")

    health.add_check("broken", broken)
    ready, body = health.readiness()
    assert not ready
    assert body["reasons"] == {
        "kafka": "broker 127.0.0.1:9 unreachable",
        "broken": "check raised RuntimeError: boom",
    }


def test_health_server_when_scraped_then_answers_json_and_prometheus_text() -> None:
    registry = CollectorRegistry()
    Counter("framebus_test_frames", "frames", registry=registry).inc(3)
    health = Health()
    health.add_check("kafka", lambda: "down")
    with HealthServer(0, health, registry, host="127.0.0.1") as server:
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(base + "/healthz") as resp:  # noqa: S310
            assert json.loads(resp.read())["status"] == "ok"
        try:
            urllib.request.urlopen(base + "/readyz")  # noqa: S310
            raise AssertionError("expected 503")
        except urllib.error.HTTPError as err:
            assert err.code == 503
            assert json.loads(err.read())["reasons"] == {"kafka": "down"}
        with urllib.request.urlopen(base + "/metrics") as resp:  # noqa: S310
            assert "framebus_test_frames_total 3.0" in resp.read().decode()


def test_health_answer_when_livez_then_same_as_healthz_and_unknown_path_none() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("consume", allowance_s=5)
    registry = CollectorRegistry()
    assert "/livez" in PATHS  # live serves PATHS from its aiohttp server
    assert answer("/livez", health, registry) == answer("/healthz", health, registry)
    status, body, content_type = answer("/livez", health, registry) or (0, b"", "")
    assert (status, json.loads(body)["status"], content_type) == (200, "ok", "application/json")
    clock.now = 6
    assert (answer("/livez", health, registry) or (0,))[0] == 503
    assert answer("/nope", health, registry) is None


def test_trace_headers_when_injected_then_extracted_context_has_same_trace() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("frame") as span:
        headers = inject_headers()
    assert headers[0][0] == "traceparent"
    remote = span_context_of(headers)
    assert remote is not None
    assert remote.trace_id == span.get_span_context().trace_id
    assert trace.get_current_span(extract_context([])).get_span_context().is_valid is False


def test_tracing_enabled_when_env_then_follows_otel_variables() -> None:
    assert not tracing_enabled({})
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not tracing_enabled(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert not tracing_enabled(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    )


def test_json_log_when_inside_span_then_carries_trace_id_and_extras() -> None:
    tracer = TracerProvider().get_tracer("test")
    record = logging.makeLogRecord({"msg": "stalled", "levelname": "WARNING", "camera_id": "cam-3"})
    with tracer.start_as_current_span("s") as span:
        line = json.loads(JsonFormatter().format(record))
    assert line["camera_id"] == "cam-3"
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
