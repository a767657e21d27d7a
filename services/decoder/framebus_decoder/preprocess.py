"""Letterbox decoded frames straight into reused model-input buffers, in uint8.

The fast path resizes the decoded YUV 4:2:0 planes with OpenCV and converts only the small result
to RGB, in place in the buffer: several times faster than converting the full frame to RGB first
or than PyAV's `reformat` (swscale); docs/benchmarks.md has the figures. Buffers are allocated
once per camera: a fresh model-input array per frame costs page faults that cost more than the
copy itself.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import numpy.typing as npt

from framebus.letterbox import PAD_VALUE, Letterbox
from framebus.messages import TensorLayout

U8 = npt.NDArray[np.uint8]
# Box-filter scratch per letterboxing thread: 1080p luma in two strips, chroma in one. With many
# cameras letterboxing at once, fewer and larger calls (each hands the GIL over) cost less CPU
# than strips of a few rows; a whole plane per call was no clearer a gain.
AREA_SCRATCH_BYTES = 1 << 20
_scratch = threading.local()


class LetterboxBuffer:
    """One model-input buffer (HWC, or CHW on request), reused for every frame it holds."""

    def __init__(self, width: int, height: int, layout: TensorLayout = TensorLayout.HWC) -> None:
        self.width = width
        self.height = height
        self.layout = layout
        self.hwc: U8 = np.full((height, width, 3), PAD_VALUE, dtype=np.uint8)
        self.chw: U8 | None = (
            np.full((3, height, width), PAD_VALUE, dtype=np.uint8)
            if layout is TensorLayout.CHW
            else None
        )
        self._geometry: Letterbox | None = None
        self._source_size: tuple[int, int] | None = None
        self._i420: U8 | None = None  # scratch for the resized planes
        self._rgb: U8 | None = None  # scratch, only for odd resized sizes

    @property
    def tensor(self) -> U8:
        """The buffer in the configured layout (what goes on the wire)."""
        return self.chw if self.chw is not None else self.hwc

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of `tensor`."""
        return tuple(self.tensor.shape)

    def geometry(self, src_width: int, src_height: int) -> Letterbox:
        """The letterbox for this source size; the padding is repainted only when it changes."""
        if self._source_size != (src_width, src_height) or self._geometry is None:
            self._geometry = Letterbox.fit(src_width, src_height, self.width, self.height)
            self._source_size = (src_width, src_height)
            self.hwc.fill(PAD_VALUE)
            if self.chw is not None:
                self.chw.fill(PAD_VALUE)
        return self._geometry

    def _window(self, lb: Letterbox) -> U8:
        return self.hwc[
            lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width
        ]

    def fill_rgb(self, rgb: U8) -> Letterbox:
        """Resize an RGB frame (H, W, 3) into the letterbox window; return the geometry."""
        h, w = rgb.shape[:2]
        lb = self.geometry(w, h)
        area_resize(rgb, self._window(lb))
        self._to_layout()
        return lb

    def fill_i420(self, y: U8, u: U8, v: U8) -> Letterbox:
        """Resize the Y, U, V planes of a 4:2:0 frame and convert only the result to RGB.

        `y` is (H, W) and `u`, `v` are ((H+1)//2, (W+1)//2); row strides may be padded.
        Colours follow BT.601 limited range, what H.264 cameras send unless they say otherwise.
        """
        h, w = y.shape
        lb = self.geometry(w, h)
        rw, rh = lb.resized_width, lb.resized_height
        ew, eh = rw + (rw & 1), rh + (rh & 1)  # 4:2:0 needs even sizes
        if self._i420 is None or self._i420.shape != (eh * 3 // 2, ew):
            self._i420 = np.empty((eh * 3 // 2, ew), dtype=np.uint8)
        flat = self._i420.reshape(-1)
        quarter = (eh // 2) * (ew // 2)
        y_dst = flat[: ew * eh].reshape(eh, ew)
        u_dst = flat[ew * eh : ew * eh + quarter].reshape(eh // 2, ew // 2)
        v_dst = flat[ew * eh + quarter :].reshape(eh // 2, ew // 2)
        area_resize(y, y_dst)
        area_resize(u, u_dst)
        area_resize(v, v_dst)
        window = self._window(lb)
        if (ew, eh) == (rw, rh):
            cv2.cvtColor(self._i420, cv2.COLOR_YUV2RGB_I420, dst=window)
        else:
            if self._rgb is None or self._rgb.shape != (eh, ew, 3):
                self._rgb = np.empty((eh, ew, 3), dtype=np.uint8)
            cv2.cvtColor(self._i420, cv2.COLOR_YUV2RGB_I420, dst=self._rgb)
            np.copyto(window, self._rgb[:rh, :rw])
        self._to_layout()
        return lb

    def _to_layout(self) -> None:
        if self.chw is not None:
            np.copyto(self.chw, self.hwc.transpose(2, 0, 1))


def area_resize(src: U8, dst: U8) -> None:
    """Resize `src` (a plane, or H x W x C) into `dst` exactly as OpenCV's INTER_AREA does, faster.

    For a whole odd factor k >= 3 (1080p to a 640 model's 360 rows: k = 3), INTER_AREA's output
    pixel is the rounded mean of a k x k block, which is a k x k box filter read at the block's
    centre: same pixels (even factors round ties differently, so they keep INTER_AREA). OpenCV's
    box filter is vectorised and its area resize at k = 3 is not (docs/benchmarks.md). Filtered
    in strips of rows, so the scratch stays small.
    """
    (h, w), (dh, dw) = src.shape[:2], dst.shape[:2]
    k = h // dh if dh else 0
    if k < 3 or k % 2 == 0 or (h, w) != (k * dh, k * dw):
        cv2.resize(src, (dw, dh), dst=dst, interpolation=cv2.INTER_AREA)
        return
    row_bytes = k * w * (src.shape[2] if src.ndim == 3 else 1)  # one output row's source rows
    rows = max(1, min(dh, AREA_SCRATCH_BYTES // row_bytes))
    scratch = _box_scratch(rows * row_bytes)
    centre = k // 2
    for top in range(0, dh, rows):
        bottom = min(dh, top + rows)
        strip = src[top * k : bottom * k]
        filtered = scratch[: strip.size].reshape(strip.shape)
        # Each sampled centre's window lies inside its own block, so the strip's edges (where the
        # border rule applies) never reach a pixel that is read.
        cv2.boxFilter(strip, -1, (k, k), dst=filtered, borderType=cv2.BORDER_REPLICATE)
        dst[top:bottom] = filtered[centre::k, centre::k]


def _box_scratch(size: int) -> U8:
    """The calling thread's scratch for `area_resize` (a camera letterboxes on one thread)."""
    held: U8 | None = getattr(_scratch, "box", None)
    if held is None or held.size < size:
        held = np.empty(size, dtype=np.uint8)
        _scratch.box = held
    return held


def plane(data: memoryview | bytes, height: int, width: int, line_size: int) -> U8:
    """A zero-copy (height, width) view of one image plane whose rows are `line_size` apart."""
    arr: U8 = np.frombuffer(data, dtype=np.uint8)
    return arr[: height * line_size].reshape(height, line_size)[:, :width]
