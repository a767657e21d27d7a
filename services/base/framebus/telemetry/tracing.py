"""OpenTelemetry tracing configured by the standard `OTEL_*` variables; context in Kafka headers.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set
and neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise. Off, the API's
no-op tracer is used: a span costs a function call and nothing is exported. The sampler
(`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) and the service name (`OTEL_SERVICE_NAME`) are
read by the SDK itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter

log = logging.getLogger(__name__)

KafkaHeaders = Sequence[tuple[str, bytes | str | None]]
TRACE_HEADERS = ("traceparent", "tracestate")
_configured = False


def tracing_enabled(env: Mapping[str, str]) -> bool:
    """Whether the `OTEL_*` variables ask for exported traces."""
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def setup_tracing(service_name: str, env: Mapping[str, str]) -> bool:
    """Install an SDK tracer provider with an OTLP/HTTP exporter when enabled; return whether it did."""
    global _configured  # noqa: PLW0603 - one provider per process, as OpenTelemetry requires
    if _configured or not tracing_enabled(env):
        return _configured
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER[_ARG]
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    log.info("tracing enabled", extra={"service": service_name})
    return True


def tracer(name: str) -> trace.Tracer:
    """A tracer from the global provider (a no-op one when tracing is off)."""
    return trace.get_tracer(name)


class _HeaderGetter(Getter[KafkaHeaders]):
    def get(self, carrier: KafkaHeaders, key: str) -> list[str] | None:
        values = [_text(v) for k, v in carrier if k.lower() == key.lower() and v is not None]
        return values or None

    def keys(self, carrier: KafkaHeaders) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _HeaderGetter()


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value or ""


def inject_headers(ctx: otel_context.Context | None = None) -> list[tuple[str, bytes]]:
    """W3C trace-context headers (`traceparent`, `tracestate`) for the given or current context."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return [(k, v.encode("latin-1")) for k, v in carrier.items()]


def extract_context(headers: KafkaHeaders | None) -> otel_context.Context:
    """The trace context carried by Kafka headers (an empty context when there is none)."""
    return propagate.extract(list(headers or ()), getter=_GETTER)


def span_context_of(headers: KafkaHeaders | None) -> trace.SpanContext | None:
    """The remote span context in the headers, if valid (for span links)."""
    span_ctx = trace.get_current_span(extract_context(headers)).get_span_context()
    return span_ctx if span_ctx.is_valid else None
