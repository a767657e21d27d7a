"""Video sources opened with PyAV: RTSP(S), HTTP(S) and HLS URLs, and local files.

This is the I/O adapter of a camera worker: it opens a source with the right FFmpeg options,
yields decoded frames with their timestamps, and turns every FFmpeg failure into a
`SourceFailure` whose `reason` is counted per camera.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av

from framebus.errors import SourceError
from framebus.letterbox import Letterbox
from framebus.messages import ColourMatrix, ColourRange
from framebus.pixels import Colour, FrameFormat
from framebus_decoder.cameras import Camera
from framebus_decoder.preprocess import LetterboxBuffer, plane
from framebus_decoder.settings import DecodeThreading

# Reasons a source fails, as counted in `errors` and shown in the RECONNECTING state.
OPEN_FAILED = "open_failed"
NO_VIDEO = "no_video_stream"
UNSUPPORTED_CODEC = "unsupported_codec"
DECODE_ERROR = "decode_error"
STALL = "stall"
ENDED = "ended"
# FFmpeg's AVColorSpace and AVColorRange codes, as PyAV's VideoFrame reports them.
AVCOL_SPC_BT709 = 1
AVCOL_RANGE_MPEG = 1
AVCOL_RANGE_JPEG = 2


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

    def __init__(self, camera: Camera, options: SourceOptions) -> None:
        self.camera = camera
        try:
            self._container: Any = av.open(
                camera.url,
                options=ffmpeg_options(camera),
                timeout=(options.open_timeout_s, options.read_timeout_s),
            )
        except (av.error.FFmpegError, OSError) as exc:
            raise SourceFailure(OPEN_FAILED, f"cannot open {camera.url}: {exc}") from exc
        try:
            self._stream = self._video_stream(options)
        except SourceFailure:
            self._container.close()
            raise
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

    def frames(self, pts_offset_s: float = 0.0) -> Iterator[tuple[Any, float, float]]:
        """Yield (frame, pts_s + offset, monotonic receive time) until the source ends."""
        pts: float | None = None
        try:
            for packet in self._container.demux(self._stream):
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
    """
    name = frame.format.name
    if name == "yuv420p" or (name == "yuvj420p" and buffer.format is FrameFormat.I420):
        h, w = frame.height, frame.width
        p = frame.planes
        ch, cw = (h + 1) // 2, (w + 1) // 2
        return buffer.fill_i420(
            plane(p[0], h, w, p[0].line_size),
            plane(p[1], ch, cw, p[1].line_size),
            plane(p[2], ch, cw, p[2].line_size),
            stream_colour(frame.colorspace, frame.color_range, name),
        )
    return buffer.fill_rgb(frame.to_ndarray(format="rgb24"))


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
