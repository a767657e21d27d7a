"""The series names each service's /metrics really exports, scraped in-process.

Each service's health server is built the way its `run()` builds it, on port 0, with its stats
object holding a little of everything (one camera, one batch, one lag reading, one alert), then
`/metrics` is read over HTTP and parsed. The names include the suffixes Prometheus stores
(`_total`, `_bucket`, `_sum`, `_count`), so a dashboard query can be checked name by name.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Callable, Iterator

from prometheus_client.parser import text_string_to_metric_families

from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus.telemetry.health import HealthServer
from framebus_alerts.engine import EngineStats
from framebus_alerts.stats import AlertsStats
from framebus_alerts.telemetry import alerts_telemetry
from framebus_decoder.stats import COUNTERS, CameraState, DecoderStats
from framebus_decoder.telemetry import decoder_telemetry
from framebus_inferencer.batcher import CloseReason
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import inferencer_telemetry
from framebus_tracker.stats import TrackerStats
from framebus_tracker.telemetry import tracker_telemetry

CAMERA = "cam-1"


def _scrape(server: HealthServer) -> set[str]:
    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a local http URL
        text = response.read().decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@contextlib.contextmanager
def _serving(build: Callable[[], HealthServer]) -> Iterator[HealthServer]:
    server = build()
    try:
        yield server
    finally:
        server.stop()


def decoder() -> HealthServer:
    """The decoder's server (framebus_decoder.service.run)."""
    stats = DecoderStats()
    stats.frame_decoded(CAMERA)
    for counter in COUNTERS:
        stats.incr(CAMERA, counter)
    stats.drop(CAMERA, "backpressure_drop_oldest")
    stats.error(CAMERA, "stall", "no frame for 10 s")
    stats.set_state(CAMERA, CameraState.STREAMING)
    server = decoder_telemetry(0, stats, KafkaSettings()).server
    assert server is not None
    return server.start()


def inferencer() -> HealthServer:
    """The inferencer's server (framebus_inferencer.service.run: `inferencer_telemetry`)."""
    stats = InferencerStats(provider="CPUExecutionProvider", batch_mode="batched")
    stats.received(2)
    stats.batch(2, CloseReason.FULL, 5.0, [1.0, 2.0])
    stats.outcome(CAMERA, FrameStatus.INFERRED, 40.0)
    stats.outcome(CAMERA, FrameStatus.DROPPED_STALE, 2500.0)
    stats.error("commit")
    stats.dead_letter()
    stats.commit_window_wait()
    now_us = time.time_ns() // 1000
    tp = ("framebus.frames", 0)
    stats.lag.received(tp, 5, now_us - 50_000)
    stats.lag.received(tp, 6, now_us - 10_000)
    stats.lag.watermarks(tp, 10, 7)
    stats.delivered([(tp, 5)], now_us)
    server = inferencer_telemetry(0, stats, RunState()).server
    assert server is not None
    return server.start()


def tracker() -> HealthServer:
    """The tracker's server (framebus_tracker.service.run)."""
    stats = TrackerStats()
    for counter in (stats.frames, stats.objects, stats.tracks_confirmed, stats.replays):
        counter[CAMERA] += 1
    stats.not_looked_at[(CAMERA, "DROPPED_STALE")] += 1
    stats.active_tracks[CAMERA] = 1
    server = tracker_telemetry(0, stats).server
    assert server is not None
    return server.start()


def alerts() -> HealthServer:
    """The alerts consumer's server (framebus_alerts.service.run)."""
    stats = AlertsStats(engine=EngineStats())
    stats.engine.frames[CAMERA] += 1
    stats.engine.not_looked_at[(CAMERA, "FAILED")] += 1
    stats.delivered["loitering"] += 1
    server = alerts_telemetry(0, stats, "framebus.tracks").server
    assert server is not None
    return server.start()


# Each builds and starts its service's server.
SERVICES: dict[str, Callable[[], HealthServer]] = {
    "decoder": decoder,
    "inferencer": inferencer,
    "tracker": tracker,
    "alerts": alerts,
}


def exported_names() -> dict[str, set[str]]:
    """Service -> the sample names its /metrics exports."""
    names = {}
    for service, build in SERVICES.items():
        with _serving(build) as server:
            names[service] = _scrape(server)
    return names
