"""One camera's worker thread: open, decode, sample, letterbox, hand over; reconnect on failure."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from framebus.compression import compress
from framebus.letterbox import Letterbox
from framebus.messages import Compression, TensorLayout
from framebus.pixels import FrameFormat
from framebus_decoder.cameras import Camera
from framebus_decoder.freeze import never_frozen
from framebus_decoder.motion import MotionGate
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher, PendingFrame
from framebus_decoder.sampler import FpsSampler
from framebus_decoder.settings import BackpressurePolicy, HwAccel
from framebus_decoder.source import (
    DECODE_ERROR,
    ENDED,
    FROZEN,
    STALL,
    SourceFailure,
    SourceOptions,
    VideoSource,
    letterbox_frame,
)
from framebus_decoder.stats import CameraState, DecoderStats
from framebus_decoder.timing import Backoff, RealtimePacer, StallWatch
from framebus_decoder.videopublisher import VideoPublisher
from framebus_decoder.videotap import PacketTap

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """What every camera worker shares."""

    input_width: int
    input_height: int
    layout: TensorLayout
    frame_format: FrameFormat
    compression: Compression
    source: SourceOptions
    stall_timeout_s: float
    reconnect_initial_s: float
    reconnect_max_s: float
    reconnect_jitter: float
    max_frames: int
    policy: BackpressurePolicy
    buffers: int  # letterbox buffers per camera: pending capacity + one filling + one encoding


class _Done(Exception):
    """max_frames reached."""


class CameraWorker:
    """Runs one camera until it ends, fails for good, or is stopped."""

    def __init__(
        self,
        camera: Camera,
        config: WorkerConfig,
        publisher: FramePublisher,
        stats: DecoderStats,
        stop: threading.Event,
        sample_phase: float = 0.0,
        video: VideoPublisher | None = None,
        frozen_s: Callable[[float], float] = never_frozen,
    ) -> None:
        """`frozen_s`: seconds the process did not run so far (the decoder's `FreezeClock`)."""
        self.camera = camera
        self._frozen_s = frozen_s
        self._video = video if camera.video else None
        self.sample_phase = sample_phase
        self._cfg = config
        self._publisher = publisher
        self._stats = stats
        self.stop = threading.Event()
        self._service_stop = stop
        self._pool: queue.SimpleQueue[LetterboxBuffer] = queue.SimpleQueue()
        for _ in range(config.buffers if config.compression is Compression.NONE else 1):
            self._pool.put(
                LetterboxBuffer(
                    config.input_width, config.input_height, config.layout, config.frame_format
                )
            )
        self._handed = 0
        self._gate = None if camera.motion is None else MotionGate(camera.motion)
        self._fallback_logged = False  # a hardware-decoding fallback is logged once per camera
        # A file decoded as fast as possible is a batch job: it waits for the producer rather
        # than drop frames, so what it publishes does not depend on the machine's speed.
        self.policy = (
            BackpressurePolicy.BLOCK if camera.is_file and not camera.realtime else config.policy
        )
        self.thread = threading.Thread(target=self.run, name=f"cam-{camera.id}", daemon=True)

    def stopping(self) -> bool:
        """True once this camera or the whole service is asked to stop."""
        return self.stop.is_set() or self._service_stop.is_set()

    def run(self) -> None:
        """The worker's loop: stream; on failure count, log, back off and reconnect."""
        cam = self.camera
        backoff = Backoff(
            self._cfg.reconnect_initial_s, self._cfg.reconnect_max_s, self._cfg.reconnect_jitter
        )
        sampler = FpsSampler(cam.target_fps, self.sample_phase)
        offset = 0.0
        final = CameraState.STOPPED
        while not self.stopping():
            try:
                offset = self._stream(sampler, offset, backoff)
                if not cam.is_file:
                    raise SourceFailure(ENDED, f"{cam.url}: the stream ended")
                if not cam.loop:
                    final = CameraState.ENDED
                    break
            except _Done:
                final = CameraState.ENDED
                break
            except SourceFailure as exc:
                if self.stopping():
                    break
                if exc.reason == FROZEN and (cam.loop or not cam.is_file):
                    self._reopen_after_freeze(exc)
                    continue
                self._stats.error(cam.id, exc.reason, str(exc))
                if cam.is_file:
                    log.error("camera failed: %s", exc, extra=self._extra(exc.reason))
                    final = CameraState.FAILED
                    self._stats.set_state(cam.id, final, exc.reason)
                    return
                delay = backoff.next_delay()
                self._stats.incr(cam.id, "reconnects")
                self._stats.set_state(cam.id, CameraState.RECONNECTING, exc.reason)
                log.warning(
                    "camera source lost (%s), reconnecting in %.1f s: %s",
                    exc.reason,
                    delay,
                    exc,
                    extra=self._extra(exc.reason, attempt=backoff.attempt),
                )
                self._wait(delay)
        self._stats.set_state(cam.id, final)
        log.info("camera stopped", extra={"camera_id": cam.id, "state": final.value})

    def _reopen_after_freeze(self, exc: SourceFailure) -> None:
        """Reopen at once, no backoff and no source error: the source did nothing wrong.

        A looping file starts its current loop again (the read cut short cannot be resumed).
        """
        self._stats.incr(self.camera.id, "reconnects")
        log.info("camera source reopened: %s", exc, extra=self._extra(exc.reason))

    def _extra(self, reason: str, **more: object) -> dict[str, object]:
        return {"camera_id": self.camera.id, "url": self.camera.url, "reason": reason, **more}

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping() and time.monotonic() < deadline:
            self.stop.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def _stream(self, sampler: FpsSampler, offset: float, backoff: Backoff) -> float:
        """Stream the source once to its end; return the pts offset for the next loop."""
        cam = self.camera
        pacer = RealtimePacer() if cam.realtime and cam.is_file else None
        if self._gate is not None:
            self._gate.reset()  # a new stream (reconnect, file loop): no reference yet
        with VideoSource(cam, self._cfg.source) as source:
            self._report_device(source)
            self._stats.set_state(cam.id, CameraState.STREAMING)
            watch = StallWatch(self._cfg.stall_timeout_s, time.monotonic(), self._frozen_s)
            # A new stream (open, reconnect, file loop) is a new video segment.
            tap = None if self._video is None else PacketTap(cam.id, self._video.submit, pacer)
            for frame, pts_s, received in self._frames(source, offset, tap, watch):
                if self.stopping():
                    return offset
                if watch.stalled(received):
                    raise SourceFailure(
                        STALL, f"{cam.url}: no frame for {watch.idle_s(received):.1f} s"
                    )
                watch.progress(received)
                backoff.reset()
                self._stats.frame_decoded(cam.id)
                if pacer is not None:
                    self._wait(pacer.wait_s(pts_s, time.monotonic()))
                if not sampler.accept(pts_s):
                    self._stats.incr(cam.id, "sampled_out")
                    continue
                capture_us = None if pacer is None else pacer.scheduled_us(pts_s)
                if self._hand_over(frame, pts_s, capture_us):
                    watch.progress(time.monotonic())  # time held back is backpressure
            return offset + source.duration_s

    def _frames(
        self, source: VideoSource, offset: float, tap: PacketTap | None, watch: StallWatch
    ) -> Iterator[tuple[Any, float, float]]:
        """The source's frames; a read cut short only because the process froze is FROZEN."""
        try:
            yield from source.frames(offset, tap)
        except SourceFailure as exc:
            frozen = freeze_failure(exc, watch, time.monotonic())
            if frozen is None:
                raise
            raise frozen from exc

    def _report_device(self, source: VideoSource) -> None:
        """Count where the source decodes; log a fallback to software the first time only."""
        fallback = source.hw_fallback
        key = None if fallback is None else (fallback.device, fallback.reason)
        self._stats.decoding(self.camera.id, source.device, key)
        if fallback is None or self._fallback_logged:
            return
        self._fallback_logged = True
        # Asked for by name, a missing device is a deployment to fix; `auto` expects none at times.
        level = logging.WARNING if fallback.mode is HwAccel.CUDA else logging.INFO
        log.log(
            level,
            fallback.message(self.camera.id),
            extra={
                "camera_id": self.camera.id,
                "hwaccel": fallback.mode.value,
                "device": fallback.device,
                "reason": fallback.reason,
            },
        )

    def _hand_over(self, frame: object, pts_s: float, capture_us: int | None = None) -> bool:
        """Letterbox into a free buffer and queue it; True when it waited on backpressure.

        The capture time is `capture_us` (a paced file's schedule) or the time of the hand-over.
        """
        capture_ts_us = time.time_ns() // 1000 if capture_us is None else capture_us
        buffer = self._pool.get()
        lb = letterbox_frame(frame, buffer)
        orig = (frame.width, frame.height)  # type: ignore[attr-defined]
        still = self._still(buffer, lb, pts_s)
        tensor, release, compression = self._payload(buffer, still)
        pending = PendingFrame(
            camera_id=self.camera.id,
            capture_ts_us=capture_ts_us,
            pts_s=pts_s,
            orig_size=orig,
            letterbox=lb,
            shape=buffer.shape,
            layout=buffer.layout,
            pixel_format=buffer.format.pixel_format,
            colour=buffer.colour,
            compression=compression,
            tensor=tensor,
            release=release,
            still=still,
        )
        full = self._publisher.queue_for(self.camera.id, self.policy).is_full()
        if full:
            self._stats.set_state(self.camera.id, CameraState.BACKPRESSURE, "producer queue full")
        result = self._publisher.submit(pending, self.policy, self.stop)
        if full:
            self._stats.set_state(self.camera.id, CameraState.STREAMING)
        if result.accepted:
            self._handed += 1
            if self._cfg.max_frames and self._handed >= self._cfg.max_frames:
                raise _Done
        return result.waited

    def _still(self, buffer: LetterboxBuffer, lb: Letterbox, pts_s: float) -> bool:
        """Ask the camera's motion gate (if any) whether this frame goes out without pixels."""
        if self._gate is None:
            return False
        started = time.thread_time()
        decision = self._gate.check(buffer.picture(lb), lb.scale, pts_s)
        cpu_s = time.thread_time() - started
        self._stats.gated(self.camera.id, decision.reason.value, decision.changed_fraction, cpu_s)
        return decision.still

    def _payload(
        self, buffer: LetterboxBuffer, still: bool
    ) -> tuple[bytes | memoryview, Callable[[], None], Compression]:
        """The record's tensor, what releases the buffer once it is encoded, its compression.

        A still frame carries no pixels: its buffer goes back at once, nothing to compress.
        """
        if still:
            self._pool.put(buffer)
            return b"", _nothing, Compression.NONE
        data = buffer.tensor.data.cast("B")
        if self._cfg.compression is Compression.NONE:
            return data, lambda: self._pool.put(buffer), Compression.NONE
        tensor = compress(self._cfg.compression, data)
        self._pool.put(buffer)
        return tensor, _nothing, self._cfg.compression


def freeze_failure(exc: SourceFailure, watch: StallWatch, now_s: float) -> SourceFailure | None:
    """FROZEN for a failure that the decoder's own freeze caused, not its source.

    Two such: a read cut short by PyAV's timeout (which counts the time the process did not
    run, as the stall watch does not) that is no stall once freezes are discounted; and a
    decode error on the first data after the process did not run for longer than the stall
    timeout, since a live sender drops what it cannot hold while nobody reads (GStreamer's
    RTSP server drops past its send backlog), and the stream resumes mid-picture. None when
    `exc` is another failure, or a stall indeed.
    """
    if exc.reason == STALL and not watch.stalled(now_s):
        cause = "cut short by the read timeout"
    elif exc.reason == DECODE_ERROR and watch.frozen_past_timeout(now_s):
        cause = "data the sender dropped meanwhile"
    else:
        return None
    return SourceFailure(
        FROZEN,
        f"{exc}: {cause} after the decoder itself did not run for {watch.frozen_s(now_s):.1f} s",
    )


def _nothing() -> None:
    return None
