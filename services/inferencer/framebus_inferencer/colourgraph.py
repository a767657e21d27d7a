"""The I420 input step of the model graph: YUV 4:2:0 planes in, the model's RGB in 0..1 out.

The bound input is uint8 [N, L + 1]: each row a frame's I420 bytes as they came off the wire
(L = H x W + 2 x ceil(H/2) x ceil(W/2), `framebus.pixels`), then one byte, its colour code: the
index of its matrix and range in `framebus.pixels.COLOURS`. One input, so the IO binding, the
TensorRT profile and the static-batch loop stay as they are for RGB, and one graph converts
frames of every matrix and range, side by side in a batch.

Plain ONNX ops that TensorRT's parser and the CUDA provider run, so on a GPU the conversion runs
on the device, in the model's engine:
- Cast the whole row to float first (TensorRT takes uint8 only into a Cast), then Slice it into
  the Y plane, the two chroma planes and the code;
- Gather the frame's 3 x 4 coefficients (already divided by 255) from a table of the four;
- the chroma part of R, G and B (a MatMul of 3 x 2 coefficients by the U and V planes, plus the
  offsets), at chroma resolution: a quarter of the pixels of doing it after upsampling;
- Resize it to the luma size (nearest: each chroma sample covers its 2 x 2 luma block, as in
  OpenCV's conversion), Slice off the extra row or column of an odd size;
- add the luma part (Y x gain, broadcast over R, G, B), Clip to 0..1 as RGB saturates in uint8.
A float16 model gets a Cast at the end: the conversion is computed in float32.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from framebus.errors import ModelError
from framebus.pixels import COLOURS, chroma_size, i420_nbytes, yuv_to_rgb_matrix

MIN_OPSET = 11  # Slice, Clip and Resize (nearest_mode) as used here
OP_TYPES = ("Cast", "Slice", "Reshape", "Gather", "MatMul", "Add", "Resize", "Mul", "Clip")


def i420_row_bytes(height: int, width: int) -> int:
    """Bytes of one frame's row in the bound input: its I420 picture and its colour code."""
    return i420_nbytes(height, width) + 1


def coefficient_table() -> np.ndarray:
    """[len(COLOURS), 3, 4] float32: per colour, R, G, B rows of (Y gain, U, V, offset) / 255."""
    return np.stack([yuv_to_rgb_matrix(c) / 255.0 for c in COLOURS]).astype(np.float32)


def i420_to_float(
    name: str, internal: str, height: int, width: int, elem: int, opset: int
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes and initializers from uint8 input `name` [N, L + 1] to `internal` [N, 3, H, W].

    `elem` is the model's float type (FLOAT or FLOAT16); `opset` its default-domain opset.
    """
    if opset < MIN_OPSET:
        raise ModelError(
            f"the model's opset {opset} is older than {MIN_OPSET}, which the I420 input step "
            "needs: export it again with a newer opset, or set FRAMEBUS_FRAME_FORMAT=rgb"
        )
    ch, cw = chroma_size(height, width)
    luma, picture = height * width, i420_nbytes(height, width)

    def n(suffix: str) -> str:
        return f"{name}__framebus_{suffix}"

    consts = {
        "table": coefficient_table(),
        "at0": _i64(0),
        "at_luma": _i64(luma),
        "at_code": _i64(picture),
        "at_end": _i64(picture + 1),
        "one": _i64(1),
        "three": _i64(3),
        "four": _i64(4),
        "axis1": _i64(1),
        "axis2": _i64(2),
        "zero_zero": _i64(0, 0),
        "one_one": _i64(1, 1),
        "axes12": _i64(1, 2),
        "y_shape": _i64(0, 1, height, width),
        "uv_shape": _i64(0, 2, ch * cw),
        "coef_shape": _i64(0, 3, 4),
        "gain_shape": _i64(0, 1, 1, 1),
        "chroma_shape": _i64(0, 3, ch, cw),
        "roi": np.zeros(0, np.float32),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "lo": np.array(0, np.float32),
        "hi": np.array(1, np.float32),
    }
    inits = [numpy_helper.from_array(v, n(k)) for k, v in consts.items()]
    node = helper.make_node
    nodes = [
        node("Cast", [name], [n("f")], to=TensorProto.FLOAT),
        node("Slice", [n("f"), n("at0"), n("at_luma"), n("axis1")], [n("y_flat")]),
        node("Slice", [n("f"), n("at_luma"), n("at_code"), n("axis1")], [n("uv_flat")]),
        node("Slice", [n("f"), n("at_code"), n("at_end"), n("axis1")], [n("code_f")]),
        node("Cast", [n("code_f")], [n("code")], to=TensorProto.INT32),
        node("Gather", [n("table"), n("code")], [n("coef_4d")], axis=0),  # [N, 1, 3, 4]
        node("Reshape", [n("coef_4d"), n("coef_shape")], [n("coef")]),  # [N, 3, 4]
        node("Slice", [n("coef"), n("zero_zero"), n("one_one"), n("axes12")], [n("gain_3d")]),
        node("Reshape", [n("gain_3d"), n("gain_shape")], [n("gain")]),  # [N, 1, 1, 1]
        node("Slice", [n("coef"), n("one"), n("three"), n("axis2")], [n("uv_coef")]),  # [N,3,2]
        node("Slice", [n("coef"), n("three"), n("four"), n("axis2")], [n("offset")]),  # [N,3,1]
        node("Reshape", [n("uv_flat"), n("uv_shape")], [n("uv")]),  # [N, 2, ch * cw]
        node("MatMul", [n("uv_coef"), n("uv")], [n("chroma_mm")]),
        node("Add", [n("chroma_mm"), n("offset")], [n("chroma_flat")]),  # [N, 3, ch * cw]
        node("Reshape", [n("chroma_flat"), n("chroma_shape")], [n("chroma")]),
        node(
            "Resize",
            [n("chroma"), n("roi"), n("scales")],
            [n("chroma_up")],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),  # [N, 3, 2 ch, 2 cw]
    ]
    chroma_up = n("chroma_up")
    if (2 * ch, 2 * cw) != (height, width):  # an odd size: one row or column too many
        inits += [
            numpy_helper.from_array(_i64(height, width), n("hw")),
            numpy_helper.from_array(_i64(2, 3), n("axes23")),
        ]
        nodes.append(node("Slice", [chroma_up, n("zero_zero"), n("hw"), n("axes23")], [n("cut")]))
        chroma_up = n("cut")
    rgb = internal if elem == TensorProto.FLOAT else n("rgb32")
    nodes += [
        node("Reshape", [n("y_flat"), n("y_shape")], [n("y")]),  # [N, 1, H, W]
        node("Mul", [n("y"), n("gain")], [n("luma")]),
        node("Add", [n("luma"), chroma_up], [n("rgb_raw")]),  # [N, 3, H, W]
        node("Clip", [n("rgb_raw"), n("lo"), n("hi")], [rgb]),
    ]
    if rgb != internal:
        nodes.append(node("Cast", [rgb], [internal], to=elem))
    return nodes, inits


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)
