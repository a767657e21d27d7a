"""The I420 input step of the graph against OpenCV's conversion of the same planes."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from framebus.errors import ModelError
from framebus.messages import ColourMatrix, ColourRange, PixelFormat
from framebus.pixels import COLOURS, Colour, FrameFormat, colour_code, i420_to_rgb, rgb_to_i420
from framebus_inferencer.colourgraph import OP_TYPES, i420_row_bytes
from framebus_inferencer.graph import prepend_uint8_input


def passthrough(h: int, w: int, elem: int = TensorProto.FLOAT, opset: int = 17) -> onnx.ModelProto:
    """A model whose output is its float [N, 3, H, W] input: what the prefix hands a model."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["images"], ["out"])],
        "passthrough",
        [helper.make_tensor_value_info("images", elem, ["batch", 3, h, w])],
        [helper.make_tensor_value_info("out", elem, ["batch", 3, h, w])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run(model: onnx.ModelProto, rows: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"images": rows})
    return np.asarray(out, np.float32)


def picture(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def rows_of(frames: list[np.ndarray], colours: list[Colour]) -> np.ndarray:
    """The bound input: each frame's I420 bytes, then its colour code."""
    return np.stack(
        [np.append(f, np.uint8(colour_code(c))) for f, c in zip(frames, colours, strict=True)]
    )


@pytest.mark.parametrize(("h", "w"), [(32, 48), (33, 47)], ids=["even", "odd"])
def test_i420_input_when_every_colour_in_one_batch_then_within_one_level_of_opencv(
    h: int, w: int
) -> None:
    model, spec = prepend_uint8_input(passthrough(h, w), frame_format=FrameFormat.I420)
    assert (spec.pixel_format, spec.bound_shape, spec.to_float) == (
        PixelFormat.I420,
        (i420_row_bytes(h, w),),
        "I420",
    )
    frames = [rgb_to_i420(picture(h, w, seed)) for seed in range(len(COLOURS))]
    out = run(model, rows_of(frames, list(COLOURS)))
    for i, colour in enumerate(COLOURS):
        expected = i420_to_rgb(frames[i], h, w, colour).transpose(2, 0, 1)
        # OpenCV rounds to whole levels (and its BT.601 constants to 3 decimals): within 1.
        assert np.abs(out[i] * 255 - expected).max() <= 1.0, colour


def test_i420_input_when_saturated_codes_then_clipped_to_zero_and_one() -> None:
    h, w = 4, 4
    frame = np.concatenate([np.full(16, 235), np.full(4, 16), np.full(4, 240)]).astype(np.uint8)
    out = run(prepend_uint8_input(passthrough(h, w), frame_format=FrameFormat.I420)[0],
              rows_of([frame], [Colour()]))  # fmt: skip
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert (out[0, 0] == 1.0).all()  # red saturates: V far above neutral on white


def test_i420_input_when_float16_model_then_float16_of_the_same_values() -> None:
    model, spec = prepend_uint8_input(
        passthrough(16, 16, TensorProto.FLOAT16), frame_format=FrameFormat.I420
    )
    frame = rgb_to_i420(picture(16, 16, 3))
    out = run(model, rows_of([frame], [Colour(ColourMatrix.BT709, ColourRange.LIMITED)]))
    expected = i420_to_rgb(frame, 16, 16, Colour(ColourMatrix.BT709, ColourRange.LIMITED))
    assert spec.dtype == "float16"
    assert np.abs(out[0] * 255 - expected.transpose(2, 0, 1)).max() <= 1.0


def test_i420_input_when_built_then_only_plain_onnx_ops_before_the_model() -> None:
    model, _ = prepend_uint8_input(passthrough(16, 16), frame_format=FrameFormat.I420)
    prefix = [n.op_type for n in model.graph.node if n.op_type != "Identity"]
    assert set(prefix) <= set(OP_TYPES)
    onnx.checker.check_model(model, full_check=True)


def test_i420_input_when_opset_older_than_11_then_model_error_naming_rgb() -> None:
    with pytest.raises(ModelError, match="FRAMEBUS_FRAME_FORMAT=rgb"):
        prepend_uint8_input(passthrough(16, 16, opset=10), frame_format=FrameFormat.I420)
