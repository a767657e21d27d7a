"""How a frame's bytes are pixels: the I420 layout, its colour matrices, and RGB conversions.

The one owner of what the frame formats mean on the wire: the decoder writes them, the inferencer
converts I420 inside its model graph with `yuv_to_rgb_matrix`, and whoever shows a frame
(`framebus live`, `framebus render`) converts it here with OpenCV.

I420 (YUV 4:2:0, planar): the Y plane, H x W, then the U and the V plane, each ceil(H / 2) x
ceil(W / 2): FFmpeg's yuv420p, whose chroma of an odd size covers the last row or column alone.
Each chroma sample covers a 2 x 2 block of luma; a reader upsamples it by repetition (nearest),
as OpenCV's I420 conversion does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from framebus.messages import ColourMatrix, ColourRange, Frame, PixelFormat

U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]


class FrameFormat(enum.Enum):
    """The pixel format a decoder publishes and an inferencer's graph takes (a setting)."""

    RGB = "rgb"  # 3 bytes a pixel, converted on the decoder
    I420 = "i420"  # 1.5 bytes a pixel, converted inside the model graph (on the device)

    @property
    def pixel_format(self) -> PixelFormat:
        """The frame record's `pixel_format` of this format."""
        return PixelFormat[self.name]


# The default of both services' `frame_format`: half the bytes on the wire, the broker and the
# receive path, at the price of the colour conversion in the engine (docs/inferencer.md).
DEFAULT_FRAME_FORMAT = FrameFormat.I420


@dataclass(frozen=True)
class Colour:
    """How a YUV source's codes are colours: its matrix and range (the record's colour fields)."""

    matrix: ColourMatrix = ColourMatrix.BT601  # what framebus assumes when a stream says nothing
    range: ColourRange = ColourRange.LIMITED

    @classmethod
    def of(cls, frame: Frame) -> Colour:
        """A frame record's colour."""
        return cls(frame.colour_matrix, frame.colour_range)


DEFAULT_COLOUR = Colour()
NEUTRAL_CHROMA = 128  # U = V = 128: no colour, so a grey pads I420 with (Y, 128, 128)
# Every matrix and range a frame may say, in the order of the inferencer's coefficient table:
# the engine's input carries each frame's index into it (`colour_code`).
COLOURS: tuple[Colour, ...] = tuple(
    Colour(m, r)
    for m in (ColourMatrix.BT601, ColourMatrix.BT709)
    for r in (ColourRange.LIMITED, ColourRange.FULL)
)
# Kr and Kb of each matrix (ITU-R BT.601 and BT.709); Kg = 1 - Kr - Kb.
_KR_KB = {ColourMatrix.BT601: (0.299, 0.114), ColourMatrix.BT709: (0.2126, 0.0722)}


def chroma_size(height: int, width: int) -> tuple[int, int]:
    """(rows, columns) of each chroma plane of an I420 picture of `height` x `width`."""
    return (height + 1) // 2, (width + 1) // 2


def i420_nbytes(height: int, width: int) -> int:
    """Bytes of an I420 picture: the Y plane and two chroma planes."""
    ch, cw = chroma_size(height, width)
    return height * width + 2 * ch * cw


def frame_nbytes(fmt: PixelFormat, height: int, width: int) -> int:
    """Bytes of a `height` x `width` frame in `fmt` (0 for a format this release does not know)."""
    if fmt is PixelFormat.RGB:
        return height * width * 3
    if fmt is PixelFormat.I420:
        return i420_nbytes(height, width)
    return 0


def i420_planes(flat: U8, height: int, width: int) -> tuple[U8, U8, U8]:
    """Views of the Y, U and V planes of a flat I420 buffer (no copy)."""
    ch, cw = chroma_size(height, width)
    luma, chroma = height * width, ch * cw
    return (
        flat[:luma].reshape(height, width),
        flat[luma : luma + chroma].reshape(ch, cw),
        flat[luma + chroma : luma + 2 * chroma].reshape(ch, cw),
    )


