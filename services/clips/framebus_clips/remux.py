"""Packets to an MP4 file without re-encoding (PyAV), and files written whole or not at all.

The output stream takes its codec parameters (codec, size, time base, frame rate, extradata)
from the packets, and each packet's bytes go into the file as they are: the clip is exactly the
camera's encoded video. Timestamps are moved so the clip starts at 0.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import av.video.codeccontext

from framebus.errors import FramebusError
from framebus.messages import VideoPacket


class ClipWriteError(FramebusError):
    """The packets could not be written as an MP4 file."""


def write_mp4(packets: Sequence[VideoPacket], path: Path) -> int:
    """Remux `packets` (one segment, starting at a keyframe) to `path`; return its size in bytes.

    Written to a temporary name beside it and renamed, so a reader never sees half a clip and a
    crash leaves at most the temporary file, which the replay overwrites.
    """
    if not packets:
        raise ClipWriteError("no packets to write")
    part = path.with_name(f".{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _remux(packets, part)
    except (av.FFmpegError, ValueError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise ClipWriteError(f"cannot write {path.name}: {exc}") from exc
    os.replace(part, path)
    return path.stat().st_size


def _remux(packets: Sequence[VideoPacket], part: Path) -> None:
    first = packets[0]
    time_base = Fraction(first.time_base_num, first.time_base_den)
    base = _first_timestamp(packets)
    # A stream added from a template is never opened as an encoder: its parameters are copied
    # to the file as set here. The template only gives the codec; its container is never written.
    with (
        av.open(io.BytesIO(), "w", format="mp4") as scratch,
        av.open(str(part), "w", format="mp4") as out,
    ):
        stream = out.add_stream_from_template(scratch.add_stream(first.codec))
        ctx = stream.codec_context
        if not isinstance(ctx, av.video.codeccontext.VideoCodecContext):
            raise ClipWriteError(f"{first.codec} is not a video codec")
        ctx.width, ctx.height = first.width, first.height
        ctx.time_base = stream.time_base = time_base
        if first.frame_rate_num:
            ctx.framerate = Fraction(first.frame_rate_num, first.frame_rate_den)
        if first.extradata:
            ctx.extradata = first.extradata
        for p in packets:
            packet = av.Packet(p.data)
            packet.pts = None if p.pts is None else p.pts - base
            packet.dts = None if p.dts is None else p.dts - base
            packet.time_base = time_base
            packet.is_keyframe = p.keyframe
            packet.stream = stream
            out.mux(packet)


def _first_timestamp(packets: Sequence[VideoPacket]) -> int:
    first = packets[0]
    if first.dts is not None:
        return first.dts
    return first.pts or 0


def write_atomically(path: Path, data: bytes) -> int:
    """Write `data` to `path` through a temporary file and a rename; return its size."""
    part = path.with_name(f".{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    part.write_bytes(data)
    os.replace(part, path)
    return len(data)
