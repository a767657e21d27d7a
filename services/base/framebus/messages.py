"""Wire messages as frozen, typed values; `framebus.codec` maps them to and from Avro."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace


class TensorLayout(enum.Enum):
    """Axis order of a frame tensor."""

    HWC = "HWC"
    CHW = "CHW"


class Compression(enum.Enum):
    """Codec applied to a frame's tensor bytes on the wire."""

    NONE = "none"
    LZ4 = "lz4"
    ZSTD = "zstd"


class PixelFormat(enum.Enum):
    """How a frame tensor's bytes are pixels (`framebus.pixels` has the layouts)."""

    # The Avro enum's default: a format added by a later release, read through that release's
    # schema, becomes UNKNOWN and is dead-lettered rather than read as some other format.
    UNKNOWN = "unknown"
    RGB = "rgb"  # interleaved or planar RGB, as `layout` says
    I420 = "i420"  # YUV 4:2:0: the Y plane, then the U and V planes at half size


class ColourMatrix(enum.Enum):
    """The YUV <-> RGB matrix of a frame's source (ITU-R BT.601 or BT.709)."""

    UNKNOWN = "unknown"  # a matrix added by a later release (see PixelFormat.UNKNOWN)
    BT601 = "bt601"
    BT709 = "bt709"


class ColourRange(enum.Enum):
    """The code range of a frame's YUV: limited (Y 16..235, "TV") or full (0..255, "JPEG")."""

    UNKNOWN = "unknown"  # a range added by a later release (see PixelFormat.UNKNOWN)
    LIMITED = "limited"
    FULL = "full"


class FrameStatus(enum.Enum):
    """What became of a frame in the inferencer."""

    INFERRED = "INFERRED"
    DROPPED_STALE = "DROPPED_STALE"
    FAILED = "FAILED"
    # No model run: the decoder's motion gate saw nothing move (`Frame.still`). On the wire a
    # `still` flag beside status DROPPED_STALE (`framebus.codec`): the enum has no default, so a
    # new symbol would break readers from before it.
    STILL = "STILL"


@dataclass(frozen=True)
class Frame:
    """One sampled, letterboxed frame as published on the frames topic."""

    camera_id: str
    seq: int
    capture_ts_us: int
    orig_width: int
    orig_height: int
    shape: tuple[int, ...]
    layout: TensorLayout
    scale: float
    pad_x: int
    pad_y: int
    tensor: bytes | memoryview  # a view into the record when read with decode_view
    compression: Compression = Compression.NONE
    dtype: str = "uint8"
    pts_s: float | None = None
    pixel_format: PixelFormat = PixelFormat.RGB
    colour_matrix: ColourMatrix = ColourMatrix.BT601
    colour_range: ColourRange = ColourRange.LIMITED
    still: bool = False  # the motion gate saw no change: no pixels (`tensor` is empty), no model


def still_picture(still: Frame, picture: Frame) -> Frame:
    """A still frame shown with the pixels of its camera's last full frame `picture`.

    A still frame has no pixels: nothing moved since `picture`, so `picture` is what the camera
    saw. The result is `picture`'s pixels and geometry under the still frame's identity (seq,
    capture time), with `still` kept so that a drawer can show it as still.
    """
    return replace(picture, seq=still.seq, capture_ts_us=still.capture_ts_us, still=True)


@dataclass(frozen=True)
class Box:
    """One detection in original-frame pixel coordinates."""

    x1: float
    y1: float
    x2: float
    y2: float
    class_id: int
    class_name: str
    score: float


@dataclass(frozen=True)
class Detections:
    """The single result record of one frame."""

    camera_id: str
    seq: int
    capture_ts_us: int
    status: FrameStatus
    model_name: str
    model_version: str
    boxes: tuple[Box, ...] = ()
    reason: str | None = None
    orig_width: int = 0
    orig_height: int = 0
    queue_wait_ms: float = 0.0
    inference_ms: float = 0.0
    batch_size: int = 0
    e2e_latency_ms: float = 0.0
    frame_partition: int = -1
    frame_offset: int = -1
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


class ZoneAnchor(enum.Enum):
    """Which point of a box must lie in an alert zone for the box to count as in it."""

    BOTTOM_CENTER = "BOTTOM_CENTER"
    CENTER = "CENTER"


