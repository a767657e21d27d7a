"""Letterbox a decoded RGB frame into a reused model-input buffer."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from framebus.letterbox import PAD_VALUE, Letterbox


class LetterboxBuffer:
    """One model-input buffer per camera, reused for every frame (no per-frame allocation)."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.buffer = np.full((height, width, 3), PAD_VALUE, dtype=np.uint8)
        self._geometry: Letterbox | None = None
        self._source_size: tuple[int, int] | None = None

    def geometry(self, src_width: int, src_height: int) -> Letterbox:
        """The letterbox for this source size; the padding is repainted only when it changes."""
        if self._source_size != (src_width, src_height) or self._geometry is None:
            self._geometry = Letterbox.fit(src_width, src_height, self.width, self.height)
            self._source_size = (src_width, src_height)
            self.buffer.fill(PAD_VALUE)
        return self._geometry

    def fill(self, rgb: npt.NDArray[np.uint8]) -> Letterbox:
        """Resize `rgb` (H, W, 3) into the buffer's letterbox window; return the geometry."""
        h, w = rgb.shape[:2]
        lb = self.geometry(w, h)
        window = self.buffer[
            lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width
        ]
        cv2.resize(
            rgb, (lb.resized_width, lb.resized_height), dst=window, interpolation=cv2.INTER_AREA
        )
        return lb
