"""The decoder's Prometheus metrics, liveness and readiness, read from its `DecoderStats`.

Metrics are computed at scrape time from the same thread-safe counters the logs use, so the two
can never disagree and the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.families import counters, gauges
from framebus.telemetry.service import ServiceTelemetry
from framebus_decoder.stats import COUNTERS, CameraSnapshot, CameraState, DecoderStats


class DecoderCollector(Collector):
    """Per-camera counters and states as Prometheus metric families."""

    def __init__(self, stats: DecoderStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        """Yield the metric families (called by the registry at each scrape)."""
        snaps = self._stats.snapshot()
        p = "framebus_decoder"
        yield counters(
            f"{p}_frames",
            "Frames per camera by outcome: decoded, sampled_out, published, delivered, delivery_failed.",
            ["camera", "outcome"],
            {
                (cid, name): snap.count(name)
                for cid, snap in snaps.items()
                for name in COUNTERS
                if name != "reconnects"
            },
        )
        yield counters(
            f"{p}_frames_dropped",
            "Frames dropped per camera, by reason.",
            ["camera", "reason"],
            {(cid, r): n for cid, snap in snaps.items() for r, n in snap.dropped.items()},
        )
        yield counters(
            f"{p}_reconnects",
            "Source reconnects per camera.",
            ["camera"],
            {cid: snap.count("reconnects") for cid, snap in snaps.items()},
        )
        yield counters(
            f"{p}_source_errors",
            "Source failures per camera, by reason.",
            ["camera", "reason"],
            {(cid, r): n for cid, snap in snaps.items() for r, n in snap.errors.items()},
        )
        yield gauges(
            f"{p}_camera_state",
            "1 for the camera's current state.",
            ["camera", "state"],
            {(cid, snap.state.value): 1 for cid, snap in snaps.items()},
        )
        yield counters(
            f"{p}_hwaccel_fallbacks",
            "Sources opened in software although hardware decoding was asked (hwaccel), per "
            "camera, by the device tried and why: not_in_ffmpeg_build, no_device, "
            "codec_not_on_device.",
            ["camera", "device", "reason"],
            {(cid, *key): n for cid, snap in snaps.items() for key, n in snap.hw_fallbacks.items()},
        )
        yield gauges(
            f"{p}_decode_device",
            "1 for where the camera's current source decodes: software or a device type (cuda).",
            ["camera", "device"],
            {(cid, snap.device): 1 for cid, snap in snaps.items() if snap.device},
        )
        yield CounterMetricFamily(
            f"{p}_frozen_seconds",
            "Seconds the decoder process itself did not run (stopped, or starved of CPU), not "
            "counted against its cameras' stall timeout.",
            value=self._stats.frozen_s(),
        )
        yield from motion_families(snaps)
        yield from video_families(snaps)
        yield gauges(
            f"{p}_last_frame_age_seconds",
            "Seconds since the camera's last decoded frame.",
            ["camera"],
            {
                cid: snap.last_frame_age_s
                for cid, snap in snaps.items()
                if snap.last_frame_age_s is not None
            },
        )


def motion_families(snaps: dict[str, CameraSnapshot]) -> Iterator[Any]:
    """The motion gate's metrics, for cameras that have one (docs/motion.md)."""
    p = "framebus_decoder"
    yield counters(
        f"{p}_still_frames",
        "Sampled frames the motion gate sent as still records (no pixels, no model run).",
        ["camera"],
        {cid: snap.gated.get("still", 0) for cid, snap in snaps.items() if snap.gated},
    )
    yield counters(
        f"{p}_motion_full_frames",
        "Sampled frames the motion gate sent in full, by reason: motion, first, motion_end, "
        "refresh, lighting.",
        ["camera", "reason"],
        {(cid, r): n for cid, snap in snaps.items() for r, n in snap.gated.items() if r != "still"},
    )
    yield gauges(
        f"{p}_motion_changed_fraction",
        "Fraction of the picture (outside the mask) the motion gate saw change in the last "
        "sampled frame.",
        ["camera"],
        {
            cid: snap.motion_fraction
            for cid, snap in snaps.items()
            if snap.motion_fraction is not None
        },
    )
    yield counters(
        f"{p}_motion_gate_cpu_seconds",
        "CPU time the motion gate spent, per camera (divide by its frames for the cost a frame).",
        ["camera"],
        {cid: snap.motion_cpu_s for cid, snap in snaps.items() if snap.gated},
    )


def video_families(snaps: dict[str, CameraSnapshot]) -> Iterator[Any]:
    """The video topic's metrics, for cameras that publish video (docs/decoder.md)."""
    p = "framebus_decoder"
    yield counters(
        f"{p}_video_packets",
        "Compressed video packets per camera, by outcome: published (queued for the producer), "
        "delivered, delivery_failed, dropped_backpressure, dropped_shutdown.",
        ["camera", "outcome"],
        {(cid, o): n for cid, snap in snaps.items() for o, n in snap.video.items()},
    )
    yield counters(
        f"{p}_video_bytes",
        "Bytes of the video records published per camera (their Avro values).",
        ["camera"],
        {cid: snap.video_bytes for cid, snap in snaps.items() if snap.video},
    )


def decoder_telemetry(
    port: int | None,
    stats: DecoderStats,
    kafka: KafkaSettings,
    host: str = "0.0.0.0",  # noqa: S104
) -> ServiceTelemetry:
    """The health, metrics and watchdog of one decoder run (an HTTP server when `port`)."""
    telemetry = ServiceTelemetry(port, (DecoderCollector(stats),), kafka, host)
    health = telemetry.health
    health.add_check("sources", lambda: sources_not_ready(stats))
    health.add_detail("stalled_cameras", lambda: cameras_in(stats, CameraState.RECONNECTING))
    health.add_detail("backpressure_cameras", lambda: cameras_in(stats, CameraState.BACKPRESSURE))
    return telemetry


def cameras_in(stats: DecoderStats, state: CameraState) -> dict[str, str]:
    """Cameras in `state`, with the reason each is there."""
    return {
        cid: s.state_reason or state.value
        for cid, s in stats.snapshot().items()
        if s.state is state
    }


def sources_not_ready(stats: DecoderStats) -> str | None:
    """Not ready while no camera is producing; stalled and held-back cameras are named apart."""
    snaps = stats.snapshot()
    if not snaps:
        return "no cameras configured"
    if any(s.state in (CameraState.STREAMING, CameraState.BACKPRESSURE) for s in snaps.values()):
        return None
    stalled = sorted(c for c, s in snaps.items() if s.state is CameraState.RECONNECTING)
    return f"no camera is producing frames; stalled (reconnecting): {', '.join(stalled) or 'none'}"
