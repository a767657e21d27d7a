"""Video sources opened with PyAV: RTSP(S), HTTP(S) and HLS URLs, and local files.

This is the I/O adapter of a camera worker: it opens a source with the right FFmpeg options
(on a decoding device when asked: `hwdecode.py`), yields decoded frames with their timestamps,
and turns every FFmpeg failure into a `SourceFailure` whose `reason` is counted per camera.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import av
import cv2
import numpy as np
from av.codec.hwaccel import HWAccel, hwdevices_available

from framebus.errors import SourceError
from framebus.letterbox import Letterbox
from framebus.messages import ColourMatrix, ColourRange
from framebus.pixels import Colour, FrameFormat
from framebus_decoder.cameras import Camera
from framebus_decoder.hwdecode import (
    CODEC_NOT_ON_DEVICE,
    NO_DEVICE,
    SOFTWARE,
    HwFallback,
    candidates,
    not_in_build,
)
from framebus_decoder.preprocess import LetterboxBuffer, plane
from framebus_decoder.settings import DecodeThreading, HwAccel

# Reasons a source fails, as counted in `errors` and shown in the RECONNECTING state.
OPEN_FAILED = "open_failed"
NO_VIDEO = "no_video_stream"
UNSUPPORTED_CODEC = "unsupported_codec"
DECODE_ERROR = "decode_error"
STALL = "stall"
# A read cut short by its timeout while the decoder process itself did not run
# (framebus_decoder.freeze): reopened at once, not counted as an error; a file that does not loop
# cannot start again, so it fails.
FROZEN = "frozen"
ENDED = "ended"
# FFmpeg's AVColorSpace and AVColorRange codes, as PyAV's VideoFrame reports them.
AVCOL_SPC_BT709 = 1
AVCOL_RANGE_MPEG = 1
AVCOL_RANGE_JPEG = 2
# Called with (packet, stream, pts_s + offset or None) for every packet before it is decoded.
PacketHandler = Callable[[Any, Any, float | None], None]


class SourceFailure(SourceError):
    """A source could not be opened or stopped delivering; `reason` says which way."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SourceOptions:
    """How to open a source: timeouts and decoder threading."""

    open_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    threading: DecodeThreading = DecodeThreading.AUTO
    threads: int = 0
    hwaccel: HwAccel = HwAccel.NONE


# A device is opened on its own, with this decoder, before a source is: it fails fast (no
# connection made) where there is none. H.264 is what every device type decodes.
PROBE_CODEC = "h264"
# FFmpeg's CUDA device option: use the GPU's primary context, which every camera and ONNX Runtime
# in the same process share, rather than a CUDA context (and its memory) per camera.
CUDA_DEVICE_OPTIONS = {"primary_ctx": "1"}
DEVICE_ERRORS = (av.error.FFmpegError, NotImplementedError, OSError)


def device_options(device: str) -> dict[str, object] | None:
    """FFmpeg's options for opening a device of this type."""
    return dict(CUDA_DEVICE_OPTIONS) if device == "cuda" else None


def probe_device(device: str) -> None:
    """Open a decoding device and let it go; raises one of DEVICE_ERRORS when it does not open."""
    HWAccel(device, options=device_options(device)).create(av.codec.Codec(PROBE_CODEC, "r"))


def open_device(
    mode: HwAccel,
    listed: Sequence[str] | None = None,
    probe: Callable[[str], None] = probe_device,
) -> tuple[str, HWAccel | None, HwFallback | None]:
    """(device type, PyAV's hwaccel for `av.open`, fallback): the first candidate that opens.

    (SOFTWARE, None, None) for `none`; (SOFTWARE, None, why) when nothing opens.
    """
    if mode is HwAccel.NONE:
        return SOFTWARE, None, None
    listed = hwdevices_available() if listed is None else listed
    tried = candidates(mode, listed)
    if not tried:
        return SOFTWARE, None, not_in_build(mode, listed)
    failures = []
    for device in tried:
        try:
            probe(device)
        except DEVICE_ERRORS as exc:
            failures.append(f"{device}: {exc}")
            continue
        # Frames are downloaded to memory (is_hw_owned False): the letterbox reads them there.
        accel = HWAccel(device, allow_software_fallback=True, options=device_options(device))
        return device, accel, None
    return SOFTWARE, None, HwFallback(mode, tried[-1], NO_DEVICE, "; ".join(failures))


def ffmpeg_options(camera: Camera) -> dict[str, str]:
    """FFmpeg (AVOptions) for a camera's URL scheme, then its own `options` on top."""
    opts: dict[str, str] = {}
    scheme = camera.url.split("://", 1)[0].lower() if "://" in camera.url else "file"
    if scheme in ("rtsp", "rtsps"):
        opts["rtsp_transport"] = camera.rtsp_transport.value
        # Cameras often send SPS/PPS only with keyframes; a short probe starts streams faster.
        opts["analyzeduration"] = "1000000"
    elif scheme in ("http", "https"):
        opts["reconnect"] = "0"  # the worker reconnects itself, with backoff and counting
    opts.update(dict(camera.options))
    return opts


