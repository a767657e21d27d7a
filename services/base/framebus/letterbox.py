"""Letterbox geometry: fit a frame into the model's square input keeping its aspect ratio.

Pure arithmetic shared by the decoder (forward map, when it resizes) and the inferencer (inverse
map, when it turns model-space boxes back into original pixels); `letterbox_window` cuts the
picture back out of a frame record, as RGB whatever its pixel format, for whoever shows it
(`framebus render`, `framebus live`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from framebus.compression import decompress
from framebus.errors import CodecError
from framebus.messages import Frame, PixelFormat, TensorLayout
from framebus.pixels import Colour, frame_nbytes, i420_to_rgb

PAD_VALUE = 114  # grey used by the YOLO family for padding; the models are trained with it


@dataclass(frozen=True)
class Letterbox:
    """How an original frame maps into the model input: scaled, then padded."""

    scale: float  # model-input pixels per original pixel
    pad_x: int  # padding on the left, model-input pixels
    pad_y: int  # padding on the top, model-input pixels
    resized_width: int
    resized_height: int

    @classmethod
    def fit(cls, src_width: int, src_height: int, dst_width: int, dst_height: int) -> Letterbox:
        """Largest scale that fits the source inside the destination, centred."""
        if min(src_width, src_height, dst_width, dst_height) <= 0:
            raise ValueError("letterbox sizes must be positive")
        scale = min(dst_width / src_width, dst_height / src_height)
        resized_w = min(dst_width, round(src_width * scale))
        resized_h = min(dst_height, round(src_height * scale))
        return cls(
            scale=scale,
            pad_x=(dst_width - resized_w) // 2,
            pad_y=(dst_height - resized_h) // 2,
            resized_width=resized_w,
            resized_height=resized_h,
        )

    def to_model(self, xy: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
        """Map original-pixel points (..., 2) into model-input pixels."""
        out = np.asarray(xy, dtype=np.float64) * self.scale
        out[..., 0] += self.pad_x
        out[..., 1] += self.pad_y
        return out


def boxes_to_original(
    boxes_xyxy: npt.NDArray[np.floating],
    scale: float,
    pad_x: float,
    pad_y: float,
    orig_width: int,
    orig_height: int,
) -> npt.NDArray[np.float32]:
    """Map (N, 4) model-input boxes x1,y1,x2,y2 back to original pixels, clipped to the frame."""
    out = np.array(boxes_xyxy, dtype=np.float32, copy=True).reshape(-1, 4)
    out[:, 0::2] = (out[:, 0::2] - pad_x) / scale
    out[:, 1::2] = (out[:, 1::2] - pad_y) / scale
    np.clip(out[:, 0::2], 0, orig_width, out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, orig_height, out=out[:, 1::2])
    return out


def letterbox_window(frame: Frame) -> npt.NDArray[np.uint8]:
    """The picture inside a frame's letterbox (HWC uint8 RGB, model-input pixels): padding cut off.

    It covers the whole original frame, so original pixel x maps to x * width / orig_width of it.
    An I420 frame is converted to RGB first (`framebus.pixels`). CodecError when the tensor does
    not match the record's shape, or the record's pixel format or colours are unknown here.
    """
    tensor = frame_rgb(frame)
    in_h, in_w = tensor.shape[:2]
    # The decoder resized to round(orig * scale) and centred it with pad_x/pad_y on the left/top.
    w = min(in_w - frame.pad_x, round(frame.orig_width * frame.scale))
    h = min(in_h - frame.pad_y, round(frame.orig_height * frame.scale))
    if w <= 0 or h <= 0 or frame.pad_x < 0 or frame.pad_y < 0:
        raise CodecError(f"frame {frame.camera_id}#{frame.seq}: letterbox outside its tensor")
    return tensor[frame.pad_y : frame.pad_y + h, frame.pad_x : frame.pad_x + w]


def frame_rgb(frame: Frame) -> npt.NDArray[np.uint8]:
    """A frame's whole tensor as (H, W, 3) RGB: a view of an RGB frame, a new array for I420."""
    fmt, shape, where = frame.pixel_format, frame.shape, f"frame {frame.camera_id}#{frame.seq}"
    if fmt is PixelFormat.I420 and len(shape) == 2:
        height, width = shape
    elif fmt is PixelFormat.RGB and len(shape) == 3:
        height, width = shape[1:] if frame.layout is TensorLayout.CHW else shape[:2]
    else:
        raise CodecError(f"{where}: an {fmt.name} frame of shape {shape} is no picture")
    expected = frame_nbytes(fmt, height, width)
    raw = decompress(frame.compression, frame.tensor, max_bytes=expected)
    if frame.dtype != "uint8" or len(raw) != expected:
        raise CodecError(
            f"{where}: tensor of {len(raw)} B does not match shape {shape} {frame.dtype} {fmt.name}"
        )
    flat = np.frombuffer(raw, np.uint8)
    if fmt is PixelFormat.I420:
        try:
            return i420_to_rgb(flat, height, width, Colour.of(frame))
        except ValueError as exc:  # a matrix or range of a later release
            raise CodecError(f"{where}: {exc}") from exc
    tensor = flat.reshape(shape)
    return tensor.transpose(1, 2, 0) if frame.layout is TensorLayout.CHW else tensor
