"""Which device a camera's video is decoded on, and why it fell back to software (pure logic).

`source.py` does the I/O: it opens each candidate device once (an FFmpeg device context, no
stream), opens the source on the first that opens, and checks that the stream's decoder really
runs there. This module decides what to try, names the outcome, and words the one log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from framebus_decoder.settings import HwAccel

SOFTWARE = "software"  # the `device` label of a camera decoding on the CPU
# `auto` tries these, in this order, among the device types the FFmpeg build lists: NVIDIA's
# decoder first (what PyAV's PyPI wheel ships), then Linux's VA-API and Intel's Quick Sync.
AUTO_ORDER = ("cuda", "vaapi", "qsv", "videotoolbox", "d3d11va")

# Why a camera asking for a device decodes in software (`reason` label of the fallback metric).
NOT_IN_BUILD = "not_in_ffmpeg_build"  # this FFmpeg cannot use the device type at all
NO_DEVICE = "no_device"  # the device does not open: none there, no driver, not permitted
CODEC_NOT_ON_DEVICE = "codec_not_on_device"  # the device opened; the stream's codec has no
# decoder on it, so FFmpeg decodes it in software


@dataclass(frozen=True)
class HwFallback:
    """A camera that asked for hardware decoding and decodes in software, and why."""

    mode: HwAccel
    device: str  # the device type tried last ("cuda"), or the mode's name when none was
    reason: str  # NOT_IN_BUILD, NO_DEVICE or CODEC_NOT_ON_DEVICE
    detail: str  # FFmpeg's words, for the log

    def message(self, camera_id: str) -> str:
        """The log line (once per camera)."""
        return (
            f"camera {camera_id}: hwaccel={self.mode.value} asked, decoding in software "
            f"({self.reason}: {self.detail})"
        )


def candidates(mode: HwAccel, listed: Sequence[str]) -> tuple[str, ...]:
    """Device types to try, in order, for `mode`: those of its kind the FFmpeg build lists.

    Empty for `none`; empty for another mode means `not_in_build`.
    """
    if mode is HwAccel.NONE:
        return ()
    wanted = ("cuda",) if mode is HwAccel.CUDA else AUTO_ORDER
    return tuple(device for device in wanted if device in listed)


def not_in_build(mode: HwAccel, listed: Sequence[str]) -> HwFallback:
    """The fallback of a mode none of whose device types the FFmpeg build lists."""
    return HwFallback(
        mode,
        "cuda" if mode is HwAccel.CUDA else mode.value,
        NOT_IN_BUILD,
        f"this FFmpeg build's device types: {', '.join(listed) or 'none'}",
    )
