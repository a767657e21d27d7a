import cv2
import numpy as np
import pytest

from framebus.letterbox import PAD_VALUE
from framebus.messages import TensorLayout
from framebus_decoder.preprocess import LetterboxBuffer


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