class VideoSource:
    """An open source: iterate `frames()`; close it with the context manager."""

    def __init__(
        self,
        camera: Camera,
        options: SourceOptions,
        probe: Callable[[str], None] = probe_device,
    ) -> None:
        self.camera = camera
        # Where this source decodes (SOFTWARE or a device type), and why not on the device asked.
        self.device, accel, self.hw_fallback = open_device(options.hwaccel, probe=probe)
        try:
            self._container: Any = av.open(
                camera.url,
                options=ffmpeg_options(camera),
                timeout=(options.open_timeout_s, options.read_timeout_s),
                hwaccel=accel,
            )
        except (av.error.FFmpegError, OSError) as exc:
            raise SourceFailure(OPEN_FAILED, f"cannot open {camera.url}: {exc}") from exc
        try:
            self._stream = self._video_stream(options)
        except SourceFailure:
            self._container.close()
            raise
        if accel is not None and not self._stream.codec_context.is_hwaccel:
            self.hw_fallback = HwFallback(
                options.hwaccel,
                self.device,
                CODEC_NOT_ON_DEVICE,
                f"{self._stream.codec_context.name} has no decoder on {self.device}",
            )
            self.device = SOFTWARE
        tb = self._stream.time_base
        self._time_base = float(tb) if tb else 0.0
        rate = self._stream.average_rate or self._stream.guessed_rate
        self._frame_s = 1.0 / float(rate) if rate else 0.04
        self.last_pts_s = 0.0

    def _video_stream(self, options: SourceOptions) -> Any:
        if not self._container.streams.video:
            raise SourceFailure(NO_VIDEO, f"{self.camera.url} has no video stream")
        stream = self._container.streams.video[0]
        ctx = stream.codec_context
        if ctx is None or ctx.codec is None or ctx.name in ("", "none"):
            raise SourceFailure(
                UNSUPPORTED_CODEC,
                f"{self.camera.url}: its video codec is unknown to this FFmpeg build "
                f"({ctx.name if ctx is not None else 'no decoder'}); send H.264 or H.265",
            )
        if options.threading is not DecodeThreading.NONE:
            stream.thread_type = options.threading.name
        if options.threads:
            stream.thread_count = options.threads
        return stream

    def frames(
        self, pts_offset_s: float = 0.0, tap: PacketHandler | None = None
    ) -> Iterator[tuple[Any, float, float]]:
        """Yield (frame, pts_s + offset, monotonic receive time) until the source ends.

        `tap` sees every packet before it is decoded, with its pts + offset (the video topic).
        """
        pts: float | None = None
        try:
            for packet in self._container.demux(self._stream):
                if tap is not None and packet.size:  # an empty packet only flushes the decoder
                    tap(packet, self._stream, self._packet_pts_s(packet, pts_offset_s))
                for frame in packet.decode():
                    if frame.pts is not None and self._time_base:
                        pts = frame.pts * self._time_base
                    else:  # e.g. the first frame of an RTSP stream: one frame after the last
                        pts = 0.0 if pts is None else pts + self._frame_s
                    self.last_pts_s = pts
                    yield frame, pts + pts_offset_s, time.monotonic()
        except av.error.ExitError as exc:  # PyAV's read timeout interrupted FFmpeg
            raise SourceFailure(STALL, f"{self.camera.url}: no data: {exc}") from exc
        except av.error.FFmpegError as exc:
            raise SourceFailure(DECODE_ERROR, f"{self.camera.url}: {exc}") from exc

    def _packet_pts_s(self, packet: Any, offset_s: float) -> float | None:
        """The packet's pts in seconds (dts when it has none), as a frame's; None when unknown."""
        when = packet.pts if packet.pts is not None else packet.dts
        if when is None or not self._time_base:
            return None
        return float(when * self._time_base + offset_s)

    @property
    def duration_s(self) -> float:
        """Where a loop of this source ends: last frame's pts plus one frame."""
        return self.last_pts_s + self._frame_s

    def close(self) -> None:
        """Close the container (network connection or file)."""
        self._container.close()

    def __enter__(self) -> VideoSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def letterbox_frame(frame: Any, buffer: LetterboxBuffer) -> Letterbox:
    """Letterbox a decoded av.VideoFrame into `buffer`: its planes when 4:2:0, else via RGB.

    An I420 buffer takes full-range 4:2:0 (yuvj420p: JPEG, MJPEG cameras) as planes too, its
    range in the record; an RGB buffer leaves that to FFmpeg's RGB conversion, as before.
    NV12 (4:2:0 with U and V interleaved in one plane) is what a hardware decoder hands back:
    its chroma is split into two planes (a quarter of the luma's bytes each), then as yuv420p.
    """
    name = frame.format.name
    planar = name in ("yuv420p", "nv12") or (
        name == "yuvj420p" and buffer.format is FrameFormat.I420
    )
    if not planar:
        return buffer.fill_rgb(frame.to_ndarray(format="rgb24"))
    h, w = frame.height, frame.width
    p = frame.planes
    ch, cw = (h + 1) // 2, (w + 1) // 2
    y = plane(p[0], h, w, p[0].line_size)
    colour = stream_colour(frame.colorspace, frame.color_range, name)
    if name == "nv12":
        u, v = cv2.split(plane(p[1], ch, 2 * cw, p[1].line_size).reshape(ch, cw, 2))
        return buffer.fill_i420(y, np.asarray(u, np.uint8), np.asarray(v, np.uint8), colour)
    return buffer.fill_i420(
        y, plane(p[1], ch, cw, p[1].line_size), plane(p[2], ch, cw, p[2].line_size), colour
    )


def stream_colour(colorspace: int, color_range: int, pixel_format: str) -> Colour:
    """A decoded frame's matrix and range from FFmpeg's codes; framebus's default where unsaid.

    BT.709 when the stream says so, else BT.601 (what it says for SD, and the default: BT.2020
    and the rarer matrices are read as BT.601 too). Full range when it says JPEG range or the
    pixel format is a `yuvj` one, else limited.
    """
    matrix = ColourMatrix.BT709 if colorspace == AVCOL_SPC_BT709 else ColourMatrix.BT601
    full = color_range == AVCOL_RANGE_JPEG or (
        color_range != AVCOL_RANGE_MPEG and pixel_format.startswith("yuvj")
    )
    return Colour(matrix, ColourRange.FULL if full else ColourRange.LIMITED)
