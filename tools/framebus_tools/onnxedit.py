"""Edits of ONNX models that the generated test media and models need: a fixed batch, float16."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def with_static_batch(model: onnx.ModelProto, batch: int = 1) -> onnx.ModelProto:
    """A copy of `model` whose inputs and outputs have the fixed batch dimension `batch`.

    ONNX Runtime then rejects any other batch size, as it does for a static-batch YOLO export.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in (*out.graph.input, *out.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_value = batch
    onnx.checker.check_model(out)
    return out


def _f16_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    if tensor.data_type != TensorProto.FLOAT:
        return tensor
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name)


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` computing in float16: float16 input, outputs, weights and casts.

    Like an export with `half=True`: every float32 initializer, Constant, Cast target and graph
    input/output becomes float16 (enough for the graphs of this module and `synthetic`).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    converted = [_f16_tensor(t) for t in graph.initializer]
    del graph.initializer[:]
    graph.initializer.extend(converted)
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.FLOAT16
            elif attr.type == onnx.AttributeProto.TENSOR:
                attr.t.CopyFrom(_f16_tensor(attr.t))
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(out)
    return out
