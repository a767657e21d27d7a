import cv2
import numpy as np
import pytest

from framebus.messages import ColourMatrix, ColourRange, PixelFormat
from framebus.pixels import (
    COLOURS,
    DEFAULT_FRAME_FORMAT,
    Colour,
    FrameFormat,
    chroma_size,
    colour_code,
    frame_nbytes,
    grey_luma,
    i420_nbytes,
    i420_planes,
    i420_to_rgb,
    rgb_to_i420,
    yuv_to_rgb_matrix,
)

BT709_FULL = Colour(ColourMatrix.BT709, ColourRange.FULL)


def picture(h: int, w: int) -> np.ndarray:
    """Flat 8 x 8 blocks of random colours: each 2 x 2 chroma block is one colour."""
    rng = np.random.default_rng(7)
    blocks = rng.integers(20, 236, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    return np.ascontiguousarray(blocks.repeat(8, axis=0).repeat(8, axis=1)[:h, :w])


@pytest.mark.parametrize(("h", "w", "chroma"), [(640, 640, (320, 320)), (357, 641, (179, 321))])
def test_i420_sizes_when_odd_then_chroma_rounds_up(h: int, w: int, chroma: tuple[int, int]) -> None:
    assert chroma_size(h, w) == chroma
    assert i420_nbytes(h, w) == h * w + 2 * chroma[0] * chroma[1]
    assert frame_nbytes(PixelFormat.I420, 640, 640) == 614_400  # half of RGB's 1,228,800
    assert frame_nbytes(PixelFormat.RGB, 640, 640) == 1_228_800
    assert frame_nbytes(PixelFormat.UNKNOWN, 640, 640) == 0


def test_yuv_to_rgb_matrix_when_bt601_limited_then_opencv_coefficients() -> None:
    m = yuv_to_rgb_matrix(Colour())
    # OpenCV's fixed-point I420 constants (ITUR_BT_601_CY, CVR, CVG, CUG, CUB) over 2**20.
    cy, cvr, cvg, cug, cub = np.array([1220542, 1673527, -852492, -409993, 2116026]) / 2**20
    expected = [[cy, 0, cvr], [cy, cug, cvg], [cy, cub, 0]]
    assert np.allclose(m[:, :3], expected, atol=1e-3)  # OpenCV rounds 0.39176 to 0.391
    assert np.allclose(m @ [16, 128, 128, 1], 0, atol=1e-9)  # limited black
    assert np.allclose(m @ [235, 128, 128, 1], 255, atol=1e-9)  # limited white


@pytest.mark.parametrize("colour", COLOURS, ids=lambda c: f"{c.matrix.name}-{c.range.name}")
def test_grey_luma_when_converted_back_then_same_grey_under_every_matrix(colour: Colour) -> None:
    for level in (0, 114, 255):
        y = grey_luma(level, colour.range)
        assert yuv_to_rgb_matrix(colour) @ [y, 128, 128, 1] == pytest.approx([level] * 3, abs=0.6)


def test_grey_luma_when_the_pad_grey_then_one_code_for_both_ranges() -> None:
    # The decoder pads I420 frames with one Y whatever the source's range (preprocess.PAD_LUMA).
    assert grey_luma(114, ColourRange.LIMITED) == grey_luma(114, ColourRange.FULL) == 114


def test_colour_code_when_each_colour_then_its_index_and_unknown_refused() -> None:
    assert [colour_code(c) for c in COLOURS] == list(range(4))
    with pytest.raises(ValueError, match="no conversion for UNKNOWN LIMITED"):
        colour_code(Colour(ColourMatrix.UNKNOWN, ColourRange.LIMITED))
    with pytest.raises(ValueError, match="no conversion for range UNKNOWN"):
        yuv_to_rgb_matrix(Colour(ColourMatrix.BT601, ColourRange.UNKNOWN))


def test_i420_to_rgb_when_bt601_limited_then_general_path_within_one_level_of_opencv() -> None:
    flat = rgb_to_i420(picture(48, 64))
    fast = i420_to_rgb(flat, 48, 64, Colour())  # OpenCV's own I420 conversion
    y, u, v = i420_planes(flat, 48, 64)
    up = [np.repeat(np.repeat(p, 2, axis=0), 2, axis=1) for p in (u, v)]
    general = cv2.transform(cv2.merge([y, *up]), yuv_to_rgb_matrix(Colour()))
    assert np.abs(fast.astype(int) - general).max() <= 1


@pytest.mark.parametrize(("h", "w"), [(48, 64), (47, 63)])
def test_i420_to_rgb_when_round_tripped_then_close_to_the_picture(h: int, w: int) -> None:
    rgb = picture(h, w)
    back = i420_to_rgb(rgb_to_i420(rgb), h, w, Colour())
    assert back.shape == (h, w, 3)
    # Flat over each chroma block (and the odd edge repeats its own colour): only rounding.
    assert np.abs(back.astype(int) - rgb).max() <= 2


def test_i420_to_rgb_when_bt709_full_then_its_own_matrix() -> None:
    # A full-range BT.709 code of a saturated red, converted by its matrix, not BT.601's.
    m = yuv_to_rgb_matrix(BT709_FULL)[:, :3]
    y, u, v = np.linalg.solve(
        m, np.array([200.0, 30.0, 30.0]) - yuv_to_rgb_matrix(BT709_FULL)[:, 3]
    )
    flat = np.concatenate(
        [np.full(16, round(y)), np.full(4, round(u)), np.full(4, round(v))]
    ).astype(np.uint8)
    rgb = i420_to_rgb(flat, 4, 4, BT709_FULL)
    assert np.abs(rgb.astype(int) - (200, 30, 30)).max() <= 2
    assert np.abs(i420_to_rgb(flat, 4, 4, Colour()).astype(int) - (200, 30, 30)).max() > 10


def test_frame_format_when_default_then_i420_and_maps_to_the_record_format() -> None:
    assert DEFAULT_FRAME_FORMAT is FrameFormat.I420
    assert FrameFormat.RGB.pixel_format is PixelFormat.RGB
    assert FrameFormat.I420.pixel_format is PixelFormat.I420
