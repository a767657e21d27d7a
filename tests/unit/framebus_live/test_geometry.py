from __future__ import annotations

import numpy as np
import pytest

from framebus.letterbox import PAD_VALUE
from framebus.messages import Box, Frame, TensorLayout
from framebus.pixels import FrameFormat
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_live.geometry import box_on_tile, tile_size
from framebus_live.tiles import tile_image


def _frame(
    orig_w: int,
    orig_h: int,
    size: int,
    layout: TensorLayout = TensorLayout.HWC,
    fmt: FrameFormat = FrameFormat.RGB,
) -> Frame:
    """A frame letterboxed as the decoder does it; its picture's corner pixels red and blue."""
    letterbox = LetterboxBuffer(size, size, layout, fmt)
    k = round(1 / letterbox.geometry(orig_w, orig_h).scale)  # source pixels per window pixel
    image = np.full((orig_h, orig_w, 3), 10, np.uint8)
    image[:k, :k] = (255, 0, 0)  # becomes the window's top-left pixel
    image[-k:, -k:] = (0, 0, 255)  # and its bottom-right one
    lb = letterbox.fill_rgb(image)
    data = letterbox.tensor
    return Frame(
        camera_id="cam",
        seq=1,
        capture_ts_us=1,
        orig_width=orig_w,
        orig_height=orig_h,
        shape=letterbox.shape,
        layout=letterbox.layout,
        pixel_format=fmt.pixel_format,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        tensor=np.ascontiguousarray(data).tobytes(),
    )


def test_tile_size_when_window_taller_than_tile_then_scaled_down_keeping_aspect() -> None:
    assert tile_size(640, 360, 180) == (320, 180)


def test_tile_size_when_window_smaller_than_tile_then_never_upscaled() -> None:
    assert tile_size(320, 180, 360) == (320, 180)


def test_tile_size_when_zero_then_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        tile_size(0, 10, 10)


@pytest.mark.parametrize("layout", [TensorLayout.HWC, TensorLayout.CHW])
def test_tile_image_when_landscape_letterboxed_then_bands_cut_off(layout: TensorLayout) -> None:
    image = tile_image(_frame(1280, 720, 320, layout), 360)
    assert image.shape == (180, 320, 3)  # 70 px grey bands above and below are gone
    assert tuple(image[0, 0]) == (255, 0, 0)
    assert tuple(image[-1, -1]) == (0, 0, 255)
    assert not (image == PAD_VALUE).all(axis=2).any()


def test_tile_image_when_portrait_letterboxed_then_side_bands_cut_off_and_scaled() -> None:
    image = tile_image(_frame(720, 1280, 640), 180)
    assert image.shape == (180, 101, 3)  # the 360x640 window scaled to 180 rows


def test_box_on_tile_when_scaled_then_corners_follow_and_edges_inclusive() -> None:
    box = Box(100.0, 200.0, 340.0, 520.0, 0, "person", 0.9)
    # 1280x720 onto 320x180: a quarter on both axes; x2/y2 are one past the last pixel.
    assert box_on_tile(box, 1280, 720, 320, 180) == (25, 50, 84, 129)


def test_box_on_tile_when_box_beyond_frame_then_clipped_to_tile() -> None:
    box = Box(-50.0, -5.0, 2000.0, 900.0, 0, "car", 0.5)
    assert box_on_tile(box, 1280, 720, 320, 180) == (0, 0, 319, 179)


def test_tile_image_when_i420_frame_then_bands_cut_off_and_converted_like_the_rgb_frame() -> None:
    rgb = tile_image(_frame(1280, 720, 320), 360)
    i420 = tile_image(_frame(1280, 720, 320, fmt=FrameFormat.I420), 360)
    assert i420.shape == rgb.shape == (180, 320, 3)
    # Chroma at half resolution: the one-pixel corners blur into their 2 x 2 blocks, no more.
    assert np.abs(i420.astype(int) - rgb).mean() < 1.0
    assert not (i420 == PAD_VALUE).all(axis=2).any()
