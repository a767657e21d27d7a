"""Pairing frames with their boxes, per camera, holding as few frames as possible. Pure.

A camera holds at most two frames: the newest frame shown (paired with its boxes record, or shown
bare once `pair_wait_s` passed without one) and the newest frame still waiting for its boxes. The
frames and the boxes topics are read by different consumers, so either may come first; a frame's
boxes are matched by (seq, capture time), which stays right across a decoder restart.

A still frame (the decoder saw nothing move) has no pixels: it is shown with those of the
camera's last full frame (`framebus.messages.still_picture`), kept for that, and paired with its
own record (STILL, the carried boxes). One that comes before any full frame cannot be shown.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from framebus.messages import Frame, still_picture
from framebus_live.records import BoxesRecord

RECENT_RECORDS = 32  # boxes records kept per camera for frames that arrive after them


@dataclass(frozen=True)
class Display:
    """What a camera's tile shows now: a frame and its boxes (None: shown without)."""

    frame: Frame
    boxes: BoxesRecord | None
    version: int  # grows with every change of the display


def _key(seq: int, capture_ts_us: int) -> tuple[int, int]:
    return seq, capture_ts_us


class CameraView:
    """The latest frame of one camera and the pairing of frames with boxes records."""

    def __init__(self, pair_wait_s: float) -> None:
        self.pair_wait_s = pair_wait_s
        self.display: Display | None = None
        self._pending: tuple[Frame, float] | None = None  # (frame, arrival time)
        self._recent: OrderedDict[tuple[int, int], BoxesRecord] = OrderedDict()
        self._version = 0
        self._picture: Frame | None = None  # the last frame with pixels, for still frames
        self.unpaired = 0  # frames replaced by a newer one before their boxes came
        self.unshown_still = 0  # still frames that came before any picture to show them with

    def add_frame(self, frame: Frame, now: float) -> bool:
        """A frame arrived; True when the display changed."""
        if frame.tensor:
            self._picture = frame
        elif frame.still:
            if self._picture is None:
                self.unshown_still += 1
                return False
            frame = still_picture(frame, self._picture)
        boxes = self._recent.get(_key(frame.seq, frame.capture_ts_us))
        if boxes is not None:
            return self._show(frame, boxes)
        if self._pending is not None:
            self.unpaired += 1
        self._pending = (frame, now)
        return self.expire(now)

    def add_boxes(self, record: BoxesRecord) -> bool:
        """A boxes record arrived; True when the display changed."""
        key = _key(record.seq, record.capture_ts_us)
        self._recent[key] = record
        self._recent.move_to_end(key)
        while len(self._recent) > RECENT_RECORDS:
            self._recent.popitem(last=False)
        shown = self.display
        if shown is not None and _key(shown.frame.seq, shown.frame.capture_ts_us) == key:
            return self._show(shown.frame, record)  # e.g. the tracks record after the detections
        if self._pending is not None:
            frame = self._pending[0]
            if _key(frame.seq, frame.capture_ts_us) == key:
                self._pending = None
                return self._show(frame, record)
        return False

    def expire(self, now: float) -> bool:
        """Show the waiting frame bare when its boxes are `pair_wait_s` late; True if shown."""
        if self._pending is None or now - self._pending[1] < self.pair_wait_s:
            return False
        frame = self._pending[0]
        self._pending = None
        return self._show(frame, None)

    def _show(self, frame: Frame, boxes: BoxesRecord | None) -> bool:
        shown = self.display
        if shown is not None and frame.capture_ts_us < shown.frame.capture_ts_us:
            return False  # a late pairing of an older frame must not replace a newer picture
        self._version += 1
        self.display = Display(frame, boxes, self._version)
        return True
