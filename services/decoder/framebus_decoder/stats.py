"""Per-camera counters and state of the decoder, thread-safe, for logs, health and metrics."""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from dataclasses import dataclass, field


class CameraState(enum.Enum):
    """What a camera worker is doing now."""

    STARTING = "STARTING"
    STREAMING = "STREAMING"
    RECONNECTING = "RECONNECTING"  # with the reason: stall, open_failed, ended, decode_error, ...
    BACKPRESSURE = "BACKPRESSURE"  # held back by a full producer queue; not a stall
    ENDED = "ENDED"  # a file source reached its end (or max_frames)
    STOPPED = "STOPPED"  # removed from the cameras file or the service is stopping
    FAILED = "FAILED"  # gave up (a file that cannot be decoded)


COUNTERS = (
    "decoded",
    "sampled_out",
    "published",
    "delivered",
    "delivery_failed",
    "reconnects",
)
# What became of a camera's video packets (docs/decoder.md, "The video topic"): queued for the
# producer (published), acknowledged by the broker (delivered), not (delivery_failed), dropped
# before the producer because it lagged (dropped_backpressure) or at shutdown (dropped_shutdown).
PUBLISHED = "published"
DELIVERED = "delivered"
DELIVERY_FAILED = "delivery_failed"
DROPPED_BACKPRESSURE = "dropped_backpressure"
DROPPED_SHUTDOWN = "dropped_shutdown"
VIDEO_OUTCOMES = (PUBLISHED, DELIVERED, DELIVERY_FAILED, DROPPED_BACKPRESSURE, DROPPED_SHUTDOWN)


@dataclass
class CameraStats:
    """Counters of one camera; mutate only through `DecoderStats`."""

    counters: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)  # by reason (policy or shutdown)
    errors: Counter[str] = field(default_factory=Counter)  # by reason
    state: CameraState = CameraState.STARTING
    state_reason: str = ""
    last_error: str = ""
    last_frame_at: float = 0.0  # time.monotonic() of the last decoded frame
    device: str = ""  # where its source decodes: "software" or a device type ("cuda")
    hw_fallbacks: Counter[tuple[str, str]] = field(default_factory=Counter)  # (device, reason)
    gated: Counter[str] = field(default_factory=Counter)  # motion gate decisions, by reason
    motion_fraction: float | None = None  # changed fraction of the last gated frame
    motion_cpu_s: float = 0.0
    video: Counter[str] = field(default_factory=Counter)  # video packets by outcome
    video_bytes: int = 0  # bytes of the video packets queued for the producer


@dataclass(frozen=True)
class CameraSnapshot:
    """A consistent copy of one camera's stats."""

    camera_id: str
    state: CameraState
    state_reason: str
    last_error: str
    counters: dict[str, int]
    dropped: dict[str, int]
    errors: dict[str, int]
    last_frame_age_s: float | None
    device: str = ""
    hw_fallbacks: dict[tuple[str, str], int] = field(default_factory=dict)
    gated: dict[str, int] = field(default_factory=dict)  # "still" or a full frame's reason
    motion_fraction: float | None = None
    motion_cpu_s: float = 0.0
    video: dict[str, int] = field(default_factory=dict)  # video packets by outcome
    video_bytes: int = 0

    def count(self, name: str) -> int:
        """One counter (`decoded`, `published`, ...), 0 when never counted."""
        return self.counters.get(name, 0)


class DecoderStats:
    """All cameras' counters and states behind one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cameras: dict[str, CameraStats] = {}
        self._frozen_s = 0.0  # the whole process's, not a camera's: framebus_decoder.freeze

    def _cam(self, camera_id: str) -> CameraStats:
        cam = self._cameras.get(camera_id)
        if cam is None:
            cam = self._cameras[camera_id] = CameraStats()
        return cam

    def incr(self, camera_id: str, counter: str, n: int = 1) -> None:
        """Add `n` to a counter of a camera."""
        with self._lock:
            self._cam(camera_id).counters[counter] += n

    def frame_decoded(self, camera_id: str) -> None:
        """Count a decoded frame and remember when it came."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.counters["decoded"] += 1
            cam.last_frame_at = time.monotonic()

    def drop(self, camera_id: str, reason: str, n: int = 1) -> None:
        """Count frames dropped for `reason`."""
        with self._lock:
            self._cam(camera_id).dropped[reason] += n

    def error(self, camera_id: str, reason: str, message: str) -> None:
        """Count one failure of the camera's source, with its reason and message."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.errors[reason] += 1
            cam.last_error = message

    def decoding(self, camera_id: str, device: str, fallback: tuple[str, str] | None) -> None:
        """A source opened, decoding on `device`; `fallback`: (device, reason) it asked for."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.device = device
            if fallback is not None:
                cam.hw_fallbacks[fallback] += 1

    def gated(self, camera_id: str, reason: str, fraction: float, cpu_s: float) -> None:
        """Count one motion gate decision (`still` or why the frame went in full), its cost."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.gated[reason] += 1
            cam.motion_fraction = fraction
            cam.motion_cpu_s += cpu_s

    def video(self, camera_id: str, outcome: str, n: int = 1, nbytes: int = 0) -> None:
        """Count `n` video packets by outcome (VIDEO_OUTCOMES), and bytes published."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.video[outcome] += n
            cam.video_bytes += nbytes

    def froze(self, seconds: float) -> None:
        """Count time the decoder process did not run (not held against its cameras)."""
        with self._lock:
            self._frozen_s += seconds

    def frozen_s(self) -> float:
        """Seconds the decoder process did not run, so far."""
        with self._lock:
            return self._frozen_s

    def set_state(self, camera_id: str, state: CameraState, reason: str = "") -> None:
        """Record the camera's current state (and why, for RECONNECTING and FAILED)."""
        with self._lock:
            cam = self._cam(camera_id)
            cam.state = state
            cam.state_reason = reason

    def state(self, camera_id: str) -> CameraState:
        """The camera's current state."""
        with self._lock:
            cam = self._cameras.get(camera_id)
            return CameraState.STARTING if cam is None else cam.state

    def snapshot(self) -> dict[str, CameraSnapshot]:
        """A copy of every camera's stats, by camera id."""
        now = time.monotonic()
        with self._lock:
            return {
                cid: CameraSnapshot(
                    camera_id=cid,
                    state=cam.state,
                    state_reason=cam.state_reason,
                    last_error=cam.last_error,
                    counters=dict(cam.counters),
                    dropped=dict(cam.dropped),
                    errors=dict(cam.errors),
                    last_frame_age_s=(now - cam.last_frame_at) if cam.last_frame_at else None,
                    device=cam.device,
                    hw_fallbacks=dict(cam.hw_fallbacks),
                    gated=dict(cam.gated),
                    motion_fraction=cam.motion_fraction,
                    motion_cpu_s=cam.motion_cpu_s,
                    video=dict(cam.video),
                    video_bytes=cam.video_bytes,
                )
                for cid, cam in self._cameras.items()
            }

    def total(self, counter: str) -> int:
        """A counter summed over cameras."""
        with self._lock:
            return sum(cam.counters[counter] for cam in self._cameras.values())
