"""Graph surgery at load time: the model takes uint8 frames, split into planes as they are staged.

A YOLO export expects float [N, 3, H, W] in 0..1. Prepending DequantizeLinear(1/255) (Cast ->
Mul(1/255) where TensorRT may run it) to a uint8 [N, 3, H, W] input lets only uint8 cross to the
device (4x fewer bytes than float32) and moves the conversion onto the device, into the same engine
as the model, instead of a numpy pass on the hot path. The frames come off the wire interleaved
(H, W, 3); the engine splits each into its three planes while writing it into the bound input
(OpenCV's split, about as cheap as the plain copy): on ONNX Runtime's CPU provider the planar
input step takes about half the time of a copy and an in-graph Transpose (docs/benchmarks.md).
A float16
export (`half=True`) gets its Cast to float16 and a float16 scale, so no float32 tensor is made.
The batch dimension is kept as exported: a static batch (an export without `dynamic=True`) is
reported in `InputSpec.batch`, and the engine runs such a model one static batch at a time.
Height and width left dynamic (Ultralytics' `dynamic=True` makes batch, height and width dynamic)
are pinned to one size: the frames' letterbox size when it is configured, else the size the
model's `imgsz` metadata names; frames all come at one size, and TensorRT builds for one.

With `frame_format` I420 the input is instead each frame's YUV 4:2:0 bytes and its colour code,
converted to RGB inside the graph (`colourgraph.py`). A model that takes uint8 NHWC itself gets
no prefix, so it stays RGB: the engine converts I420 frames for it on the host.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from framebus.errors import ModelError
from framebus.messages import PixelFormat
from framebus.pixels import FrameFormat
from framebus_inferencer.colourgraph import i420_row_bytes, i420_to_float

INTERNAL_SUFFIX = "__framebus_nchw"


@dataclass(frozen=True)
class InputSpec:
    """The model's image input after surgery: name, the frames' height, width, channels.

    `batch` is the exported batch dimension when it is a fixed number (None when dynamic);
    `dtype` is the element type the model computes in (`float32`, `float16`, or `uint8`);
    `planar`: the bound input is uint8 [N, C, H, W] (frames are split into planes as they are
    staged), else [N, H, W, C] (a model that takes uint8 NHWC itself); `to_float`: the prepended
    conversion, `DequantizeLinear` or `Cast+Mul` (`none` for a uint8 model, `I420` for the
    colour conversion); `pixel_format`: what the bound input takes, RGB or I420 (frames of the
    other format are converted on the host as they are staged).
    """

    name: str
    height: int
    width: int
    channels: int
    batch: int | None = None
    dtype: str = "float32"
    planar: bool = False
    to_float: str = "none"
    pixel_format: PixelFormat = PixelFormat.RGB

    @property
    def bound_shape(self) -> tuple[int, ...]:
        """One frame's shape in the bound input: (C, H, W) when planar, else (H, W, C).

        I420: (L + 1,), the frame's bytes and its colour code (`colourgraph.py`).
        """
        if self.pixel_format is PixelFormat.I420:
            return (i420_row_bytes(self.height, self.width),)
        if self.planar:
            return (self.channels, self.height, self.width)
        return (self.height, self.width, self.channels)

    @property
    def exported_shape(self) -> str:
        """The model's own input shape as exported, e.g. `[1, 3, 320, 320] float16`."""
        n = "N" if self.batch is None else str(self.batch)
        if self.dtype == "uint8":
            return f"[{n}, {self.height}, {self.width}, {self.channels}] uint8"
        return f"[{n}, {self.channels}, {self.height}, {self.width}] {self.dtype}"


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


def _pin(value_info: onnx.ValueInfoProto, dims: list[int | str]) -> None:
    """Give `value_info` the shape `dims` (ints fixed, strings symbolic)."""
    shape = value_info.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = d


def _static_batch(dim: int | str) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default (ai.onnx) domain the model imports; 0 when none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def metadata_size(model: onnx.ModelProto) -> tuple[int, int] | None:
    """(height, width) from the model's `imgsz` metadata (Ultralytics: `[640, 640]` or `640`)."""
    raw = next((p.value for p in model.metadata_props if p.key == "imgsz"), None)
    if raw is None:
        return None
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, int):
        value = [value, value]
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and v > 0 for v in value)
    ):
        return int(value[0]), int(value[1])
    return None


def image_size(
    model: onnx.ModelProto, dims: list[int | str], planar: bool, size: tuple[int, int] | None
) -> tuple[int, int]:
    """The (height, width) the image input runs at: as exported, else pinned (module docstring).

    `dims` is the input's shape, [N, C, H, W] when `planar` else [N, H, W, C]; `size` is the
    configured (height, width) of the frames, or None when not configured. A fixed dimension is
    kept even when `size` differs: `model.check_input_size` then names both sizes.
    """
    height, width = (dims[2], dims[3]) if planar else (dims[1], dims[2])
    if isinstance(height, int) and isinstance(width, int):
        return height, width
    pinned = size or metadata_size(model)
    if pinned is None:
        raise ModelError(
            f"model input {image_input(model).name} has shape {dims}: its height and width are "
            "dynamic and its metadata names no `imgsz`, so framebus cannot tell which size to "
            "run it at: set FRAMEBUS_INPUT_WIDTH and FRAMEBUS_INPUT_HEIGHT (--input-width, "
            "--input-height) to the decoder's letterbox size"
        )
    return (
        height if isinstance(height, int) else pinned[0],
        width if isinstance(width, int) else pinned[1],
    )


