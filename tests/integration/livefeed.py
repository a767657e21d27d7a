"""Records for `framebus live` tests: letterboxed frames of a known picture and their boxes.

A 1280x720 frame holds one solid rectangle per camera; it is letterboxed into the model input the
way the decoder does it, and its detections / tracks records put a box exactly on it, so a test
can check that what the viewer shows (tile, /mjpeg, page) lines up with the records.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

import confluent_kafka
import numpy as np

from framebus.codec import AlertCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.messages import (
    Alert,
    Box,
    Detections,
    Frame,
    FrameStatus,
    RuleType,
    TensorLayout,
    TrackedObject,
    ZoneAnchor,
    tracks_of,
)
from framebus_decoder.preprocess import LetterboxBuffer

ORIG_W, ORIG_H = 1280, 720
BLOB_RGB = (40, 80, 200)  # a blue the viewer's box palette does not use


@dataclass(frozen=True)
class LiveTopics:
    """Where the feed writes."""

    frames: str
    detections: str
    tracks: str
    alerts: str


def blob_box(camera_index: int, seq: int) -> Box:
    """The rectangle of a camera's frame `seq` (moves right 8 px a frame), original pixels."""
    x1 = 100 + 200 * camera_index + (8 * seq) % 600
    return Box(float(x1), 200.0, float(x1 + 240), 520.0, 0, "person", 0.9)


def frame_of(camera: str, camera_index: int, seq: int, size: int, noise: bool = False) -> Frame:
    """A letterboxed frame with the camera's blob at `blob_box`."""
    rng = np.random.default_rng(seq)
    image = (
        rng.integers(0, 255, (ORIG_H, ORIG_W, 3), dtype=np.uint8)
        if noise
        else np.full((ORIG_H, ORIG_W, 3), 30, np.uint8)
    )
    b = blob_box(camera_index, seq)
    image[int(b.y1) : int(b.y2), int(b.x1) : int(b.x2)] = BLOB_RGB
    letterbox = LetterboxBuffer(size, size)
    lb = letterbox.fill_rgb(image)
    return Frame(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        orig_width=ORIG_W,
        orig_height=ORIG_H,
        shape=(size, size, 3),
        layout=TensorLayout.HWC,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        tensor=letterbox.tensor.tobytes(),
    )


def detections_of(frame: Frame, box: Box, status: FrameStatus = FrameStatus.INFERRED) -> Detections:
    """The detections record of `frame` with its one box (none unless INFERRED)."""
    return Detections(
        camera_id=frame.camera_id,
        seq=frame.seq,
        capture_ts_us=frame.capture_ts_us,
        status=status,
        model_name="feed",
        model_version="1",
        boxes=(box,) if status is FrameStatus.INFERRED else (),
        orig_width=ORIG_W,
        orig_height=ORIG_H,
        e2e_latency_ms=40.0 + frame.seq % 10,
    )


def alert_of(det: Detections) -> Alert:
    """A dwell alert on the record's box."""
    return Alert(
        rule="feed-dwell",
        camera_id=det.camera_id,
        seq=det.seq,
        capture_ts_us=det.capture_ts_us,
        fired_at_us=time.time_ns() // 1000,
        consecutive_frames=1,
        zone=((0.0, 0.0), (1280.0, 0.0), (1280.0, 720.0)),
        anchor=ZoneAnchor.BOTTOM_CENTER,
        boxes=det.boxes,
        rule_type=RuleType.DWELL,
        track_id=f"{det.camera_id}/1/1",
        measure=2.0,
    )


class LiveFeed:
    """Plays cameras at `fps` on a thread: frames with their detections and tracks records.

    Cameras in `tracked` also get a tracks record per frame; the first camera an alert every
    `alert_every` frames. With `still_every` N only every Nth frame is full: the others are still
    (no pixels, the decoder's motion gate saw nothing move), answered STILL, their tracks records
    carrying the last full frame's box.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: LiveTopics,
        cameras: list[str],
        fps: float = 5.0,
        size: int = 320,
        tracked: frozenset[str] = frozenset(),
        alert_every: int = 10,
        noise: bool = False,
        stale_every: int = 0,
        still_every: int = 0,
    ) -> None:
        self._producer = confluent_kafka.Producer(
            {**kafka.client_config(), "message.max.bytes": MAX_RECORD_BYTES}
        )
        self.topics, self.cameras, self.fps, self.size = topics, cameras, fps, size
        self.tracked, self.alert_every, self.noise, self.stale_every = (
            tracked,
            alert_every,
            noise,
            stale_every,
        )
        self.still_every = still_every
        self.sent: dict[tuple[str, int], Detections] = {}
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-feed", daemon=True)

    def start(self) -> LiveFeed:
        """Start playing."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop playing and flush."""
        self.stop.set()
        self._thread.join(10)
        self._producer.flush(10)

    def produce(self, topic: str, key: str, value: bytes) -> None:
        """One raw record."""
        self._producer.produce(topic, value, key=key)
        self._producer.poll(0)

    def _run(self) -> None:
        codecs = FrameCodec(), DetectionsCodec(), TracksCodec(), AlertCodec()
        frames, detections, tracks, alerts = codecs
        seq = 0
        start = time.monotonic()
        while not self.stop.is_set():
            still = bool(self.still_every) and seq % self.still_every != 0
            shown_seq = seq - seq % self.still_every if still else seq  # its picture's frame
            for i, cam in enumerate(self.cameras):
                frame = frame_of(cam, i, seq, self.size, self.noise)
                if still:
                    frame = replace(frame, tensor=b"", still=True)
                self.produce(self.topics.frames, cam, frames.encode(frame))
                stale = self.stale_every and seq % self.stale_every == self.stale_every - 1
                status = FrameStatus.DROPPED_STALE if stale else FrameStatus.INFERRED
                det = detections_of(frame, blob_box(i, seq), FrameStatus.STILL if still else status)
                self.sent[(cam, seq)] = det
                self.produce(self.topics.detections, cam, detections.encode(det))
                if cam in self.tracked:
                    boxes = (blob_box(i, shown_seq),) if still else det.boxes
                    objects = tuple(
                        TrackedObject(f"{cam}/1/{i + 1}", b, det.capture_ts_us, True, 3, still)
                        for b in boxes
                    )
                    self.produce(self.topics.tracks, cam, tracks.encode(tracks_of(det, objects)))
                if i == 0 and seq % self.alert_every == self.alert_every - 1 and det.boxes:
                    self.produce(self.topics.alerts, cam, alerts.encode(alert_of(det)))
            self._producer.flush(5)
            seq += 1
            self.stop.wait(max(0.0, start + seq / self.fps - time.monotonic()))
