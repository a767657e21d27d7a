"""Small fixed-output ONNX detector heads in every output layout framebus reads.

Everything is built with the `onnx` package; nothing is downloaded. The fixed-output models return
the same per-image tensor for every image of a batch, so tests know the exact expected detections
of a YOLOv5 (`[N, anchors, 5 + C]`), YOLOv8 (`[N, 4 + C, anchors]`) or end-to-end (`[N, K, 6]`, or
`num_dets/boxes/scores/classes`) head. `frame_dependent_model` gives each image of a batch its own
head; `strided_head_model` is a `dynamic=True` export's head in small, its anchor count following
the input size; `near_free_model` costs almost nothing (for capacity benchmarks) and
`poison_pixel_model` fails inside ONNX Runtime on a chosen frame. `finish_model` and `OPSET` are
the shared model wrapper the other testkit model modules build on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def finish_model(graph: onnx.GraphProto, names: Sequence[str] | None) -> onnx.ModelProto:
    """Wrap `graph` in an opset-`OPSET` model, set `names` metadata if given, and check it."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    model.producer_name = "framebus.testkit"
    if names is not None:
        helper.set_model_props(
            model, {"names": "{" + ", ".join(f"{i}: '{n}'" for i, n in enumerate(names)) + "}"}
        )
    onnx.checker.check_model(model)
    return model


def fixed_output_model(
    outputs: Mapping[str, npt.NDArray[np.generic]],
    input_size: int = 32,
    names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """A model whose output `k` is `outputs[k]` (one image's tensor) repeated for every image.

    Input `images`: float32 [N, 3, S, S] like a YOLO export. The input still flows into every
    output (times zero), so the batch dimension and the whole input path are real.
    """
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["zeros"]),  # [N]
    ]
    inits = [numpy_helper.from_array(np.asarray(0.0, np.float32), "zero")]
    graph_outputs = []
    for name, value in outputs.items():
        arr = np.asarray(value)
        shape_name = f"{name}_bshape"
        inits.append(
            numpy_helper.from_array(np.asarray([-1] + [1] * arr.ndim, np.int64), shape_name)
        )
        inits.append(numpy_helper.from_array(arr.astype(np.float32), f"{name}_const"))
        nodes += [
            helper.make_node("Reshape", ["zeros", shape_name], [f"{name}_b"]),
            helper.make_node("Add", [f"{name}_b", f"{name}_const"], [f"{name}_f"]),
        ]
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
        if arr.dtype == np.float32:
            nodes.append(helper.make_node("Identity", [f"{name}_f"], [name]))
        else:
            nodes.append(helper.make_node("Cast", [f"{name}_f"], [name], to=elem))
        graph_outputs.append(helper.make_tensor_value_info(name, elem, ["batch", *arr.shape]))
    graph = helper.make_graph(
        nodes,
        "fixed_output",
        [helper.make_tensor_value_info("images", f32, ["batch", 3, input_size, input_size])],
        graph_outputs,
        initializer=inits,
    )
    return finish_model(graph, names)


