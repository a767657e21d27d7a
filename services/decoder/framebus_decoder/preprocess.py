"""Letterbox decoded frames straight into reused model-input buffers, in uint8.

The fast path resizes the decoded YUV 4:2:0 planes with OpenCV; an I420 buffer keeps them as they
are, an RGB one converts only the small result to RGB, in place in the buffer: several times faster than converting the full frame to RGB first
or than PyAV's `reformat` (swscale); docs/benchmarks.md has the figures. Buffers are allocated
once per camera: a fresh model-input array per frame costs page faults that cost more than the
copy itself.
"""

from __future__ import annotations

import threading
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from framebus.letterbox import PAD_VALUE, Letterbox
from framebus.messages import ColourRange, TensorLayout
from framebus.pixels import (
    NEUTRAL_CHROMA,
    Colour,
    FrameFormat,
    chroma_size,
    grey_luma,
    i420_nbytes,
    i420_planes,
    i420_to_rgb,
    rgb_to_i420,
)

U8 = npt.NDArray[np.uint8]
# Box-filter scratch per letterboxing thread: 1080p luma in two strips, chroma in one. With many
# cameras letterboxing at once, fewer and larger calls (each hands the GIL over) cost less CPU
# than strips of a few rows; a whole plane per call was no clearer a gain.
AREA_SCRATCH_BYTES = 1 << 20
_scratch = threading.local()
# The pad grey as Y (with U = V = 128). 114 is its own limited-range code (16 + 114 * 219 / 255 =
# 113.9), as it is full-range, so one pad serves both ranges (a unit test checks it).
PAD_LUMA = grey_luma(PAD_VALUE, ColourRange.LIMITED)


