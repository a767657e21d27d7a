"""Telemetry shared by the services: tracing across the Kafka hop, metrics, health and readiness.

- `tracing`: OpenTelemetry set-up from the standard `OTEL_*` variables, and W3C trace-context
  injection into / extraction from Kafka headers.
- `health`: loop heartbeats (liveness) and named readiness checks, plus the HTTP server that
  answers `/healthz`, `/readyz` and `/metrics` (Prometheus text format).

Each service creates one `prometheus_client.CollectorRegistry` per run and registers its metrics
there, so several services (or test runs) can live in one process without name clashes.
"""
