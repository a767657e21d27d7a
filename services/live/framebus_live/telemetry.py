"""The live viewer's telemetry: `framebus_live_*` metrics on the service's registry, health.

The page's server answers /healthz, /readyz and /metrics itself (`framebus.telemetry.health.answer`),
so the `ServiceTelemetry` has no server of its own; its watchdog watches the consumers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.service import ServiceTelemetry


class LiveMetrics:
    """Every metric of one live server; thread-safe (consumer threads and the event loop)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.viewers = Gauge("framebus_live_viewers", "Pages connected over /ws.", registry=r)
        self.viewer_connections = Counter(
            "framebus_live_viewer_connections", "Pages that connected over /ws.", registry=r
        )
        self.mjpeg_clients = Gauge(
            "framebus_live_mjpeg_clients", "Clients of /mjpeg/<camera> streams.", registry=r
        )
        self.frames_received = Counter(
            "framebus_live_frames_received",
            "Frames records read from the frames topic, per camera.",
            ["camera_id"],
            registry=r,
        )
        self.records_received = Counter(
            "framebus_live_records_received",
            "Boxes records read, per source topic kind (tracks, detections) and whether shown.",
            ["source", "used"],
            registry=r,
        )
        self.alerts_received = Counter(
            "framebus_live_alerts_received", "Alerts read from the alerts topic.", registry=r
        )
        self.clips_received = Counter(
            "framebus_live_clips_received",
            "Clip records read from the clips topic, per status.",
            ["status"],
            registry=r,
        )
        self.logins = Counter(
            "framebus_live_logins",
            "Login attempts, per outcome (ok, wrong_password).",
            ["outcome"],
            registry=r,
        )
        self.bad_records = Counter(
            "framebus_live_bad_records",
            "Records that could not be decoded or shown, per topic kind (logged; skipped).",
            ["kind"],
            registry=r,
        )
        self.handoff_dropped = Counter(
            "framebus_live_handoff_dropped",
            "Frames replaced before the server took them, and records dropped when its inbox "
            "was full (the server fell behind the consumers).",
            ["kind"],
            registry=r,
        )
        self.frames_unpaired = Counter(
            "framebus_live_frames_unpaired",
            "Frames replaced by a newer one of their camera before their boxes record came.",
            registry=r,
        )
        self.frames_still_unshown = Counter(
            "framebus_live_frames_still_unshown",
            "Still frames (no pixels) that came before any full frame of their camera to show "
            "them with.",
            registry=r,
        )
        self.tiles_sent = Counter(
            "framebus_live_tiles_sent", "Tiles (frames) sent to pages.", registry=r
        )
        self.tiles_dropped = Counter(
            "framebus_live_tiles_dropped",
            "Tiles a slow page never got: replaced by a newer tile of the camera while its "
            "socket was still sending.",
            registry=r,
        )
        self.texts_dropped = Counter(
            "framebus_live_texts_dropped",
            "Alerts and camera lists a slow page never got: the oldest of its 256 unsent ones.",
            registry=r,
        )
        self.mjpeg_frames_sent = Counter(
            "framebus_live_mjpeg_frames_sent", "Frames sent on /mjpeg streams.", registry=r
        )
        self.jpeg_encode_seconds = Histogram(
            "framebus_live_jpeg_encode_seconds",
            "Time to cut, scale and JPEG-encode one tile.",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
            registry=r,
        )
        self.cameras = Gauge("framebus_live_cameras", "Cameras seen.", registry=r)
        self.tile_interval_seconds = Gauge(
            "framebus_live_tile_interval_seconds",
            "Seconds between two tiles of a camera now (1/tile_fps, longer with many cameras).",
            registry=r,
        )
        self.consumers_assigned = Gauge(
            "framebus_live_consumers_assigned",
            "Consumers (frames, boxes, alerts) that have joined their group.",
            registry=r,
        )


def live_telemetry(kafka: KafkaSettings) -> tuple[ServiceTelemetry, LiveMetrics]:
    """The service's telemetry (ready once the brokers answer) and its metrics on its registry."""
    telemetry = ServiceTelemetry(None, kafka=kafka)
    return telemetry, LiveMetrics(telemetry.registry)
