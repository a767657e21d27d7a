"""Copies of a generated ONNX model with dims made dynamic, as some exports declare them.

`with_dynamic_image_dims` makes the input ['batch', 3, 'height', 'width'], as Ultralytics'
`dynamic=True` export does (optionally dropping the `imgsz` metadata and declaring the anchor count
dynamic too); `with_dynamic_output_dims` hides every output's shape after the batch until the model
runs. Both take any model from `testkit.model_heads` or `testkit.model_yolov8n` and leave it
unchanged. (A fixed batch and float16, as users also export, are `with_static_batch` and
`to_float16` in `framebus_tools.onnxedit`.)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def with_dynamic_image_dims(
    model: onnx.ModelProto, imgsz: bool = True, anchors: bool = False
) -> onnx.ModelProto:
    """A copy of `model` whose input is ['batch', 3, 'height', 'width'] (Ultralytics `dynamic=True`).

    Intermediate shapes are dropped so that nothing still states the exported size; without
    `imgsz` the `imgsz` metadata goes too (an export that does not name its size). With
    `anchors` the YOLOv8 output is declared ['batch', 4 + C, 'anchors'] as well, as that export
    declares it.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    (inp,) = (i for i in out.graph.input if i.name not in {t.name for t in out.graph.initializer})
    dims = inp.type.tensor_type.shape.dim
    for i, name in ((0, "batch"), (2, "height"), (3, "width")):
        dims[i].Clear()
        dims[i].dim_param = name
    if anchors:
        head = out.graph.output[0].type.tensor_type.shape.dim
        for i, name in ((0, "batch"), (2, "anchors")):
            head[i].Clear()
            head[i].dim_param = name
    if not imgsz:
        kept = [p for p in out.metadata_props if p.key != "imgsz"]
        del out.metadata_props[:]
        out.metadata_props.extend(kept)
    onnx.checker.check_model(out)
    return out


def with_dynamic_output_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose output dims after the batch are unknown until it runs.

    Some exports leave e.g. the anchor count dynamic: only the real outputs show the shape. Each
    output is reshaped to its own shape plus a zero computed from its values, which neither ONNX
    nor ONNX Runtime shape inference can see through.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    graph.initializer.append(numpy_helper.from_array(np.asarray(0.0, np.float32), "dyn_zero"))
    for value in graph.output:
        name, inner = value.name, value.name + "__static"
        for node in graph.node:
            node.output[:] = [inner if o == name else o for o in node.output]
        graph.node.extend(
            [
                helper.make_node("Shape", [inner], [f"{name}__shape"]),
                helper.make_node("Cast", [inner], [f"{name}__f"], to=TensorProto.FLOAT),
                helper.make_node("ReduceMin", [f"{name}__f"], [f"{name}__min"], keepdims=0),
                helper.make_node("Mul", [f"{name}__min", "dyn_zero"], [f"{name}__zf"]),
                helper.make_node("Cast", [f"{name}__zf"], [f"{name}__z"], to=TensorProto.INT64),
                helper.make_node("Add", [f"{name}__shape", f"{name}__z"], [f"{name}__dyn"]),
                helper.make_node("Reshape", [inner, f"{name}__dyn"], [name]),
            ]
        )
        for i, dim in enumerate(value.type.tensor_type.shape.dim[1:], start=1):
            dim.Clear()
            dim.dim_param = f"{name}_dim{i}"
    onnx.checker.check_model(out)
    return out
