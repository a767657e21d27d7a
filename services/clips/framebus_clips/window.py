"""Which packets make an alert's clip, and what its files are called: pure, no Kafka, no PyAV.

A clip runs from the last keyframe at or before `alert - pre_roll` (a decoder can start only at a
keyframe) to the first packet at or after `alert + post_roll`, within the one segment that holds
the alert's time: timestamps and codec parameters are continuous only within a segment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from framebus.messages import Alert, ClipStatus

US_PER_S = 1_000_000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class PacketMark(Protocol):
    """What the window needs of a packet (a `VideoPacket` is one)."""

    @property
    def capture_ts_us(self) -> int:
        """Capture time, microseconds since the epoch."""
        ...

    @property
    def keyframe(self) -> bool:
        """Whether a decoder can start at this packet."""
        ...

    @property
    def segment(self) -> str:
        """The unbroken run of the stream the packet belongs to."""
        ...


@dataclass(frozen=True)
class ClipWindow:
    """The time around an alert a clip should cover."""

    alert_ts_us: int
    pre_roll_us: int
    post_roll_us: int

    @property
    def start_us(self) -> int:
        """Capture time the clip should start at or before."""
        return self.alert_ts_us - self.pre_roll_us

    @property
    def end_us(self) -> int:
        """Capture time the clip should end at or after."""
        return self.alert_ts_us + self.post_roll_us


@dataclass(frozen=True)
class Selection:
    """The clip's packets, as indices into those handed in, in order, all of one segment.

    `notes` say where the clip falls short of its window (it still holds what there is).
    """

    indices: tuple[int, ...]
    notes: tuple[str, ...] = ()

    @property
    def reason(self) -> str | None:
        """The notes as one line, or None when the clip covers its window."""
        return "; ".join(self.notes) or None


@dataclass(frozen=True)
class NoClip:
    """Why no clip can be cut."""

    status: ClipStatus
    reason: str


def select_packets(packets: Sequence[PacketMark], window: ClipWindow) -> Selection | NoClip:
    """The clip's packets among `packets` (in the order read), or why there are none."""
    segment = alert_segment(packets, window.alert_ts_us)
    if segment is None:
        return NoClip(ClipStatus.NO_VIDEO, _no_video_reason(packets, window))
    ours = [i for i, p in enumerate(packets) if p.segment == segment]
    notes: list[str] = []
    start = _start_index(packets, ours, window.start_us)
    if start is None:
        return NoClip(ClipStatus.NO_VIDEO, f"no keyframe in segment {segment} of the alert")
    start_ts = packets[ours[start]].capture_ts_us
    if start_ts > window.start_us:
        late_s = (start_ts - window.start_us) / US_PER_S
        notes.append(f"video starts {late_s:.2f} s after the pre-roll's start")
    end = next(
        (k for k in range(start, len(ours)) if packets[ours[k]].capture_ts_us >= window.end_us),
        None,
    )
    if end is None:
        end = len(ours) - 1
        short_s = (window.end_us - packets[ours[end]].capture_ts_us) / US_PER_S
        notes.append(f"video ends {short_s:.2f} s before the post-roll's end")
    return Selection(tuple(ours[start : end + 1]), tuple(notes))


def alert_segment(packets: Sequence[PacketMark], alert_ts_us: int) -> str | None:
    """The segment that holds the alert's time: that of the last packet at or before it."""
    before = [p for p in packets if p.capture_ts_us <= alert_ts_us]
    if not before:
        return None
    return max(before, key=lambda p: p.capture_ts_us).segment


def _start_index(packets: Sequence[PacketMark], ours: list[int], start_us: int) -> int | None:
    """Index in `ours` of the last keyframe at or before `start_us`, else the first keyframe."""
    keyframes = [k for k, i in enumerate(ours) if packets[i].keyframe]
    at_or_before = [k for k in keyframes if packets[ours[k]].capture_ts_us <= start_us]
    if at_or_before:
        return at_or_before[-1]
    return keyframes[0] if keyframes else None


def _no_video_reason(packets: Sequence[PacketMark], window: ClipWindow) -> str:
    if not packets:
        return "no video packets of the camera around the alert"
    first_s = (packets[0].capture_ts_us - window.alert_ts_us) / US_PER_S
    return f"the camera's video starts {first_s:.2f} s after the alert"


def missing_video(
    window: ClipWindow, earliest_retained_us: int | None, now_us: int, retention_us: int
) -> NoClip:
    """Why the video topic holds nothing of the camera at the alert: aged out, or never there.

    Aged out when the topic's oldest record is younger than the clip's start and the start is
    older than the retention; otherwise the camera's video is simply absent.
    """
    if (
        earliest_retained_us is not None
        and earliest_retained_us > window.start_us
        and now_us - window.start_us >= retention_us
    ):
        age_s = (now_us - window.start_us) / US_PER_S
        return NoClip(
            ClipStatus.VIDEO_AGED_OUT,
            f"the clip would start {age_s:.0f} s ago; the video topic keeps "
            f"{retention_us / US_PER_S:.0f} s",
        )
    return NoClip(ClipStatus.NO_VIDEO, "no video packets of the camera around the alert")


def clip_name(alert: Alert) -> str:
    """The clip's file name without extension, the same for every replay of the alert.

    Capture time (UTC, to the microsecond), rule, track (or the frame's seq when the rule has
    no track), so the name sorts by time and a replayed alert overwrites its own clip.
    """
    when = datetime.fromtimestamp(alert.capture_ts_us // US_PER_S, tz=UTC)
    stamp = when.strftime("%Y%m%dT%H%M%S") + f".{alert.capture_ts_us % US_PER_S:06d}Z"
    who = safe_name(alert.track_id) if alert.track_id else f"seq{alert.seq}"
    return f"{stamp}_{safe_name(alert.rule)}_{who}"


def safe_name(text: str) -> str:
    """`text` as one path component: runs of characters other than [A-Za-z0-9._-] become '-'."""
    cleaned = _UNSAFE.sub("-", text).strip(".-")
    return cleaned or "_"
