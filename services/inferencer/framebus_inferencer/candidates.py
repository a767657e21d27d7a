"""Candidate selection on the device: graph surgery appended after a raw YOLO head.

A raw head holds every anchor's box and class scores, 84 x 8400 floats (2.7 MB) a frame for an
80-class YOLOv8 at 640 x 640, written by the engine and read again by the host's candidate filter.
Appended here, after the head: each anchor's best class score (ReduceMax; of objectness x class
scores for YOLOv5, as `postprocess` computes it), the confidence threshold (Less + Where), a TopK
of K = `max_candidates` anchors and a GatherElements of their rows only. One output leaves the
engine: [N, K, 7] float32 rows (cx, cy, w, h, score, class id, anchor index), best score first,
8.4 KB a frame at K = 300. A row whose anchor fails the threshold has score -inf; the host keeps
the rows at or above it and runs the same NMS as on a raw head, on at most K rows. With `topk_nms`
the graph runs ONNX NonMaxSuppression as well, and the rows it suppressed get class id -1.

The arithmetic is the host path's, so the boxes are the same: values are only moved (float16
values cast to float32, exactly), scores are compared in the model's precision as numpy compares
them, YOLOv5's product is taken in float32. K is a constant and every output shape is static
(TensorRT's parser and the CUDA provider run every op; NonZero is never used). A row's class is the
first class of its best score, as numpy's argmax gives it, on any provider (ArgMax leaves ties to
the provider). A head whose anchor count is declared dynamic (Ultralytics' `dynamic=True` export:
['batch', 84, 'anchors']) gets it from ONNX shape inference at the size the engine pins the input
to. What the surgery cannot rewrite (a class or anchor count still unknown, another output besides
the head, an opset before 11) stays on the host: `Selection.reason` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from framebus_inferencer.graph import default_opset
from framebus_inferencer.headshape import head_shape, known
from framebus_inferencer.postprocess import ROW_WIDTH, CandidateRows
from framebus_inferencer.settings import CandidateSelection, HeadFormat

OUTPUT = "framebus_candidates"
MIN_OPSET = 11  # GatherElements; TopK's K as an input (10)
_P = "framebus_cand__"  # prefix of every name the surgery adds


@dataclass(frozen=True)
class Selection:
    """The model to run and how its candidates come out: `rows` when appended, else `reason`."""

    model: onnx.ModelProto
    rows: CandidateRows | None
    reason: str = ""


class _Graph:
    """Appends nodes and constants to a graph, in the model's opset."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self.graph, self.opset = graph, opset

    def const(self, name: str, value: npt.NDArray[Any]) -> str:
        self.graph.initializer.append(numpy_helper.from_array(value, _P + name))
        return _P + name

    def f32(self, name: str, value: float) -> str:
        return self.const(name, np.asarray(value, np.float32))

    def ints(self, name: str, *values: int) -> str:
        return self.const(name, np.asarray(values, np.int64))

    def node(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = _P + name
        self.graph.node.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def nodes2(self, op: str, inputs: list[str], names: tuple[str, str], **attrs: Any) -> list[str]:
        outs = [_P + n for n in names]
        self.graph.node.append(helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        return outs

    def slice(self, x: str, name: str, start: int, end: int, axis: int) -> str:
        return self.node(
            "Slice",
            [
                x,
                self.ints(f"{name}_s", start),
                self.ints(f"{name}_e", end),
                self.ints(f"{name}_a", axis),
            ],
            name,
        )

    def to_float(self, x: str, name: str, elem: int) -> str:
        return (
            x if elem == TensorProto.FLOAT else self.node("Cast", [x], name, to=TensorProto.FLOAT)
        )

    def reduce(self, op: str, x: str, name: str, axes: list[int], keepdims: int) -> str:
        # ReduceMax and ReduceMin take their axes as an input from opset 18, as an attribute before.
        if self.opset >= 18:
            return self.node(op, [x, self.ints(f"{name}_ax", *axes)], name, keepdims=keepdims)
        return self.node(op, [x], name, axes=axes, keepdims=keepdims)

    def reduce_max(self, x: str, name: str, axes: list[int], keepdims: int) -> str:
        return self.reduce("ReduceMax", x, name, axes, keepdims)

    def first_max_index(self, x: str, name: str, axis: int, count: int) -> str:
        """Float32 index of the first maximum along `axis` of rank-3 `x` (`count` long), kept.

        numpy's argmax (the host path's) takes the first of equal scores; ONNX ArgMax says so
        too, but TensorRT runs it as a TopK of 1 and leaves ties open. Equal + Where + ReduceMin
        give the first index on every provider, on K rows only.
        """
        top = self.reduce_max(x, f"{name}_max", [axis], 1)
        at = self.node("Equal", [x, top], f"{name}_at")
        shape = [1, 1, 1]
        shape[axis] = count
        iota = self.const(f"{name}_iota", np.arange(count, dtype=np.float32).reshape(shape))
        index = self.node("Where", [at, iota, self.f32(f"{name}_none", count)], f"{name}_where")
        return self.reduce("ReduceMin", index, name, [axis], 1)

    def reshape(self, x: str, name: str, *shape: int) -> str:
        return self.node("Reshape", [x, self.ints(f"{name}_shape", *shape)], name)


def _why_not(
    model: onnx.ModelProto, head: HeadFormat, size: tuple[int, int] | None
) -> tuple[str, list[int | str | None]]:
    """Why the surgery cannot rewrite this model's head ("" when it can), and the head's shape."""
    if head not in (HeadFormat.YOLOV5, HeadFormat.YOLOV8):
        return f"the {head.value} head selects its own detections", []
    outputs = model.graph.output
    if len(outputs) != 1:
        return f"the model has {len(outputs)} outputs; the surgery rewrites a single raw head", []
    elem = outputs[0].type.tensor_type.elem_type
    if elem not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        return f"its head is {TensorProto.DataType.Name(elem)}, not float32 or float16", []
    if default_opset(model) < MIN_OPSET:
        return f"its opset {default_opset(model)} is older than {MIN_OPSET} (GatherElements)", []
    shape = head_shape(model, size)
    if not known(shape):
        return (
            f"its head's shape {shape} leaves the class or anchor count unknown until it runs "
            "(ONNX shape inference at the pinned input size does not tell them either)",
            shape,
        )
    return "", shape


def resolved(how: CandidateSelection, gpu: bool) -> CandidateSelection:
    """`auto` made `topk` where a GPU may run the graph, else `host`.

    On ONNX Runtime's CPU provider the appended nodes (a copy of the class scores, a max over
    them) cost more than the host's filter they replace (docs/inferencer.md has the figures);
    on a GPU they take microseconds and spare the copy of the whole head.
    """
    if how is not CandidateSelection.AUTO:
        return how
    return CandidateSelection.TOPK if gpu else CandidateSelection.HOST


def append_candidate_selection(
    model: onnx.ModelProto,
    head: HeadFormat,
    how: CandidateSelection,
    threshold: float,
    max_candidates: int,
    iou_threshold: float,
    size: tuple[int, int] | None = None,
) -> Selection:
    """Return `model` with candidate selection appended to its head, or as it is with the reason.

    `threshold` is the confidence threshold; `iou_threshold` is used when `how` is `topk_nms`;
    `size` is the configured (height, width) the engine pins a dynamic input to (else `imgsz`).
    """
    if how is CandidateSelection.HOST:
        return Selection(model, None, "FRAMEBUS_CANDIDATE_SELECTION is host")
    if how is CandidateSelection.AUTO:
        raise ValueError("resolve candidate_selection=auto first (resolved())")
    reason, shape = _why_not(model, head, size)
    if reason:
        return Selection(model, None, reason)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    head_out = out.graph.output[0]
    elem = head_out.type.tensor_type.elem_type
    a, b = (d for d in shape[1:] if isinstance(d, int))  # _why_not: both known
    (width, anchors), build = ((a, b), _yolov8) if head is HeadFormat.YOLOV8 else ((b, a), _yolov5)
    k = min(max_candidates, anchors)
    g = _Graph(out.graph, default_opset(out))
    # numpy compares a float16 head with the threshold in float16: the same bound, in float32.
    bound = np.float32(helper.tensor_dtype_to_np_dtype(elem).type(threshold))
    rows = build(g, head_out.name, elem, width, k, bound)
    nms = how is CandidateSelection.TOPK_NMS
    if nms:
        rows = _nms(g, rows, k, iou_threshold)
    out.graph.node.append(helper.make_node("Identity", [rows], [OUTPUT], name=OUTPUT))
    del out.graph.output[:]
    out.graph.output.append(
        helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [shape[0], k, ROW_WIDTH])
    )
    problem = _check_appended(out, model.graph.output[0])
    if problem:
        return Selection(model, None, f"the appended nodes do not check: {problem}")
    layout = CandidateRows(k, anchors, threshold, iou_threshold if nms else None)
    return Selection(out, layout)


def _check_appended(model: onnx.ModelProto, head: onnx.ValueInfoProto) -> str:
    """ONNX's checker and strict shape inference on the appended nodes alone: "" when they pass.

    Alone, so that whatever the exporter left in the rest of the graph is no concern of ours.
    """
    nodes = [n for n in model.graph.node if n.name.startswith(_P) or n.name == OUTPUT]
    consts = [t for t in model.graph.initializer if t.name.startswith(_P)]
    graph = helper.make_graph(nodes, "appended", [head], list(model.graph.output), consts)
    part = helper.make_model(graph, opset_imports=list(model.opset_import))
    part.ir_version = model.ir_version
    try:
        onnx.checker.check_model(part, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return str(exc).splitlines()[0][:300]
    return ""


def _ranked_top_k(g: _Graph, best: str, below: str, k: int) -> tuple[str, str]:
    """TopK of the anchors' best scores, those below the threshold at -inf: (scores, indices)."""
    masked = g.node("Where", [below, g.f32("neg_inf", -np.inf), best], "masked")
    values, indices = g.nodes2("TopK", [masked, g.ints("k", k)], ("top", "top_idx"), axis=1)
    return values, indices


def _yolov8(g: _Graph, head: str, elem: int, rows: int, k: int, bound: np.float32) -> str:
    """[N, 4 + C, A]: the best class score ranks the anchors; K columns gathered."""
    classes = g.to_float(g.slice(head, "cls", 4, rows, 1), "cls32", elem)
    best = g.reduce_max(classes, "best", [1], 0)  # [N, A]
    below = g.node("Less", [best, g.f32("bound", float(bound))], "below")
    score, idx = _ranked_top_k(g, best, below, k)  # [N, K]
    idx_rows = g.node(
        "Expand", [g.reshape(idx, "idx3", 0, 1, -1), g.ints("expand_rows", 1, rows, 1)], "idx_rows"
    )
    picked = g.to_float(
        g.node("GatherElements", [head, idx_rows], "picked", axis=2), "picked32", elem
    )
    box = g.slice(picked, "box", 0, 4, 1)  # [N, 4, K]
    class_f = g.first_max_index(g.slice(picked, "cls_k", 4, rows, 1), "class_f", 1, rows - 4)
    columns = [
        box,
        g.reshape(score, "score3", 0, 1, -1),
        class_f,
        g.node("Cast", [g.reshape(idx, "anchor3", 0, 1, -1)], "anchor_f", to=TensorProto.FLOAT),
    ]
    return g.node("Transpose", [g.node("Concat", columns, "cols", axis=1)], "rows", perm=[0, 2, 1])


def _yolov5(g: _Graph, head: str, elem: int, width: int, k: int, bound: np.float32) -> str:
    """[N, A, 5 + C]: objectness gates, objectness x class score ranks; K rows gathered."""
    obj = g.to_float(g.slice(head, "obj", 4, 5, 2), "obj32", elem)  # [N, A, 1]
    classes = g.to_float(g.slice(head, "cls", 5, width, 2), "cls32", elem)
    best = g.reduce_max(g.node("Mul", [classes, obj], "prod"), "best", [2], 0)  # [N, A]
    below = g.node("Less", [g.reshape(obj, "obj2", 0, -1), g.f32("bound", float(bound))], "below")
    score, idx = _ranked_top_k(g, best, below, k)
    idx_rows = g.node(
        "Expand",
        [g.reshape(idx, "idx3", 0, -1, 1), g.ints("expand_width", 1, 1, width)],
        "idx_rows",
    )
    picked = g.to_float(
        g.node("GatherElements", [head, idx_rows], "picked", axis=1), "picked32", elem
    )
    prod_k = g.node(
        "Mul", [g.slice(picked, "cls_k", 5, width, 2), g.slice(picked, "obj_k", 4, 5, 2)], "prod_k"
    )
    class_f = g.first_max_index(prod_k, "class_f", 2, width - 5)  # [N, K, 1]
    columns = [
        g.slice(picked, "box", 0, 4, 2),
        g.reshape(score, "score3", 0, -1, 1),
        class_f,
        g.node("Cast", [g.reshape(idx, "anchor3", 0, -1, 1)], "anchor_f", to=TensorProto.FLOAT),
    ]
    return g.node("Concat", columns, "rows", axis=2)


def _nms(g: _Graph, rows: str, k: int, iou_threshold: float) -> str:
    """ONNX NonMaxSuppression of the K rows, per class; suppressed rows get class id -1.

    As `postprocess.nms`: each class is moved to its own region of the plane (offset by its id
    times twice the largest coordinate plus one), so one class-blind NMS keeps classes apart.
    """
    box = g.slice(rows, "nms_box", 0, 4, 2)  # [N, K, 4] cx, cy, w, h
    score = g.slice(rows, "nms_score", 4, 5, 2)
    class_f = g.slice(rows, "nms_class", 5, 6, 2)
    centre, size = g.slice(box, "nms_c", 0, 2, 2), g.slice(box, "nms_wh", 2, 4, 2)
    half = g.node("Mul", [size, g.f32("half", 0.5)], "nms_half")
    corners = g.node(
        "Concat",
        [g.node("Sub", [centre, half], "nms_lo"), g.node("Add", [centre, half], "nms_hi")],
        "nms_corners",
        axis=2,
    )
    reach = g.reduce_max(g.node("Abs", [corners], "nms_abs"), "nms_reach", [1, 2], 1)  # [N, 1, 1]
    span = g.node(
        "Add",
        [
            g.node("Mul", [reach, g.f32("two", 2)], "nms_2r"),
            g.f32("one", 1),
        ],
        "nms_span",
    )
    offset = g.node(
        "Mul",
        [
            g.node("Mul", [class_f, span], "nms_shift"),
            g.const("xy", np.asarray([1, 1, 0, 0], np.float32)),
        ],
        "nms_offset",
    )
    shifted = g.node("Add", [box, offset], "nms_shifted")
    selected = g.node(
        "NonMaxSuppression",
        [
            shifted,
            g.reshape(score, "nms_scores", 0, 1, -1),  # [N, 1, K]
            g.ints("nms_max", k),
            g.const("nms_iou", np.asarray([iou_threshold], np.float32)),
        ],
        "nms_selected",
        center_point_box=1,
    )  # [S, 3]: batch, class (0), row
    where = g.node("Gather", [selected, g.ints("nms_cols", 0, 2)], "nms_where", axis=1)
    ones = g.node(
        "ConstantOfShape",
        [g.slice(g.node("Shape", [selected], "nms_sel_shape"), "nms_count", 0, 1, 0)],
        "nms_ones",
        value=numpy_helper.from_array(np.asarray([1], np.float32)),
    )
    zeros = g.node(
        "ConstantOfShape",
        [g.node("Shape", [g.reshape(score, "nms_s2", 0, -1)], "nms_nk")],
        "nms_zeros",
    )
    kept = g.node("ScatterND", [zeros, where, ones], "nms_kept")  # [N, K]: 1 where kept
    suppressed = g.node(
        "Less",
        [g.reshape(kept, "nms_kept3", 0, -1, 1), g.f32("half_b", 0.5)],
        "nms_supp",
    )
    class_kept = g.node("Where", [suppressed, g.f32("minus_one", -1), class_f], "nms_class_kept")
    rest = g.slice(rows, "nms_rest", 6, ROW_WIDTH, 2)
    return g.node("Concat", [box, score, class_kept, rest], "nms_rows", axis=2)
