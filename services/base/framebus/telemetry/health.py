"""Liveness (loop heartbeats), readiness (named checks) and the HTTP server that reports them.

`/healthz` (and its alias `/livez`) answers 200 while every registered loop has beaten within its
allowance, else 503 naming the stuck loops. `/readyz` answers 200 when every readiness check
passes, else 503 with each failing check's reason. `/metrics` is the run's Prometheus registry in
text format.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], str | None]  # None when ready, else the reason

PATHS = ("/healthz", "/livez", "/readyz", "/metrics")
JSON = "application/json"


class Health:
    """Thread-safe heartbeats and readiness checks of one service."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._beats: dict[str, tuple[float, float]] = {}  # loop -> (last beat, allowance s)
        self._checks: dict[str, ReadinessCheck] = {}
        self._details: dict[str, Callable[[], Any]] = {}

    def heartbeat(self, loop: str, allowance_s: float = 30.0) -> None:
        """Record that `loop` is alive; it counts as stuck after `allowance_s` without a beat."""
        with self._lock:
            self._beats[loop] = (self._clock(), allowance_s)

    def retire(self, loop: str) -> None:
        """Stop watching a loop that ended on purpose."""
        with self._lock:
            self._beats.pop(loop, None)

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        """Register a readiness check."""
        with self._lock:
            self._checks[name] = check

    def add_detail(self, name: str, detail: Callable[[], Any]) -> None:
        """Register information shown in every `/readyz` answer (it does not decide readiness)."""
        with self._lock:
            self._details[name] = detail

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """(alive, details): stuck loops and how long since they beat."""
        now = self._clock()
        with self._lock:
            beats = dict(self._beats)
        stuck = {name: round(now - t, 1) for name, (t, allow) in beats.items() if now - t > allow}
        body: dict[str, Any] = {
            "status": "ok" if not stuck else "unhealthy",
            "loops": sorted(beats),
        }
        if stuck:
            body["stuck_loops_s"] = stuck
        return not stuck, body

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details): the reason of every failing check."""
        with self._lock:
            checks = dict(self._checks)
            details = dict(self._details)
        reasons: dict[str, str] = {}
        for name, check in checks.items():
            try:
                reason = check()
            except Exception as exc:  # noqa: BLE001 - a broken check must make us not-ready, visibly
                reason = f"check raised {type(exc).__name__}: {exc}"
            if reason:
                reasons[name] = reason
        body: dict[str, Any] = {"status": "ready" if not reasons else "not ready"}
        if reasons:
            body["reasons"] = reasons
        for name, detail in details.items():
            body[name] = detail()
        return not reasons, body


class HealthServer:
    """Serves `/healthz`, `/readyz` and `/metrics` on a background thread."""

    def __init__(
        self,
        port: int,
        health: Health,
        registry: CollectorRegistry,
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from outside the pod
    ) -> None:
        handler = _make_handler(health, registry)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-http", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        """Start serving; returns self."""
        self._thread.start()
        log.info("health and metrics on :%d (/healthz /readyz /metrics)", self.port)
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def answer(path: str, health: Health, registry: CollectorRegistry) -> tuple[int, bytes, str] | None:
    """(status, body, content type) of a GET of one of PATHS; None for any other path.

    Shared by HealthServer and services that serve these paths from their own HTTP server.
    """
    if path == "/metrics":
        return 200, generate_latest(registry), CONTENT_TYPE_LATEST
    if path in ("/healthz", "/livez"):
        ok, body = health.liveness()
    elif path == "/readyz":
        ok, body = health.readiness()
    else:
        return None
    return 200 if ok else 503, json.dumps(body).encode(), JSON


def _make_handler(health: Health, registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            answered = answer(path, health, registry)
            if answered is None:
                error = {"error": f"no such endpoint {path}; try /healthz /readyz /metrics"}
                answered = 404, json.dumps(error).encode(), JSON
            self._send(*answered)

        def _send(self, code: int, payload: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            # Probes hit these endpoints every few seconds; keep them out of the service log.
            return

    return Handler
