"""`framebus render`: read a camera's frames and tracks (or detections) from Kafka, join, draw, write.

The topics are read from the beginning up to their end at start-up, in a throw-away consumer
group that commits nothing. Frames live on the frames topic for minutes only (its retention), so
render what happened recently; tracks and detections are kept for days. Records are joined by
(camera_id, seq). A frame's tracks record, when there is one, draws each box with its short track
id ("#7"); else its detections record draws the boxes unlabelled. A frame with neither, or one the
model did not look at, is drawn with a banner that says so.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import av
import cv2
import numpy as np

from framebus.codec import DetectionsCodec, FrameCodec, TracksCodec
from framebus.errors import CodecError, ConfigError, FramebusError
from framebus.kafka.protocol import MessageProto
from framebus.kafka.reader import Reader, TopicMissingError
from framebus.kafka.settings import KafkaSettings
from framebus.messages import (
    Detections,
    Frame,
    FrameStatus,
    Tracks,
    short_track_label,
    still_picture,
)
from framebus.settings import check, setting
from framebus.topology import TopicSettings
from framebus_tools.render.draw import (
    Image,
    contact_sheet,
    draw_detections,
    original_frame,
)

log = logging.getLogger(__name__)


class RenderSource(enum.Enum):
    """Which records draw the boxes; `auto`: tracks where the frame has one, else detections."""

    AUTO = "auto"
    DETECTIONS = "detections"
    TRACKS = "tracks"


@dataclass(frozen=True)
class RenderSettings:
    """Everything `framebus render` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    camera: str | None = setting(None, "Camera id whose frames are drawn (required).")
    render_source: RenderSource = setting(
        RenderSource.AUTO,
        "Records that draw the boxes: tracks (labelled with track ids), detections, or auto "
        "(a frame's tracks record when the tracks topic has one, else its detections record).",
    )
    out: Path | None = setting(
        None, "Output file: `.mp4` for a clip, `.png` for a contact sheet (required)."
    )
    max_frames: int = setting(
        0, "Draw only the most recent N frames of the camera (0 = all on the topic)."
    )
    clip_fps: float = setting(5.0, "Frame rate of the MP4 clip, frames per second.")
    sheet_columns: int = setting(4, "Frames per row of the PNG contact sheet.")
    thumb_width: int = setting(640, "Width in pixels of each frame in the contact sheet.")
    read_idle_s: float = setting(
        5.0, "Stop reading a topic after this many seconds without a message, if not at its end."
    )

    def __post_init__(self) -> None:
        check(self.max_frames >= 0, "max_frames", "must be >= 0")
        check(self.clip_fps > 0, "clip_fps", "must be > 0")
        check(self.sheet_columns >= 1, "sheet_columns", "must be >= 1")
        check(16 <= self.thumb_width <= 4096, "thumb_width", "must be between 16 and 4096")
        check(self.read_idle_s > 0, "read_idle_s", "must be > 0")


@dataclass
class RenderStats:
    """What was drawn; printed at the end."""

    frames: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # INFERRED / DROPPED_STALE / ...
    boxes: int = 0
    tracked: int = 0  # frames drawn from a tracks record (boxes labelled with track ids)
    unreadable: int = 0
    still_unshown: int = 0  # still frames (no pixels) before any full frame to show them with


def read_topic_to_end(
    kafka: KafkaSettings,
    topic: str,
    idle_s: float,
    keep: Callable[[MessageProto], bool],
) -> Iterator[MessageProto]:
    """Yield the topic's messages (those `keep` accepts) from the beginning to its current end."""
    with Reader(kafka) as reader:
        yield from (m for m in reader.read_to_end(topic, idle_s) if keep(m))


class _Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


R = TypeVar("R", bound=_Sequenced)


def _by_seq(
    settings: RenderSettings, topic: str, camera: str, decode: Callable[[bytes], R]
) -> dict[int, R]:
    """The camera's records of `topic` by seq (the latest record wins on a replay)."""
    key = camera.encode()
    by_seq: dict[int, R] = {}
    for msg in read_topic_to_end(
        settings.kafka, topic, settings.read_idle_s, lambda m: m.key() == key
    ):
        try:
            record = decode(msg.value() or b"")
        except CodecError as exc:
            log.warning("skipping an unreadable record of %s: %s", topic, exc)
            continue
        by_seq[record.seq] = record
    return by_seq


def read_detections(settings: RenderSettings, camera: str) -> dict[int, Detections]:
    """The camera's detections records by seq (the latest record wins on a replay)."""
    return _by_seq(settings, settings.topics.detections_topic, camera, DetectionsCodec().decode)


def read_tracks(settings: RenderSettings, camera: str) -> dict[int, Tracks]:
    """The camera's tracks records by seq; none when the tracks topic does not exist (auto)."""
    try:
        return _by_seq(settings, settings.topics.tracks_topic, camera, TracksCodec().decode)
    except TopicMissingError:
        if settings.render_source is RenderSource.TRACKS:
            raise
        log.info("no tracks topic %s: drawing detections", settings.topics.tracks_topic)
        return {}


def as_detections(tracks: Tracks) -> tuple[Detections, list[str | None]]:
    """A tracks record as the detections record it was made from, and each box's track label."""
    det = Detections(
        camera_id=tracks.camera_id,
        seq=tracks.seq,
        capture_ts_us=tracks.capture_ts_us,
        status=tracks.status,
        model_name=tracks.model_name,
        model_version=tracks.model_version,
        boxes=tuple(o.box for o in tracks.objects),
        reason=tracks.reason,
        orig_width=tracks.orig_width,
        orig_height=tracks.orig_height,
        e2e_latency_ms=tracks.e2e_latency_ms,
    )
    labels = [short_track_label(o.track_id) if o.track_id else None for o in tracks.objects]
    return det, labels