def prepend_uint8_input(
    model: onnx.ModelProto,
    dequantize: bool = True,
    size: tuple[int, int] | None = None,
    frame_format: FrameFormat = FrameFormat.RGB,
) -> tuple[onnx.ModelProto, InputSpec]:
    """Return a copy of `model` whose input is uint8 [N, 3, H, W], plus that input's spec.

    With `frame_format` I420 the input is uint8 [N, L + 1] of I420 frames (`colourgraph.py`).

    Dynamic H and W are pinned to `size` (height, width), else to the model's `imgsz` metadata.
    A model whose input is already uint8 NHWC is returned as it is (its H and W pinned). With `dequantize` the
    uint8 -> float step is one DequantizeLinear (x * 1/255, zero point 0: the same arithmetic as
    Cast then Mul, in one pass, so faster on ONNX Runtime's CPU provider: docs/benchmarks.md).
    TensorRT reads Q/DQ nodes as INT8 quantization, so the engine asks for the
    Cast + Mul form when TensorRT may run the graph; float16 needs opset 19 for DequantizeLinear.
    """
    inp = image_input(model)
    dims = _dims(inp)
    elem = inp.type.tensor_type.elem_type
    if len(dims) != 4:
        raise ModelError(f"model input {inp.name} has shape {dims}; expected [N, 3, H, W]")
    if elem == TensorProto.UINT8 and dims[3] == 3:
        height, width = image_size(model, dims, False, size)
        spec = InputSpec(inp.name, height, width, 3, _static_batch(dims[0]), "uint8")
        if [height, width] == dims[1:3]:
            return model, spec
        out = onnx.ModelProto()
        out.CopyFrom(model)
        _pin(out.graph.input[list(model.graph.input).index(inp)], [dims[0], height, width, 3])
        return out, spec
    if dims[1] != 3:
        raise ModelError(
            f"model input {inp.name} has shape {dims}; expected [N, 3, H, W] with 3 channels"
        )
    if elem not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise ModelError(f"model input {inp.name} is {TensorProto.DataType.Name(elem)}")
    channels = 3
    height, width = image_size(model, dims, True, size)
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
    opset = default_opset(model)
    batch = dims[0]
    dtype = "float16" if elem == TensorProto.FLOAT16 else "float32"
    if frame_format is FrameFormat.I420:
        to_float, inits = i420_to_float(name, internal, height, width, elem, opset)
        graph.initializer.extend(inits)
        bound: list[int | str] = [batch, i420_row_bytes(height, width)]
        conversion = "I420"
    else:
        to_float = _rgb_to_float(graph, name, internal, elem, dequantize, opset)
        bound = [batch, channels, height, width]
        conversion = "+".join(n.op_type for n in to_float)
    planar = frame_format is FrameFormat.RGB
    spec = InputSpec(
        name, height, width, channels, _static_batch(batch), dtype, planar, conversion,
        frame_format.pixel_format,
    )  # fmt: skip
    nodes = to_float + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    new_input = helper.make_tensor_value_info(name, TensorProto.UINT8, bound)
    idx = list(graph.input).index(inp)
    graph.input.remove(graph.input[idx])
    graph.input.insert(idx, new_input)
    return out, spec


def _rgb_to_float(
    graph: onnx.GraphProto, name: str, internal: str, elem: int, dequantize: bool, opset: int
) -> list[onnx.NodeProto]:
    """uint8 [N, 3, H, W] to the model's float in 0..1: DequantizeLinear, or Cast then Mul."""
    scale_dtype = helper.tensor_dtype_to_np_dtype(elem)
    graph.initializer.append(
        numpy_helper.from_array(
            np.asarray(1.0 / 255.0, dtype=scale_dtype), name + "__framebus_scale"
        )
    )
    if dequantize and opset >= (19 if elem == TensorProto.FLOAT16 else 10):
        graph.initializer.append(
            numpy_helper.from_array(np.asarray(0, dtype=np.uint8), name + "__framebus_zero")
        )
        to_float = [
            helper.make_node(
                "DequantizeLinear",
                [name, name + "__framebus_scale", name + "__framebus_zero"],
                [internal],
            )
        ]
    else:
        to_float = [
            helper.make_node("Cast", [name], [name + "__framebus_f"], to=elem),
            helper.make_node("Mul", [name + "__framebus_f", name + "__framebus_scale"], [internal]),
        ]
    return to_float