def colour_code(colour: Colour) -> int:
    """The index of a colour in `COLOURS`; ValueError for one this release lacks."""
    try:
        return COLOURS.index(colour)
    except ValueError:
        raise ValueError(f"no conversion for {colour.matrix.name} {colour.range.name}") from None


def yuv_to_rgb_matrix(colour: Colour) -> F64:
    """The 3 x 4 affine map from (Y, U, V, 1) codes to R, G, B in 0..255 (unclipped).

    Limited range scales Y by 255/219 from 16 and U, V by 255/224 from 128; full range takes
    them as they are, from 0 and 128.
    """
    if colour.matrix not in _KR_KB:
        raise ValueError(f"no conversion for matrix {colour.matrix.name}")
    kr, kb = _KR_KB[colour.matrix]
    kg = 1.0 - kr - kb
    if colour.range is ColourRange.LIMITED:
        y_gain, c_gain, y_zero = 255 / 219, 255 / 224, 16.0
    elif colour.range is ColourRange.FULL:
        y_gain, c_gain, y_zero = 1.0, 1.0, 0.0
    else:
        raise ValueError(f"no conversion for range {colour.range.name}")
    m = np.array(
        [
            [y_gain, 0.0, c_gain * 2 * (1 - kr)],
            [y_gain, -c_gain * 2 * (1 - kb) * kb / kg, -c_gain * 2 * (1 - kr) * kr / kg],
            [y_gain, c_gain * 2 * (1 - kb), 0.0],
        ]
    )
    offset = -m @ np.array([y_zero, NEUTRAL_CHROMA, NEUTRAL_CHROMA])
    return np.column_stack([m, offset])


def grey_luma(level: int, colour_range: ColourRange) -> int:
    """The Y code of the grey `level` (0..255): with U = V = 128 it converts back to `level`."""
    if colour_range is ColourRange.FULL:
        return level
    return round(16 + level * 219 / 255)


def i420_to_rgb(flat: U8, height: int, width: int, colour: Colour) -> U8:
    """An I420 picture as a new (height, width, 3) RGB array, converted with OpenCV.

    Chroma is repeated over its 2 x 2 luma block, as the inferencer's graph does. BT.601
    limited of an even size takes OpenCV's own I420 conversion (what the decoder's RGB frames
    are made with); any other matrix, range or size the general affine transform.
    """
    if colour == Colour() and not (height % 2 or width % 2):
        tall = flat[: i420_nbytes(height, width)].reshape(height * 3 // 2, width)
        return cast(U8, cv2.cvtColor(tall, cv2.COLOR_YUV2RGB_I420))
    y, u, v = i420_planes(flat, height, width)
    ch, cw = chroma_size(height, width)
    up = [
        cv2.resize(p, (2 * cw, 2 * ch), interpolation=cv2.INTER_NEAREST)[:height, :width]
        for p in (u, v)
    ]
    yuv = cv2.merge([y, *up])
    return cast(U8, cv2.transform(yuv, yuv_to_rgb_matrix(colour)))


def rgb_to_i420(rgb: U8, out: U8 | None = None) -> U8:
    """An RGB picture (H, W, 3) as flat I420, BT.601 limited range (OpenCV's conversion).

    An odd size is padded by repeating its last row or column, so the chroma of the odd edge is
    that edge's own colour. Written into `out` (i420_nbytes(H, W) bytes) when given.
    """
    h, w = rgb.shape[:2]
    if out is None:
        out = np.empty(i420_nbytes(h, w), np.uint8)
    eh, ew = h + (h & 1), w + (w & 1)
    even = (
        rgb
        if (eh, ew) == (h, w)
        else cv2.copyMakeBorder(rgb, 0, eh - h, 0, ew - w, cv2.BORDER_REPLICATE)
    )
    tall = cv2.cvtColor(even, cv2.COLOR_RGB2YUV_I420)  # (eh * 3 / 2, ew)
    y, u, v = i420_planes(out, h, w)
    y[:] = tall[:eh][:h, :w]
    chroma = tall[eh:].reshape(2, eh // 2, ew // 2)  # U then V, each (ch, cw)
    u[:], v[:] = chroma[0], chroma[1]
    return out