class LetterboxBuffer:
    """One model-input buffer, reused for every frame it holds: RGB (HWC, or CHW), or I420.

    An I420 buffer holds the Y, U and V planes of the letterboxed picture, flat (`framebus.pixels`):
    the resized planes are its content, with no colour conversion at all. Its picture lies where
    an RGB buffer's does, to the pixel: the model sees the same picture at the same place in
    either format (a one-pixel shift moves a real detector's boxes by more than 1 px). A 2 x 2
    chroma block that holds picture and pad (an odd pad, or an odd picture size) takes the
    picture's colour over its pad line; after an odd pad, the picture's chroma is resampled half
    a chroma sample over, to the blocks the canvas has there (`resite_chroma`).
    """

    def __init__(
        self,
        width: int,
        height: int,
        layout: TensorLayout = TensorLayout.HWC,
        fmt: FrameFormat = FrameFormat.RGB,
    ) -> None:
        self.width = width
        self.height = height
        self.format = fmt
        # I420 is planar: its records say CHW (planes one after the other).
        self.layout = TensorLayout.CHW if fmt is FrameFormat.I420 else layout
        self.colour = Colour()  # the last frame's, for its record
        rgb = fmt is FrameFormat.RGB
        self.hwc: U8 = np.full((height, width, 3) if rgb else (0, 0, 3), PAD_VALUE, np.uint8)
        self.chw: U8 | None = (
            np.full((3, height, width), PAD_VALUE, dtype=np.uint8)
            if rgb and layout is TensorLayout.CHW
            else None
        )
        self.i420: U8 | None = None if rgb else np.empty(i420_nbytes(height, width), np.uint8)
        self._geometry: Letterbox | None = None
        self._source_size: tuple[int, int] | None = None
        self._i420: U8 | None = None  # scratch for the resized planes (RGB buffers)
        self._chroma: U8 | None = None  # scratch: a resized chroma plane (I420, odd pads)
        self._rgb: U8 | None = None  # scratch: odd resized sizes (RGB), RGB sources (I420)

    @property
    def tensor(self) -> U8:
        """The buffer as it goes on the wire: HWC or CHW RGB, or flat I420."""
        if self.i420 is not None:
            return self.i420
        return self.chw if self.chw is not None else self.hwc

    @property
    def shape(self) -> tuple[int, ...]:
        """The record's `shape`: the tensor's, or (height, width) of an I420 picture."""
        return (self.height, self.width) if self.i420 is not None else tuple(self.tensor.shape)

    def geometry(self, src_width: int, src_height: int) -> Letterbox:
        """The letterbox for this source size; the padding is repainted only when it changes."""
        if self._source_size != (src_width, src_height) or self._geometry is None:
            self._geometry = Letterbox.fit(src_width, src_height, self.width, self.height)
            self._source_size = (src_width, src_height)
            self._paint_pad()
        return self._geometry

    def _paint_pad(self) -> None:
        if self.i420 is not None:
            y, u, v = i420_planes(self.i420, self.height, self.width)
            y.fill(PAD_LUMA)
            u.fill(NEUTRAL_CHROMA)
            v.fill(NEUTRAL_CHROMA)
            return
        self.hwc.fill(PAD_VALUE)
        if self.chw is not None:
            self.chw.fill(PAD_VALUE)

    def picture(self, lb: Letterbox) -> U8:
        """A view of the picture without its pad: the Y plane's window (I420), or RGB (HWC)."""
        if self.i420 is None:
            return self._window(lb)
        return self._plane_windows(self.i420, lb)[0]

    def _window(self, lb: Letterbox) -> U8:
        return self.hwc[
            lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width
        ]

    def _plane_windows(self, i420: U8, lb: Letterbox) -> tuple[U8, U8, U8]:
        """The picture's windows in the Y, U and V planes of `i420` (this buffer's).

        The chroma windows are the chroma blocks that hold a picture pixel: one more row (column)
        than the picture's own chroma when the pad is odd and the picture size even.
        """
        y, u, v = i420_planes(i420, self.height, self.width)
        rh, rw = lb.resized_height, lb.resized_width
        top, left = lb.pad_y // 2, lb.pad_x // 2
        bottom, right = (lb.pad_y + rh + 1) // 2, (lb.pad_x + rw + 1) // 2
        return (
            y[lb.pad_y : lb.pad_y + rh, lb.pad_x : lb.pad_x + rw],
            u[top:bottom, left:right],
            v[top:bottom, left:right],
        )

    def fill_rgb(self, rgb: U8) -> Letterbox:
        """Resize an RGB frame (H, W, 3) into the letterbox window; return the geometry.

        An I420 buffer converts the resized picture with OpenCV (BT.601, limited range).
        """
        h, w = rgb.shape[:2]
        lb = self.geometry(w, h)
        self.colour = Colour()
        if self.i420 is None:
            area_resize(rgb, self._window(lb))
            self._to_layout()
            return lb
        rw, rh = lb.resized_width, lb.resized_height
        self._rgb = _scratch_of(self._rgb, (rh, rw, 3))
        area_resize(rgb, self._rgb)
        # After an odd pad, the picture's first row (column) shares its chroma block with the
        # pad's last: subsample a picture one line larger there, that line its own edge's copy.
        top, left = lb.pad_y & 1, lb.pad_x & 1
        grown = cv2.copyMakeBorder(self._rgb, top, 0, left, 0, cv2.BORDER_REPLICATE)
        planes = i420_planes(rgb_to_i420(cast(U8, grown)), rh + top, rw + left)
        y, u, v = self._plane_windows(self.i420, lb)
        np.copyto(y, planes[0][top:, left:])
        np.copyto(u, planes[1])
        np.copyto(v, planes[2])
        return lb

    def fill_i420(self, y: U8, u: U8, v: U8, colour: Colour | None = None) -> Letterbox:
        """Resize the Y, U, V planes of a 4:2:0 frame; an RGB buffer converts only the result.

        `y` is (H, W) and `u`, `v` are ((H+1)//2, (W+1)//2); row strides may be padded.
        `colour` is the source's (default: BT.601 limited range, what H.264 cameras send unless
        they say otherwise).
        """
        h, w = y.shape
        lb = self.geometry(w, h)
        self.colour = colour or Colour()
        rw, rh = lb.resized_width, lb.resized_height
        if self.i420 is not None:
            y_dst, u_dst, v_dst = self._plane_windows(self.i420, lb)
            area_resize(y, y_dst)
            if not (lb.pad_x & 1 or lb.pad_y & 1):
                area_resize(u, u_dst)
                area_resize(v, v_dst)
                return lb
            self._chroma = _scratch_of(self._chroma, chroma_size(rh, rw))
            for src, dst in ((u, u_dst), (v, v_dst)):
                area_resize(src, self._chroma)
                resite_chroma(self._chroma, dst, lb.pad_y & 1, lb.pad_x & 1)
            return lb
        ew, eh = rw + (rw & 1), rh + (rh & 1)  # 4:2:0 needs even sizes
        self._i420 = _scratch_of(self._i420, (eh * 3 // 2, ew))
        flat = self._i420.reshape(-1)
        y_dst, u_dst, v_dst = i420_planes(flat, eh, ew)
        # The luma at the picture's own size (its edge repeated to the even size), so the
        # picture is not stretched by a row or a column; the chroma is ceil(size / 2) either way.
        area_resize(y, y_dst[:rh, :rw])
        y_dst[rh:, :rw] = y_dst[rh - 1 : rh, :rw]
        y_dst[:, rw:] = y_dst[:, rw - 1 : rw]
        area_resize(u, u_dst)
        area_resize(v, v_dst)
        window = self._window(lb)
        if self.colour != Colour():
            np.copyto(window, i420_to_rgb(flat, eh, ew, self.colour)[:rh, :rw])
        elif (ew, eh) == (rw, rh):
            cv2.cvtColor(self._i420, cv2.COLOR_YUV2RGB_I420, dst=window)
        else:
            self._rgb = _scratch_of(self._rgb, (eh, ew, 3))
            cv2.cvtColor(self._i420, cv2.COLOR_YUV2RGB_I420, dst=self._rgb)
            np.copyto(window, self._rgb[:rh, :rw])
        self._to_layout()
        return lb

    def _to_layout(self) -> None:
        if self.chw is not None:
            np.copyto(self.chw, self.hwc.transpose(2, 0, 1))


def resite_chroma(chroma: U8, dst: U8, down: int, right: int) -> None:
    """Write a picture's chroma plane into `dst`: a canvas's, where the picture starts odd.

    `down` (`right`) is 1 when the picture starts at an odd row (column) of the canvas.
    Sample k of `chroma` covers picture rows 2k and 2k + 1; the canvas's block k covers picture
    rows 2k - 1 and 2k, so it takes the mean of samples k - 1 and k (the edge sample repeated
    past either end): the picture's chroma at the canvas's siting, half a sample over.
    """
    wide = chroma.astype(np.uint16)
    if down:
        wide = np.concatenate([wide[:1], wide, wide[-1:]], axis=0)
        wide = wide[:-1] + wide[1:]
    if right:
        wide = np.concatenate([wide[:, :1], wide, wide[:, -1:]], axis=1)
        wide = wide[:, :-1] + wide[:, 1:]
    shift = down + right  # each resited axis summed two samples
    rounded = (wide + (1 << shift >> 1)) >> shift
    dst[:] = rounded[: dst.shape[0], : dst.shape[1]]


def _scratch_of(held: U8 | None, shape: tuple[int, ...]) -> U8:
    """`held` when it has `shape`, else a new array of it (a buffer's scratch, per source size)."""
    if held is None or held.shape != shape:
        held = np.empty(shape, dtype=np.uint8)
    return held


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
