"""A camera's demuxed packets as `VideoPacket` records, before decoding: one segment per stream.

Called by the source for every non-empty packet of the camera's video stream, ahead of the
decoder and the sampler, so every packet is published whatever the sampler keeps. The record
copies the packet's bytes (`bytes(packet)`) at once: FFmpeg may reuse the buffer once decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from framebus.messages import VideoPacket
from framebus.videopackets import new_segment, video_packet
from framebus_decoder.timing import RealtimePacer


def packet_capture_us(
    pts_s: float | None,
    pacer: RealtimePacer | None,
    now_s: float,
    epoch_us: Callable[[], int],
) -> int:
    """A packet's capture time: a paced file's schedule for its pts, else when it was received.

    The schedule is the frames' (`RealtimePacer.scheduled_us`), anchored here when the packet
    comes before any frame, so a frame and its packet have the same capture time.
    """
    if pacer is None or pts_s is None:
        return epoch_us()
    pacer.anchor(pts_s, now_s)
    return pacer.scheduled_us(pts_s)


def _epoch_us() -> int:
    return time.time_ns() // 1000


class PacketTap:
    """Numbers one stream's packets (from 0, in a fresh segment) and hands them to `submit`."""

    def __init__(
        self,
        camera_id: str,
        submit: Callable[[VideoPacket], None],
        pacer: RealtimePacer | None = None,
        epoch_us: Callable[[], int] | None = None,
    ) -> None:
        self.camera_id = camera_id
        self.segment = new_segment(camera_id)
        self._submit = submit
        self._pacer = pacer
        self._epoch_us = epoch_us or _epoch_us  # the UTC clock in µs; tests pass a fixed one
        self.packets = 0

    def __call__(self, packet: Any, stream: Any, pts_s: float | None) -> None:
        """One demuxed packet of `stream`, at `pts_s` on the worker's timeline (None: unknown)."""
        capture_us = packet_capture_us(pts_s, self._pacer, time.monotonic(), self._epoch_us)
        record = video_packet(
            packet, stream, self.camera_id, self.segment, self.packets, capture_us
        )
        self.packets += 1
        self._submit(record)