class RuleType(enum.Enum):
    """Which kind of alert rule fired."""

    FRAME_STREAK = "FRAME_STREAK"
    ZONE_ENTER = "ZONE_ENTER"
    ZONE_EXIT = "ZONE_EXIT"
    DWELL = "DWELL"
    LINE_CROSSING = "LINE_CROSSING"
    OCCUPANCY = "OCCUPANCY"


class CrossingDirection(enum.Enum):
    """Which way a track crossed a counting line."""

    NONE = "NONE"
    IN = "IN"
    OUT = "OUT"


@dataclass(frozen=True)
class TrackedObject:
    """One box of a frame and the track it belongs to (`schemas/tracks.avsc`)."""

    track_id: str
    box: Box
    first_seen_us: int
    confirmed: bool
    hits: int
    carried: bool = False  # not seen: kept at its last box through a still frame


def short_track_label(track_id: str) -> str:
    """A track id as a box label: its counter, "#7" for "cam-1/1765003011/7"; "" for none."""
    return "#" + track_id.rsplit("/", 1)[-1] if track_id else ""


@dataclass(frozen=True)
class Tracks:
    """What the tracker made of one detections record (`schemas/tracks.avsc`)."""

    camera_id: str
    seq: int
    capture_ts_us: int
    status: FrameStatus
    objects: tuple[TrackedObject, ...] = ()
    reason: str | None = None
    missing_before: int = 0
    model_name: str = ""
    model_version: str = ""
    orig_width: int = 0
    orig_height: int = 0
    e2e_latency_ms: float = 0.0
    tracked_at_us: int = 0
    detections_partition: int = -1
    detections_offset: int = -1


def tracks_of(det: Detections, objects: tuple[TrackedObject, ...], **more: int) -> Tracks:
    """The tracks record of a detections record: its identity and timings, with `objects`.

    `more`: the tracker's own fields (missing_before, tracked_at_us, detections_partition/offset).
    """
    return Tracks(
        camera_id=det.camera_id,
        seq=det.seq,
        capture_ts_us=det.capture_ts_us,
        status=det.status,
        objects=objects,
        reason=det.reason,
        model_name=det.model_name,
        model_version=det.model_version,
        orig_width=det.orig_width,
        orig_height=det.orig_height,
        e2e_latency_ms=det.e2e_latency_ms,
        **more,
    )


@dataclass(frozen=True)
class Alert:
    """An alert rule fired on a camera (`schemas/alert.avsc`)."""

    rule: str
    camera_id: str
    seq: int
    capture_ts_us: int
    fired_at_us: int
    consecutive_frames: int
    zone: tuple[tuple[float, float], ...]
    anchor: ZoneAnchor
    boxes: tuple[Box, ...]
    model_name: str = ""
    model_version: str = ""
    detections_partition: int = -1
    detections_offset: int = -1
    rule_type: RuleType = RuleType.FRAME_STREAK
    track_id: str = ""
    direction: CrossingDirection = CrossingDirection.NONE
    measure: float = 0.0
    counts: tuple[tuple[str, int], ...] = ()  # LINE_CROSSING: ("<class>:IN", n), ...


@dataclass(frozen=True)
class VideoPacket:
    """One compressed packet of a camera's stream, as demuxed (`schemas/video.avsc`)."""

    camera_id: str
    segment: str
    packet_seq: int
    capture_ts_us: int
    pts: int | None
    dts: int | None
    time_base_num: int
    time_base_den: int
    keyframe: bool
    codec: str
    width: int
    height: int
    frame_rate_num: int
    frame_rate_den: int
    extradata: bytes | None
    data: bytes


class ClipStatus(enum.Enum):
    """What became of an alert's clip."""

    UNKNOWN = "UNKNOWN"  # a status added by a later release (see PixelFormat.UNKNOWN)
    WRITTEN = "WRITTEN"
    VIDEO_AGED_OUT = "VIDEO_AGED_OUT"
    NO_VIDEO = "NO_VIDEO"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Clip:
    """The clip of one alert, or why there is none (`schemas/clip.avsc`)."""

    rule: str
    camera_id: str
    seq: int
    capture_ts_us: int
    track_id: str
    alert_partition: int
    alert_offset: int
    status: ClipStatus
    reason: str | None = None
    uri: str | None = None
    snapshot_uri: str | None = None
    start_ts_us: int = 0
    end_ts_us: int = 0
    duration_s: float = 0.0
    size_bytes: int = 0
    written_at_us: int = 0
