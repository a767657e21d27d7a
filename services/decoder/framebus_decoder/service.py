"""The decoder service: one worker thread per camera, one publishing thread, one Kafka producer.

The main thread supervises: it applies changes of the cameras file (add, remove, restart a
camera without touching the others), logs a per-camera summary, and ends when every camera has
ended or `stop` is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from framebus.errors import ConfigError
from framebus.kafka.producer import Producer
from framebus.malloc import BacklogDrain
from framebus.messages import TensorLayout
from framebus.pixels import frame_nbytes
from framebus.telemetry.tracing import setup_tracing
from framebus_decoder.cameras import Camera, diff_cameras, load_cameras
from framebus_decoder.freeze import FreezeClock, FreezeTicker, never_frozen
from framebus_decoder.publisher import FramePublisher
from framebus_decoder.sampler import spread_phase
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.source import SourceOptions
from framebus_decoder.stats import CameraState, DecoderStats
from framebus_decoder.telemetry import decoder_telemetry
from framebus_decoder.videopublisher import VideoPublisher
from framebus_decoder.worker import CameraWorker, WorkerConfig

log = logging.getLogger(__name__)

SUMMARY_EVERY_S = 30.0
SUPERVISOR_ALLOWANCE_S = 30.0  # the supervisor loop turns every 0.1 s; past this it is stuck
# How long to wait for a camera worker to end once its stop is set. It checks the stop between
# frames, but an open or read blocked in FFmpeg returns only at PyAV's timeout (`open_timeout_s`,
# `stall_timeout_s`: 10 s by default), so less would give up on a worker about to end, and more
# would hold up a camera reload or the shutdown (within Kubernetes' grace period) on a stuck one.
WORKER_JOIN_TIMEOUT_S = 10.0


def backlog_drain(settings: DecoderSettings) -> BacklogDrain:
    """A producer backlog worth a quarter of its queue's bytes, drained to an eighth of that."""
    record = frame_nbytes(
        settings.frame_format.pixel_format, settings.input_height, settings.input_width
    )
    high = max(8, settings.producer_queue_kbytes * 1024 // 4 // max(1, record))
    return BacklogDrain(high, high // 8)


def worker_config(settings: DecoderSettings) -> WorkerConfig:
    """The part of the settings every camera worker uses."""
    return WorkerConfig(
        input_width=settings.input_width,
        input_height=settings.input_height,
        layout=TensorLayout.HWC,
        frame_format=settings.frame_format,
        compression=settings.compression,
        source=SourceOptions(
            open_timeout_s=settings.open_timeout_s,
            read_timeout_s=settings.stall_timeout_s,
            threading=settings.decode_threading,
            threads=settings.decode_threads,
            hwaccel=settings.hwaccel,
        ),
        stall_timeout_s=settings.stall_timeout_s,
        reconnect_initial_s=settings.reconnect_initial_s,
        reconnect_max_s=settings.reconnect_max_s,
        reconnect_jitter=settings.reconnect_jitter,
        max_frames=settings.max_frames,
        policy=settings.backpressure,
        buffers=settings.max_pending_frames + 2,
    )


def producer_overrides(settings: DecoderSettings) -> dict[str, object]:
    """Settings of librdkafka for ~1.2 MB frame records (on top of the shared producer's)."""
    return {
        "linger.ms": settings.producer_linger_ms,
        "queue.buffering.max.kbytes": settings.producer_queue_kbytes,
        # The tensor is compressed by the decoder (or not at all): Kafka must not re-compress.
        "compression.type": "none",
    }


def video_producer_overrides(settings: DecoderSettings) -> dict[str, object]:
    """Settings of librdkafka for the video packets: small records, batched by a short linger."""
    return {
        "linger.ms": settings.video_linger_ms,
        "queue.buffering.max.kbytes": settings.video_queue_kbytes,
        # Packets are compressed video already: Kafka's compression would find nothing to save.
        "compression.type": "none",
    }


class CameraFileWatcher:
    """Re-reads the cameras file when its modification time or size changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[float, int] | None = self._stamp()

    def _stamp(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def changed(self) -> bool:
        """True once per change of the file."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        return True


class DecoderService:
    """Cameras, their workers and the publisher; `apply` changes the camera set while running."""

    def __init__(
        self,
        settings: DecoderSettings,
        producer: Producer,
        stop: threading.Event,
        stats: DecoderStats,
        video_producer: Producer | None = None,
        freeze: FreezeClock | None = None,
    ) -> None:
        """`freeze`: the process's clock of time it did not run, which cameras' stalls discount."""
        self.settings = settings
        self._frozen_s = never_frozen if freeze is None else freeze.frozen_s
        self.stats = stats
        self._stop = stop
        self._config = worker_config(settings)
        self.publisher = FramePublisher(
            producer,
            settings.topics.frames_topic,
            stats,
            settings.max_pending_frames,
            backlog_drain(settings),
        )
        # Its producer connects on the first packet: nothing is opened while no camera has video.
        self.video = VideoPublisher(
            video_producer or Producer(settings.kafka, video_producer_overrides(settings)),
            settings.topics.video_topic,
            stats,
            settings.video_max_pending_packets,
        )
        self.workers: dict[str, CameraWorker] = {}
        self.config_errors = 0
        self._started = 0  # cameras started so far: picks the next spread sampling phase

    def apply(self, cameras: list[Camera]) -> None:
        """Start added cameras, stop removed ones, restart changed ones; leave the rest alone."""
        running = {cid: w.camera for cid, w in self.workers.items() if w.thread.is_alive()}
        finished = {cid for cid, w in self.workers.items() if not w.thread.is_alive()}
        changes = diff_cameras(running, [c for c in cameras if c.id not in finished])
        for cid in changes.removed:
            self._stop_camera(cid, "removed from the cameras file")
        for cam in changes.changed:
            self._stop_camera(cam.id, "changed in the cameras file")
            self._start(cam)
        for cam in changes.added:
            self._start(cam)
        # A finished camera whose entry changed gets another run.
        for cam in cameras:
            old = self.workers.get(cam.id)
            if cam.id in finished and old is not None and old.camera != cam:
                self._start(cam)

    def _start(self, camera: Camera) -> None:
        phase = camera.sample_phase
        if phase is None:
            phase = spread_phase(self._started)
        self._started += 1
        worker = CameraWorker(
            camera,
            self._config,
            self.publisher,
            self.stats,
            self._stop,
            sample_phase=phase,
            video=self.video,
            frozen_s=self._frozen_s,
        )
        self.workers[camera.id] = worker
        self.stats.set_state(camera.id, CameraState.STARTING)
        log.info(
            "camera starting",
            extra={
                "camera_id": camera.id,
                "url": camera.url,
                "target_fps": camera.target_fps,
                "sample_phase": round(phase, 3),
            },
        )
        worker.thread.start()

    def _stop_camera(self, camera_id: str, why: str) -> None:
        worker = self.workers.pop(camera_id)
        worker.stop.set()
        log.info("camera stopping: %s", why, extra={"camera_id": camera_id})
        worker.thread.join(WORKER_JOIN_TIMEOUT_S)
        if worker.thread.is_alive():
            log.error(
                "camera worker did not stop within %.0f s",
                WORKER_JOIN_TIMEOUT_S,
                extra={"camera_id": camera_id},
            )

    def reload(self, path: Path) -> None:
        """Apply the cameras file again; a bad file is logged, counted and ignored."""
        try:
            cameras = load_cameras(self.settings)
        except ConfigError as exc:
            self.config_errors += 1
            log.error("cameras file %s not applied, keeping the current cameras: %s", path, exc)
            return
        self.apply(cameras)

    def alive(self) -> bool:
        """True while any camera worker runs."""
        return any(w.thread.is_alive() for w in self.workers.values())

    def shutdown(self) -> None:
        """Stop every camera worker."""
        for w in self.workers.values():
            w.stop.set()
        for w in self.workers.values():
            w.thread.join(WORKER_JOIN_TIMEOUT_S)


def log_summary(stats: DecoderStats) -> None:
    """One log line per camera with its state and counters."""
    for cid, snap in sorted(stats.snapshot().items()):
        log.info(
            "camera %s: %s",
            snap.state.value,
            snap.state_reason or "-",
            extra={
                "camera_id": cid,
                **snap.counters,
                **{f"dropped_{k}": v for k, v in snap.dropped.items()},
                **{f"error_{k}": v for k, v in snap.errors.items()},
                **{f"video_{k}": v for k, v in snap.video.items()},
            },
        )


def run(
    settings: DecoderSettings,
    stop: threading.Event | None = None,
    stats: DecoderStats | None = None,
) -> int:
    """Run the cameras until they all end (or `stop` is set); return a process exit code.

    Exit code 1 when a camera failed for good or a frame was not delivered, else 0. A video
    packet not delivered is counted and logged only: the video topic serves clips, best effort.
    """
    stop = stop or threading.Event()
    stats = stats or DecoderStats()
    cameras = load_cameras(settings)
    producer = Producer(settings.kafka, overrides=producer_overrides(settings))
    ticker = FreezeTicker(FreezeClock(time.monotonic()), stats).start()
    service = DecoderService(settings, producer, stop, stats, freeze=ticker.clock)
    telemetry = decoder_telemetry(settings.http_port or None, stats, settings.kafka)
    setup_tracing("framebus-decoder", os.environ)
    # Cameras start only once the producer can send: a frame captured earlier would wait behind
    # the client's start-up (the producer id takes ~0.5 s, seconds on a fresh broker).
    waited = time.monotonic()
    if not producer.wait_ready(settings.open_timeout_s):
        log.warning(
            "Kafka producer not ready after %.0f s; starting cameras anyway",
            settings.open_timeout_s,
        )
    log.info("producer ready", extra={"wait_s": round(time.monotonic() - waited, 3)})
    service.publisher.start()
    service.video.start()
    service.apply(cameras)
    watcher = CameraFileWatcher(settings.cameras_file) if settings.cameras_file else None
    next_check = next_summary = time.monotonic()
    with telemetry.running():
        try:
            while not stop.is_set():
                telemetry.health.heartbeat("supervisor", allowance_s=SUPERVISOR_ALLOWANCE_S)
                now = time.monotonic()
                if watcher is not None and settings.cameras_reload_s and now >= next_check:
                    next_check = now + settings.cameras_reload_s
                    if watcher.changed():
                        service.reload(watcher.path)
                if now >= next_summary + SUMMARY_EVERY_S:
                    next_summary = now
                    log_summary(stats)
                if service.workers and not service.alive():
                    break
                stop.wait(0.1)
        except KeyboardInterrupt:
            stop.set()
        finally:
            telemetry.health.retire("supervisor")  # the drain below has its own bound
            service.shutdown()
            # Frames first: they are what the pipeline waits for; the video gets what is left.
            drain_end = time.monotonic() + settings.drain_timeout_s
            undelivered = service.publisher.close(settings.drain_timeout_s)
            video_undelivered = service.video.close(max(0.0, drain_end - time.monotonic()))
            ticker.stop()
    log_summary(stats)
    snaps = stats.snapshot().values()
    failed_cameras = [s.camera_id for s in snaps if s.state is CameraState.FAILED]
    # Records still undelivered at close were purged: their delivery reports count them failed.
    failed = stats.total("delivery_failed") + service.publisher.errors
    log.info(
        "decoder finished",
        extra={
            "delivered": stats.total("delivered"),
            "delivery_failed": failed,
            "undelivered_at_close": undelivered,
            "video_undelivered_at_close": video_undelivered,
            "failed_cameras": ",".join(failed_cameras),
        },
    )
    return 1 if failed_cameras or failed or undelivered else 0
