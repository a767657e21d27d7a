"""Frame records of either pixel format for the inferencer's tests: a square picture, no pad."""

from __future__ import annotations

from framebus.messages import Frame, PixelFormat, TensorLayout
from framebus.pixels import frame_nbytes


def record(size: int, fmt: PixelFormat = PixelFormat.RGB, with_tensor: bool = False) -> Frame:
    """A `size` x `size` frame record in `fmt`; its tensor zeros of the right length, or empty."""
    rgb = fmt is PixelFormat.RGB
    return Frame(
        camera_id="cam",
        seq=0,
        capture_ts_us=0,
        orig_width=size,
        orig_height=size,
        shape=(size, size, 3) if rgb else (size, size),
        layout=TensorLayout.HWC if rgb else TensorLayout.CHW,
        scale=1.0,
        pad_x=0,
        pad_y=0,
        tensor=bytes(frame_nbytes(fmt, size, size) if with_tensor else 0),
        pixel_format=fmt,
    )
