import cv2
import numpy as np
import pytest

from framebus.letterbox import PAD_VALUE
from framebus.messages import ColourMatrix, ColourRange, TensorLayout
from framebus.pixels import (
    Colour,
    FrameFormat,
    i420_nbytes,
    i420_planes,
    i420_to_rgb,
    rgb_to_i420,
)
from framebus_decoder.preprocess import (
    AREA_SCRATCH_BYTES,
    PAD_LUMA,
    LetterboxBuffer,
    area_resize,
    plane,
    resite_chroma,
)


def scene(w: int, h: int) -> np.ndarray:
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[:, :, 0] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    rgb[:, :, 1] = np.linspace(255, 0, h, dtype=np.uint8)[:, None]
    rgb[h // 4 : h // 2, w // 4 : w // 2] = (200, 40, 90)
    return rgb


def i420(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h, w = rgb.shape[:2]
    yuv = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420).reshape(-1)
    q = (h // 2) * (w // 2)
    return (
        yuv[: w * h].reshape(h, w),
        yuv[w * h : w * h + q].reshape(h // 2, w // 2),
        yuv[w * h + q :].reshape(h // 2, w // 2),
    )


@pytest.mark.parametrize(("w", "h", "dst"), [(1920, 1080, 640), (640, 360, 320), (1280, 720, 333)])
def test_letterbox_when_yuv_planes_then_matches_rgb_resize(w: int, h: int, dst: int) -> None:
    rgb = scene(w, h)
    fast, ref = LetterboxBuffer(dst, dst), LetterboxBuffer(dst, dst)
    lb = fast.fill_i420(*i420(rgb))
    assert lb == ref.fill_rgb(rgb)
    diff = np.abs(fast.hwc.astype(int) - ref.hwc.astype(int))
    # Chroma is subsampled on one path only: small differences at colour edges, none on average.
    assert diff.mean() < 3.0
    assert (fast.hwc[: lb.pad_y] == PAD_VALUE).all()
    assert (fast.hwc[lb.pad_y + lb.resized_height :] == PAD_VALUE).all()


def test_letterbox_when_filled_again_then_same_buffer_reused() -> None:
    buf = LetterboxBuffer(320, 320)
    before = buf.hwc.__array_interface__["data"][0]
    for _ in range(3):
        buf.fill_i420(*i420(scene(640, 360)))
    assert buf.hwc.__array_interface__["data"][0] == before


def test_letterbox_when_chw_layout_then_planar_copy_of_hwc() -> None:
    buf = LetterboxBuffer(320, 320, TensorLayout.CHW)
    buf.fill_rgb(scene(640, 360))
    assert buf.shape == (3, 320, 320)
    assert (buf.tensor == buf.hwc.transpose(2, 0, 1)).all()


@pytest.mark.parametrize(
    ("src_hw", "dst_hw"),
    [
        ((1080, 1920), (360, 640)),  # 1080p luma to a 640 model: the box-filter path, k = 3
        ((540, 960), (180, 320)),  # its chroma planes
        ((5 * 70, 5 * 33), (70, 33)),  # k = 5, rows not a whole number of strips
        ((720, 1280), (360, 640)),  # k = 2: OpenCV's own (vectorised) path
        ((2160, 3840), (360, 640)),  # k = 6, even: rounds ties unlike INTER_AREA, so INTER_AREA
        ((1080, 1920), (333, 592)),  # no whole factor
    ],
)
def test_area_resize_when_any_factor_then_same_pixels_as_inter_area(
    src_hw: tuple[int, int], dst_hw: tuple[int, int]
) -> None:
    rng = np.random.default_rng(3)
    h, w = src_hw
    # A decoded plane: rows padded to a wider line size, read through the zero-copy view.
    padded = rng.integers(0, 256, (h, w + 32), dtype=np.uint8)
    src = plane(padded.tobytes(), h, w, w + 32)
    dst = np.zeros(dst_hw, np.uint8)
    area_resize(src, dst)
    expected = cv2.resize(src, dst_hw[::-1], interpolation=cv2.INTER_AREA)
    assert (dst == expected).all()


def test_area_resize_when_rgb_then_same_pixels_as_inter_area() -> None:
    rgb = np.random.default_rng(5).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    window = np.zeros((640, 640, 3), np.uint8)[140:500]  # a letterbox window: rows of a buffer
    area_resize(rgb, window)
    assert (window == cv2.resize(rgb, (640, 360), interpolation=cv2.INTER_AREA)).all()


def test_area_resize_when_taller_than_one_strip_then_every_strip_written() -> None:
    k, width = 3, 640
    rows = 2 * AREA_SCRATCH_BYTES // (k * k * width) + 5  # two full strips and a short one
    src = np.random.default_rng(4).integers(0, 256, (k * rows, k * width), dtype=np.uint8)
    dst = np.full((rows, width), 7, np.uint8)
    area_resize(src, dst)
    assert (dst == cv2.resize(src, (width, rows), interpolation=cv2.INTER_AREA)).all()


def as_rgb(buf: LetterboxBuffer) -> np.ndarray:
    """An I420 buffer's picture as RGB, converted as a reader of the record does."""
    return i420_to_rgb(buf.tensor, buf.height, buf.width, buf.colour)


@pytest.mark.parametrize(
    ("w", "h", "dst"),
    [(1920, 1080, 640), (640, 360, 320), (1280, 720, 333), (641, 359, 640), (359, 641, 321)],
)
def test_letterbox_when_i420_buffer_then_planes_convert_to_the_rgb_buffer(
    w: int, h: int, dst: int
) -> None:
    planes = i420(scene(w + (w & 1), h + (h & 1)))
    y, u, v = planes[0][:h, :w], planes[1], planes[2]  # an odd frame: chroma rounds up
    yuv, ref = LetterboxBuffer(dst, dst, fmt=FrameFormat.I420), LetterboxBuffer(dst, dst)
    lb, ref_lb = yuv.fill_i420(y, u, v), ref.fill_i420(y, u, v)
    assert yuv.tensor.size == i420_nbytes(dst, dst)
    assert (yuv.shape, yuv.layout) == ((dst, dst), TensorLayout.CHW)
    # The same letterbox to the pixel, odd pads included (641 x 359: 141 rows; 333: 73 rows).
    assert lb == ref_lb
    rgb = as_rgb(yuv)
    window = rgb[lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width]
    ref_window = ref.hwc[
        lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width
    ]
    assert np.abs(window.astype(int) - ref_window).mean() < 1.0
    # The luma plane is the frame's, resized, exactly where the RGB buffer has its picture.
    y_plane = i420_planes(yuv.tensor, dst, dst)[0]
    resized = cv2.resize(y, (lb.resized_width, lb.resized_height), interpolation=cv2.INTER_AREA)
    assert (
        y_plane[lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x :][:, : lb.resized_width]
        == resized
    ).all()
    # The pad is today's grey, exactly, above and below the picture, but for a pad line that
    # shares its chroma block with the picture.
    assert (rgb[: lb.pad_y & ~1] == PAD_VALUE).all()
    assert (rgb[lb.pad_y + lb.resized_height + 1 :] == PAD_VALUE).all()


@pytest.mark.parametrize(("w", "h", "dst"), [(640, 360, 320), (1352, 900, 640), (900, 1352, 640)])
def test_letterbox_when_i420_buffer_filled_from_rgb_then_bt601_limited_planes(
    w: int, h: int, dst: int
) -> None:
    rgb = scene(w, h)
    yuv, ref = LetterboxBuffer(dst, dst, fmt=FrameFormat.I420), LetterboxBuffer(dst, dst)
    lb = yuv.fill_rgb(rgb)
    assert lb == ref.fill_rgb(rgb)  # 1352 x 900: 107 rows above, odd, as in RGB
    assert yuv.colour == Colour()
    assert np.abs(as_rgb(yuv).astype(int) - ref.hwc).mean() < 3.0
    # Its luma is the RGB buffer's, at the same place (both BT.601 limited).
    ref_y = i420_planes(rgb_to_i420(ref.hwc), dst, dst)[0]
    assert (i420_planes(yuv.tensor, dst, dst)[0] == ref_y).all()


@pytest.mark.parametrize(("down", "right"), [(1, 0), (0, 1), (1, 1)])
def test_resite_chroma_when_odd_start_then_each_block_is_the_mean_of_the_samples_it_covers(
    down: int, right: int
) -> None:
    chroma = np.array([[10, 20, 30], [50, 60, 70]], np.uint8)  # a 3 x 4 or 4 x 5 picture's
    # Every picture pixel's own chroma, as an RGB conversion repeats it, on a canvas where the
    # picture starts one row down / one column right; each 2 x 2 block of it, averaged.
    full = np.repeat(np.repeat(chroma.astype(float), 2, 0), 2, 1)
    full = np.pad(full, ((down, 1), (right, 1)), mode="edge")
    rows, cols = (full.shape[0]) // 2, (full.shape[1]) // 2
    blocks = full[: 2 * rows, : 2 * cols].reshape(rows, 2, cols, 2).mean(axis=(1, 3))
    dst = np.zeros((2 + down, 3 + right), np.uint8)
    resite_chroma(chroma, dst, down, right)
    assert np.abs(dst - blocks[: dst.shape[0], : dst.shape[1]]).max() <= 0.5


def test_letterbox_when_rgb_buffer_and_bt709_source_then_converted_with_bt709() -> None:
    y, u, v = i420(scene(640, 360))
    bt709 = Colour(ColourMatrix.BT709, ColourRange.LIMITED)
    as_601, as_709 = LetterboxBuffer(320, 320), LetterboxBuffer(320, 320)
    as_601.fill_i420(y, u, v)
    as_709.fill_i420(y, u, v, bt709)
    yuv = LetterboxBuffer(320, 320, fmt=FrameFormat.I420)
    yuv.fill_i420(y, u, v, bt709)
    assert (as_709.colour, yuv.colour) == (bt709, bt709)
    assert np.abs(as_709.hwc.astype(int) - as_rgb(yuv)).mean() < 1.0
    assert np.abs(as_709.hwc.astype(int) - as_601.hwc).max() > 10


def test_letterbox_when_i420_source_size_changes_then_pad_repainted_grey() -> None:
    buf = LetterboxBuffer(320, 320, fmt=FrameFormat.I420)
    buf.fill_i420(*i420(scene(320, 320)))  # no pad at all
    buf.fill_i420(*i420(scene(640, 360)))
    lb = buf.geometry(640, 360)
    assert (as_rgb(buf)[: lb.pad_y] == PAD_VALUE).all()
    y, u, v = i420_planes(buf.tensor, 320, 320)
    assert (y[: lb.pad_y] == PAD_LUMA).all() and (u[: lb.pad_y // 2] == 128).all()


@pytest.mark.parametrize(("w", "h", "dst"), [(1280, 720, 333), (774, 512, 640)])
def test_letterbox_when_rgb_buffer_and_odd_picture_size_then_planes_not_stretched(
    w: int, h: int, dst: int
) -> None:
    # Grey stripes (U = V = 128): the RGB picture is the resized luma, level for level.
    y = np.repeat(np.where(np.arange(h) % 16 < 8, 40, 220).astype(np.uint8)[:, None], w, 1)
    y[:, : w // 3] = 128  # a grey band, so some columns carry no edge at all
    u = v = np.full(((h + 1) // 2, (w + 1) // 2), 128, np.uint8)
    buf = LetterboxBuffer(dst, dst)
    lb = buf.fill_i420(y, u, v)
    assert lb.resized_height % 2 == 1  # 187 and 423 rows: the even scratch is one row taller
    resized = cv2.resize(y, (lb.resized_width, lb.resized_height), interpolation=cv2.INTER_AREA)
    expected = np.clip((resized.astype(float) - 16) * 255 / 219, 0, 255)
    window = buf.hwc[lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x :][:, : lb.resized_width]
    assert np.abs(window[:, :, 1] - expected).max() <= 1.5
