"""The hand-off from the consumer threads to the event loop, bounded.

Frames are latest-only per camera (a newer frame replaces one the loop has not taken; a still
frame, which has no pixels, takes those of the frame it replaces), records and alerts queue up
to a limit: if the loop falls behind, memory stays bounded and the loss is
counted. The loop is woken once per batch, not once per record.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from framebus.messages import Frame, still_picture

T = TypeVar("T")


class Inbox(Generic[T]):
    """Frames by camera and other items, written by consumer threads, drained by the loop."""

    def __init__(self, wake: Callable[[], object], max_items: int = 10_000) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._frames: dict[str, tuple[Frame, int]] = {}  # camera -> (newest frame, arrivals)
        self._items: deque[T] = deque()
        self._max_items = max_items
        self._woken = False
        self.frames_replaced = 0
        self.items_dropped = 0

    def put_frame(self, frame: Frame) -> None:
        """Hand over a frame; replaces the camera's frame the loop has not taken yet."""
        with self._lock:
            held = self._frames.get(frame.camera_id)
            arrivals = 1 if held is None else held[1] + 1
            if held is not None:
                self.frames_replaced += 1
                if frame.still and not frame.tensor and held[0].tensor:
                    frame = still_picture(frame, held[0])  # the newest picture must not be lost
            self._frames[frame.camera_id] = (frame, arrivals)
            wake = self._arm()
        if wake:
            self._wake()

    def put(self, item: T) -> None:
        """Hand over a record or an alert; dropped (counted) when the inbox is full."""
        with self._lock:
            if len(self._items) >= self._max_items:
                self.items_dropped += 1
                return
            self._items.append(item)
            wake = self._arm()
        if wake:
            self._wake()

    def _arm(self) -> bool:
        if self._woken:
            return False
        self._woken = True
        return True

    def drain(self) -> tuple[list[tuple[Frame, int]], list[T]]:
        """What came since the last drain: newest frame per camera with its count, then items.

        The count is how many of the camera's frames arrived (the figures count them all).
        """
        with self._lock:
            frames = list(self._frames.values())
            items = list(self._items)
            self._frames.clear()
            self._items.clear()
            self._woken = False
        return frames, items
