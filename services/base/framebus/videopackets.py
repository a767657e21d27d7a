"""Demuxed video packets as `VideoPacket` records, for the video topic (`schemas/video.avsc`).

The decoder publishes every packet it demuxes, before decoding, so `framebus clips` can cut a
clip around an alert by remuxing them, without re-encoding. `video_packet` is the one place a
PyAV packet becomes a record; `demux_file` turns a whole file into records (tests and tools fill
the video topic with it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import av.container
import av.packet
import av.video.stream

from framebus.errors import FramebusError
from framebus.messages import VideoPacket

US_PER_S = 1_000_000


class VideoFileError(FramebusError):
    """A file that cannot be read as video."""


def new_segment(camera_id: str) -> str:
    """A fresh segment id: one per decoder run and per reconnect of the camera."""
    return f"{camera_id}/{uuid.uuid4().hex}"


def video_packet(
    packet: av.packet.Packet[av.video.stream.VideoStream],
    stream: av.video.stream.VideoStream,
    camera_id: str,
    segment: str,
    packet_seq: int,
    capture_ts_us: int,
) -> VideoPacket:
    """The record of one demuxed packet of `stream`; the codec parameters ride on keyframes."""
    ctx = stream.codec_context
    time_base = packet.time_base or stream.time_base or Fraction(1, 90_000)
    rate = stream.average_rate or Fraction(0)  # unknown: 0/1
    keyframe = bool(packet.is_keyframe)
    extradata = bytes(ctx.extradata) if keyframe and ctx.extradata else None
    # In the schema's field order: identity, timing, the stream's parameters, the bytes.
    return VideoPacket(
        camera_id, segment, packet_seq, capture_ts_us, packet.pts, packet.dts,
        time_base.numerator, time_base.denominator, keyframe,
        ctx.name, ctx.width, ctx.height, rate.numerator, rate.denominator,
        extradata, bytes(packet)
    )  # fmt: skip


def kafka_timestamp_ms(packet: VideoPacket) -> int:
    """The record's Kafka timestamp: its capture time, so readers can seek by time."""
    return packet.capture_ts_us // 1000


def demux_file(
    path: Path, camera_id: str, start_ts_us: int, segment: str | None = None
) -> Iterator[VideoPacket]:
    """Every packet of the file's first video stream, captured at `start_ts_us` + its pts.

    The pts counts from the stream's start time. Empty packets (the demuxer's end-of-stream
    marker) are not packets of the stream and are left out.
    """
    segment = segment or new_segment(camera_id)
    try:
        container = av.open(str(path))
    except (OSError, av.FFmpegError) as exc:
        raise VideoFileError(f"cannot open {path} as video: {exc}") from exc
    with container:
        if not container.streams.video:
            raise VideoFileError(f"{path} has no video stream")
        stream = container.streams.video[0]
        start = stream.start_time or 0
        seq = 0
        for packet in container.demux(stream):
            when = packet.pts if packet.pts is not None else packet.dts
            if packet.size == 0 or when is None or packet.time_base is None:
                continue
            offset_us = round((when - start) * packet.time_base * US_PER_S)
            yield video_packet(packet, stream, camera_id, segment, seq, start_ts_us + offset_us)
            seq += 1