def frame_dependent_model(
    base: npt.NDArray[np.float32],
    step: npt.NDArray[np.float32],
    input_size: int = 32,
    names: Sequence[str] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A model whose output0 for an image is `base + p * step`, p its first pixel (0..1).

    Each image of a batch gets its own head (a YOLOv5 or YOLOv8 layout, as `base` has it), so
    tests can feed frames of different grey levels and get different candidates, ties and counts.
    Its ops (Slice, Reshape, Mul, Add) read the same in every opset from 10, so `opset` may be any.
    """
    arr, delta = np.asarray(base, np.float32), np.asarray(step, np.float32)
    inits = [
        numpy_helper.from_array(arr, "fd_base"),
        numpy_helper.from_array(delta, "fd_step"),
        numpy_helper.from_array(np.zeros(4, np.int64), "fd_starts"),
        numpy_helper.from_array(np.asarray([np.iinfo(np.int64).max, 1, 1, 1], np.int64), "fd_ends"),
        numpy_helper.from_array(np.asarray([-1] + [1] * arr.ndim, np.int64), "fd_bshape"),
    ]
    nodes = [
        helper.make_node("Slice", ["images", "fd_starts", "fd_ends"], ["fd_pixel"]),  # [N,1,1,1]
        helper.make_node("Reshape", ["fd_pixel", "fd_bshape"], ["fd_p"]),  # [N, 1, 1]
        helper.make_node("Mul", ["fd_p", "fd_step"], ["fd_delta"]),
        helper.make_node("Add", ["fd_delta", "fd_base"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "frame_dependent",
        [
            helper.make_tensor_value_info(
                "images", TensorProto.FLOAT, ["batch", 3, input_size, input_size]
            )
        ],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", *arr.shape])],
        initializer=inits,
    )
    model = finish_model(graph, names)
    model.opset_import[0].version = opset
    onnx.checker.check_model(model)
    return model


def strided_head_model(imgsz: int = 64, stride: int = 8) -> onnx.ModelProto:
    """A YOLOv8 head whose anchor count follows the input size, declared as `dynamic=True` does.

    Input ['batch', 3, 'height', 'width'] (`imgsz` metadata: `imgsz`); output0 declared
    ['batch', 7, 'anchors']. One anchor per `stride` x `stride` cell, row by row as Ultralytics
    orders them: a box of 2 x `stride` centred on the cell (its centre from a Range over the
    feature map's width and height, as Ultralytics' `make_anchors` computes it in the graph), and
    3 class scores, the cell's mean red, green and blue (ties galore on flat colours). The class
    rows are viewed as [batch, 3, -1] with the batch taken from Shape, as the export's Detect
    head does, so only ONNX shape inference with data propagation can tell the anchor count.
    """
    f32 = TensorProto.FLOAT

    def ints(name: str, *v: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(v, np.int64), name)

    def scalar(name: str, v: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(v, np.int64), name)

    def num(name: str, v: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(v, np.float32), name)

    node = helper.make_node
    nodes = [
        node("AveragePool", ["images"], ["cells"], kernel_shape=[stride] * 2, strides=[stride] * 2),
        node("Shape", ["cells"], ["cells_shape"]),  # [N, 3, h, w]
        node("Gather", ["cells_shape", "at0"], ["n"], axis=0),  # scalars
        node("Unsqueeze", ["n", "ax0"], ["n1"]),
        node("Concat", ["n1", "three", "minus_one"], ["view"], axis=0),
        node("Reshape", ["cells", "view"], ["cls"]),  # [N, 3, h * w]
        node("Slice", ["cells_shape", "i2", "i4", "ax0"], ["hw"]),  # [h, w]
        node("Gather", ["cells_shape", "at2"], ["h"], axis=0),
        node("Gather", ["cells_shape", "at3"], ["w"], axis=0),
        node("Cast", ["h"], ["hf"], to=f32),
        node("Cast", ["w"], ["wf"], to=f32),
        node("Add", ["wf", "half"], ["wf_end"]),
        node("Add", ["hf", "half"], ["hf_end"]),
        node("Range", ["half", "wf_end", "one"], ["sx"]),  # [w]: 0.5, 1.5, ...
        node("Range", ["half", "hf_end", "one"], ["sy"]),  # [h]
        node("Unsqueeze", ["sy", "ax1"], ["sy_col"]),  # [h, 1]
        node("Expand", ["sx", "hw"], ["gx"]),  # [h, w]
        node("Expand", ["sy_col", "hw"], ["gy"]),
        node("Reshape", ["gx", "flat"], ["ax_"]),  # [h * w]
        node("Reshape", ["gy", "flat"], ["ay_"]),
        node("Mul", ["ax_", "stride"], ["cx"]),
        node("Mul", ["ay_", "stride"], ["cy"]),
        node("Mul", ["cx", "zero"], ["z"]),
        node("Add", ["z", "size"], ["wh"]),
        node("Concat", ["cx", "cy", "wh", "wh"], ["box_flat"], axis=0),  # [4 * h * w]
        node("Concat", ["four", "minus_one"], ["box_view"], axis=0),
        node("Reshape", ["box_flat", "box_view"], ["box"]),  # [4, h * w]
        node("Slice", ["cls", "i0", "i1", "ax1"], ["first"]),  # [N, 1, h * w]
        node("Mul", ["first", "zero"], ["batch_zero"]),
        node("Add", ["batch_zero", "box"], ["boxes"]),  # [N, 4, h * w]
        node("Concat", ["boxes", "cls"], ["output0"], axis=1),
    ]
    inits = [
        ints("i0", 0), ints("i1", 1), ints("i2", 2), ints("i4", 4),
        ints("ax0", 0), ints("ax1", 1), ints("three", 3), ints("four", 4),
        ints("minus_one", -1), ints("flat", -1), scalar("at0", 0), scalar("at2", 2),
        scalar("at3", 3),
        num("half", 0.5), num("one", 1.0), num("zero", 0.0),
        num("stride", float(stride)), num("size", float(2 * stride)),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "strided_head",
        [helper.make_tensor_value_info("images", f32, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", f32, ["batch", 7, "anchors"])],
        initializer=inits,
    )
    model = finish_model(graph, None)
    helper.set_model_props(
        model,
        {"names": "{0: 'red', 1: 'green', 2: 'blue'}", "imgsz": f"[{imgsz}, {imgsz}]"},
    )
    return model


def yolov5_model(
    rows: npt.NDArray[np.float32], input_size: int = 32, names: Sequence[str] | None = None
) -> onnx.ModelProto:
    """YOLOv5 head: output0 [N, anchors, 5 + C] = `rows` (cx, cy, w, h, obj, class scores)."""
    return fixed_output_model({"output0": rows}, input_size, names)


def yolov8_model(
    rows: npt.NDArray[np.float32], input_size: int = 32, names: Sequence[str] | None = None
) -> onnx.ModelProto:
    """YOLOv8/YOLO11 head: output0 [N, 4 + C, anchors] = `rows` (cx, cy, w, h, class scores)."""
    return fixed_output_model({"output0": rows}, input_size, names)


def end2end_model(
    dets: npt.NDArray[np.float32], input_size: int = 32, names: Sequence[str] | None = None
) -> onnx.ModelProto:
    """End-to-end head with NMS inside: output0 [N, K, 6] = (x1, y1, x2, y2, score, class)."""
    return fixed_output_model({"output0": dets}, input_size, names)


def end2end_nms_model(
    boxes: npt.NDArray[np.float32],
    scores: npt.NDArray[np.float32],
    classes: npt.NDArray[np.int32],
    count: int,
    input_size: int = 32,
    names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """EfficientNMS-style outputs: num_dets [N, 1], det_boxes, det_scores, det_classes [N, K]."""
    return fixed_output_model(
        {
            "num_dets": np.asarray([count], np.int32),
            "det_boxes": boxes,
            "det_scores": scores,
            "det_classes": classes,
        },
        input_size,
        names,
    )


def near_free_model(size: int = 640, classes: int = 80) -> onnx.ModelProto:
    """A detector that costs almost nothing: reads one pixel, returns an all-zero YOLOv8 head.

    Input `images` float32 [N, 3, size, size]; output0 [N, 4 + classes, anchors] of zeros, so
    postprocessing finds no box. The output still depends on the input (one pixel times zero) and
    on its batch dimension, so the whole input path is real. For capacity benchmarks: with the
    engine near free, what is left is framebus's own cost (bench/capacity.py).
    """
    anchors = sum((size // s) ** 2 for s in (8, 16, 32))
    inits = [
        numpy_helper.from_array(np.zeros(4, np.int64), "nf_starts"),
        numpy_helper.from_array(np.asarray([np.iinfo(np.int64).max, 1, 1, 1], np.int64), "nf_ends"),
        numpy_helper.from_array(np.asarray(0.0, np.float32), "nf_zero"),
        numpy_helper.from_array(np.asarray([-1, 1, 1], np.int64), "nf_bshape"),
        numpy_helper.from_array(np.asarray([1, 4 + classes, anchors], np.int64), "nf_head"),
    ]
    nodes = [
        helper.make_node("Slice", ["images", "nf_starts", "nf_ends"], ["pixel"]),  # [N, 1, 1, 1]
        helper.make_node("Reshape", ["pixel", "nf_bshape"], ["pixel3"]),  # [N, 1, 1]
        helper.make_node("Mul", ["pixel3", "nf_zero"], ["zeros"]),
        # Expand broadcasts both ways: [N, 1, 1] x [1, 4 + C, anchors] -> [N, 4 + C, anchors].
        helper.make_node("Expand", ["zeros", "nf_head"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "near_free",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + classes, anchors])],
        initializer=inits,
    )
    return finish_model(graph, [f"class{i}" for i in range(classes)])


def poison_pixel_model(
    rows: npt.NDArray[np.float32],
    input_size: int = 32,
    names: Sequence[str] | None = None,
    poison: int = 255,
) -> onnx.ModelProto:
    """A YOLOv8-head model (output0 = `rows` per image) whose run fails on a "poison" frame.

    Inference raises inside ONNX Runtime for any batch holding an image whose first pixel
    (channel 0, as uint8) is `poison` or more: that pixel, times 255, indexes a table of `poison`
    zeros with Gather, and an index past the table's end is refused ("indices element out of data
    bounds"). Every other image runs, the all-zero warm-up batches included, so the failure
    depends on the data, not on the batch size: it shows the inferencer's FAILED path through a
    real session. Input `images`: float32 [N, 3, S, S] in 0..1, like a YOLO export.
    """
    if not 1 <= poison <= 255:
        raise ValueError("poison must be a uint8 value of 1..255")
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    arr = np.asarray(rows, np.float32)
    inits = [
        numpy_helper.from_array(np.zeros(4, np.int64), "pp_starts"),
        numpy_helper.from_array(np.asarray([np.iinfo(np.int64).max, 1, 1, 1], np.int64), "pp_ends"),
        numpy_helper.from_array(np.asarray(255.0, np.float32), "pp_255"),
        numpy_helper.from_array(np.asarray(0.5, np.float32), "pp_half"),  # round, then truncate
        numpy_helper.from_array(np.asarray([-1], np.int64), "pp_flat"),
        numpy_helper.from_array(np.zeros(poison, np.float32), "pp_table"),
        numpy_helper.from_array(np.asarray([-1, 1, 1], np.int64), "pp_bshape"),
        numpy_helper.from_array(arr, "pp_rows"),
    ]
    nodes = [
        helper.make_node("Slice", ["images", "pp_starts", "pp_ends"], ["pp_pixel"]),  # [N,1,1,1]
        helper.make_node("Mul", ["pp_pixel", "pp_255"], ["pp_scaled"]),
        helper.make_node("Add", ["pp_scaled", "pp_half"], ["pp_rounded"]),
        helper.make_node("Cast", ["pp_rounded"], ["pp_index4"], to=i64),
        helper.make_node("Reshape", ["pp_index4", "pp_flat"], ["pp_index"]),  # [N]
        helper.make_node("Gather", ["pp_table", "pp_index"], ["pp_zero"], axis=0),  # [N] zeros
        helper.make_node("Reshape", ["pp_zero", "pp_bshape"], ["pp_zero3"]),  # [N, 1, 1]
        helper.make_node("Add", ["pp_zero3", "pp_rows"], ["output0"]),  # [N, 4 + C, anchors]
    ]
    graph = helper.make_graph(
        nodes,
        "poison_pixel",
        [helper.make_tensor_value_info("images", f32, ["batch", 3, input_size, input_size])],
        [helper.make_tensor_value_info("output0", f32, ["batch", *arr.shape])],
        initializer=inits,
    )
    return finish_model(graph, names)
