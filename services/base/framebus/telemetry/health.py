"""Liveness (loop heartbeats, watched calls), readiness (named checks) and their HTTP server.

`/healthz` (and its alias `/livez`) answers 200 while every registered loop has beaten within its
allowance and no thread has been inside one watched call (a library call that can block, such
as a Kafka transaction's commit or an engine run) for longer than the call's budget; else 503
naming the stuck loops and calls. `/readyz` answers 200 when every readiness check passes, else
503 with each failing check's reason. Once the service is declared stalled (`fail`), both answer
503 with that reason until the process exits (`framebus.telemetry.watchdog`). `/metrics` is the
run's Prometheus registry in text format.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], str | None]  # None when ready, else the reason

PATHS = ("/healthz", "/livez", "/readyz", "/metrics")
JSON = "application/json"


@dataclass(frozen=True)
class Call:
    """A watched library call in progress on one thread."""

    thread: str
    name: str
    started: float
    budget_s: float


@dataclass(frozen=True)
class Stall:
    """A loop that has not beaten, or a call that has not returned, within its allowance."""

    loop: str
    overdue_s: float  # seconds since the beat or the call's start
    allowance_s: float
    call: str | None = None  # the call it is stuck in; None for a loop that stopped beating

    def describe(self) -> str:
        """One line for logs and probes."""
        if self.call is None:
            return f"loop {self.loop} has not come round for {self.overdue_s:.0f} s"
        return (
            f"{self.loop} stuck in {self.call} for {self.overdue_s:.0f} s "
            f"(budget {self.allowance_s:g} s)"
        )


def thread_loop_name() -> str:
    """The current thread's name as a loop name (the pipelines name their threads `fb-<loop>`)."""
    return threading.current_thread().name.removeprefix("fb-")


class Health:
    """Thread-safe heartbeats, watched calls and readiness checks of one service."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._beats: dict[str, tuple[float, float]] = {}  # loop -> (last beat, allowance s)
        self._calls: dict[int, list[Call]] = {}  # thread ident -> its watched calls, innermost last
        self._checks: dict[str, ReadinessCheck] = {}
        self._details: dict[str, Callable[[], Any]] = {}
        self._failed: str | None = None

    def heartbeat(self, loop: str, allowance_s: float = 30.0) -> None:
        """Record that `loop` is alive; it counts as stuck after `allowance_s` without a beat."""
        with self._lock:
            self._beats[loop] = (self._clock(), allowance_s)

    def retire(self, loop: str) -> None:
        """Stop watching a loop that ended on purpose."""
        with self._lock:
            self._beats.pop(loop, None)

    @contextmanager
    def call(self, name: str, budget_s: float) -> Iterator[None]:
        """Watch a call that may block: past `budget_s` inside it, the thread counts as stuck.

        Heartbeats inside the call do not reset it: a thread that keeps polling while it waits
        for something that never comes is stuck all the same.
        """
        ident = threading.get_ident()
        entry = Call(thread_loop_name(), name, self._clock(), budget_s)
        with self._lock:
            self._calls.setdefault(ident, []).append(entry)
        try:
            yield
        finally:
            with self._lock:
                stack = self._calls.get(ident, [])
                if entry in stack:
                    stack.remove(entry)
                if not stack:
                    self._calls.pop(ident, None)

    def stalls(self) -> list[Stall]:
        """Loops overdue for a beat and calls past their budget, now.

        A loop overdue while its thread is inside a watched call is reported as stuck in that
        call (the innermost), which is what the operator needs to know.
        """
        now = self._clock()
        with self._lock:
            beats = dict(self._beats)
            calls = [c for stack in self._calls.values() for c in stack]
        inside = {c.thread: c for c in calls}  # each thread's innermost call (appended last)
        out = []
        for name, (t, allow) in beats.items():
            if now - t > allow:
                call = inside.get(name)
                out.append(Stall(name, now - t, allow, None if call is None else call.name))
        reported = {s.loop for s in out}
        out += [
            Stall(c.thread, now - c.started, c.budget_s, c.name)
            for c in calls
            if now - c.started > c.budget_s and c.thread not in reported
        ]
        return out

    def fail(self, reason: str) -> None:
        """Declare the service stalled: liveness and readiness fail with `reason` from now on."""
        with self._lock:
            self._failed = self._failed or reason

    @property
    def failed(self) -> str | None:
        """The stall reason once `fail` was called."""
        with self._lock:
            return self._failed

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        """Register a readiness check."""
        with self._lock:
            self._checks[name] = check

    def add_detail(self, name: str, detail: Callable[[], Any]) -> None:
        """Register information shown in every `/readyz` answer (it does not decide readiness)."""
        with self._lock:
            self._details[name] = detail

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """(alive, details): stuck loops, calls past their budget, and a declared stall."""
        stalls = self.stalls()
        with self._lock:
            loops = sorted(self._beats)
            failed = self._failed
        stuck = {s.loop: round(s.overdue_s, 1) for s in stalls if s.call is None}
        calls = [s.describe() for s in stalls if s.call is not None]
        alive = not stalls and failed is None
        body: dict[str, Any] = {"status": "ok" if alive else "unhealthy", "loops": loops}
        if stuck:
            body["stuck_loops_s"] = stuck
        if calls:
            body["stuck_calls"] = calls
        if failed is not None:
            body["stalled"] = failed
        return alive, body

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details): the reason of every failing check."""
        with self._lock:
            checks = dict(self._checks)
            details = dict(self._details)
        reasons: dict[str, str] = {}
        if self.failed is not None:
            reasons["stalled"] = self.failed
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


class _ProbeHTTPServer(ThreadingHTTPServer):
    """A probe that gave up before its answer (its own timeout) is no error of the service."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # broken pipe, reset by the client
            log.debug("probe client %s left before its answer", client_address)
            return
        super().handle_error(request, client_address)


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
        self._server = _ProbeHTTPServer((host, port), handler)
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