@dataclass(frozen=True)
class _Records:
    """A camera's tracks and detections records by seq; a frame's tracks record wins."""

    tracks: dict[int, Tracks]
    detections: dict[int, Detections]

    def for_frame(self, seq: int) -> tuple[Detections | None, list[str | None] | None]:
        tracks = self.tracks.get(seq)
        if tracks is not None:
            return as_detections(tracks)
        return self.detections.get(seq), None


def _read_records(settings: RenderSettings, camera: str) -> _Records:
    source = settings.render_source
    tracks = {} if source is RenderSource.DETECTIONS else read_tracks(settings, camera)
    detections = {} if source is RenderSource.TRACKS else read_detections(settings, camera)
    return _Records(tracks, detections)


def read_frames(settings: RenderSettings, camera: str) -> Iterator[Frame]:
    """The camera's frames in order, or only the most recent `max_frames` of them."""
    codec = FrameCodec()
    key = camera.encode()
    messages = read_topic_to_end(
        settings.kafka,
        settings.topics.frames_topic,
        settings.read_idle_s,
        lambda m: m.key() == key,
    )
    frames = with_pictures(codec.decode(m.value() or b"") for m in messages)
    if settings.max_frames:
        yield from deque(frames, maxlen=settings.max_frames)
    else:
        yield from frames


def with_pictures(frames: Iterable[Frame]) -> Iterator[Frame]:
    """The frames, a still one (no pixels) with the pixels of the last full frame before it.

    A still frame before any full one has nothing to be drawn with: it is left out here and
    counted by `render` (it still has its record; only its picture is unknown).
    """
    picture: Frame | None = None
    for frame in frames:
        if not frame.still:
            picture = frame
            yield frame
        elif picture is not None:
            yield still_picture(frame, picture)
        else:
            yield frame  # no pixels: `_draw` counts it and skips it


class Mp4Writer:
    """H.264 MP4 via PyAV; opened on the first frame, whose size fixes the clip's size."""

    def __init__(self, path: Path, fps: float) -> None:
        self.path = path
        self.fps = fps
        self._container: Any = None
        self._stream: Any = None

    def write(self, image: Image) -> None:
        """Append one RGB frame."""
        if self._container is None:
            self._open(image.shape[1], image.shape[0])
        h, w = self._stream.height, self._stream.width
        if image.shape[:2] != (h, w):
            image = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA).astype(np.uint8)
        frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def _open(self, width: int, height: int) -> None:
        from fractions import Fraction

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._container = av.open(str(self.path), mode="w")
        self._stream = self._container.add_stream(
            "libx264", rate=Fraction(self.fps).limit_denominator(1000)
        )
        self._stream.width = width - width % 2  # 4:2:0 needs even sizes
        self._stream.height = height - height % 2
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"crf": "23", "preset": "veryfast"}

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        if self._container is not None:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            self._container = None

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def render(settings: RenderSettings) -> RenderStats:
    """Draw the camera's frames to `settings.out`; return what was drawn."""
    if not settings.camera:
        raise ConfigError("no camera: set FRAMEBUS_CAMERA (--camera ID)")
    if settings.out is None or settings.out.suffix.lower() not in (".mp4", ".png"):
        raise ConfigError("--out must name a .mp4 clip or a .png contact sheet")
    records = _read_records(settings, settings.camera)
    stats = RenderStats()
    drawn = (
        _draw(frame, *records.for_frame(frame.seq), stats)
        for frame in read_frames(settings, settings.camera)
    )
    if settings.out.suffix.lower() == ".mp4":
        with Mp4Writer(settings.out, settings.clip_fps) as writer:
            for image in drawn:
                if image is not None:
                    writer.write(image)
    else:
        images = [im for im in drawn if im is not None]
        if images:
            sheet = contact_sheet(images, settings.sheet_columns, settings.thumb_width)
            settings.out.parent.mkdir(parents=True, exist_ok=True)
            if not cv2.imwrite(str(settings.out), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR)):
                raise FramebusError(f"cannot write {settings.out}")
    if stats.frames == 0:
        raise FramebusError(
            f"no frames of camera {settings.camera!r} on {settings.topics.frames_topic}; "
            "frames are kept only minutes: render while or just after the pipeline runs"
        )
    return stats


def _draw(
    frame: Frame,
    det: Detections | None,
    labels: list[str | None] | None,
    stats: RenderStats,
) -> Image | None:
    if frame.still and not frame.tensor:
        stats.still_unshown += 1
        return None
    try:
        image = original_frame(frame)
    except CodecError as exc:
        stats.unreadable += 1
        log.warning("skipping an unreadable frame: %s", exc)
        return None
    stats.frames += 1
    stats.statuses["NO RECORD" if det is None else det.status.value] += 1
    stats.tracked += labels is not None
    if det is not None and det.status in (FrameStatus.INFERRED, FrameStatus.STILL):
        stats.boxes += len(det.boxes)
    return draw_detections(image, frame, det, labels)


def run(settings: RenderSettings) -> int:
    """The `framebus render` command: render, then print what was written."""
    stats = render(settings)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(stats.statuses.items()))
    print(
        f"wrote {settings.out}: {stats.frames} frames of {settings.camera} ({statuses}), "
        f"{stats.boxes} boxes drawn, {stats.tracked} frames with track ids"
        + (f", {stats.unreadable} unreadable" if stats.unreadable else "")
        + (
            f", {stats.still_unshown} still frames before any picture left out"
            if stats.still_unshown
            else ""
        )
    )
    return 1 if stats.unreadable else 0
