import numpy as np
import onnx
import onnxruntime as ort
import pytest

from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.settings import HeadFormat
from testkit.models import near_free_model, with_dynamic_output_dims, yolov5_model


@pytest.fixture(scope="module")
def session() -> ort.InferenceSession:
    model = near_free_model()
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("batch", [1, 4])
def test_near_free_model_when_run_then_all_zero_yolov8_head_per_image(
    session: ort.InferenceSession, batch: int
) -> None:
    images = np.random.default_rng(batch).random((batch, 3, 640, 640), dtype=np.float32)
    (out,) = session.run(None, {"images": images})
    assert out.shape == (batch, 84, 8400)
    assert out.dtype == np.float32
    assert not out.any()


def test_near_free_model_when_decoded_as_yolov8_then_no_detections(
    session: ort.InferenceSession,
) -> None:
    images = np.ones((2, 3, 640, 640), np.float32)
    outputs = session.run(None, {"images": images})
    for raw in Decoder(HeadFormat.YOLOV8).decode(outputs, 2):
        assert len(raw.scores) == 0


def test_near_free_model_when_other_size_then_anchors_follow_strides() -> None:
    model = near_free_model(size=320, classes=3)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"images": np.zeros((2, 3, 320, 320), np.float32)})
    assert out.shape == (2, 7, 2100)  # 40^2 + 20^2 + 10^2 anchors


def test_with_dynamic_output_dims_when_loaded_then_shape_unknown_and_outputs_unchanged() -> None:
    rows = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
    model = with_dynamic_output_dims(yolov5_model(rows, input_size=16))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # ONNX Runtime's own shape inference cannot see through it: the engine only learns at run time.
    assert [o.shape for o in session.get_outputs()] == [["batch", "output0_dim1", "output0_dim2"]]
    (out,) = session.run(None, {"images": np.ones((3, 3, 16, 16), np.float32)})
    np.testing.assert_array_equal(out, np.broadcast_to(rows, (3, 2, 7)))
