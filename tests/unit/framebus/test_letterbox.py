import numpy as np
import pytest

from framebus.errors import CodecError
from framebus.letterbox import Letterbox, boxes_to_original, letterbox_window
from framebus.messages import ColourMatrix, ColourRange, Frame, PixelFormat, TensorLayout


def test_letterbox_when_1080p_into_640_then_scale_third_and_vertical_padding() -> None:
    lb = Letterbox.fit(1920, 1080, 640, 640)
    assert lb.scale == pytest.approx(1 / 3)
    assert (lb.resized_width, lb.resized_height) == (640, 360)
    assert (lb.pad_x, lb.pad_y) == (0, 140)


def test_letterbox_when_portrait_then_horizontal_padding() -> None:
    lb = Letterbox.fit(720, 1280, 640, 640)
    assert lb.scale == pytest.approx(0.5)
    assert (lb.resized_width, lb.resized_height, lb.pad_x, lb.pad_y) == (360, 640, 140, 0)


def test_letterbox_when_forward_then_inverse_then_identity() -> None:
    lb = Letterbox.fit(1920, 1080, 640, 640)
    corners = np.array([[300.0, 210.0], [900.0, 777.0]])
    model = lb.to_model(corners)
    np.testing.assert_allclose(model, [[100.0, 210.0], [300.0, 399.0]])
    back = boxes_to_original(model.reshape(1, 4), lb.scale, lb.pad_x, lb.pad_y, 1920, 1080)
    np.testing.assert_allclose(back, [[300.0, 210.0, 900.0, 777.0]], atol=1e-3)


def test_boxes_to_original_when_box_in_padding_then_clipped_to_frame() -> None:
    out = boxes_to_original(np.array([[-10.0, 100.0, 700.0, 600.0]]), 1 / 3, 0, 140, 1920, 1080)
    np.testing.assert_allclose(out, [[0.0, 0.0, 1920.0, 1080.0]])


def test_letterbox_when_size_not_positive_then_value_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        Letterbox.fit(0, 1080, 640, 640)


def _i420_frame(**fields: object) -> Frame:
    """A 4 x 4 I420 frame record whose picture is its top-left 2 x 2 pixels."""
    y = np.full((4, 4), 114, np.uint8)
    y[:2, :2] = 200
    tensor = np.concatenate([y.reshape(-1), np.full(8, 128, np.uint8)]).tobytes()
    base = dict(
        camera_id="cam", seq=1, capture_ts_us=0, orig_width=2, orig_height=2, shape=(4, 4),
        layout=TensorLayout.CHW, scale=1.0, pad_x=0, pad_y=0, tensor=tensor,
        pixel_format=PixelFormat.I420, colour_range=ColourRange.FULL,
    )  # fmt: skip
    return Frame(**{**base, **fields})  # type: ignore[arg-type]


def test_letterbox_window_when_i420_frame_then_rgb_picture_by_its_range() -> None:
    window = letterbox_window(_i420_frame())
    assert window.shape == (2, 2, 3)
    assert (window == 200).all()  # full range: Y 200 with neutral chroma is grey 200


@pytest.mark.parametrize(
    "fields",
    [
        {"pixel_format": PixelFormat.UNKNOWN},
        {"colour_matrix": ColourMatrix.UNKNOWN},
        {"shape": (4, 4, 3)},
    ],
)
def test_letterbox_window_when_i420_frame_unreadable_then_codec_error(fields: dict) -> None:
    with pytest.raises(CodecError, match="frame cam#1"):
        letterbox_window(_i420_frame(**fields))
