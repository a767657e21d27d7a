import numpy as np
import pytest

from framebus.letterbox import Letterbox, boxes_to_original


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
