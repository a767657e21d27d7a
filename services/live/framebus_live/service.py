"""`framebus live`: run the consumers, the hub and the HTTP server until stopped."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from framebus.errors import ConfigError
from framebus.telemetry.health import Health
from framebus_live.auth import Sessions, read_password
from framebus_live.encoder import PendingTile, TileEncoder
from framebus_live.hub import LiveHub
from framebus_live.inbox import Inbox
from framebus_live.reader import TopicReader, decoders, instance_suffix
from framebus_live.server import build_app
from framebus_live.settings import LiveAuth, LiveSettings
from framebus_live.telemetry import LiveMetrics, live_telemetry
from framebus_live.views import Display

log = logging.getLogger(__name__)

TICK_S = 0.02  # how often due tiles go out and late boxes are given up on
STATS_EVERY_S = 1.0
ENCODE_THREADS = 4
SHUTDOWN_S = 2.0


def make_readers(
    settings: LiveSettings,
    inbox: Inbox[Any],
    metrics: LiveMetrics,
    health: Health,
    on_failure: Callable[[str], None],
) -> dict[str, TopicReader]:
    """The frames, boxes, alerts and clips consumers, each in a group of its own."""
    boxes = settings.live_source.topics(
        settings.topics.tracks_topic, settings.topics.detections_topic
    )
    topics_by_kind = {
        "frames": [settings.topics.frames_topic],
        "boxes": boxes,
        "alerts": [settings.topics.alerts_topic],
        "clips": [settings.topics.clips_topic],
    }
    decode = decoders(settings.topics.tracks_topic)
    suffix = instance_suffix()
    return {
        kind: TopicReader(
            kind,
            settings.kafka,
            f"{settings.live_group}-{suffix}-{kind}",
            topics,
            decode[kind],
            inbox.put_frame if kind == "frames" else inbox.put,
            metrics,
            health,
            on_failure,
        )
        for kind, topics in topics_by_kind.items()
    }


def add_readiness(health: Health, readers: dict[str, TopicReader]) -> None:
    """Ready once the frames and boxes consumers joined; the alerts and clips topics may not exist yet."""

    def joined(reader: TopicReader) -> Callable[[], str | None]:
        return lambda: (
            None if reader.assigned.is_set() else f"{reader.kind} consumer not assigned yet"
        )

    for kind in ("frames", "boxes"):
        health.add_check(f"{kind}-consumer", joined(readers[kind]))
    health.add_detail("alerts_consumer_assigned", readers["alerts"].assigned.is_set)
    health.add_detail("clips_consumer_assigned", readers["clips"].assigned.is_set)


def login_sessions(settings: LiveSettings) -> Sessions | None:
    """The page's logins (None with auth=off); ConfigError without a readable password."""
    if settings.auth is LiveAuth.OFF:
        return None
    if settings.password_file is None:
        raise ConfigError(
            "FRAMEBUS_PASSWORD_FILE (--password-file): required with auth=password, the "
            "default; or FRAMEBUS_AUTH=off with FRAMEBUS_HTTP_HOST=127.0.0.1 for local use"
        )
    return Sessions(read_password(settings.password_file), settings.session_max_age_s)


def run(settings: LiveSettings, stop: threading.Event | None = None) -> int:
    """Serve the page until `stop` is set; return the exit code (1 if a consumer failed)."""
    stop = stop or threading.Event()
    sessions = login_sessions(settings)  # a missing password stops it before anything starts
    return asyncio.run(_serve(settings, sessions, stop))


async def _serve(settings: LiveSettings, sessions: Sessions | None, stop: threading.Event) -> int:
    loop = asyncio.get_running_loop()
    telemetry, metrics = live_telemetry(settings.kafka)
    health = telemetry.health
    failures: list[str] = []
    pool = ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="live-encode")
    encoder = TileEncoder(pool, settings.tile_height, settings.jpeg_quality, metrics)

    def make_tile(camera: str, display: Display) -> PendingTile:
        return PendingTile(camera, display, encoder)

    hub = LiveHub(settings, metrics, make_tile)
    inbox: Inbox[Any] = Inbox(lambda: loop.call_soon_threadsafe(drain))

    def drain() -> None:
        frames, items = inbox.drain()
        hub.take(frames, items)

    def failed(reason: str) -> None:
        failures.append(reason)
        stop.set()

    readers = make_readers(settings, inbox, metrics, health, failed)
    add_readiness(health, readers)
    # On stop, open pages and streams get SHUTDOWN_S to close before their handlers are cancelled.
    app = build_app(hub, encoder, health, metrics, sessions)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.http_host, settings.http_port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"FRAMEBUS_HTTP_PORT (--http-port): cannot listen on "
            f"{settings.http_host}:{settings.http_port}: {exc.strerror}"
        ) from None
    for reader in readers.values():
        reader.start()
    log.info(
        "live page on http://%s/",
        _host_port(*runner.addresses[0][:2]),  # the bound port, also when http_port is 0
        extra={"groups": [r.group_id for r in readers.values()]},
    )
    try:
        with telemetry.running():
            await _ticks(hub, inbox, metrics, stop)
    finally:
        await runner.cleanup()
        for reader in readers.values():
            reader.stop()
        pool.shutdown(wait=True, cancel_futures=True)
    log.info("live stopped", extra={"failures": "; ".join(failures)} if failures else {})
    return 1 if failures else 0


def _host_port(host: str, port: int) -> str:
    """`host:port` for a URL: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _ticks(
    hub: LiveHub, inbox: Inbox[Any], metrics: LiveMetrics, stop: threading.Event
) -> None:
    """Send due tiles every TICK_S and the figures every second, until `stop` is set."""
    next_stats = 0.0
    replaced = dropped = 0
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        hub.tick()
        if loop.time() >= next_stats:
            next_stats = loop.time() + STATS_EVERY_S
            hub.send_stats()
            metrics.handoff_dropped.labels("frame").inc(inbox.frames_replaced - replaced)
            metrics.handoff_dropped.labels("record").inc(inbox.items_dropped - dropped)
            replaced, dropped = inbox.frames_replaced, inbox.items_dropped
        await asyncio.sleep(TICK_S)
