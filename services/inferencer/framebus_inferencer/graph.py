"""Graph surgery at load time: the model takes uint8 NHWC frames as they come off the wire.

A YOLO export expects float [N, 3, H, W] in 0..1. Prepending Transpose -> Cast -> Mul(1/255) lets
only uint8 cross to the device (4x fewer bytes than float32) and moves the conversion onto the
device, into the same engine as the model, instead of a numpy pass on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from framebus.errors import ModelError

INTERNAL_SUFFIX = "__framebus_nchw"


@dataclass(frozen=True)
class InputSpec:
    """The model's image input after surgery: name, uint8 NHWC height, width, channels."""

    name: str
    height: int
    width: int
    channels: int


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
        for d in value_info.type.tensor_type.shape.dim
    ]


def image_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    """The model's single real input (initializers listed as inputs are skipped)."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ModelError(
            f"the model has {len(inputs)} inputs ({[i.name for i in inputs]}); framebus runs "
            "detectors with one image input"
        )
    found: onnx.ValueInfoProto = inputs[0]
    return found


def prepend_uint8_input(model: onnx.ModelProto) -> tuple[onnx.ModelProto, InputSpec]:
    """Return a copy of `model` whose input is uint8 [N, H, W, 3], plus that input's spec.

    A model whose input is already uint8 NHWC is returned unchanged.
    """
    inp = image_input(model)
    dims = _dims(inp)
    elem = inp.type.tensor_type.elem_type
    if len(dims) != 4:
        raise ModelError(f"model input {inp.name} has shape {dims}; expected [N, 3, H, W]")
    if elem == TensorProto.UINT8 and isinstance(dims[3], int) and dims[3] == 3:
        return model, InputSpec(inp.name, int(dims[1]), int(dims[2]), 3)
    if not (isinstance(dims[1], int) and isinstance(dims[2], int) and isinstance(dims[3], int)):
        raise ModelError(
            f"model input {inp.name} has shape {dims}; expected [N, 3, H, W] with fixed C, H, W "
            "(export with a fixed image size; a dynamic batch is fine)"
        )
    if elem not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise ModelError(f"model input {inp.name} is {TensorProto.DataType.Name(elem)}")
    channels, height, width = int(dims[1]), int(dims[2]), int(dims[3])
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    name = inp.name
    internal = name + INTERNAL_SUFFIX
    for node in graph.node:
        node.input[:] = [internal if i == name else i for i in node.input]
    for o in graph.output:
        if o.name == name:
            raise ModelError(f"model input {name} is also an output; cannot rewrite it")
    scale_dtype = helper.tensor_dtype_to_np_dtype(elem)
    graph.initializer.append(
        numpy_helper.from_array(
            np.asarray(1.0 / 255.0, dtype=scale_dtype), name + "__framebus_scale"
        )
    )
    pre = [
        helper.make_node("Transpose", [name], [name + "__framebus_t"], perm=[0, 3, 1, 2]),
        helper.make_node("Cast", [name + "__framebus_t"], [name + "__framebus_f"], to=elem),
        helper.make_node("Mul", [name + "__framebus_f", name + "__framebus_scale"], [internal]),
    ]
    nodes = pre + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    batch = dims[0]
    new_input = helper.make_tensor_value_info(
        name, TensorProto.UINT8, [batch, height, width, channels]
    )
    idx = list(graph.input).index(inp)
    graph.input.remove(graph.input[idx])
    graph.input.insert(idx, new_input)
    return out, InputSpec(name, height, width, channels)
