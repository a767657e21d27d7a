"""The decoder service: one worker thread per camera, all publishing through one producer."""

from __future__ import annotations

import logging
import threading
import time

from framebus.errors import SourceError
from framebus.kafka.producer import Producer
from framebus_decoder.cameras import Camera, load_cameras
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher
from framebus_decoder.sampler import FpsSampler
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.source import iterate_frames

log = logging.getLogger(__name__)


def run_camera(
    camera: Camera, settings: DecoderSettings, publisher: FramePublisher, stop: threading.Event
) -> int:
    """Decode, sample, letterbox and publish one camera until its source ends; return frames sent."""
    buffer = LetterboxBuffer(settings.input_width, settings.input_height)
    sampler = FpsSampler(camera.target_fps)
    seq = 0
    while not stop.is_set():
        for decoded in iterate_frames(camera.url):
            if stop.is_set():
                break
            capture_ts_us = time.time_ns() // 1000
            if not sampler.accept(decoded.pts_s):
                continue
            lb = buffer.fill(decoded.rgb)
            h, w = decoded.rgb.shape[:2]
            publisher.publish(
                camera.id, seq, capture_ts_us, decoded.pts_s, (w, h), lb, buffer.buffer
            )
            seq += 1
            if settings.max_frames and seq >= settings.max_frames:
                return seq
        if not settings.loop:
            break
        sampler = FpsSampler(camera.target_fps)
    return seq


def run(settings: DecoderSettings, stop: threading.Event | None = None) -> int:
    """Run every camera to completion (or until `stop` is set); return a process exit code."""
    cameras = load_cameras(settings)
    stop = stop or threading.Event()
    failures: list[str] = []
    with Producer(settings.kafka) as producer:
        publisher = FramePublisher(producer, settings.topics.frames_topic, settings.compression)

        def work(camera: Camera) -> None:
            try:
                sent = run_camera(camera, settings, publisher, stop)
                log.info("camera finished", extra={"camera_id": camera.id, "frames": sent})
            except SourceError as exc:
                failures.append(camera.id)
                log.error("camera failed: %s", exc, extra={"camera_id": camera.id})

        threads = [threading.Thread(target=work, args=(c,), name=f"cam-{c.id}") for c in cameras]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                producer.poll(0.1)
        except KeyboardInterrupt:
            stop.set()
        for t in threads:
            t.join()
    failed = sum(publisher.failed.values())
    log.info(
        "decoder finished", extra={"delivered": sum(publisher.delivered.values()), "failed": failed}
    )
    return 1 if failures or failed else 0
