"""What the page draws on a frame: the boxes of one detections or tracks record, as plain values."""

from __future__ import annotations

from dataclasses import dataclass

from framebus.messages import Box, Detections, FrameStatus, Tracks, short_track_label


@dataclass(frozen=True)
class LiveBox:
    """One box in original-frame pixels and, from the tracks topic, its track."""

    box: Box
    track: str = ""  # "#7" for track "cam-1/1765003011/7"; "" from detections
    confirmed: bool = False
    carried: bool = False  # not seen: kept at its last box through a still frame


@dataclass(frozen=True)
class BoxesRecord:
    """One frame's result, from the tracks topic or the detections topic."""

    camera_id: str
    seq: int
    capture_ts_us: int
    status: FrameStatus
    orig_width: int
    orig_height: int
    e2e_latency_ms: float
    boxes: tuple[LiveBox, ...]
    source: str  # "tracks" or "detections"


def from_detections(det: Detections) -> BoxesRecord:
    """The boxes of a detections record."""
    boxes = tuple(LiveBox(b) for b in det.boxes)
    return BoxesRecord(
        det.camera_id,
        det.seq,
        det.capture_ts_us,
        det.status,
        det.orig_width,
        det.orig_height,
        det.e2e_latency_ms,
        boxes,
        "detections",
    )


def from_tracks(tracks: Tracks) -> BoxesRecord:
    """The boxes of a tracks record, each labelled with its short track id."""
    boxes = tuple(
        LiveBox(o.box, short_track_label(o.track_id), o.confirmed, o.carried)
        for o in tracks.objects
    )
    return BoxesRecord(
        tracks.camera_id,
        tracks.seq,
        tracks.capture_ts_us,
        tracks.status,
        tracks.orig_width,
        tracks.orig_height,
        tracks.e2e_latency_ms,
        boxes,
        "tracks",
    )
