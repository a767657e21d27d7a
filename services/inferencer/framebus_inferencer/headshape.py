"""What a model's head is, told from the model before any session is made.

Candidate selection is appended to the graph before a session is made (a TensorRT engine is built
once), so the head's layout and shape come from the model's declared outputs and, where those are
dynamic, from ONNX shape inference at the input size the engine pins.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from framebus.errors import ModelError
from framebus_inferencer.graph import image_input, prepend_uint8_input
from framebus_inferencer.headlayout import check_head, detect_head
from framebus_inferencer.postprocess import class_names
from framebus_inferencer.settings import HeadFormat


def _shape(value: onnx.ValueInfoProto) -> list[int | str | None]:
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in value.type.tensor_type.shape.dim
    ]


def declared_shapes(model: onnx.ModelProto) -> list[list[int | str | None]]:
    """The model's output shapes as declared: a number, a symbolic name, or None when unknown."""
    return [_shape(o) for o in model.graph.output]


def known(shape: list[int | str | None]) -> bool:
    """A 3-d head shape whose class and anchor counts are numbers."""
    return len(shape) == 3 and all(isinstance(d, int) and d > 0 for d in shape[1:])


def inferred_head_shape(
    model: onnx.ModelProto, size: tuple[int, int] | None
) -> list[int | str | None] | None:
    """The single output's shape by ONNX shape inference at the input size the engine runs.

    Ultralytics' `dynamic=True` declares output0 ['batch', 84, 'anchors'], but the engine pins
    height and width (`graph.prepend_uint8_input`: `size`, else the `imgsz` metadata), which
    fixes the anchor count. With the batch pinned too (to 1 unless static), data propagation
    follows the head's Shape -> Gather -> Concat -> Reshape(-1) arithmetic. None when it fails.
    """
    try:
        pinned, spec = prepend_uint8_input(model, size=size)
        dims = image_input(pinned).type.tensor_type.shape.dim
        dims[0].Clear()
        dims[0].dim_value = spec.batch or 1
        inferred = onnx.shape_inference.infer_shapes(pinned, data_prop=True)
    except (ModelError, ValueError, onnx.shape_inference.InferenceError):
        return None  # the declared shape's reason is the one to give
    name = model.graph.output[0].name
    return next((_shape(o) for o in inferred.graph.output if o.name == name), None)


def head_shape(model: onnx.ModelProto, size: tuple[int, int] | None) -> list[int | str | None]:
    """The head's declared shape, its class and anchor counts inferred when declared dynamic."""
    declared = declared_shapes(model)[0]
    if known(declared):
        return declared
    inferred = inferred_head_shape(model, size)
    if inferred is None or len(inferred) != len(declared) or not known(inferred):
        return declared
    return [declared[0], *inferred[1:]]


def resolve_head(
    model: onnx.ModelProto, labels_path: Path | None, head: HeadFormat, size: tuple[int, int] | None
) -> tuple[HeadFormat, tuple[str, ...]]:
    """The head layout (detected, or checked when set) and the class names, before any session."""
    names = class_names({p.key: p.value for p in model.metadata_props}, labels_path)
    shapes = declared_shapes(model)
    if head is HeadFormat.AUTO:
        _, spec = prepend_uint8_input(model, size=size)
        return detect_head(shapes, len(names), (spec.height, spec.width)), names
    check_head(head, shapes)
    return head, names
